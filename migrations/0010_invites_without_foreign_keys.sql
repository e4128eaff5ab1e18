-- The foreign keys of `invites` (to `api_keys` and to `senders`) only re-checked, for every
-- invite written, what the write path already guarantees: an invite is inserted in the same
-- transaction that upserts its sender's row and holds it locked until commit (the batch
-- statement inserts only invites joined to the senders it upserted; a flagging invite follows
-- its sender's upsert), its API key is the one its request was authenticated with, and no
-- sender or API key is ever deleted (keys are revoked, senders change state). Each check was a
-- trigger running a query per invite: a quarter to a third of the batch statement's time in an
-- isolated measurement (docs/PERFORMANCE.md). The tests check that every invite written has
-- its sender and its key.
ALTER TABLE invites
    DROP CONSTRAINT invites_api_key_id_fkey,
    DROP CONSTRAINT invites_app_id_sender_id_fkey;
