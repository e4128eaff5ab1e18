-- A bounce or complaint is counted in Redis after it is recorded. `counted` says it was; the
-- request that recorded it holds it for its count with a short lease (`counting_until`), and
-- an outcome not counted whose lease is over (Redis did not answer, the request or its
-- instance stopped) is counted by a task, at the time it arrived (`Outcomes::count_uncounted`),
-- each under a lease of its own so that instances never count one at the same time. Outcomes
-- recorded before this migration were counted.
ALTER TABLE outcomes
    ADD COLUMN counted boolean NOT NULL DEFAULT true,
    ADD COLUMN counting_until timestamptz;
CREATE INDEX outcomes_uncounted ON outcomes (at) WHERE NOT counted;
