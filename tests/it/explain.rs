//! Every query of the dashboard, the outbox and the retention sweep uses an index on a database
//! seeded with a million invites (in weekly partitions), 20,000 senders, 100,000 flags, 200,000
//! audit entries and 200,000 idempotency keys: none reads a whole growing table or a whole
//! partition that holds rows (EXPLAIN, after ANALYZE, with the parameters the pages pass). And
//! the outbox's writes search only the weeks that hold their invites, with the plans made for
//! their values and with a cached plan; its claim skips the invites in a lease; and the batch
//! statement probes its tables by key even with a plan cached while they were empty.

use std::collections::BTreeSet;

use crate::support::app::migrated;
use serde_json::Value;
use sqlx::PgPool;

const SEED: &[&str] = &[
    "INSERT INTO api_keys (name, key_hash, app_id) VALUES ('seed', '\\x00', 1)",
    // A second app with senders of its own, so app conditions must be served by indexes.
    "INSERT INTO apps (name) VALUES ('second')",
    "INSERT INTO senders (app_id, id, state, state_changed_at)
     SELECT CASE WHEN n % 10 = 0 THEN (SELECT id FROM apps WHERE name = 'second') ELSE 1 END,
         'u' || n, CASE WHEN n % 100 = 0 THEN 'shadow_banned' ELSE 'active' END, now()
     FROM generate_series(1, 20000) n",
    // Five flags per sender: bans come and go over the months.
    "INSERT INTO flags (app_id, sender_id, rule_name, observed, limit_count, window_secs,
         created_at)
     SELECT app_id, id, 'sender-hourly', 61, 60, 3600, now() - k * interval '9 days'
     FROM senders, generate_series(1, 5) k",
    // The weeks of the last two months, as an installation that has run that long has them.
    "SELECT sendguard_invite_weeks(now() - interval '60 days', 2)",
    // One invite every five seconds for eight weeks, to 50,000 recipients on 500 domains.
    "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
         status, decision, created_at)
     SELECT gen_random_uuid(), (SELECT id FROM api_keys),
         CASE WHEN (n % 20000 + 1) % 10 = 0 THEN (SELECT id FROM apps WHERE name = 'second')
             ELSE 1 END,
         'u' || (n % 20000 + 1),
         'r' || (n % 50000) || '@d' || (n % 500) || '.example', 'd' || (n % 500) || '.example',
         (ARRAY['sent', 'sent', 'sent', 'sent', 'held', 'suppressed', 'failed', 'queued'])[n % 8 + 1],
         '{\"reason\": \"seeded\"}', now() - n * interval '5 seconds'
     FROM generate_series(1, 1000000) n",
    "INSERT INTO outbox (invite_id, created_at, next_attempt_at)
     SELECT id, created_at, now() FROM invites WHERE status = 'queued'",
    "INSERT INTO audit_log (actor, action, app_id, sender_id, at)
     SELECT CASE WHEN n % 10 = 0 THEN 'alice' ELSE 'system' END,
         CASE WHEN n % 500 = 0 THEN 'confirm_ban' ELSE 'shadow_ban' END,
         CASE WHEN (n % 20000 + 1) % 10 = 0 THEN (SELECT id FROM apps WHERE name = 'second')
             ELSE 1 END,
         'u' || (n % 20000 + 1), now() - n * interval '30 seconds'
     FROM generate_series(1, 200000) n",
    // A bounce or a complaint for one invite in forty.
    "INSERT INTO outcomes (invite_id, type, app_id, sender_id, at)
     SELECT id, CASE WHEN random() < 0.5 THEN 'bounce' ELSE 'complaint' END, app_id, sender_id,
         created_at + interval '1 minute'
     FROM invites TABLESAMPLE SYSTEM (2.5)",
    "INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash, created_at)
     SELECT (SELECT id FROM api_keys), 'key-' || n, gen_random_uuid(), '\\x00',
         now() - n * interval '25 seconds'
     FROM generate_series(1, 200000) n",
    // Some active senders hold invites for review (a `hold` rule), as the queue lists them.
    "UPDATE senders SET held_stored = 1 WHERE id LIKE 'u%7'",
    "ANALYZE",
];

/// Tables that grow with traffic or time.
const GROWING: [&str; 7] = [
    "invites",
    "outbox",
    "audit_log",
    "senders",
    "flags",
    "outcomes",
    "idempotency_keys",
];

