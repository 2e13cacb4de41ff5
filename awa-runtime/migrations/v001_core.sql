-- v1: the 0.6 core schema: jobs, three slot rings with singleton cursor
-- columns, executions, terminal archive, rollups, dead letters.
-- Every statement is idempotent (IF NOT EXISTS / ON CONFLICT) so that the
-- migration set can be re-applied to an existing schema.

CREATE TABLE IF NOT EXISTS awa.runtime_instances (
    instance_id  text PRIMARY KEY,
    name         text NOT NULL,
    version      text NOT NULL,
    role         text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    leader       boolean NOT NULL DEFAULT false
);

CREATE SEQUENCE IF NOT EXISTS awa.job_id_seq;

-- Live (non-terminal) jobs. A job leaves this table when it reaches a
-- terminal state; its terminal record is a closure in the claim ring
-- (archived on prune) or a dead letter.
CREATE TABLE IF NOT EXISTS awa.jobs (
    job_id       bigint PRIMARY KEY DEFAULT nextval('awa.job_id_seq'),
    kind         text NOT NULL,
    queue        text NOT NULL,
    args         jsonb NOT NULL DEFAULT '{}',
    priority     smallint NOT NULL DEFAULT 0,
    max_attempts int NOT NULL DEFAULT 3 CHECK (max_attempts > 0),
    deadline_ms  int CHECK (deadline_ms > 0),
    state        text NOT NULL CHECK (state IN ('scheduled', 'available', 'running')),
    attempt      int NOT NULL DEFAULT 0,
    run_lease    bigint NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS jobs_scheduled_idx ON awa.jobs (run_at) WHERE state = 'scheduled';

-- Ring cursors: one singleton row per ring, advanced by UPDATE under
-- FOR UPDATE, and one row per slot holding the generation it was last
-- opened at (the prune metadata).
DO $$
DECLARE
    ring text;
    n int := 8;
    i int;
BEGIN
    FOREACH ring IN ARRAY ARRAY['queue', 'claim', 'lease'] LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS awa.%I (
                 singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                 slot_count   int NOT NULL CHECK (slot_count > 1),
                 current_slot int NOT NULL,
                 generation   bigint NOT NULL)', ring || '_ring_state');
        EXECUTE format(
            'INSERT INTO awa.%I (singleton, slot_count, current_slot, generation)
             VALUES (true, %s, 0, 0) ON CONFLICT DO NOTHING', ring || '_ring_state', n);
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS awa.%I (
                 slot       int PRIMARY KEY,
                 generation bigint NOT NULL)', ring || '_ring_slots');
        -- slot s starts at generation s - n: sealed, empty, "one wrap ago"
        EXECUTE format(
            'INSERT INTO awa.%I (slot, generation)
             SELECT s, CASE WHEN s = 0 THEN 0 ELSE s - %s END FROM generate_series(0, %s - 1) s
             ON CONFLICT DO NOTHING', ring || '_ring_slots', n, n);
    END LOOP;

    -- queue ring: ready entries
    CREATE TABLE IF NOT EXISTS awa.queue_entries (
        slot        int NOT NULL,
        generation  bigint NOT NULL,
        job_id      bigint NOT NULL,
        queue       text NOT NULL,
        priority    smallint NOT NULL,
        attempt     int NOT NULL,
        enqueued_at timestamptz NOT NULL DEFAULT now()
    ) PARTITION BY LIST (slot);
    -- claim ring: claim receipts and closure evidence, both append-only
    CREATE TABLE IF NOT EXISTS awa.claim_receipts (
        slot        int NOT NULL,
        generation  bigint NOT NULL,
        job_id      bigint NOT NULL,
        run_lease   bigint NOT NULL,
        attempt     int NOT NULL,
        instance_id text NOT NULL,
        claimed_at  timestamptz NOT NULL DEFAULT now()
    ) PARTITION BY LIST (slot);
    CREATE TABLE IF NOT EXISTS awa.claim_closures (
        slot       int NOT NULL,
        generation bigint NOT NULL,
        job_id     bigint NOT NULL,
        run_lease  bigint NOT NULL,
        attempt    int NOT NULL,
        outcome    text NOT NULL,
        terminal   boolean NOT NULL,
        queue      text NOT NULL,
        priority   smallint NOT NULL,
        kind       text NOT NULL,
        closed_at  timestamptz NOT NULL DEFAULT now()
    ) PARTITION BY LIST (slot);
    -- lease ring: run leases of attempts in flight, with their heartbeat
    CREATE TABLE IF NOT EXISTS awa.leases (
        slot         int NOT NULL,
        generation   bigint NOT NULL,
        job_id       bigint NOT NULL,
        run_lease    bigint NOT NULL,
        attempt      int NOT NULL,
        instance_id  text NOT NULL,
        heartbeat_at timestamptz NOT NULL DEFAULT now(),
        deadline_at  timestamptz
    ) PARTITION BY LIST (slot);

    FOR i IN 0 .. n - 1 LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa.queue_entries_%s PARTITION OF awa.queue_entries FOR VALUES IN (%s)', i, i);
        EXECUTE format('CREATE INDEX IF NOT EXISTS queue_entries_%s_pick ON awa.queue_entries_%s (queue, priority DESC, job_id)', i, i);
        EXECUTE format('CREATE INDEX IF NOT EXISTS queue_entries_%s_job ON awa.queue_entries_%s (job_id)', i, i);
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa.claim_receipts_%s PARTITION OF awa.claim_receipts FOR VALUES IN (%s)', i, i);
        EXECUTE format('CREATE INDEX IF NOT EXISTS claim_receipts_%s_job ON awa.claim_receipts_%s (job_id, run_lease)', i, i);
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa.claim_closures_%s PARTITION OF awa.claim_closures FOR VALUES IN (%s)', i, i);
        EXECUTE format('CREATE INDEX IF NOT EXISTS claim_closures_%s_job ON awa.claim_closures_%s (job_id, run_lease)', i, i);
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa.leases_%s PARTITION OF awa.leases FOR VALUES IN (%s)', i, i);
        EXECUTE format('CREATE INDEX IF NOT EXISTS leases_%s_job ON awa.leases_%s (job_id, run_lease)', i, i);
    END LOOP;
END
$$;

-- The cursor resolver used by enqueue and claim. (Rotate, prune and
-- terminal writes read the singleton columns directly.)
CREATE OR REPLACE FUNCTION awa.ring_cursor(ring text, OUT slot int, OUT generation bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF ring = 'queue' THEN
        SELECT s.current_slot, s.generation INTO slot, generation FROM awa.queue_ring_state s;
    ELSIF ring = 'claim' THEN
        SELECT s.current_slot, s.generation INTO slot, generation FROM awa.claim_ring_state s;
    ELSIF ring = 'lease' THEN
        SELECT s.current_slot, s.generation INTO slot, generation FROM awa.lease_ring_state s;
    ELSE
        RAISE EXCEPTION 'unknown ring %', ring;
    END IF;
END
$$;

-- One row per handler run (a claim), finished or not.
CREATE TABLE IF NOT EXISTS awa.executions (
    job_id      bigint NOT NULL,
    run_lease   bigint NOT NULL,
    attempt     int NOT NULL,
    instance_id text NOT NULL,
    version     text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    outcome     text,
    PRIMARY KEY (job_id, run_lease)
);

-- Terminal closures copied out of a claim slot before it is truncated.
CREATE TABLE IF NOT EXISTS awa.terminal_archive (
    job_id      bigint NOT NULL,
    run_lease   bigint NOT NULL,
    attempt     int NOT NULL,
    state       text NOT NULL,
    queue       text NOT NULL,
    priority    smallint NOT NULL,
    kind        text NOT NULL,
    closed_at   timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS terminal_archive_job ON awa.terminal_archive (job_id);
CREATE INDEX IF NOT EXISTS terminal_archive_closed ON awa.terminal_archive (closed_at);

-- Per-(queue, priority, state) counts of archived terminal outcomes.
CREATE TABLE IF NOT EXISTS awa.queue_terminal_rollups (
    queue    text NOT NULL,
    priority smallint NOT NULL,
    state    text NOT NULL,
    count    bigint NOT NULL,
    PRIMARY KEY (queue, priority, state)
);

-- Jobs whose attempts are exhausted.
CREATE TABLE IF NOT EXISTS awa.dead_letters (
    job_id    bigint PRIMARY KEY,
    kind      text NOT NULL,
    queue     text NOT NULL,
    priority  smallint NOT NULL,
    args      jsonb NOT NULL,
    attempt   int NOT NULL,
    run_lease bigint NOT NULL,
    reason    text NOT NULL,
    dead_at   timestamptz NOT NULL DEFAULT now()
);
