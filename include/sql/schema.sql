-- crawler_ops progress store. Idempotent DDL, applied by create_schema (crawler_ops.hooks.store.db) when the schema's comment
-- does not name this file's SHA-256 (any edit here is applied by the next plan).
CREATE SCHEMA IF NOT EXISTS crawler_ops;

-- One row per crawl task: the watermark (every offset below it is done) and the status fields the status view shows.
CREATE TABLE IF NOT EXISTS crawler_ops.progress (
    task_id           text PRIMARY KEY,
    watermark         bigint NOT NULL,
    total             bigint,
    last_start_offset bigint,
    status            text NOT NULL,
    filtered_count    bigint NOT NULL DEFAULT 0,
    produced_count    bigint NOT NULL DEFAULT 0,
    last_run_id       text,
    -- the newest reference time of a run whose commit moved (or kept) the watermark
    last_ref_time     timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Crawl batches on the status-table protocol: (id, status, start_time, end_time, task_name) as in the
-- executor status tables, id = batch start offset, plus the batch end and the claim bookkeeping.
-- status: 0 pending, 1 claimed (lease from start_time), 2 done (or expired), 3 parked.
CREATE TABLE IF NOT EXISTS crawler_ops.batch_status (
    id          bigint NOT NULL,
    status      integer NOT NULL DEFAULT 0,
    start_time  timestamptz,
    end_time    timestamptz,
    task_name   text NOT NULL,
    hi          bigint NOT NULL,
    attempts    integer NOT NULL DEFAULT 0,
    last_error  text,
    claim_token text,
    run_id      text,
    expired     boolean NOT NULL DEFAULT false,
    UNIQUE (id, task_name),
    CHECK (hi > id)
);

-- One row per DAG run of a crawl task: counters updated with each finished batch, the summary at commit.
CREATE TABLE IF NOT EXISTS crawler_ops.crawl_run (
    task_id        text NOT NULL,
    run_id         text NOT NULL,
    mode           text NOT NULL,
    ref_time       timestamptz NOT NULL,
    total          bigint,
    old_watermark  bigint,
    new_watermark  bigint,
    planned        bigint NOT NULL DEFAULT 0,
    fetched        bigint NOT NULL DEFAULT 0,
    kept           bigint NOT NULL DEFAULT 0,
    published      bigint NOT NULL DEFAULT 0,
    expired        bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    pages          bigint NOT NULL DEFAULT 0,
    errors         jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- what an operator should know about a run that is not an error (e.g. it re-ran an older reference time)
    notes          jsonb NOT NULL DEFAULT '[]'::jsonb,
    expiry_cutoff  bigint NOT NULL DEFAULT 0,
    status         text NOT NULL DEFAULT 'running',
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    duration_s     double precision GENERATED ALWAYS AS (extract(epoch FROM finished_at - started_at)) STORED,
    -- kept / published already added to crawler_ops.progress by a commit of this run (a retried or repeated
    -- commit adds only what came since)
    committed_kept      bigint NOT NULL DEFAULT 0,
    committed_published bigint NOT NULL DEFAULT 0,
    -- a first crawl with source.window_filter: the records the source counted in its window
    window_count   bigint,
    -- field drift (crawler_ops.drift): the run's published records sampled so far and their top-level fields with a
    -- count per JSON type (added with each batch's counts), and, from the commit, the drift against the baseline
    drift_sampled  bigint NOT NULL DEFAULT 0,
    drift_profile  jsonb NOT NULL DEFAULT '{}'::jsonb,
    drift          jsonb,
    PRIMARY KEY (task_id, run_id)
);

-- Errors of a run, one row each: a record that could not be published (kind 'record': no parseable date,
-- transform failure; the record itself kept, size-capped), a batch that failed (kind 'batch': offsets
-- [source_offset, offset_end)), or a plan that failed (kind 'plan'). Pruned by the maintenance DAG.
CREATE TABLE IF NOT EXISTS crawler_ops.crawl_error (
    id            bigserial PRIMARY KEY,
    task_id       text NOT NULL,
    run_id        text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('record', 'batch', 'plan')),
    source_offset bigint,
    offset_end    bigint,
    reason        text NOT NULL,
    record        jsonb,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS crawl_error_task_time ON crawler_ops.crawl_error (task_id, created_at);
CREATE INDEX IF NOT EXISTS crawl_error_time ON crawler_ops.crawl_error (created_at);
CREATE INDEX IF NOT EXISTS crawl_run_age ON crawler_ops.crawl_run ((coalesce(finished_at, started_at)));

-- One row per crawl task: the fields its successful runs published (the sum of their drift profiles, the baseline
-- a run's drift is found against), the last run added (run_id) and the baseline before it (a repeated commit of that
-- run compares with and adds to that one again).
CREATE TABLE IF NOT EXISTS crawler_ops.field_baseline (
    task_id    text PRIMARY KEY,
    profile    jsonb NOT NULL,
    run_id     text NOT NULL,
    before_run jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per source connection: the request pacing every worker shares (crawler_ops.hooks.source.ratelimit). Times are
-- epoch seconds on PostgreSQL's clock, so workers' clocks do not matter. Slots are handed out 1/rate apart from
-- next_slot on; rate is the current shared rate (halved on 429, growing back to ceiling), as of rate_at.
CREATE TABLE IF NOT EXISTS crawler_ops.source_rate (
    source     text PRIMARY KEY,
    ceiling    double precision NOT NULL,
    rate       double precision NOT NULL,
    rate_at    double precision NOT NULL,
    next_slot  double precision NOT NULL,
    cut_at     double precision NOT NULL DEFAULT 0,
    throttles  bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Requests in flight to a source connection, counted over every process (crawler_ops.hooks.source.flight): one row
-- per process sending to it (holder) with the permits it holds and those it wants (its requests in flight and those
-- waiting); seen_at is epoch seconds on PostgreSQL's clock. A holder not seen for its lease (a killed process) is
-- deleted by the next settle_flight on the source, and its permits are free again.
CREATE TABLE IF NOT EXISTS crawler_ops.source_flight (
    source  text NOT NULL,
    holder  text NOT NULL,
    held    integer NOT NULL,
    wants   integer NOT NULL,
    seen_at double precision NOT NULL,
    PRIMARY KEY (source, holder)
);

-- One holder's permits settled to what it needs, in one call (one round trip), under the source's advisory lock, so
-- the permits of all holders never pass p_cap (the source's max_in_flight). A holder is given up to what it wants,
-- from the permits free; while another holder waits (wants more than it holds), no holder is given more than its
-- fair share, cap / holders that want any (at least one), and one holding more gives the surplus back as its
-- requests finish: never below p_busy, its requests in flight. Returns the permits the holder holds now (0: none
-- free; ask again). A holder that wants nothing and holds nothing is deleted.
CREATE OR REPLACE FUNCTION crawler_ops.settle_flight(
    p_source text, p_holder text, p_cap integer, p_busy integer, p_wants integer, p_lease_s double precision
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    t double precision := extract(epoch FROM clock_timestamp());
    mine integer;
    others_held integer;
    others_waiting integer;
    wanting integer;
    target integer;
BEGIN
    -- Each statement below reads what the holder before this one committed (READ COMMITTED, a snapshot a statement).
    PERFORM pg_advisory_xact_lock(hashtextextended('crawler_ops.source_flight:' || p_source, 0));
    DELETE FROM crawler_ops.source_flight WHERE source = p_source AND seen_at < t - p_lease_s;
    SELECT coalesce(sum(held), 0), count(*) FILTER (WHERE wants > held), count(*) FILTER (WHERE wants > 0)
      INTO others_held, others_waiting, wanting
      FROM crawler_ops.source_flight WHERE source = p_source AND holder <> p_holder;
    SELECT held INTO mine FROM crawler_ops.source_flight WHERE source = p_source AND holder = p_holder;
    -- Requests in flight hold their permits even when the row lapsed meanwhile.
    mine := greatest(coalesce(mine, 0), p_busy);
    IF p_wants > 0 THEN
        wanting := wanting + 1;
    END IF;
    target := least(p_wants, CASE WHEN others_waiting > 0 THEN greatest(1, p_cap / wanting) ELSE p_cap END);
    IF mine > target THEN
        mine := greatest(p_busy, target);
    ELSIF mine < target THEN
        mine := mine + greatest(0, least(target - mine, p_cap - others_held - mine));
    END IF;
    IF mine = 0 AND p_wants = 0 THEN
        DELETE FROM crawler_ops.source_flight WHERE source = p_source AND holder = p_holder;
    ELSE
        INSERT INTO crawler_ops.source_flight (source, holder, held, wants, seen_at)
        VALUES (p_source, p_holder, mine, p_wants, t)
        ON CONFLICT (source, holder) DO UPDATE SET held = excluded.held, wants = excluded.wants, seen_at = t;
    END IF;
    RETURN mine;
END
$fn$;

-- One row per crawl task whose source is watched (crawler_ops.triggers.source_moved): the total its trigger last
-- announced, and when; a total is not announced again until a plan saw it, or the row is older than the watch's
-- refire_s.
CREATE TABLE IF NOT EXISTS crawler_ops.source_watch (
    task_id      text PRIMARY KEY,
    total        bigint NOT NULL,
    announced_at timestamptz NOT NULL
);

-- One row per source connection with OAuth2 auth: the access token every worker shares (crawler_ops.hooks.source.tokens),
-- valid until expires_at (PostgreSQL's clock, a margin before the provider's expiry), and the newest refresh token,
-- seeded from the connection secret whose SHA-256 is seed (a new secret in the connection starts over from it).
-- Holds secrets, as the connections do: grant access to crawler_ops as to Airflow's metadata database.
CREATE TABLE IF NOT EXISTS crawler_ops.source_token (
    source         text PRIMARY KEY,
    access_token   text,
    expires_at     timestamptz,
    refresh_token  text,
    seed           text,
    token_requests bigint NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- Upgrades of tables made by earlier versions; each checks the catalog first, so no lock is taken when done.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'crawl_run' AND column_name = 'duration_s') THEN
        ALTER TABLE crawler_ops.crawl_run ADD COLUMN duration_s double precision
            GENERATED ALWAYS AS (extract(epoch FROM finished_at - started_at)) STORED;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'crawl_run' AND column_name = 'committed_kept') THEN
        ALTER TABLE crawler_ops.crawl_run ADD COLUMN committed_kept bigint NOT NULL DEFAULT 0,
                                          ADD COLUMN committed_published bigint NOT NULL DEFAULT 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'crawl_run' AND column_name = 'notes') THEN
        ALTER TABLE crawler_ops.crawl_run ADD COLUMN notes jsonb NOT NULL DEFAULT '[]'::jsonb;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'crawl_run' AND column_name = 'window_count') THEN
        ALTER TABLE crawler_ops.crawl_run ADD COLUMN window_count bigint;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'crawl_run' AND column_name = 'drift') THEN
        ALTER TABLE crawler_ops.crawl_run ADD COLUMN drift_sampled bigint NOT NULL DEFAULT 0,
                                          ADD COLUMN drift_profile jsonb NOT NULL DEFAULT '{}'::jsonb,
                                          ADD COLUMN drift jsonb;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'progress' AND column_name = 'last_ref_time') THEN
        ALTER TABLE crawler_ops.progress ADD COLUMN last_ref_time timestamptz;
    END IF;
    -- Sequential feeds (cursor, next_link, link_header paginators): the position that fetches a page's batch row
    -- (its cursor or link; null: the feed's first page), the newest record a plan's first page held (its key and
    -- date: the mark the plan's commit saves), and the task's mark, where the next crawl stops.
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'batch_status' AND column_name = 'cursor') THEN
        ALTER TABLE crawler_ops.batch_status ADD COLUMN cursor text, ADD COLUMN mark text,
                                             ADD COLUMN mark_date timestamptz;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'crawler_ops'
                      AND table_name = 'progress' AND column_name = 'feed_mark') THEN
        ALTER TABLE crawler_ops.progress ADD COLUMN feed_mark text, ADD COLUMN feed_mark_date timestamptz;
    END IF;
    -- Before crawl_error, dead letters had their own table: move its rows over once, then drop it.
    IF to_regclass('crawler_ops.dead_letter') IS NOT NULL THEN
        INSERT INTO crawler_ops.crawl_error (task_id, run_id, kind, source_offset, reason, record, created_at)
        SELECT task_id, run_id, 'record', source_offset, reason, record, created_at FROM crawler_ops.dead_letter;
        DROP TABLE crawler_ops.dead_letter;
    END IF;
END
$$;