/// The scans of whole growing tables in a plan, and of whole partitions of `invites` that hold
/// rows (`filled`, with their row counts) to keep fewer than half of them: a week whose rows
/// all match (today's, on a Monday) is best read whole.
fn full_scans(plan: &Value, filled: &[(String, f32)], found: &mut Vec<String>) {
    if plan["Node Type"] == "Seq Scan"
        && let Some(table) = plan["Relation Name"].as_str()
    {
        let kept = plan["Plan Rows"].as_f64().unwrap_or(0.0);
        let wasteful = filled
            .iter()
            .any(|(p, rows)| p == table && kept < f64::from(*rows) / 2.0);
        if GROWING.contains(&table) || wasteful {
            found.push(table.to_owned());
        }
    }
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            full_scans(child, filled, found);
        }
    }
}

/// A parameter as the code binds it.
enum P {
    Text(&'static str),
    Int4(i32),
    Int8(i64),
    /// An absent filter: a NULL of type int8.
    NoInt8,
    Float(f64),
}

/// The plan Postgres picks for `sql` with these parameters (custom plans, as the first
/// executions of a prepared statement get).
async fn plan_of(pool: &PgPool, sql: &str, params: &[P]) -> Value {
    let explain = format!("EXPLAIN (FORMAT JSON) {sql}");
    let mut query = sqlx::query_scalar::<_, Value>(&explain);
    for p in params {
        query = match p {
            P::Text(v) => query.bind(*v),
            P::Int4(v) => query.bind(*v),
            P::Int8(v) => query.bind(*v),
            P::NoInt8 => query.bind(None::<i64>),
            P::Float(v) => query.bind(*v),
        };
    }
    let plan = query
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    plan[0]["Plan"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_query_uses_an_index_on_a_million_invites() {
    use P::*;
    use sendguard::moderation::senders as s;
    use sendguard::{audit, invite_counts};
    let (_db, pool) = migrated("explain", SEED).await;
    let filled: Vec<(String, f32)> = sqlx::query_as(
        "SELECT c.relname::text, c.reltuples FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'invites'::regclass AND c.reltuples > 0",
    )
    .fetch_all(&pool)
    .await
    .expect("partitions");
    assert!(filled.len() >= 8, "the seed fills the weeks: {filled:?}");
    let cases: Vec<(&str, &str, Vec<P>)> = vec![
        (
            "overview: last 24 hours",
            invite_counts::STATUSES_24H,
            vec![],
        ),
        ("overview: awaiting review", s::AWAITING, vec![]),
        ("overview: chart", invite_counts::HOURLY, vec![]),
        ("review queue", s::QUEUE, vec![Int8(51), Int8(0), NoInt8]),
        (
            "review queue of one app",
            s::QUEUE,
            vec![Int8(51), Int8(0), Int8(2)],
        ),
        (
            "sender: invites",
            s::INVITES,
            vec![Text("u4200"), Int8(51), Int8(50), Int8(1)],
        ),
        (
            "sender: history",
            audit::OF_SENDER,
            vec![Int8(1), Text("u4200")],
        ),
        (
            "audit log",
            audit::PAGE,
            vec![Text(""), Text(""), NoInt8, Int8(51), Int8(0)],
        ),
        (
            "audit log of an admin",
            audit::PAGE,
            vec![Text("alice"), Text(""), NoInt8, Int8(51), Int8(0)],
        ),
        (
            "audit log of a sender",
            audit::PAGE,
            vec![Text(""), Text("u4200"), NoInt8, Int8(51), Int8(0)],
        ),
        (
            "audit log of a sender of one app",
            audit::PAGE,
            vec![Text(""), Text("u4200"), Int8(1), Int8(51), Int8(0)],
        ),
        (
            "find a sender in every app",
            s::APPS_OF,
            vec![Text("u4200")],
        ),
        (
            "rule backtest",
            sendguard::rules::backtest::BACKTEST_INVITES,
            vec![Int8(200_001)],
        ),
        (
            "rule backtest: outcomes",
            sendguard::rules::backtest::BACKTEST_OUTCOMES,
            vec![Int8(200_000)],
        ),
        (
            "rule backtest: reviewers' decisions",
            sendguard::rules::advisor::DECISIONS,
            vec![],
        ),
        (
            "outbox claim",
            sendguard::mail::CLAIM,
            vec![Text("worker"), Float(60.0), Int8(32)],
        ),
        (
            "retention: invites",
            sendguard::retention::DELETE_INVITES,
            vec![Int4(30), Int8(1000)],
        ),
        (
            "retention: audit",
            sendguard::retention::DELETE_AUDIT,
            vec![Int4(30), Int8(1000)],
        ),
        (
            "retention: idempotency keys",
            sendguard::retention::DELETE_KEYS,
            vec![Int4(30), Int8(1000)],
        ),
        (
            "retention: webhook events",
            sendguard::retention::DELETE_WEBHOOK_EVENTS,
            vec![Int4(30), Int8(1000)],
        ),
        (
            "retention: flags",
            sendguard::retention::DELETE_FLAGS,
            vec![Int4(30), Int8(1000)],
        ),
        (
            "retention: outcomes",
            sendguard::retention::DELETE_OUTCOMES,
            vec![Int4(30), Int8(1000)],
        ),
    ];
    let mut slow = Vec::new();
    for (name, sql, params) in &cases {
        let plan = plan_of(&pool, sql, params).await;
        let mut scans = Vec::new();
        full_scans(&plan, &filled, &mut scans);
        if !scans.is_empty() {
            slow.push(format!("{name}: reads all of {scans:?}\n{plan:#}"));
        }
    }
    assert!(slow.is_empty(), "{}", slow.join("\n\n"));
}

/// Eight weeks of invites already sent, one every 100 s, in the weeks of two months.
const SENT_WEEKS: [&str; 4] = [
    "INSERT INTO api_keys (name, key_hash, app_id) VALUES ('seed', '\\x00', 1)",
    "INSERT INTO senders (app_id, id) VALUES (1, 'u1')",
    "SELECT sendguard_invite_weeks(now() - interval '60 days', 2)",
    "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
         status, decision, created_at)
     SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 'u1', 'r' || n || '@d.example',
         'd.example', 'sent', '{}', now() - n * interval '100 seconds'
     FROM generate_series(1, 50000) n",
];

/// `n` invites written just now and waiting to be sent, claimed by `worker` whose lease ran
/// out (so the claim takes them again), after [`SENT_WEEKS`].
fn waiting(n: u32) -> Vec<String> {
    let mut seed: Vec<String> = SENT_WEEKS.iter().map(|s| s.to_string()).collect();
    seed.push(format!(
        "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
             status, decision)
         SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 'u1', 'q' || n || '@d.example',
             'd.example', 'queued', '{{}}'
         FROM generate_series(1, {n}) n"
    ));
    seed.push(
        "INSERT INTO outbox (invite_id, created_at, next_attempt_at, claimed_by)
         SELECT id, created_at, now() - interval '1 minute', 'worker' FROM invites
         WHERE status = 'queued'"
            .to_owned(),
    );
    seed.push("ANALYZE".to_owned());
    seed
}

/// `EXPLAIN ANALYZE` of statement `sql` prepared under `plan_cache_mode` `mode` and run with
/// `args` (SQL expressions), on the seed as it is: its changes are rolled back.
async fn explain_prepared(pool: &PgPool, mode: &str, sql: &str, args: &str) -> Value {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::raw_sql(&format!(
        "SET LOCAL plan_cache_mode = {mode}; PREPARE probe AS {sql}"
    ))
    .execute(&mut *tx)
    .await
    .unwrap_or_else(|e| panic!("PREPARE {sql}: {e}"));
    let plan: Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe({args})"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap_or_else(|e| panic!("EXPLAIN ({mode}) {sql}: {e}"));
    sqlx::raw_sql("DEALLOCATE probe")
        .execute(&mut *tx)
        .await
        .expect("deallocate");
    tx.rollback().await.expect("rollback");
    plan
}

/// The partitions of `invites` a plan searched for invites by their id.
fn searched_by_id(plan: &Value, found: &mut BTreeSet<String>) {
    let by_id = ["Index Cond", "Recheck Cond", "Filter"].iter().any(|key| {
        plan[key]
            .as_str()
            .is_some_and(|cond| cond.contains("(id = ") || cond.contains(" = id)"))
    });
    let ran = plan["Actual Loops"]
        .as_f64()
        .is_some_and(|loops| loops > 0.0);
    if by_id
        && ran
        && let Some(table) = plan["Relation Name"].as_str()
    {
        found.insert(table.to_owned());
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        searched_by_id(child, found);
    }
}

/// The outbox's writes find their invites in the weeks that hold them. By id alone, every
/// week's primary key is searched for every invite: a cost that grows with the retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_searches_only_the_weeks_of_its_invites() {
    let seed = waiting(20);
    let seed: Vec<&str> = seed.iter().map(String::as_str).collect();
    let (_db, pool) = migrated("explain-outbox", &seed).await;
    // The round as SQL literals, for EXECUTE.
    let (ids, first, last, one, one_at): (String, String, String, String, String) = sqlx::query_as(
        "SELECT array_agg(id)::text, min(created_at)::text, max(created_at)::text,
                 (array_agg(id ORDER BY id))[1]::text,
                 (array_agg(created_at ORDER BY id))[1]::text
             FROM invites WHERE status = 'queued'",
    )
    .fetch_one(&pool)
    .await
    .expect("the round");
    let holding: BTreeSet<String> = sqlx::query_scalar(
        "SELECT DISTINCT tableoid::regclass::text FROM invites WHERE status = 'queued'",
    )
    .fetch_all(&pool)
    .await
    .expect("weeks")
    .into_iter()
    .collect();
    let weeks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'invites'::regclass",
    )
    .fetch_one(&pool)
    .await
    .expect("weeks");
    assert!(
        weeks >= 10,
        "the seed makes the weeks of two months: {weeks}"
    );
    let round = format!("'{ids}'::uuid[], 'worker', '{first}'::timestamptz, '{last}'::timestamptz");
    let retry =
        format!("'{one}'::uuid, 'worker', 1, 'refused', false, 60, '{one_at}'::timestamptz");
    let mut wide = Vec::new();
    // A prepared statement's first runs get plans made for their values; a cached plan, made
    // for any values, must prune the weeks when it runs.
    for mode in ["auto", "force_generic_plan"] {
        for (name, sql, args) in [
            ("claim", sendguard::mail::CLAIM, "'worker', 60, 20"),
            ("sent", sendguard::mail::MARK_SENT, round.as_str()),
            ("suppressed", sendguard::mail::SUPPRESS, round.as_str()),
            ("retry", sendguard::mail::RETRY, retry.as_str()),
        ] {
            let plan = explain_prepared(&pool, mode, sql, args).await;
            let mut searched = BTreeSet::new();
            searched_by_id(&plan[0]["Plan"], &mut searched);
            if searched != holding {
                wide.push(format!(
                    "{name} ({mode}): searched {searched:?}\n{:#}",
                    plan[0]["Plan"]
                ));
            }
        }
    }
    assert!(
        wide.is_empty(),
        "the round is in {holding:?}; {}",
        wide.join("\n\n")
    );
}

