"""Hooks, one folder per system the crawl talks to: :mod:`.source` (the HTTP source API: client, auth, tokens,
paging, feeds, response rules, rate limits), :mod:`.store` (PostgreSQL: the crawler database, batch rows, reports,
retention and the status table) and :mod:`.kafka` (the producer, exactly-once delivery, topics and the schema
registry). :mod:`.http` holds what the source client, the registry and the webhook share: wall-clock deadlines for
httpx calls and the base URL of a connection."""
