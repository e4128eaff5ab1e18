-- Invites accepted while Redis could not be asked: recorded as deferred and checked against the
-- rules, with their own timestamps, once it answers again.
ALTER TABLE invites DROP CONSTRAINT invites_status_check;
ALTER TABLE invites ADD CONSTRAINT invites_status_check
    CHECK (status IN ('queued', 'sent', 'failed', 'held', 'suppressed', 'discarded', 'deferred'));
CREATE INDEX invites_deferred ON invites (created_at) WHERE status = 'deferred';
