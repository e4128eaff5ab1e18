-- A bounce or complaint is recorded in the transaction that counts it in Redis; when Redis does
-- not answer, the outcome is kept uncounted instead of refused, and counted once Redis answers
-- again (`Outcomes::count_uncounted`). Outcomes recorded before this migration were counted.
ALTER TABLE outcomes ADD COLUMN counted boolean NOT NULL DEFAULT true;
CREATE INDEX outcomes_uncounted ON outcomes (at) WHERE NOT counted;
