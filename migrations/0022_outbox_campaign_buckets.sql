-- The campaign subjects of each waiting invite, as buckets on its outbox row, so that the sweep
-- of a campaign (docs/DESIGN.md §3d) reads the campaign's few waiting invites instead of all its
-- invites ever written, whose number grows for as long as the campaign runs.
--
-- A bucket is one of 65,536 (the first two bytes of the subject's SHA-256, as
-- `campaigns::bucket` computes it), not the subject: a GIN index never removes a key from its
-- entry tree, and nearly every text is a subject of its own, so an index of the subjects of a
-- queue whose rows live for seconds grew by 1.4 MB a minute at 1,000 invites/s, for good, and
-- every vacuum of the outbox reads it whole. The sweep checks the subjects of the few invites
-- of a bucket. The service computes the buckets it writes: an index on a function of the
-- subjects cost each batch of the writer 30-100 µs more, in the function's set-up.
ALTER TABLE outbox ADD COLUMN campaign_buckets int[];

-- The same bucket in SQL, for the invites already waiting (and for the tests that check the
-- two agree).
CREATE FUNCTION sendguard_campaign_bucket(subject text) RETURNS int
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN get_byte(sha256(convert_to(subject, 'UTF8')), 0) * 256
        + get_byte(sha256(convert_to(subject, 'UTF8')), 1);

-- A released invite went back to the outbox by a moderator's decision: no sweep holds it again.
UPDATE outbox o
SET campaign_buckets = ARRAY(SELECT sendguard_campaign_bucket(k) FROM unnest(i.campaign_keys) k)
FROM invites i
WHERE i.id = o.invite_id AND i.created_at = o.created_at AND i.campaign_keys IS NOT NULL
    AND NOT i.decision ? 'decided';

CREATE INDEX outbox_by_campaign ON outbox USING gin (campaign_buckets) WITH (fastupdate = off)
    WHERE campaign_buckets IS NOT NULL;
