//! `sendguard bench writer`: what the writer's batch statement costs Postgres, by the invites
//! it carries, next to a bare single-row insert (what bounds any write). At an everyday rate a
//! batch holds one or two invites, so its fixed part (setting up the plan's many steps, the
//! commit, the round trip) is paid by each invite nearly alone; at saturation it is shared.
//!
//! It writes through the service's own statement, on a connection set up as the writer's, to
//! a database it is given: a scratch one, holding no invites (it refuses any other), since it
//! writes invites (to `bench.invalid` recipients, claimed for good by an outbox that does not
//! exist) and deletes them when it is done.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgConnection;
use uuid::Uuid;

use super::decision::{DecisionRecord, RuleOutcome};
use super::policy::Status;
use super::store::insert::{Claim, Row, insert_batch};
use super::store::{Assumed, NewInvite};
use super::validate::ValidInvite;
use crate::db::{self, Commits, DbError};
use crate::moderation::SenderState;
use crate::sender_key::SenderKey;

/// The outbox worker the bench's invites are claimed by, so that no outbox sends them.
const WORKER: &str = "sendguard-bench-writer";

/// The senders the bench's invites are spread over, as `bench-writer-<n>`.
const SENDERS: usize = 1_000;

/// The claim on the bench's invites: were it killed before deleting them, no outbox would take
/// them over.
const LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One measured statement.
#[derive(Debug, Clone)]
pub struct Measured {
    pub statement: &'static str,
    pub invites_per_call: usize,
    pub calls: usize,
    pub wall: Duration,
    /// Postgres' CPU for the calls, read from its backend's `/proc/<pid>/schedstat` when the
    /// server runs on this machine.
    pub cpu: Option<Duration>,
}

impl Measured {
    pub fn wall_us_per_call(&self) -> f64 {
        self.wall.as_secs_f64() * 1e6 / self.calls as f64
    }

    pub fn cpu_us_per_call(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / self.calls as f64)
    }

    pub fn cpu_us_per_invite(&self) -> Option<f64> {
        self.cpu_us_per_call()
            .map(|us| us / self.invites_per_call as f64)
    }
}

/// Whether the database at `url` holds no invites (or no tables yet): the only kind the bench
/// writes to.
pub async fn is_scratch(url: &str) -> Result<bool, DbError> {
    let pool = db::connect_kept(url, "sendguard-bench", 1, Commits::Flushed).await?;
    let tables: bool = sqlx::query_scalar("SELECT to_regclass('invites') IS NOT NULL")
        .fetch_one(pool.pool())
        .await?;
    if !tables {
        return Ok(true);
    }
    let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM invites)")
        .fetch_one(pool.pool())
        .await?;
    Ok(!any)
}

/// Runs `calls` single-row inserts and, for each size, batch statements of that many invites,
/// enough of them for `calls` invites (at least 50). Every sender is written once before, and
/// the first 10 calls of each size are not counted (they plan the statement): each measured
/// batch updates senders that exist, as the writer mostly does.
pub async fn run(url: &str, calls: usize, sizes: &[usize]) -> Result<Vec<Measured>, DbError> {
    let connections = db::connect_kept(url, "sendguard-bench", 2, Commits::Flushed).await?;
    let app_id: i64 = sqlx::query_scalar("SELECT id FROM apps ORDER BY id LIMIT 1")
        .fetch_one(connections.pool())
        .await?;
    let measured = connections
        .run(async |conn| {
            let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *conn)
                .await?;
            let backend = is_postgres(backend).then_some(backend);
            batches(conn, None, app_id, 64, SENDERS).await?;
            let mut measured = vec![bare_inserts(conn, backend, calls).await?];
            for &size in sizes {
                measured.push(batches(conn, backend, app_id, size, calls).await?);
            }
            Ok(measured)
        })
        .await;
    let cleaned = clean_up(connections.pool(), app_id).await;
    let measured = measured?;
    cleaned?;
    Ok(measured)
}