/// Rows of the tables named `table…` (a partitioned table's weeks with it) a plan read: those
/// it returned and those its filters dropped.
fn rows_read(plan: &Value, table: &str) -> f64 {
    let own = if plan["Relation Name"]
        .as_str()
        .is_some_and(|name| name.starts_with(table))
    {
        let rows = plan["Actual Rows"].as_f64().unwrap_or(0.0);
        let loops = plan["Actual Loops"].as_f64().unwrap_or(0.0);
        rows * loops + plan["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
    } else {
        0.0
    };
    let children = plan["Plans"].as_array().into_iter().flatten();
    own + children.map(|child| rows_read(child, table)).sum::<f64>()
}

/// The metrics' outbox gauges read the invites waiting, not the history: the outbox's own
/// table, and none of the invites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_gauges_read_only_the_invites_waiting() {
    let seed = waiting(1000);
    let seed: Vec<&str> = seed.iter().map(String::as_str).collect();
    let (_db, pool) = migrated("explain-gauges", &seed).await;
    let explain = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        sendguard::mail::OUTBOX_STATE
    );
    let plan: Value = sqlx::query_scalar(&explain)
        .fetch_one(&pool)
        .await
        .expect("EXPLAIN the gauges");
    let (invites, waiting) = (
        rows_read(&plan[0]["Plan"], "invites"),
        rows_read(&plan[0]["Plan"], "outbox"),
    );
    assert!(
        invites == 0.0 && waiting <= 1_000.0,
        "1,000 invites wait among 50,000 sent, and the gauges read {invites} rows of invites \
         and {waiting} of the outbox:\n{:#}",
        plan[0]["Plan"]
    );
}

