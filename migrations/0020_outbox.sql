-- The outbox gets a table of its own: one row per queued invite, deleted once the invite is
-- sent, suppressed, held or given up on. The claim, its lease and the time of the next attempt
-- live here, so that a delivered invite's second write to `invites` (its status and `sent_at`)
-- changes no indexed column and stays on its page as a heap-only update: the invites' indexes
-- no longer carry a dead entry for every invite delivered.
CREATE TABLE outbox (
    invite_id       uuid PRIMARY KEY,
    -- The invite's `created_at`: with the id, it names the week of `invites` that holds it.
    created_at      timestamptz NOT NULL,
    -- When it is due: its first attempt, its next after a failure, or when the lease of the
    -- worker that claimed it runs out.
    next_attempt_at timestamptz NOT NULL,
    -- The outbox worker sending it until `next_attempt_at`; NULL while it waits.
    claimed_by      text
);
CREATE INDEX outbox_due ON outbox (next_attempt_at);

INSERT INTO outbox (invite_id, created_at, next_attempt_at, claimed_by)
SELECT id, created_at, COALESCE(GREATEST(next_attempt_at, claimed_until), now()),
    CASE WHEN claimed_until > now() THEN claimed_by END
FROM invites WHERE status = 'queued';

-- Every index of `invites` that names a column a delivery changes rules out the heap-only
-- update: the outbox's index goes with the claim, and the deferred invites are found by the
-- reason they were recorded with, which no delivery changes, instead of by their status.
DROP INDEX invites_outbox;
DROP INDEX invites_deferred;
CREATE INDEX invites_deferred ON invites (created_at)
    WHERE decision ->> 'reason' = 'redis_unavailable_deferred';
ALTER TABLE invites DROP COLUMN next_attempt_at, DROP COLUMN claimed_by,
    DROP COLUMN claimed_until;

-- Room on each page for the delivered versions of the invites written there: a heap-only
-- update needs it on the same page. Half of each page, because one commit of `sent` marks
-- often updates several invites of a page, and the versions it replaces are pruned only once
-- it has committed (in the outbox's test, 20 of 20 updates stayed on their page at 50, 18 at
-- 65 and 9 at 80).
DO $$
DECLARE
    week regclass;
BEGIN
    FOR week IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'invites'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 50)', week);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION sendguard_invite_weeks(since timestamptz, weeks_ahead integer)
    RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    week date := date_trunc('week', since AT TIME ZONE 'UTC')::date;
    last date := date_trunc('week', now() AT TIME ZONE 'UTC')::date + 7 * weeks_ahead;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('sendguard_invite_weeks'));
    WHILE week <= last LOOP
        IF to_regclass('invites_w' || to_char(week, 'YYYYMMDD')) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF invites FOR VALUES FROM (%L) TO (%L)
                    WITH (fillfactor = 50)',
                'invites_w' || to_char(week, 'YYYYMMDD'), week || ' 00:00:00+00',
                (week + 7) || ' 00:00:00+00');
        END IF;
        week := week + 7;
    END LOOP;
END $$;