/// The ceiling: one row of two columns inserted and committed per statement.
async fn bare_inserts(
    conn: &mut PgConnection,
    backend: Option<i32>,
    calls: usize,
) -> Result<Measured, sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS sendguard_bench_writer (id uuid PRIMARY KEY, at timestamptz)",
    )
    .execute(&mut *conn)
    .await?;
    let insert = "INSERT INTO sendguard_bench_writer VALUES ($1, now())";
    for _ in 0..10 {
        sqlx::query(insert)
            .bind(Uuid::new_v4())
            .execute(&mut *conn)
            .await?;
    }
    let (started, cpu) = (Instant::now(), backend_cpu(backend));
    for _ in 0..calls {
        sqlx::query(insert)
            .bind(Uuid::new_v4())
            .execute(&mut *conn)
            .await?;
    }
    Ok(Measured {
        statement: "bare insert",
        invites_per_call: 1,
        calls,
        wall: started.elapsed(),
        cpu: spent(backend, cpu),
    })
}

/// Batch statements of `size` queued invites, each written claimed as the writer writes them.
async fn batches(
    conn: &mut PgConnection,
    backend: Option<i32>,
    app_id: i64,
    size: usize,
    calls: usize,
) -> Result<Measured, sqlx::Error> {
    let size = size.max(1);
    let calls = (calls / size).max(50);
    let claim = Claim {
        worker_id: WORKER,
        lease: LEASE,
        rows: vec![true; size],
    };
    let mut n = 0;
    let batch = |n: &mut usize| -> Vec<NewInvite> {
        (0..size)
            .map(|_| {
                *n += 1;
                invite(app_id, *n)
            })
            .collect()
    };
    let mut write = async |invites: &[NewInvite]| {
        let rows: Vec<Row<'_>> = invites.iter().map(row).collect();
        insert_batch(&mut *conn, &rows, &claim).await.map(drop)
    };
    for _ in 0..10 {
        write(&batch(&mut n)).await?;
    }
    let mut invites = Vec::with_capacity(calls);
    for _ in 0..calls {
        invites.push(batch(&mut n));
    }
    let (started, cpu) = (Instant::now(), backend_cpu(backend));
    for invites in &invites {
        write(invites).await?;
    }
    let wall = started.elapsed();
    Ok(Measured {
        statement: "batch",
        invites_per_call: size,
        calls,
        wall,
        cpu: spent(backend, cpu),
    })
}

/// A queued invite as a request with a short message makes one, its decision the default
/// rules' record.
fn invite(app_id: i64, n: usize) -> NewInvite {
    let recipient = format!("r{n}@bench.invalid");
    let rules = [
        ("sender-hourly", 60, 3600),
        ("sender-daily", 500, 86400),
        ("ip-hourly", 300, 3600),
        ("recipient-daily", 3, 86400),
        ("new-sender-links", 0, 86400),
        ("sender-distinct-recipients-daily", 100, 86400),
        ("sender-complaints-daily", 2, 86400),
        ("sender-bounces-daily", 10, 86400),
        ("campaign-text", 5, 86400),
    ];
    let decision = DecisionRecord {
        action: Some(None),
        rules: Some(
            rules
                .iter()
                .map(|&(rule, limit, window_secs)| RuleOutcome {
                    rule: rule.to_owned(),
                    count: 1,
                    limit,
                    window_secs,
                    outcome: "ok",
                })
                .collect(),
        ),
        ..DecisionRecord::reason("within_limits")
    };
    NewInvite {
        id: Uuid::new_v4(),
        api_key_id: 0,
        sender: SenderKey {
            app_id,
            id: format!("bench-writer-{}", n % SENDERS),
        },
        invite: Arc::new(ValidInvite {
            sender_id: format!("bench-writer-{}", n % SENDERS),
            recipient_domain: "bench.invalid".to_owned(),
            recipient,
            sender_ip: None,
            resource: Some("Quarterly plan".to_owned()),
            message: Some(format!(
                "Hi, I added you to the quarterly plan so you can comment before Friday ({n})."
            )),
            sender_name: Some("Sam Lee".to_owned()),
            sender_created_at: None,
            accept_url: None,
        }),
        accept_url: None,
        address: None,
        status: Status::Queued,
        decision,
        idempotency_key: None,
        request_hash: Arc::from(&[0u8; 32][..]),
        campaign_keys: Vec::new(),
        settle: Duration::ZERO,
    }
}

