-- The campaign subjects of each waiting invite, copied to its outbox row, so that the sweep of
-- a campaign (docs/DESIGN.md §3d) reads the campaign's few waiting invites instead of all its
-- invites ever written, whose number grows for as long as the campaign runs.
ALTER TABLE outbox ADD COLUMN campaign_keys text[];

UPDATE outbox o SET campaign_keys = i.campaign_keys
FROM invites i
WHERE i.id = o.invite_id AND i.created_at = o.created_at AND i.campaign_keys IS NOT NULL
    AND NOT i.decision ? 'decided';

-- The index holds each subject's bucket, one of 65,536, not the subject itself. A GIN index
-- never removes a key from its entry tree, and nearly every text is a subject of its own: an
-- index of the subjects of a queue whose rows live for seconds grew by 1.4 MB a minute at
-- 1,000 invites/s, for good, and every vacuum of the outbox reads it whole. Buckets bound it;
-- a sweep checks the subjects of the few rows of its bucket. SHA-256, not `hashtext`: the
-- buckets must not change with the server's version. (In PL/pgSQL: the same in one SQL
-- expression cost each outbox row about 4 µs more.)
CREATE FUNCTION sendguard_campaign_buckets(keys text[]) RETURNS int[]
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    buckets int[] := '{}';
    key text;
    digest bytea;
BEGIN
    FOREACH key IN ARRAY keys LOOP
        digest := sha256(convert_to(key, 'UTF8'));
        buckets := buckets || (get_byte(digest, 0) * 256 + get_byte(digest, 1));
    END LOOP;
    RETURN buckets;
END $$;

CREATE INDEX outbox_by_campaign ON outbox USING gin (sendguard_campaign_buckets(campaign_keys))
    WITH (fastupdate = off) WHERE campaign_keys IS NOT NULL;
