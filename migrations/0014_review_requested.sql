-- A sender flagged for review with nothing held (a `hold` rule of bounces or complaints: the
-- invites went out before their outcomes came) waits in the review queue until a reviewer
-- decides, as a sender with held invites does.
ALTER TABLE senders ADD COLUMN review_requested_at timestamptz;

DROP INDEX senders_with_held;
CREATE INDEX senders_awaiting_review ON senders (state_changed_at DESC)
    WHERE state = 'active' AND (held_stored > 0 OR review_requested_at IS NOT NULL);