fn row(new: &NewInvite) -> Row<'_> {
    Row {
        new,
        assumed: Assumed {
            state: SenderState::Active,
            version: 0,
            admitted: true,
        },
        held_cap: None,
        breach: None,
    }
}

/// Removes what the bench wrote.
async fn clean_up(pool: &sqlx::PgPool, app_id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM outbox WHERE claimed_by = $1")
        .bind(WORKER)
        .execute(pool)
        .await?;
    sqlx::query("DELETE FROM invites WHERE app_id = $1 AND sender_id LIKE 'bench-writer-%'")
        .bind(app_id)
        .execute(pool)
        .await?;
    sqlx::query("DELETE FROM senders WHERE app_id = $1 AND id LIKE 'bench-writer-%'")
        .bind(app_id)
        .execute(pool)
        .await?;
    sqlx::query("DROP TABLE IF EXISTS sendguard_bench_writer")
        .execute(pool)
        .await?;
    Ok(())
}

/// Whether process `pid` here is a Postgres server process: a server in a container reports
/// an id of its own namespace, which here may be another process or none.
fn is_postgres(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "postgres")
}

/// The CPU time the backend `pid` has used, when it runs here.
fn backend_cpu(pid: Option<i32>) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{}/schedstat", pid?)).ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

fn spent(pid: Option<i32>, before: Option<Duration>) -> Option<Duration> {
    Some(backend_cpu(pid)?.saturating_sub(before?))
}

/// The rows `sendguard bench writer` prints.
pub fn to_rows(rows: &[Measured]) -> Vec<Vec<String>> {
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    rows.iter()
        .map(|m| {
            vec![
                m.statement.to_owned(),
                m.invites_per_call.to_string(),
                m.calls.to_string(),
                format!("{:.0}", m.wall_us_per_call()),
                us(m.cpu_us_per_call()),
                us(m.cpu_us_per_invite()),
            ]
        })
        .collect()
}

/// What the rows say: the fixed and per-invite parts of the batch statement's cost, drawn from
/// its smallest and largest batches, and an invite's cost against a bare insert.
pub fn summary(rows: &[Measured]) -> Vec<String> {
    let mut out = Vec::new();
    let batches: Vec<&Measured> = rows.iter().filter(|m| m.statement == "batch").collect();
    let ends = batches
        .iter()
        .min_by_key(|m| m.invites_per_call)
        .zip(batches.iter().max_by_key(|m| m.invites_per_call));
    if let Some((small, large)) = ends
        && large.invites_per_call > small.invites_per_call
        && let (Some(a), Some(b)) = (small.cpu_us_per_call(), large.cpu_us_per_call())
    {
        let per_invite = (b - a) / (large.invites_per_call - small.invites_per_call) as f64;
        let fixed = a - per_invite * small.invites_per_call as f64;
        out.push(format!(
            "the batch statement's Postgres CPU: {fixed:.0} µs a call + {per_invite:.0} µs an invite"
        ));
    }
    if let Some(bare) = rows.iter().find(|m| m.statement == "bare insert")
        && let Some(bare) = bare.cpu_us_per_call()
    {
        for m in &batches {
            if let Some(cpu) = m.cpu_us_per_invite() {
                out.push(format!(
                    "an invite in batches of {}: {:.1}x a bare insert",
                    m.invites_per_call,
                    cpu / bare
                ));
            }
        }
    }
    out
}
