//! Group commit: concurrent invites share commits, every answer follows its commit, and a batch
//! whose commit fails answers 503 to each of its requests and keeps none of them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::sync::Mutex;

use crate::support::api::Api;
use crate::support::app::{
    Stage, admin, api_key, connections_down_to, flags_done, hold_batch_statements, hold_senders,
    orphans, wait_for, waiting_on_locks,
};

/// Transactions committed in `db` so far, read from another database so the reading itself is
/// not counted.
async fn commits(db: &str) -> i64 {
    database_stat(db, "xact_commit").await
}

/// A counter of `db` in `pg_stat_database`, read from another database.
async fn database_stat(db: &str, counter: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT {counter} FROM pg_stat_database WHERE datname = $1"
    ))
    .bind(db)
    .fetch_one(&mut admin().await)
    .await
    .expect("pg_stat_database")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_invites_share_commits_and_each_answer_follows_its_commit() {
    const INVITES: usize = 200;
    let stage = Stage::start("groupcommit", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let db = stage.db.name.clone();
    // Every check shares one READ COMMITTED transaction, committed only after the count is
    // read: each statement sees what was committed before it, and adds nothing to the count.
    let mut check = PgConnection::connect(&stage.db.url).await.expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut check)
        .await
        .expect("begin");
    let check = Arc::new(Mutex::new(check));
    stage.pool.close().await;
    let before = commits(&db).await;

    let sends: Vec<_> = (0..INVITES)
        .map(|n| {
            let (api, check) = (api.clone(), check.clone());
            tokio::spawn(async move {
                let body = json!({"sender_id": format!("gc{n}"), "recipient": format!("gc{n}@example.com")});
                let (status, id) = api.send(body).await;
                assert_eq!(status, StatusCode::OK, "invite {n}");
                let id = uuid::Uuid::parse_str(&id.expect("id")).expect("uuid");
                let visible: bool =
                    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM invites WHERE id = $1)")
                        .bind(id)
                        .fetch_one(&mut *check.lock().await)
                        .await
                        .expect("look up");
                assert!(visible, "invite {n} was answered before its commit");
            })
        })
        .collect();
    for send in sends {
        send.await.expect("send");
    }
    assert_eq!(
        orphans(&mut *check.lock().await).await,
        0,
        "every invite has its sender and its key, every sender its app"
    );
    // The instance's connections report their counts as they close.
    let Stage {
        app,
        db: test_db,
        pool,
        ..
    } = stage;
    app.shutdown().await;
    // A connection that was still being given back when the pool closed waits idle in it:
    // dropping the pool closes it too.
    drop(pool);
    // Only the checking connection is left.
    let closed = connections_down_to(&db, 1).await;
    assert!(closed, "the instance closed its connections");
    // The outbox commits each delivery's `sent` mark as it completes, shared only with the marks
    // completing around it: its commits are left out, one per `sent_at` (each commit's `now()`).
    let marks: i64 = sqlx::query_scalar("SELECT count(DISTINCT sent_at) FROM invites")
        .fetch_one(&mut *check.lock().await)
        .await
        .expect("mark commits");
    let committed = commits(&db).await - before - marks;
    println!("{INVITES} invites, {committed} transactions committed besides {marks} marks");
    assert!(
        committed < INVITES as i64,
        "{committed} commits for {INVITES} invites: they were not written together"
    );
    drop(check);
    drop(test_db);
}

/// Batches the instance of the failure test writes at once: each is held up by a locked sender.
const WRITERS: usize = 3;

/// Refuses, at commit, any transaction that wrote an invite to a `poison…` recipient.
const POISON: &str = "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.recipient LIKE 'poison%' THEN
            RAISE EXCEPTION 'a poisoned batch';
        END IF;
        RETURN NULL;
    END $$";
