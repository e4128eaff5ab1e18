-- When a campaign's queue was last swept. Every invite past a campaign rule's limit is held by
-- its own decision, so a sweep only has to catch what was queued before the limit was crossed:
-- the follow-up sweeps at every breach in a campaign's first seconds and then at most once a
-- second, rather than once per held invite.
ALTER TABLE campaigns ADD COLUMN swept_at timestamptz;