/// An invite of a batch the tests write with [`sendguard::invites::INSERT_BATCH`]: queued, or
/// held under a cap of 100 when `held`.
struct BatchRow<'a> {
    id: uuid::Uuid,
    sender: &'a str,
    recipient: String,
    held: bool,
    idempotency_key: Option<&'a str>,
    /// Written claimed by outbox `worker`, for a minute.
    claimed: bool,
}

/// The parameters of [`sendguard::invites::INSERT_BATCH`] for these rows, for EXECUTE.
fn batch_args(rows: &[BatchRow<'_>], worker: &str) -> String {
    let n = rows.len();
    let array = |kind: &str, value: &dyn Fn(&BatchRow<'_>) -> String| {
        let values: Vec<String> = rows.iter().map(value).collect();
        format!("ARRAY[{}]::{kind}[]", values.join(", "))
    };
    let nulls = |kind: &str| format!("array_fill(NULL::{kind}, ARRAY[{n}])");
    let same = |value: &str, kind: &str| format!("array_fill({value}::{kind}, ARRAY[{n}])");
    [
        array("uuid", &|r| format!("'{}'", r.id)),
        same("1", "int8"),
        same("1", "int8"),
        array("text", &|r| format!("'{}'", r.sender)),
        array("text", &|r| format!("'{}'", r.recipient)),
        same("'d.example'", "text"),
        nulls("text"),
        nulls("text"),
        nulls("text"),
        nulls("text"),
        array("text", &|r| {
            (if r.held { "'held'" } else { "'queued'" }).to_owned()
        }),
        same("'{}'", "jsonb"),
        array("text", &|r| {
            r.idempotency_key
                .map_or("NULL".to_owned(), |key| format!("'{key}'"))
        }),
        same("'\\x00'", "bytea"),
        nulls("text"),
        same("'active'", "text"),
        same("false", "bool"),
        same("0", "int8"),
        nulls("text"),
        nulls("timestamptz"),
        array("bool", &|r| r.claimed.to_string()),
        format!("'{worker}'"),
        "60".to_owned(),
        array("int8", &|r| {
            (if r.held { "100" } else { "NULL" }).to_owned()
        }),
        // No invite flags its sender.
        nulls("jsonb"),
        // None settles, and no campaign rule counts.
        same("0", "float8"),
        nulls("text"),
        nulls("text"),
    ]
    .join(", ")
}

/// A batch of one held invite of `sender`, with an `Idempotency-Key`, and one queued invite of
/// a new sender written claimed by an outbox.
fn held_and_queued(sender: &str) -> String {
    let key = uuid::Uuid::now_v7().to_string();
    batch_args(
        &[
            BatchRow {
                id: uuid::Uuid::now_v7(),
                sender,
                recipient: "a@d.example".to_owned(),
                held: true,
                idempotency_key: Some(&key),
                claimed: false,
            },
            BatchRow {
                id: uuid::Uuid::now_v7(),
                sender: "fresh",
                recipient: "b@d.example".to_owned(),
                held: false,
                idempotency_key: None,
                claimed: true,
            },
        ],
        "worker",
    )
}

/// Scans of `senders`, `idempotency_keys` and `suppressions` that read more rows than a batch
/// of two needs.
fn keyed_tables_read(plan: &Value, found: &mut Vec<String>) {
    if let Some(table @ ("senders" | "idempotency_keys" | "suppressions")) =
        plan["Relation Name"].as_str()
    {
        let loops = plan["Actual Loops"].as_f64().unwrap_or(0.0);
        let rows = plan["Actual Rows"].as_f64().unwrap_or(0.0) * loops
            + plan["Rows Removed by Filter"].as_f64().unwrap_or(0.0) * loops;
        if rows > 10.0 {
            found.push(format!("{} of {table} read {rows} rows", plan["Node Type"]));
        }
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        keyed_tables_read(child, found);
    }
}

/// The batch statement finds its senders, its invites' `Idempotency-Key`s and their
/// recipients' unsubscriptions by their keys whatever plan it runs with. A writer's connection
/// keeps its plans: one made while the tables were nearly empty (a new installation's first
/// minutes, or a fresh benchmark database) must not read a whole table for every batch that
/// holds an invite once it has grown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_statement_reads_by_key_with_a_plan_made_on_empty_tables() {
    let (_db, pool) = migrated(
        "explain-batch",
        &["INSERT INTO api_keys (name, key_hash, app_id) VALUES ('seed', '\\x00', 1)"],
    )
    .await;
    let mut conn = pool.acquire().await.expect("connection");
    // The plan is made for any values on its first run, while `senders` is empty.
    sqlx::raw_sql(&format!(
        "SET plan_cache_mode = force_generic_plan; PREPARE probe AS {}",
        sendguard::invites::INSERT_BATCH
    ))
    .execute(&mut *conn)
    .await
    .expect("PREPARE the batch statement");
    sqlx::raw_sql(&format!("EXECUTE probe({})", held_and_queued("first")))
        .execute(&mut *conn)
        .await
        .expect("the first batch");
    sqlx::query(
        "INSERT INTO senders (app_id, id) SELECT 1, 'u' || n FROM generate_series(1, 20000) n",
    )
    .execute(&mut *conn)
    .await
    .expect("20,000 senders");
    sqlx::query(
        "INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash)
         SELECT 1, 'key-' || n, gen_random_uuid(), '\\x00' FROM generate_series(1, 200000) n",
    )
    .execute(&mut *conn)
    .await
    .expect("200,000 idempotency keys");
    sqlx::query(
        "INSERT INTO suppressions (app_id, recipient)
         SELECT 1, 's' || n || '@d.example' FROM generate_series(1, 100000) n",
    )
    .execute(&mut *conn)
    .await
    .expect("100,000 suppressions");
    let plan: Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe({})",
        held_and_queued("u4200")
    ))
    .fetch_one(&mut *conn)
    .await
    .expect("EXPLAIN the batch");
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE status = 'held' AND sender_id = 'u4200'",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("held invites");
    assert_eq!(held, 1, "the batch holds its held invite");
    let mut wide = Vec::new();
    keyed_tables_read(&plan[0]["Plan"], &mut wide);
    assert!(
        wide.is_empty(),
        "a batch of two senders: {wide:?}\n{:#}",
        plan[0]["Plan"]
    );
}

