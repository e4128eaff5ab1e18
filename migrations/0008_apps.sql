-- Apps: the products that call sendguard. Each API key belongs to one app, and a sender is
-- (app, sender_id): two apps' `u_123` are two senders. Existing keys and senders move into the
-- app `default`. Columns are added with the constant default 1 (the id `default` gets here),
-- which Postgres stores once instead of rewriting each row, then the default is dropped so
-- every new row names its app.

CREATE TABLE apps (
    id             bigserial PRIMARY KEY,
    name           text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    -- The product's name in emails ("Bo invited you to Drawbox"); NULL: emails name no product.
    product        text CHECK (length(product) BETWEEN 1 AND 64),
    -- Hosts an invite's accept_url may point to.
    link_hosts     text[] NOT NULL DEFAULT '{}',
    -- The accept link when an invite carries none: {invite_id} and {resource} are filled in.
    link_template  text,
    -- The From mailbox of this app's emails; NULL: SENDGUARD_MAIL_FROM.
    mail_from      text,
    webhook_url    text,
    -- `whsec_<base64>`: signs webhooks, shown once when set.
    webhook_secret text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO apps (id, name) VALUES (1, 'default');
SELECT setval(pg_get_serial_sequence('apps', 'id'), 1);

-- Instances cache apps; a change reaches every one at once (and the 1 s reload catches a lost
-- notification, as for rules).
CREATE FUNCTION sendguard_apps_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sendguard_apps', '');
    RETURN NULL;
END $$;
CREATE TRIGGER apps_changed AFTER INSERT OR UPDATE OR DELETE ON apps
    FOR EACH STATEMENT EXECUTE FUNCTION sendguard_apps_changed();

ALTER TABLE api_keys ADD COLUMN app_id bigint NOT NULL DEFAULT 1 REFERENCES apps (id);
ALTER TABLE api_keys ALTER COLUMN app_id DROP DEFAULT;

-- Senders become (app_id, id). The foreign keys that name a sender move with it.
ALTER TABLE flags DROP CONSTRAINT flags_sender_id_fkey;
ALTER TABLE invites DROP CONSTRAINT invites_sender_id_fkey;
ALTER TABLE sender_notes DROP CONSTRAINT sender_notes_sender_id_fkey;

ALTER TABLE senders ADD COLUMN app_id bigint NOT NULL DEFAULT 1 REFERENCES apps (id);
ALTER TABLE senders ALTER COLUMN app_id DROP DEFAULT;
ALTER TABLE senders DROP CONSTRAINT senders_pkey;
ALTER TABLE senders ADD PRIMARY KEY (app_id, id);
-- The dashboard finds a sender by id alone, in whichever apps have one.
CREATE INDEX senders_by_id ON senders (id);

ALTER TABLE flags ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
ALTER TABLE flags ALTER COLUMN app_id DROP DEFAULT;
ALTER TABLE flags ADD FOREIGN KEY (app_id, sender_id) REFERENCES senders (app_id, id);
DROP INDEX flags_by_sender;
CREATE INDEX flags_by_sender ON flags (app_id, sender_id, created_at DESC);

ALTER TABLE invites ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
ALTER TABLE invites ALTER COLUMN app_id DROP DEFAULT;
ALTER TABLE invites ADD FOREIGN KEY (app_id, sender_id) REFERENCES senders (app_id, id);
-- The link the email carries (accept_url, or the app's template filled in); NULL: no link.
ALTER TABLE invites ADD COLUMN accept_url text;
DROP INDEX invites_by_sender;
CREATE INDEX invites_by_sender ON invites (app_id, sender_id, created_at DESC);

ALTER TABLE sender_notes ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
ALTER TABLE sender_notes ALTER COLUMN app_id DROP DEFAULT;
ALTER TABLE sender_notes ADD FOREIGN KEY (app_id, sender_id) REFERENCES senders (app_id, id);
DROP INDEX sender_notes_by_sender;
CREATE INDEX sender_notes_by_sender ON sender_notes (app_id, sender_id, created_at DESC);

ALTER TABLE outcomes ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
ALTER TABLE outcomes ALTER COLUMN app_id DROP DEFAULT;
DROP INDEX outcomes_by_sender;
CREATE INDEX outcomes_by_sender ON outcomes (app_id, sender_id, at DESC);

-- Ban evasion looks for senders of the same app.
ALTER TABLE banned_addresses ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
ALTER TABLE banned_addresses ALTER COLUMN app_id DROP DEFAULT;
ALTER TABLE banned_addresses DROP CONSTRAINT banned_addresses_pkey;
ALTER TABLE banned_addresses ADD PRIMARY KEY (app_id, address, sender_id);
DROP INDEX banned_addresses_by_time;
CREATE INDEX banned_addresses_by_time ON banned_addresses (app_id, address, banned_at DESC);

-- Entries about a sender name its app; others (logins, rules, keys) none. The log is searched
-- by sender id, of one app or all, so audit_by_sender (sender_id, at) stays as it is.
ALTER TABLE audit_log ADD COLUMN app_id bigint;
UPDATE audit_log SET app_id = 1 WHERE sender_id IS NOT NULL;

-- The cached sender state of every instance is keyed by app and sender: the notification
-- names both, as `app_id:sender_id` (an app id has no colon).
CREATE OR REPLACE FUNCTION sendguard_sender_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sendguard_senders', NEW.app_id || ':' || NEW.id);
    RETURN NULL;
END $$;

-- Recipients who asked this app for no more invitations (the one-click unsubscribe, or an admin).
CREATE TABLE suppressions (
    app_id     bigint NOT NULL REFERENCES apps (id),
    recipient  text NOT NULL,
    -- The invite whose unsubscribe link was used; NULL when an admin added it.
    invite_id  uuid,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, recipient)
);

-- Keys shared by every instance. `link_key` signs the unsubscribe and report links of emails
-- when SENDGUARD_SECRET_KEY is not set: 32 bytes from gen_random_uuid's strong random source
-- (two UUIDs, 244 random bits).
CREATE TABLE secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);
INSERT INTO secrets (name, value)
VALUES ('link_key', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- Events for apps' webhooks, written in the transaction of the change they tell about and
-- delivered from here with retries. `id` is the `webhook-id`: the same on every attempt.
CREATE TABLE webhook_events (
    id              uuid PRIMARY KEY,
    app_id          bigint NOT NULL REFERENCES apps (id),
    type            text NOT NULL,
    -- The body exactly as it is sent and signed.
    payload         text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    claimed_until   timestamptz,
    delivered_at    timestamptz,
    gave_up_at      timestamptz,
    last_status     integer,
    last_error      text
);
CREATE INDEX webhook_events_due ON webhook_events (next_attempt_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX webhook_events_by_app ON webhook_events (app_id, created_at DESC);