const POISON_TRIGGER: &str = "CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON invites
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_poison()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_commit_fails_answers_503_to_each_member_and_keeps_none() {
    let stage = Stage::start_with("groupfail", &[POISON, POISON_TRIGGER], |cfg| {
        cfg.db_writers = WRITERS
    })
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let db = stage.db.name.clone();
    let blockers: Vec<String> = (0..WRITERS).map(|n| format!("blocker{n}")).collect();
    for blocker in &blockers {
        api.accepted(blocker, "first@example.com").await;
    }

    // Every writer is held up on a blocker's row, so the next invites queue behind them and
    // share the batch after them. One blocker at a time, so each is a batch of its own.
    let mut lock = stage.pool.begin().await.expect("begin");
    let mut blocked = Vec::new();
    for (n, blocker) in blockers.iter().enumerate() {
        sqlx::query("SELECT 1 FROM senders WHERE id = $1 FOR UPDATE")
            .bind(blocker)
            .execute(&mut *lock)
            .await
            .expect("lock the sender");
        let api = api.clone();
        let body = json!({"sender_id": blocker, "recipient": "second@example.com"});
        blocked.push(tokio::spawn(async move { api.send(body).await }));
        let waiting = wait_for(Duration::from_secs(10), || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND wait_event_type = 'Lock'",
            )
            .bind(&db)
            .fetch_one(&mut admin().await)
            .await
            .expect("pg_stat_activity")
                == n as i64 + 1
        })
        .await;
        assert!(waiting, "writer {n} waits for its locked sender");
    }
    let recipients: Vec<String> = std::iter::once("poison@example.com".to_owned())
        .chain((0..20).map(|n| format!("good{n}@example.com")))
        .collect();
    let batch: Vec<_> = recipients
        .iter()
        .enumerate()
        .map(|(n, recipient)| {
            let api = api.clone();
            let body = json!({"sender_id": format!("member{n}"), "recipient": recipient});
            tokio::spawn(async move { api.send(body).await })
        })
        .collect();
    // Let every request reach the writer's queue before the blocker's write goes on.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    lock.rollback().await.expect("release");

    for answer in blocked {
        let (status, _) = answer.await.expect("blocked invite");
        assert_eq!(status, StatusCode::OK, "the batches before are unaffected");
    }
    let mut refused = HashSet::new();
    let mut accepted = HashSet::new();
    for (recipient, answer) in recipients.iter().zip(batch) {
        let (status, id) = answer.await.expect("invite");
        match status {
            StatusCode::OK => accepted.insert(id.expect("id")),
            StatusCode::SERVICE_UNAVAILABLE => refused.insert(recipient.clone()),
            other => panic!("{recipient}: {other}"),
        };
    }
    assert!(
        refused.contains("poison@example.com"),
        "the poisoned invite is refused"
    );
    assert!(
        refused.len() > 1,
        "the poisoned invite's batch mates are refused with it: {refused:?}"
    );
    let stored: HashSet<String> = sqlx::query_scalar("SELECT recipient FROM invites")
        .fetch_all(&stage.pool)
        .await
        .expect("recipients")
        .into_iter()
        .collect();
    for recipient in &refused {
        assert!(
            !stored.contains(recipient),
            "{recipient} was answered 503 but kept"
        );
    }
    let ids: HashSet<String> = sqlx::query_scalar::<_, uuid::Uuid>("SELECT id FROM invites")
        .fetch_all(&stage.pool)
        .await
        .expect("ids")
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    assert!(
        accepted.is_subset(&ids),
        "every invite answered 200 is kept"
    );
    // A refused invite sent again is accepted: nothing is left stuck.
    for (n, recipient) in recipients.iter().enumerate().skip(1) {
        if refused.contains(recipient) {
            api.accepted(&format!("member{n}"), recipient).await;
        }
    }
}

/// Requests racing with one Idempotency-Key share batches with each other: the same body gets
/// one invite and one id, another body a 422, exactly as one request per transaction would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_with_one_idempotency_key_record_one_invite() {
    let stage = Stage::start("groupidem", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let send = |recipient: &'static str| {
        let api = api.clone();
        tokio::spawn(async move {
            let body = json!({"sender_id": "racer", "recipient": recipient});
            api.send_keyed("race-1", &body).await
        })
    };
    let same: Vec<_> = (0..30).map(|_| send("once@example.com")).collect();
    let other: Vec<_> = (0..5).map(|_| send("other@example.com")).collect();
    let mut ids = HashSet::new();
    let mut refused = 0;
    for answer in same.into_iter().chain(other) {
        match answer.await.expect("request") {
            (StatusCode::OK, Some(id)) => {
                ids.insert(id);
            }
            (StatusCode::UNPROCESSABLE_ENTITY, _) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ids.len(), 1, "one id for every accepted request: {ids:?}");
    let stored: Vec<String> = sqlx::query_scalar("SELECT recipient FROM invites")
        .fetch_all(&stage.pool)
        .await
        .expect("invites");
    assert_eq!(stored.len(), 1, "one invite recorded: {stored:?}");
    // Whichever body came first is the key's; every request with the other body is refused.
    let expected_refusals = if stored[0] == "once@example.com" {
        5
    } else {
        30
    };
    assert_eq!(refused, expected_refusals);
}

/// Sends an invite with `key` on a service of two writers, then its retry once the first
/// attempt waits on `lock` (and the retry on it or on the first), releases the lock, and checks
/// that both are answered 200 with the first attempt's invite.
async fn retried_on_two_writers(
    api: &Api,
    db: &str,
    lock: sqlx::Transaction<'static, sqlx::Postgres>,
    key: &'static str,
    body: serde_json::Value,
) {
    let send = || {
        let (api, body) = (api.clone(), body.clone());
        tokio::spawn(async move { api.send_keyed(key, &body).await })
    };
    let first = send();
    assert!(waiting_on_locks(db, 1).await, "the first attempt waits");
    let retry = send();
    assert!(
        waiting_on_locks(db, 2).await,
        "the retry waits on the other writer"
    );
    lock.rollback().await.expect("release");
    let (first, retry) = (first.await.expect("first"), retry.await.expect("retry"));
    assert_eq!(first.0, StatusCode::OK);
    assert_eq!(retry, first, "the retry answers the first attempt's invite");
}

