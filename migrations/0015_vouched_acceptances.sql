-- Trust is not self-granted (docs/DESIGN.md §3c): an acceptance ends "new" only when it came at
-- least 10 minutes after the invite was sent, and the 5 that do must come from recipients at 3
-- or more domains. `accepted` keeps counting every acceptance (the reviewers' figure);
-- `vouched` counts those that qualify, `vouched_domains` their first 3 distinct domains.
ALTER TABLE senders
    ADD COLUMN vouched bigint NOT NULL DEFAULT 0,
    ADD COLUMN vouched_domains text[] NOT NULL DEFAULT '{}';

UPDATE senders s SET vouched = v.n, vouched_domains = v.domains[1:3]
FROM (SELECT o.app_id, o.sender_id, count(*) AS n,
             array_agg(DISTINCT i.recipient_domain) AS domains
      FROM outcomes o JOIN invites i ON i.id = o.invite_id
      WHERE o.type = 'accepted' AND i.sent_at IS NOT NULL
        AND o.at >= i.sent_at + interval '10 minutes'
      GROUP BY o.app_id, o.sender_id) v
WHERE s.app_id = v.app_id AND s.id = v.sender_id;
