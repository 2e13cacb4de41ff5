-- v3: the 0.7 expand migration (ADR-040), additive only. It adds the
-- append-only rotation ledgers (seeded from the cursor columns), the
-- cursor authority, the authority-aware resolver, rollup deltas, the
-- runtimes' binary versions, the schema-owned flip floor, compact claim
-- batches for deadline claims, and the fence trigger (installed
-- inactive). The 0.6 cursor columns stay: 0.6.2 runs on this schema
-- while the authority is 'columns'. Upgrades start in 'columns'; a fresh
-- install is moved to 'ledger' by the migration runner.

-- legacy_fenced: the flip's fence also covers the legacy resolver
-- awa.ring_cursor(ring), the claim and enqueue path of pre-flip binaries
-- (set by the flip together with the fence trigger).
CREATE TABLE IF NOT EXISTS awa.ring_cursor_authority (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    authority     text NOT NULL CHECK (authority IN ('columns', 'ledger')),
    flipped_at    timestamptz,
    legacy_fenced boolean NOT NULL DEFAULT false
);
INSERT INTO awa.ring_cursor_authority (authority) VALUES ('columns') ON CONFLICT DO NOTHING;

ALTER TABLE awa.runtime_instances ADD COLUMN IF NOT EXISTS binary_version text;

-- The lowest binary version that may run after the flip. Binaries query
-- it; they do not compile their own copy.
CREATE OR REPLACE FUNCTION awa.ring_authority_min_flip_version() RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT '0.7.0' $$;

-- Ledger-mode prune appends counts here instead of upserting rollups;
-- the leader folds them into queue_terminal_rollups.
CREATE TABLE IF NOT EXISTS awa.queue_terminal_rollup_deltas (
    delta_id   bigserial PRIMARY KEY,
    queue      text NOT NULL,
    priority   smallint NOT NULL,
    state      text NOT NULL,
    count      bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- 0.7 claims with a deadline record it here, one row per claim batch,
-- instead of on each lease. A 0.6 leader does not scan this table.
CREATE TABLE IF NOT EXISTS awa.claim_batches (
    batch_id    bigserial PRIMARY KEY,
    instance_id text NOT NULL,
    deadline_at timestamptz NOT NULL,
    job_ids     bigint[] NOT NULL,
    run_leases  bigint[] NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS claim_batches_deadline ON awa.claim_batches (deadline_at);

-- The fence: once active, any write to the retired cursor representation
-- fails loudly.
CREATE OR REPLACE FUNCTION awa.ring_cursor_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ring cursor authority is ledger: old-style cursor write to %.% rejected', TG_TABLE_SCHEMA, TG_TABLE_NAME
        USING ERRCODE = 'object_not_in_prerequisite_state',
              HINT = 'the cursor columns were retired by the ring-authority flip; run awa 0.7 or later';
END
$$;

DO $$
DECLARE
    ring text;
    tbl text;
    n int;
    g bigint;
BEGIN
    FOREACH ring IN ARRAY ARRAY['queue', 'claim', 'lease'] LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS awa.%I (
                 generation bigint PRIMARY KEY,
                 slot       int NOT NULL,
                 rotated_at timestamptz NOT NULL DEFAULT now())', ring || '_ring_rotations');
        EXECUTE format('SELECT slot_count, generation FROM awa.%I', ring || '_ring_state') INTO n, g;
        -- Seed one wrap from the columns (slot = generation mod slot_count).
        IF g >= 0 THEN
            EXECUTE format(
                'INSERT INTO awa.%I (generation, slot)
                 SELECT x, (x %% %s)::int FROM generate_series(greatest(0, %s - %s + 1), %s) x
                 ON CONFLICT DO NOTHING', ring || '_ring_rotations', n, g, n, g);
        END IF;
        FOREACH tbl IN ARRAY ARRAY[ring || '_ring_state', ring || '_ring_slots'] LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'ring_cursor_fence'
                           AND tgrelid = format('awa.%I', tbl)::regclass) THEN
                EXECUTE format('CREATE TRIGGER ring_cursor_fence BEFORE UPDATE OR DELETE ON awa.%I
                                FOR EACH ROW EXECUTE FUNCTION awa.ring_cursor_fence()', tbl);
                EXECUTE format('ALTER TABLE awa.%I DISABLE TRIGGER ring_cursor_fence', tbl);
            END IF;
        END LOOP;
    END LOOP;
END
$$;

-- The resolver of flip-aware binaries (0.7 and later): the ledger's max
-- row after the flip, the singleton columns before. Enqueue, promote,
-- claim, rescue, cron and terminal writes of 0.7 call it.
CREATE OR REPLACE FUNCTION awa.flip_aware_ring_cursor(ring text, OUT slot int, OUT generation bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF (SELECT a.authority FROM awa.ring_cursor_authority a) = 'ledger' THEN
        IF ring = 'queue' THEN
            SELECT r.slot, r.generation INTO slot, generation FROM awa.queue_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
        ELSIF ring = 'claim' THEN
            SELECT r.slot, r.generation INTO slot, generation FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
        ELSIF ring = 'lease' THEN
            SELECT r.slot, r.generation INTO slot, generation FROM awa.lease_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
        ELSE
            RAISE EXCEPTION 'unknown ring %', ring;
        END IF;
    ELSIF ring = 'queue' THEN
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

-- The legacy resolver, the one 0.6 binaries call to enqueue, promote,
-- claim, re-queue and fire cron. Before the flip it reads the columns as
-- it always did, so 0.6.2 runs unchanged in compat mode. Once the flip
-- has fenced it, it refuses: a returning pre-flip binary fails on its
-- first claim or enqueue, inside that statement, before the statement
-- takes a job or writes anything (one statement is one transaction), so
-- no job loses an attempt to a binary that could never close it.
CREATE OR REPLACE FUNCTION awa.ring_cursor(ring text, OUT slot int, OUT generation bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    auth awa.ring_cursor_authority;
BEGIN
    SELECT * INTO auth FROM awa.ring_cursor_authority;
    IF auth.authority = 'ledger' AND auth.legacy_fenced THEN
        RAISE EXCEPTION 'ring cursor authority is ledger: the legacy cursor resolver awa.ring_cursor(%) is fenced', ring
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'this binary predates the ring-authority flip and may not claim or enqueue; run awa 0.7 or later';
    END IF;
    SELECT c.slot, c.generation INTO slot, generation FROM awa.flip_aware_ring_cursor(ring) c;
END
$$;

-- Pre-flip binaries also enqueue jobs that never touch a cursor (a batch
-- of scheduled jobs only). Once the flip has fenced them, an insert into
-- awa.jobs from a session that has not declared itself flip-aware
-- (awa 0.7 and later set awa.flip_aware = on on every connection) is
-- refused, once per statement.
CREATE OR REPLACE FUNCTION awa.pre_flip_enqueue_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('awa.flip_aware', true), '') <> 'on'
       AND EXISTS (SELECT 1 FROM awa.ring_cursor_authority a WHERE a.authority = 'ledger' AND a.legacy_fenced) THEN
        RAISE EXCEPTION 'ring cursor authority is ledger: enqueue from a session that is not flip-aware is fenced'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'this binary predates the ring-authority flip and may not enqueue; run awa 0.7 or later (its sessions set awa.flip_aware = on)';
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER pre_flip_enqueue_fence BEFORE INSERT ON awa.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION awa.pre_flip_enqueue_fence();