/// A flagging invite retried with its Idempotency-Key while the first attempt is still being
/// written, by another writer: the retry finds the key taken only when it claims it, after its
/// flag. The flag (and its audit entry and webhook event) must go with the invite, so the
/// retry flags nothing. A table lock holds both writers at the point where they claim the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flagging_invite_retried_on_another_writer_flags_its_sender_once() {
    let stage = Stage::start_with("groupflagrace", &[], |cfg| cfg.db_writers = 2).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let db = stage.db.name.clone();
    let lock = hold_batch_statements(&stage.pool).await;
    let body = json!({"sender_id": "fresh", "recipient": "r@example.com",
        "message": "see prize[.]example.com"});
    retried_on_two_writers(&api, &db, lock, "retried-1", body).await;
    flags_done(&stage.pool).await;
    let flags: Vec<Option<uuid::Uuid>> =
        sqlx::query_scalar("SELECT invite_id FROM flags WHERE sender_id = 'fresh'")
            .fetch_all(&stage.pool)
            .await
            .expect("flags");
    assert_eq!(flags.len(), 1, "one flag for one invite: {flags:?}");
    let invites: i64 = sqlx::query_scalar("SELECT count(*) FROM invites WHERE id = $1")
        .bind(flags[0])
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    assert_eq!(invites, 1, "the flag names the invite written");
}

/// A held invite retried with its Idempotency-Key on another writer while the first attempt is
/// being written: both see the key free, and the retry finds it taken only when it claims it.
/// It must take no slot under its sender's held cap, or the sender's held count (the review
/// queue's figure, and what the cap is checked against) drifts up with every such retry. A
/// lock on the sender's row holds both statements after each has taken its snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_invite_retried_on_another_writer_takes_one_slot() {
    let muted = "INSERT INTO senders (app_id, id, state) VALUES (1, 'muted', 'shadow_banned')";
    let stage = Stage::start_with("groupheldrace", &[muted], |cfg| cfg.db_writers = 2).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let db = stage.db.name.clone();
    let lock = hold_senders(&stage.pool, &["muted"]).await;
    let body = json!({"sender_id": "muted", "recipient": "r@example.com"});
    retried_on_two_writers(&api, &db, lock, "held-retry-1", body).await;
    let counted: (i64, i64, i64) = sqlx::query_as(
        "SELECT held_stored, held_overflow,
             (SELECT count(*) FROM invites WHERE sender_id = 'muted' AND status = 'held')
         FROM senders WHERE id = 'muted'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held counts");
    assert_eq!(counted, (1, 0, 1), "held stored, overflow, held invites");
}

/// `sendguard bench writer` writes its invites through the writer's batch statement, in the
/// batch sizes asked for, reads the server's CPU (it runs on this machine), leaves nothing
/// behind in the database it was given, and takes only a database without invites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_bench_measures_the_batch_statement_and_leaves_nothing() {
    use sendguard::invites::bench;
    let (db, pool) = crate::support::app::migrated("writerbench", &[]).await;
    let measured = bench::run(&db.url, 100, &[1, 4]).await.expect("bench");
    let shape: Vec<(&str, usize, usize)> = (measured.iter())
        .map(|m| (m.statement, m.invites_per_call, m.calls))
        .collect();
    assert_eq!(
        shape,
        [("bare insert", 1, 100), ("batch", 1, 100), ("batch", 4, 50)]
    );
    assert!(
        (measured.iter()).all(|m| m.cpu.is_some_and(|cpu| !cpu.is_zero())),
        "{measured:?}"
    );
    assert_eq!(bench::summary(&measured).len(), 3, "{measured:?}");
    // 10 batches of each size plan the statement before the measured ones.
    let written = 10 + 100 + 10 * 4 + 50 * 4;
    let inserted = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT coalesce(sum(n_tup_ins), 0)::int8 FROM pg_stat_user_tables
             WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'invites'::regclass)",
        )
        .fetch_one(&pool)
        .await
        .expect("inserted")
    };
    assert!(
        wait_for(Duration::from_secs(10), || async {
            inserted().await >= written
        })
        .await,
        "{} invites inserted, not {written}",
        inserted().await
    );
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM invites) + (SELECT count(*) FROM outbox)
             + (SELECT count(*) FROM senders)
             + (SELECT count(*) FROM pg_tables WHERE tablename = 'sendguard_bench_writer')",
    )
    .fetch_one(&pool)
    .await
    .expect("left");
    assert_eq!(left, 0, "the bench left rows behind");
    // A database that holds invites is not a scratch one.
    assert!(bench::is_scratch(&db.url).await.expect("scratch"));
    crate::support::app::queue(&pool, 1, &["kept@example.com"]).await;
    assert!(!bench::is_scratch(&db.url).await.expect("scratch"));
}
