-- sendguard's records: rules, senders and their states, flags, invites with their decision
-- records and delivery attempts, API keys (hashes only) and the audit log.

CREATE TABLE rules (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    scope       text NOT NULL CHECK (scope IN ('sender', 'ip', 'recipient', 'recipient_domain', 'global')),
    limit_count bigint NOT NULL CHECK (limit_count BETWEEN 1 AND 1000000),
    window_secs bigint NOT NULL CHECK (window_secs BETWEEN 1 AND 2592000),
    -- An algorithm name as the limiter prints it: hash_counters, hash_counters:weighted, …
    algorithm   text NOT NULL DEFAULT 'hash_counters',
    action      text NOT NULL CHECK (action IN ('shadow_ban', 'reject', 'suppress', 'monitor')),
    enabled     boolean NOT NULL DEFAULT true,
    version     bigint NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO rules (name, scope, limit_count, window_secs, action) VALUES
    ('sender-hourly', 'sender', 60, 3600, 'shadow_ban'),
    ('sender-daily', 'sender', 500, 86400, 'shadow_ban'),
    ('ip-hourly', 'ip', 300, 3600, 'reject'),
    ('recipient-daily', 'recipient', 3, 86400, 'suppress'),
    ('global-minute', 'global', 10000, 60, 'monitor');

-- Every running instance reloads its rules when they change.
CREATE FUNCTION sendguard_rules_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sendguard_rules', '');
    RETURN NULL;
END $$;
CREATE TRIGGER rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rules
    FOR EACH STATEMENT EXECUTE FUNCTION sendguard_rules_changed();

CREATE TABLE senders (
    id               text PRIMARY KEY,
    state            text NOT NULL DEFAULT 'active'
                     CHECK (state IN ('active', 'shadow_banned', 'banned', 'trusted')),
    -- Bumped by every change of state: review actions carry the version they saw.
    version          bigint NOT NULL DEFAULT 1,
    -- Held invites stored, and those beyond the cap: counted, not stored.
    held_stored      bigint NOT NULL DEFAULT 0,
    held_overflow    bigint NOT NULL DEFAULT 0,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    state_changed_at timestamptz
);
CREATE INDEX senders_by_state ON senders (state, state_changed_at DESC);

CREATE TABLE flags (
    id          bigserial PRIMARY KEY,
    sender_id   text NOT NULL REFERENCES senders (id),
    rule_id     bigint REFERENCES rules (id) ON DELETE SET NULL,
    rule_name   text NOT NULL,
    observed    bigint NOT NULL,
    limit_count bigint NOT NULL,
    window_secs bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX flags_by_sender ON flags (sender_id, created_at DESC);

CREATE TABLE api_keys (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    -- SHA-256 of the key: the key itself is shown once and never stored.
    key_hash   bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE TABLE invites (
    id               uuid PRIMARY KEY,
    api_key_id       bigint NOT NULL REFERENCES api_keys (id),
    sender_id        text NOT NULL REFERENCES senders (id),
    recipient        text NOT NULL,
    recipient_domain text NOT NULL,
    sender_ip        text,
    resource         text,
    message          text,
    sender_name      text,
    status           text NOT NULL
                     CHECK (status IN ('queued', 'sent', 'failed', 'held', 'suppressed', 'discarded')),
    -- Why: each rule checked with its count, limit and outcome.
    decision         jsonb NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    next_attempt_at  timestamptz,
    claimed_by       text,
    claimed_until    timestamptz,
    idempotency_key  text,
    request_hash     bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    UNIQUE (api_key_id, idempotency_key)
);
CREATE INDEX invites_outbox ON invites (next_attempt_at) WHERE status = 'queued';
CREATE INDEX invites_by_sender ON invites (sender_id, created_at DESC);

CREATE TABLE audit_log (
    id        bigserial PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    -- 'system' or an admin's name.
    actor     text NOT NULL,
    action    text NOT NULL,
    sender_id text,
    rule_id   bigint,
    detail    jsonb NOT NULL DEFAULT '{}',
    note      text
);
CREATE INDEX audit_by_sender ON audit_log (sender_id, at DESC);
CREATE INDEX audit_by_actor ON audit_log (actor, at DESC);
