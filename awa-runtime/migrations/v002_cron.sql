-- v2: interval cron schedules fired by the maintenance leader, one job
-- per (name, fire time): the primary key of cron_fires is what makes a
-- leader handoff unable to double-fire.

CREATE TABLE IF NOT EXISTS awa.cron_schedules (
    name         text PRIMARY KEY,
    every_ms     bigint NOT NULL CHECK (every_ms > 0),
    queue        text NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL DEFAULT '{}',
    priority     smallint NOT NULL DEFAULT 0,
    max_attempts int NOT NULL DEFAULT 3,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- the first fire time is the first multiple of every_ms after this
    anchor_ms    bigint NOT NULL,
    last_fire_ms bigint
);

CREATE TABLE IF NOT EXISTS awa.cron_fires (
    name        text NOT NULL,
    fire_ms     bigint NOT NULL,
    job_id      bigint NOT NULL,
    instance_id text NOT NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, fire_ms)
);
