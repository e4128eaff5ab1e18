-- The foreign key of `senders` to `apps` only re-checked what the write path guarantees: a
-- sender's row is written with the app of the API key its request was authenticated with (and
-- `api_keys` keeps its foreign key to `apps`), and no app is ever deleted. The check was a
-- trigger running a query and taking a share lock on the app's row for every sender inserted,
-- and in traffic from many senders nearly every invite's batch inserts new ones: 4,190-4,260
-- transactions/s of 12 new senders with it against 5,120-5,240 without, on one machine
-- (docs/PERFORMANCE.md). The tests that write through every path check that every sender has
-- its app, as they check that every invite has its sender and its key (migration 0010).
ALTER TABLE senders DROP CONSTRAINT senders_app_id_fkey;
