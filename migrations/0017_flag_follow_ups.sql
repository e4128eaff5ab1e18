-- A flag is open until a reviewer decides on its sender. A sender with an open `hold` flag for
-- a rule has that flag's count raised, not a new flag: one caller cannot grow the records.
ALTER TABLE flags
    ADD COLUMN count bigint NOT NULL DEFAULT 1,
    ADD COLUMN last_seen_at timestamptz,
    ADD COLUMN closed_at timestamptz;
UPDATE flags SET last_seen_at = created_at;
ALTER TABLE flags ALTER COLUMN last_seen_at SET NOT NULL, ALTER COLUMN last_seen_at SET DEFAULT now();

-- Flags of senders no longer awaiting anyone are decided; of the open `hold` flags of one rule,
-- the newest stays open.
UPDATE flags f SET closed_at = now()
WHERE NOT EXISTS (SELECT 1 FROM senders s WHERE s.app_id = f.app_id AND s.id = f.sender_id
        AND (s.state IN ('shadow_banned', 'banned') OR s.held_stored > 0
             OR s.review_requested_at IS NOT NULL))
    OR (f.action = 'hold' AND EXISTS (SELECT 1 FROM flags g WHERE g.app_id = f.app_id
        AND g.sender_id = f.sender_id AND g.rule_name = f.rule_name AND g.action = 'hold'
        AND g.id > f.id));
CREATE UNIQUE INDEX flags_open_hold ON flags (app_id, sender_id, rule_name)
    WHERE action = 'hold' AND closed_at IS NULL;
-- Retention removes decided flags by age.
CREATE INDEX flags_closed_by_time ON flags (last_seen_at) WHERE closed_at IS NOT NULL;

-- What an invite that flags its sender leaves to do, written by the batch statement in the
-- invite's transaction and done by any instance right after (docs/DESIGN.md §3a): the flag,
-- the sender's new state, the audit entry and the webhook event. `version` is the sender's as
-- the invite was written: a person's decision since outranks the flag.
CREATE TABLE pending_flags (
    id         bigserial PRIMARY KEY,
    app_id     bigint NOT NULL,
    sender_id  text NOT NULL,
    invite_id  uuid NOT NULL,
    version    bigint NOT NULL,
    -- The invite was past its sender's held cap: counted, not announced.
    over_cap   boolean NOT NULL,
    -- rule_id, rule_name, signal, action, observed, limit, window_secs.
    breach     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- A sender with a shadow ban on its way is held as a banned one.
CREATE INDEX pending_flags_by_sender ON pending_flags (app_id, sender_id)
    WHERE breach ->> 'action' = 'shadow_ban';

-- Retention removes delivered and abandoned webhook events by age.
CREATE INDEX webhook_events_done_by_time ON webhook_events (created_at)
    WHERE delivered_at IS NOT NULL OR gave_up_at IS NOT NULL;
