//! Postgres goes away under a running server and comes back.

use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{TestDb, api_key, config, invite_becomes, migrated, wait_for};
use crate::support::proxy::Proxy;
use reqwest::StatusCode;
use serde_json::json;

/// An instance whose connections to Postgres go through a proxy the test can cut; the test's
/// own pool reaches the database directly.
struct BehindProxy {
    _db: TestDb,
    pool: sqlx::PgPool,
    proxy: Proxy,
    app: sendguard::Running,
    api: Api,
}

impl BehindProxy {
    async fn start(test: &str) -> BehindProxy {
        let (db, pool) = migrated(test, &[]).await;
        let key = api_key(&pool).await;
        let proxy = Proxy::start("127.0.0.1:5432".parse().expect("address")).await;
        let mut cfg = config(&db, None);
        cfg.database.database_url =
            format!("postgres://postgres@127.0.0.1:{}/{}", proxy.port, db.name);
        cfg.mail_dir = std::env::temp_dir().join(format!("sendguard-{test}-{}", proxy.port));
        let app = sendguard::start(&cfg).await.expect("start");
        let api = Api::new(format!("http://{}", app.addr), key);
        BehindProxy {
            _db: db,
            pool,
            proxy,
            app,
            api,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_postgres_the_api_answers_503_and_recovers_by_itself() {
    let BehindProxy {
        _db,
        pool,
        proxy,
        app: _app,
        api,
    } = BehindProxy::start("pgdown").await;
    let base = api.base.clone();
    let http = &api.http;
    let invite =
        |n: u32| api.invite(json!({"sender_id": "pg", "recipient": format!("p{n}@example.com")}));
    assert_eq!(invite(0).await.status(), StatusCode::OK);

    proxy.cut();
    for n in 1..4 {
        let resp = invite(n).await;
        assert_eq!(
            resp.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "never a 200 without the database"
        );
        assert!(resp.headers().contains_key("retry-after"));
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
    }
    let ready = http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The dashboard shows an error page, not a panic.
    let page = http
        .get(format!("{base}/admin/queue"))
        .header("cookie", format!("sg_session={}", "a".repeat(64)))
        .send()
        .await
        .expect("dashboard");
    assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        page.text()
            .await
            .expect("body")
            .contains("database is unavailable")
    );

    proxy.resume().await;
    let back = wait_for(Duration::from_secs(15), || async {
        invite(9).await.status() == StatusCode::OK
    })
    .await;
    assert!(back, "the service recovers by itself");
    let recipients: Vec<String> =
        sqlx::query_scalar("SELECT recipient FROM invites ORDER BY recipient")
            .fetch_all(&pool)
            .await
            .expect("recipients");
    assert_eq!(recipients, ["p0@example.com", "p9@example.com"]);
    // The connections the outbox keeps between rounds died with the cut: they are replaced, and
    // the invite accepted after the outage is delivered. (The first one may have been sent and
    // not marked before the cut: it is sent again once its lease expires.)
    let delivered = invite_becomes(&pool, "p9@example.com", "sent", 15).await;
    assert!(delivered, "the outbox recovers by itself");
}

/// Postgres restarts (or fails over) while the service is quiet: the connection the writer kept
/// from its last batch is dead, and the next invite is still written, not answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_after_postgres_restarted_in_a_quiet_moment_is_written() {
    let BehindProxy {
        _db,
        pool,
        proxy,
        app,
        api,
    } = BehindProxy::start("pgblip").await;
    let invite = |n: u32| {
        api.invite(json!({"sender_id": "quiet", "recipient": format!("q{n}@example.com")}))
    };
    assert_eq!(invite(0).await.status(), StatusCode::OK);
    // Every open connection is cut; new ones get through at once.
    proxy.cut();
    proxy.resume().await;
    // Quiet for a moment, as between two invites of a quiet hour.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in 1..4 {
        assert_eq!(invite(n).await.status(), StatusCode::OK, "invite {n}");
    }
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM invites")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(written, 4);
    app.shutdown().await;
}
