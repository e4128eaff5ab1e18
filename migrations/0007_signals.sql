-- Signals beyond volume (DESIGN.md §3c): what a rule counts, rules for new senders only, the
-- hold action, outcomes reported after delivery, ban evasion, repeat offenders, reviewers' notes.

ALTER TABLE rules
    ADD COLUMN signal text NOT NULL DEFAULT 'invites'
        CHECK (signal IN ('invites', 'distinct_recipients', 'distinct_domains', 'links',
                          'bounces', 'complaints')),
    ADD COLUMN new_senders_only boolean NOT NULL DEFAULT false;
ALTER TABLE rules DROP CONSTRAINT rules_limit_count_check;
ALTER TABLE rules ADD CONSTRAINT rules_limit_count_check CHECK (limit_count BETWEEN 0 AND 1000000);
ALTER TABLE rules DROP CONSTRAINT rules_action_check;
ALTER TABLE rules ADD CONSTRAINT rules_action_check
    CHECK (action IN ('shadow_ban', 'reject', 'hold', 'suppress', 'monitor'));

-- The new default rules; an installation that already has a rule of one of these names keeps it.
INSERT INTO rules (name, scope, signal, limit_count, window_secs, action, new_senders_only) VALUES
    ('new-sender-links', 'sender', 'links', 0, 86400, 'hold', true),
    ('sender-distinct-recipients-daily', 'sender', 'distinct_recipients', 100, 86400, 'shadow_ban', false),
    ('sender-complaints-daily', 'sender', 'complaints', 2, 86400, 'shadow_ban', false),
    ('sender-bounces-daily', 'sender', 'bounces', 10, 86400, 'shadow_ban', false)
ON CONFLICT (name) DO NOTHING;

ALTER TABLE senders
    -- When the account was created in the app, as the app said; else first_seen_at counts.
    ADD COLUMN created_in_app_at timestamptz,
    -- Invites of this sender the recipient accepted: a sender stops being new at 5.
    ADD COLUMN accepted bigint NOT NULL DEFAULT 0,
    -- The client address (IPv6: its /64) the sender was first seen from.
    ADD COLUMN first_address text,
    -- A sender banned within 30 days from the address this one was first seen from.
    ADD COLUMN linked_to text,
    ADD COLUMN repeat_offender boolean NOT NULL DEFAULT false,
    ADD COLUMN lifted_at timestamptz;
-- The review queue: senders shadow-banned, or active with invites held for review.
CREATE INDEX senders_with_held ON senders (state_changed_at DESC) WHERE state = 'active' AND held_stored > 0;

ALTER TABLE flags
    ADD COLUMN signal text NOT NULL DEFAULT 'invites',
    ADD COLUMN action text NOT NULL DEFAULT 'shadow_ban',
    -- The invite a `hold` breach held.
    ADD COLUMN invite_id uuid,
    ADD COLUMN repeat boolean NOT NULL DEFAULT false;

-- What happened to an invite after it was sent, once per invite and type.
CREATE TABLE outcomes (
    invite_id uuid NOT NULL,
    type      text NOT NULL CHECK (type IN ('bounce', 'complaint', 'accepted')),
    sender_id text NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (invite_id, type)
);
CREATE INDEX outcomes_by_sender ON outcomes (sender_id, at DESC);
CREATE INDEX outcomes_by_time ON outcomes (at);

-- Addresses senders were banned from, for 30 days: a new sender first seen from one is linked.
CREATE TABLE banned_addresses (
    address   text NOT NULL,
    sender_id text NOT NULL,
    banned_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (address, sender_id)
);
CREATE INDEX banned_addresses_by_time ON banned_addresses (address, banned_at DESC);

-- Reviewers' private notes on a sender.
CREATE TABLE sender_notes (
    id         bigserial PRIMARY KEY,
    sender_id  text NOT NULL REFERENCES senders (id),
    admin_id   bigint REFERENCES admins (id) ON DELETE SET NULL,
    author     text NOT NULL,
    body       text NOT NULL CHECK (length(body) BETWEEN 1 AND 2000),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sender_notes_by_sender ON sender_notes (sender_id, created_at DESC);

-- The reviewers' decisions a backtest scores a proposed rule against.
CREATE INDEX audit_decisions ON audit_log (at DESC)
    WHERE action IN ('confirm_ban', 'lift_and_release', 'lift_and_discard');
