-- The campaign subjects of each waiting invite, copied to its outbox row, so that the sweep of
-- a campaign (docs/DESIGN.md §3d) reads the campaign's few waiting invites instead of all its
-- invites ever written, whose number grows for as long as the campaign runs. The index is
-- updated in place (no pending list): the outbox's rows live for seconds, and a pending list
-- would be scanned whole by every sweep until the next vacuum.
ALTER TABLE outbox ADD COLUMN campaign_keys text[];

UPDATE outbox o SET campaign_keys = i.campaign_keys
FROM invites i
WHERE i.id = o.invite_id AND i.created_at = o.created_at AND i.campaign_keys IS NOT NULL
    AND NOT i.decision ? 'decided';

CREATE INDEX outbox_by_campaign ON outbox USING gin (campaign_keys) WITH (fastupdate = off)
    WHERE campaign_keys IS NOT NULL;
