"""The crawler database in PostgreSQL: connections and schema (:mod:`.db`), the crawl steps' store (:mod:`.hook`),
batch rows and the status-table protocol they share with the executor, reports, retention, and the SQL files of
``include/sql``."""
