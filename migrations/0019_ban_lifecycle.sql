-- The ban's lifecycle (docs/DESIGN.md §3e): a confirmed ban lasts a term, each confirmed ban is
-- a strike on the sender's record, and a banned sender may appeal each ban once.

-- When a `banned` sender's term ends; NULL while banned: permanent.
ALTER TABLE senders ADD COLUMN banned_until timestamptz;
-- The expiry task's one question: whose term has ended.
CREATE INDEX senders_ban_ends ON senders (banned_until)
    WHERE state = 'banned' AND banned_until IS NOT NULL;

-- One row per confirmed ban. Kept whatever the retention: strikes are the sender's record, and
-- the ladder reads the last 90 days of them. A strike removed (the ban was a mistake, or an
-- appeal was granted) stays, marked, and no longer counts.
CREATE TABLE strikes (
    id             bigserial PRIMARY KEY,
    app_id         bigint NOT NULL,
    sender_id      text NOT NULL,
    at             timestamptz NOT NULL DEFAULT now(),
    -- The rules whose open flags the ban confirmed; empty for a ban by hand.
    rules          text[] NOT NULL DEFAULT '{}',
    term           text NOT NULL CHECK (term IN ('1d', '7d', '30d', 'permanent')),
    banned_until   timestamptz,
    by_actor       text NOT NULL,
    removed_at     timestamptz,
    removed_by     text,
    removed_reason text
);
CREATE INDEX strikes_by_sender ON strikes (app_id, sender_id, at DESC);

-- Senders banned before terms existed: permanent, each with the strike of that ban.
INSERT INTO strikes (app_id, sender_id, at, rules, term, by_actor)
SELECT s.app_id, s.id, COALESCE(s.state_changed_at, now()),
       COALESCE((SELECT array_agg(DISTINCT f.rule_name) FROM flags f
                 WHERE f.app_id = s.app_id AND f.sender_id = s.id), '{}'),
       'permanent', COALESCE(s.state_changed_by, 'system')
FROM senders s WHERE s.state = 'banned';

-- A banned sender's request, passed on by its app, to have the ban reviewed again. One per ban
-- (`strike_id`), one open per sender. `version` moves with every change, so a decision made on
-- a page that showed an older appeal is refused.
CREATE TABLE appeals (
    id         uuid PRIMARY KEY,
    app_id     bigint NOT NULL,
    sender_id  text NOT NULL,
    strike_id  bigint NOT NULL UNIQUE REFERENCES strikes (id),
    body       text NOT NULL,
    status     text NOT NULL DEFAULT 'open'
               CHECK (status IN ('open', 'granted', 'denied', 'moot')),
    version    bigint NOT NULL DEFAULT 1,
    reply      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    decided_at timestamptz,
    decided_by text
);
CREATE UNIQUE INDEX appeals_one_open ON appeals (app_id, sender_id) WHERE status = 'open';
CREATE INDEX appeals_by_sender ON appeals (app_id, sender_id, created_at DESC);
CREATE INDEX appeals_open_by_age ON appeals (created_at) WHERE status = 'open';

-- An appeal outlives no ban: whichever way a ban ends (a lift, a term's end, a granted appeal
-- that decided it first), an appeal still open is moot.
CREATE FUNCTION sendguard_ban_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE appeals SET status = 'moot', version = version + 1, decided_at = now(),
        decided_by = 'system'
    WHERE app_id = NEW.app_id AND sender_id = NEW.id AND status = 'open';
    RETURN NULL;
END $$;
CREATE TRIGGER senders_ban_ended AFTER UPDATE OF state ON senders
    FOR EACH ROW WHEN (OLD.state = 'banned' AND NEW.state <> 'banned')
    EXECUTE FUNCTION sendguard_ban_ended();
