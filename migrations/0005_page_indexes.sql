-- Indexes for the queries that must stay fast with millions of rows (tests/explain.rs checks
-- each against a seeded database): invites by age (overview, chart, backtest, retention),
-- and the audit log by time and by admin (the review queue uses senders_by_state).
CREATE INDEX IF NOT EXISTS invites_by_age ON invites (created_at);
CREATE INDEX IF NOT EXISTS audit_by_time ON audit_log (at DESC, id DESC);
CREATE INDEX IF NOT EXISTS audit_by_actor ON audit_log (actor, at DESC, id DESC);