/// The claim of a polling outbox reads the invites that are due, not those in another
/// worker's lease: fresh invites are written claimed by their instance's outbox, so under load
/// most queued invites are in a lease, and a claim that walked them would grow with the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_claim_skips_the_invites_in_a_lease() {
    let seed = waiting(20);
    let seed: Vec<&str> = seed.iter().map(String::as_str).collect();
    let (_db, pool) = migrated("explain-leased", &seed).await;
    // 2,000 invites written by the batch statement, claimed by another instance's outbox.
    let n = 2_000;
    let rows: Vec<BatchRow<'_>> = (0..n)
        .map(|i| BatchRow {
            id: uuid::Uuid::now_v7(),
            sender: "u1",
            recipient: format!("l{i}@d.example"),
            held: false,
            idempotency_key: None,
            claimed: true,
        })
        .collect();
    sqlx::raw_sql(&format!(
        "PREPARE batch AS {}; EXECUTE batch({})",
        sendguard::invites::INSERT_BATCH,
        batch_args(&rows, "another")
    ))
    .execute(&pool)
    .await
    .expect("invites written claimed");
    let leased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE claimed_by = 'another' AND next_attempt_at > now()",
    )
    .fetch_one(&pool)
    .await
    .expect("leased");
    assert_eq!(leased, n as i64, "the batch writes its invites claimed");
    sqlx::query("ANALYZE invites, outbox")
        .execute(&pool)
        .await
        .expect("analyze");
    let explain = format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", sendguard::mail::CLAIM);
    let plan: Value = sqlx::query_scalar(&explain)
        .bind("worker")
        .bind(60.0_f64)
        .bind(32_i64)
        .fetch_one(&pool)
        .await
        .expect("EXPLAIN the claim");
    let read = rows_read(&plan[0]["Plan"], "outbox") + rows_read(&plan[0]["Plan"], "invites");
    assert!(
        read <= 200.0,
        "20 invites are due and 2,000 in a lease; the claim read {read} rows of the outbox \
         and invites:\n{:#}",
        plan[0]["Plan"]
    );
}

