-- Campaigns: many accounts, one payload (docs/DESIGN.md §3d).

ALTER TABLE rules DROP CONSTRAINT rules_scope_check;
ALTER TABLE rules ADD CONSTRAINT rules_scope_check CHECK (scope IN
    ('sender', 'ip', 'recipient', 'recipient_domain', 'global', 'fingerprint', 'link_domain'));
ALTER TABLE rules DROP CONSTRAINT rules_signal_check;
ALTER TABLE rules ADD CONSTRAINT rules_signal_check CHECK (signal IN ('invites',
    'distinct_recipients', 'distinct_domains', 'links', 'bounces', 'complaints',
    'distinct_senders'));

-- The messages an app prefills: a text like one of them never fingerprints.
ALTER TABLE apps ADD COLUMN standard_texts text[] NOT NULL DEFAULT '{}';

-- The campaign subjects an invite counted under (its text's fingerprint group, its link
-- domains), while campaign rules are enabled: the sweep finds a campaign's queued invites by
-- them, and its page its senders and invites.
ALTER TABLE invites ADD COLUMN campaign_keys text[];
CREATE INDEX invites_by_campaign ON invites USING gin (campaign_keys)
    WHERE campaign_keys IS NOT NULL;

-- A fingerprint group or link domain whose hold or shadow-ban rule of distinct senders was
-- exceeded, decided as one.
CREATE TABLE campaigns (
    id            bigserial PRIMARY KEY,
    -- `fingerprint:<group>` or `link_domain:<domain>`, as the rules count it.
    subject       text NOT NULL UNIQUE,
    kind          text NOT NULL CHECK (kind IN ('fingerprint', 'link_domain')),
    -- The normalised text, or the domain.
    normalised    text NOT NULL,
    -- The text's signature: a benign mark matches its near-duplicates by it.
    signature     bytea,
    -- One invite's text as its sender wrote it.
    sample        text,
    rule_name     text NOT NULL,
    detected_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    -- Benign: released, and never counted again until the mark is undone.
    benign_at     timestamptz,
    -- The last decision on the whole campaign: `banned` or `benign`.
    decision      text CHECK (decision IN ('banned', 'benign')),
    decided_by    text,
    decided_at    timestamptz,
    note          text,
    -- Bumped by every decision: one carries the version its reviewer saw.
    version       bigint NOT NULL DEFAULT 1
);
CREATE INDEX campaigns_by_time ON campaigns (last_seen_at DESC);

-- Each app told of a campaign (`campaign.detected`, once per campaign and app).
CREATE TABLE campaign_notices (
    campaign_id bigint NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    app_id      bigint NOT NULL,
    PRIMARY KEY (campaign_id, app_id)
);

-- The campaign a flag came from.
ALTER TABLE flags ADD COLUMN campaign_id bigint REFERENCES campaigns (id) ON DELETE SET NULL;
CREATE INDEX flags_by_campaign ON flags (campaign_id) WHERE campaign_id IS NOT NULL;

INSERT INTO rules (name, scope, signal, limit_count, window_secs, action, algorithm) VALUES
    ('campaign-text', 'fingerprint', 'distinct_senders', 5, 86400, 'hold', 'hash_counters'),
    ('campaign-link-domain', 'link_domain', 'distinct_senders', 20, 3600, 'monitor', 'hash_counters')
ON CONFLICT (name) DO NOTHING;
