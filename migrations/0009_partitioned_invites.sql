-- Invites partitioned by week of `created_at`, so that retention drops whole weeks instead of
-- deleting rows one by one, and the newest week's indexes stay small and hot.
--
-- A unique constraint of a partitioned table must include the partition key, so the
-- Idempotency-Key can no longer be unique on `invites`: keys move to a table of their own,
-- where (api_key_id, key) stays unique across all time.
--
-- This migration copies every row in its transaction: on a large installation, run it in a
-- maintenance window (docs/SCALING.md, "Partitioned history", gives the procedure and an
-- estimate of its duration).

CREATE TABLE idempotency_keys (
    api_key_id   bigint NOT NULL REFERENCES api_keys (id),
    key          text NOT NULL,
    invite_id    uuid NOT NULL,
    request_hash bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (api_key_id, key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

ALTER TABLE invites RENAME TO invites_unpartitioned;
ALTER TABLE invites_unpartitioned RENAME CONSTRAINT invites_pkey TO invites_unpartitioned_pkey;
ALTER INDEX invites_by_age RENAME TO invites_unpartitioned_by_age;
ALTER INDEX invites_by_sender RENAME TO invites_unpartitioned_by_sender;
ALTER INDEX invites_deferred RENAME TO invites_unpartitioned_deferred;
ALTER INDEX invites_outbox RENAME TO invites_unpartitioned_outbox;

CREATE TABLE invites (
    id               uuid NOT NULL,
    api_key_id       bigint NOT NULL
                     CONSTRAINT invites_api_key_id_fkey REFERENCES api_keys (id),
    app_id           bigint NOT NULL,
    sender_id        text NOT NULL,
    recipient        text NOT NULL,
    recipient_domain text NOT NULL,
    sender_ip        text,
    resource         text,
    message          text,
    sender_name      text,
    status           text NOT NULL CONSTRAINT invites_status_check
                     CHECK (status IN ('queued', 'sent', 'failed', 'held', 'suppressed',
                         'discarded', 'deferred')),
    -- Why: each rule checked with its count, limit and outcome.
    decision         jsonb NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    next_attempt_at  timestamptz,
    claimed_by       text,
    claimed_until    timestamptz,
    accept_url       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    PRIMARY KEY (id, created_at),
    CONSTRAINT invites_app_id_sender_id_fkey
        FOREIGN KEY (app_id, sender_id) REFERENCES senders (app_id, id)
) PARTITION BY RANGE (created_at);
CREATE INDEX invites_by_age ON invites (created_at);
CREATE INDEX invites_by_sender ON invites (app_id, sender_id, created_at DESC);
CREATE INDEX invites_deferred ON invites (created_at) WHERE status = 'deferred';
CREATE INDEX invites_outbox ON invites (next_attempt_at) WHERE status = 'queued';

-- Rows no week holds: none while the weeks are made ahead, and the invites still waiting that
-- retention moved out of a week it dropped.
CREATE TABLE invites_default PARTITION OF invites DEFAULT;

-- The weeks from the one holding `since` to `weeks_ahead` weeks after this one, named
-- invites_wYYYYMMDD after their first day (a Monday, UTC). Instances call it at start and
-- every hour; the advisory lock keeps two of them from creating the same week at once.
CREATE FUNCTION sendguard_invite_weeks(since timestamptz, weeks_ahead integer)
    RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    week date := date_trunc('week', since AT TIME ZONE 'UTC')::date;
    last date := date_trunc('week', now() AT TIME ZONE 'UTC')::date + 7 * weeks_ahead;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('sendguard_invite_weeks'));
    WHILE week <= last LOOP
        IF to_regclass('invites_w' || to_char(week, 'YYYYMMDD')) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF invites FOR VALUES FROM (%L) TO (%L)',
                'invites_w' || to_char(week, 'YYYYMMDD'), week || ' 00:00:00+00',
                (week + 7) || ' 00:00:00+00');
        END IF;
        week := week + 7;
    END LOOP;
END $$;

SELECT sendguard_invite_weeks(
    COALESCE((SELECT min(created_at) FROM invites_unpartitioned), now()), 2);

INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain, sender_ip,
    resource, message, sender_name, status, decision, attempts, last_error, next_attempt_at,
    claimed_by, claimed_until, accept_url, created_at, sent_at)
SELECT id, api_key_id, app_id, sender_id, recipient, recipient_domain, sender_ip, resource,
    message, sender_name, status, decision, attempts, last_error, next_attempt_at, claimed_by,
    claimed_until, accept_url, created_at, sent_at
FROM invites_unpartitioned;

-- A key stored without a hash could never be replayed: it answers as another body would.
INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash, created_at)
SELECT api_key_id, idempotency_key, id, COALESCE(request_hash, '\x'), created_at
FROM invites_unpartitioned WHERE idempotency_key IS NOT NULL;

DROP TABLE invites_unpartitioned;