/// A campaign's sweep reads the campaign's invites that wait, not its history: with 50,000 of
/// its invites sent and 20,000 other invites in the outbox, the look-up of its senders and the
/// sweep read its 20 waiting invites and little else (at most 100 rows of each table), with the
/// plans made for the subject and with a cached plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_sweep_reads_only_the_campaigns_waiting_invites() {
    let mut seed: Vec<String> = SENT_WEEKS.iter().map(|s| s.to_string()).collect();
    seed.push(
        "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
             status, decision, campaign_keys, created_at)
         SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 'u1', 'c' || n || '@d.example',
             'd.example', CASE WHEN n <= 20 THEN 'queued' ELSE 'sent' END, '{}',
             ARRAY['fingerprint:big'], now() - n * interval '10 seconds'
         FROM generate_series(1, 50020) n"
            .to_owned(),
    );
    seed.push(
        "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
             status, decision, campaign_keys)
         SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 'u1', 'o' || n || '@d.example',
             'd.example', 'queued', '{}', ARRAY['fingerprint:' || n]
         FROM generate_series(1, 20000) n"
            .to_owned(),
    );
    // The campaign's invites settle; the others are being sent.
    seed.push(
        "INSERT INTO outbox (invite_id, created_at, next_attempt_at, claimed_by,
             campaign_buckets)
         SELECT id, created_at, now() + interval '1 minute',
             CASE WHEN campaign_keys = ARRAY['fingerprint:big'] THEN NULL ELSE 'worker' END,
             ARRAY(SELECT sendguard_campaign_bucket(k) FROM unnest(campaign_keys) k)
         FROM invites WHERE status = 'queued'"
            .to_owned(),
    );
    seed.push("ANALYZE".to_owned());
    let seed: Vec<&str> = seed.iter().map(String::as_str).collect();
    let (_db, pool) = migrated("explain-sweep", &seed).await;
    let mut wide = Vec::new();
    for mode in ["auto", "force_generic_plan"] {
        for (name, sql, args) in [
            (
                "senders",
                sendguard::campaigns::store::QUEUED_SENDERS,
                "'fingerprint:big', sendguard_campaign_bucket('fingerprint:big')",
            ),
            (
                "sweep",
                sendguard::campaigns::store::SWEEP,
                "'fingerprint:big', 1, sendguard_campaign_bucket('fingerprint:big')",
            ),
        ] {
            let plan = explain_prepared(&pool, mode, sql, args).await;
            let plan = &plan[0]["Plan"];
            let (invites, outbox) = (rows_read(plan, "invites"), rows_read(plan, "outbox"));
            // The 20 waiting invites, each found, then taken or held in a later step of the
            // sweep: a few reads each, against the 50,020 invites of the campaign.
            if invites > 100.0 || outbox > 100.0 {
                wide.push(format!(
                    "{name} ({mode}) read {invites} rows of invites and {outbox} of the \
                     outbox:\n{plan:#}"
                ));
            }
        }
    }
    assert!(wide.is_empty(), "{}", wide.join("\n\n"));
}

/// The reload of benign campaigns, every second on every instance, reads the campaigns marked
/// benign, not all of them: 3 among 20,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reload_of_benign_campaigns_reads_only_those() {
    let seed = [
        "INSERT INTO campaigns (subject, kind, normalised, rule_name, benign_at)
         SELECT 'fingerprint:' || n, 'fingerprint', 'text ' || n, 'campaign-text',
             CASE WHEN n % 7000 = 0 THEN now() END
         FROM generate_series(1, 20000) n",
        "ANALYZE campaigns",
    ];
    let (_db, pool) = migrated("explain-benign", &seed).await;
    let explain = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        sendguard::campaigns::known::BENIGN
    );
    let plan: Value = sqlx::query_scalar(&explain)
        .fetch_one(&pool)
        .await
        .expect("EXPLAIN the reload");
    let read = rows_read(&plan[0]["Plan"], "campaigns");
    assert!(
        read <= 10.0,
        "3 of 20,000 campaigns are benign, and the reload read {read} rows:\n{:#}",
        plan[0]["Plan"]
    );
}
