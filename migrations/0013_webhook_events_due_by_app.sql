-- The delivery worker claims each app's oldest due events, a share of its slots at most, so
-- that one app's backlog never holds up another's: an app's due events in order, found without
-- reading the others'.
CREATE INDEX webhook_events_due_by_app ON webhook_events (app_id, next_attempt_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
