-- A bounce or complaint that arrives while Redis does not answer is kept, with counted = false,
-- instead of refused, and counted once Redis answers again (`Outcomes::count_uncounted`). An
-- outcome being counted is marked counted first, so that instances never count one twice.
-- Outcomes recorded before this migration were counted.
ALTER TABLE outcomes ADD COLUMN counted boolean NOT NULL DEFAULT true;
CREATE INDEX outcomes_uncounted ON outcomes (at) WHERE NOT counted;
