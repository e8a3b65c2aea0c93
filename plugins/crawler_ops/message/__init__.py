"""What turns a page into Kafka messages (pure: no I/O): a record's date and the window test (:mod:`.dates`,
:mod:`.filtering`), the record and its message (:mod:`.records`), its key, headers and timestamp (:mod:`.shaping`),
and its value in the topic's format (:mod:`.values`, :mod:`.schemas`)."""
