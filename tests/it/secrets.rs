//! Secrets kept as secrets (issue 39, item 10), through the `sendguard` binary as an operator
//! runs it: webhook secrets are stored sealed, a rotation signs with both secrets until the old
//! one expires, the service key can come from a file, and `serve` warns when it is an argument.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sendguard::webhooks::{self, EventType};
use serde_json::json;
use sha2::Sha256;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, migrated, wait_for};
use crate::support::serve::ServeProcess;
use crate::support::smtp::SmtpSink;
use crate::support::webhook_receiver::{Received, Verifier, WebhookReceiver};

/// `sendguard ARGS` on `database_url`, with no service key from this process's environment.
fn sendguard(database_url: &str, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_sendguard"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .env_remove("SENDGUARD_SECRET_KEY")
        .env_remove("SENDGUARD_SECRET_KEY_FILE")
        .env_remove("SENDGUARD_PREVIOUS_SECRET_KEY")
        .output()
        .expect("run sendguard");
    assert!(
        out.status.success(),
        "sendguard {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What a command printed on stdout: a webhook secret.
fn printed_secret(out: &Output) -> String {
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret:?}");
    secret
}

/// The app's whole row as text: no column may hold a secret or its key.
async fn stored_row(pool: &PgPool, name: &str) -> String {
    sqlx::query_scalar("SELECT row_to_json(apps)::text FROM apps WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("the app's row")
}

fn assert_not_stored(row: &str, secret: &str) {
    let key = secret.trim_start_matches("whsec_");
    assert!(!row.contains(key), "the secret is stored in clear: {row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_secret_is_stored_sealed() {
    let (db, pool) = migrated("sealed", &[]).await;
    let out = sendguard(
        &db.url,
        &[
            "app",
            "create",
            "drawbox",
            "--webhook-url",
            "http://127.0.0.1:9/hooks",
            "--webhook-allow-private",
        ],
    );
    let secret = printed_secret(&out);
    assert_not_stored(&stored_row(&pool, "drawbox").await, &secret);
}

/// Whether `signature` alone is a valid signature of `received` under `secret`.
fn signed_by(received: &Received, signature: &str, secret: &str) -> bool {
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: &str| {
        headers.insert(name, HeaderValue::from_str(value).expect("a header value"));
    };
    put("webhook-id", &received.id);
    put("webhook-timestamp", &received.timestamp.to_string());
    put("webhook-signature", signature);
    Verifier::new(secret)
        .verify(&headers, received.raw.as_bytes())
        .is_ok()
}

async fn enqueue(pool: &PgPool, app_id: i64, sender: &str) {
    let mut tx = pool.begin().await.expect("begin");
    let data = json!({"sender_id": sender}).as_object().cloned();
    webhooks::enqueue(
        &mut tx,
        app_id,
        "drawbox",
        EventType::SenderBanned,
        chrono::Utc::now(),
        data.expect("an object"),
    )
    .await
    .expect("enqueue");
    tx.commit().await.expect("commit");
}

/// `app rotate-webhook-secret` prints a new secret; until the old one expires (24 h) every
/// delivery carries two signatures, one under each secret, then only the new one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_rotation_both_secrets_sign_until_the_old_one_expires() {
    let stage = Stage::start("rotation", &[]).await;
    let url = &stage.db.url;
    let private = "--webhook-allow-private";
    let old = printed_secret(&sendguard(
        url,
        &[
            "app",
            "create",
            "drawbox",
            "--webhook-url",
            "http://127.0.0.1:9/x",
            private,
        ],
    ));
    let before = WebhookReceiver::start(&old, 0).await;
    sendguard(
        url,
        &[
            "app",
            "update",
            "drawbox",
            "--webhook-url",
            &before.url(),
            private,
        ],
    );
    let new = printed_secret(&sendguard(
        url,
        &["app", "rotate-webhook-secret", "drawbox"],
    ));
    assert_ne!(old, new);
    let row = stored_row(&stage.pool, "drawbox").await;
    assert_not_stored(&row, &old);
    assert_not_stored(&row, &new);
    let app_id = sendguard::apps::store::id_of(&stage.pool, "drawbox")
        .await
        .expect("app");

    enqueue(&stage.pool, app_id, "u1").await;
    assert!(before.wait_for(1, Duration::from_secs(15)).await);
    let during = &before.received()[0];
    let signatures: Vec<&str> = during.signature.split(' ').collect();
    assert_eq!(signatures.len(), 2, "{}", during.signature);
    let by_old = signatures.iter().filter(|s| signed_by(during, s, &old));
    let by_new = signatures.iter().filter(|s| signed_by(during, s, &new));
    assert_eq!((by_old.count(), by_new.count()), (1, 1), "{signatures:?}");

    // The overlap over: the old secret no longer signs.
    sqlx::query("UPDATE apps SET previous_webhook_secret_until = now() - interval '1 second'")
        .execute(&stage.pool)
        .await
        .expect("expire the old secret");
    let after = WebhookReceiver::start(&new, 0).await;
    sendguard(
        url,
        &[
            "app",
            "update",
            "drawbox",
            "--webhook-url",
            &after.url(),
            private,
        ],
    );
    enqueue(&stage.pool, app_id, "u2").await;
    assert!(after.wait_for(1, Duration::from_secs(15)).await);
    let later = &after.received()[0];
    assert!(!later.signature.contains(' '), "{}", later.signature);
    assert!(signed_by(later, &later.signature, &new));
    assert!(!signed_by(later, &later.signature, &old));
    assert_eq!(before.requests(), 1);
}

/// The unsubscribe token an independent check computes for `invite` under `key`.
fn unsubscribe_token(key: &str, invite: Uuid) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(b"unsubscribe:");
    mac.update(invite.as_bytes());
    URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..16])
}

/// `SENDGUARD_SECRET_KEY_FILE`: the file's key, trimmed, signs the links of emails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_key_can_come_from_a_file() {
    let sink = SmtpSink::start().await;
    let (db, pool) = migrated("keyfile", &[]).await;
    let key = "k".repeat(40);
    let file = std::env::temp_dir().join(format!("sendguard-key-{}", db.name));
    std::fs::write(&file, format!("  {key}\n")).expect("write the key file");
    let prefix = crate::support::unique_prefix("keyfile");
    let serve = ServeProcess::start(
        &db.url,
        prefix.as_str(),
        &[
            ("SENDGUARD_SECRET_KEY_FILE", file.display().to_string()),
            ("SENDGUARD_SMTP_URL", sink.url()),
        ],
    )
    .await;
    let id = Api::new(serve.base.clone(), api_key(&pool).await)
        .accepted("bo", "ana@example.com")
        .await;
    assert!(
        wait_for(Duration::from_secs(15), || async {
            !sink.messages().is_empty()
        })
        .await
    );
    let link = sink.messages()[0]
        .header("List-Unsubscribe")
        .expect("List-Unsubscribe");
    let token = link
        .trim_matches(['<', '>'])
        .rsplit_once("?t=")
        .map(|(_, t)| t.to_owned())
        .expect("a token");
    let invite: Uuid = id.parse().expect("an invite id");
    assert_eq!(token, unsubscribe_token(&key, invite));
    drop(serve);
    let _ = std::fs::remove_file(&file);
}

/// What `serve` logged at start with `args` and `env`, once ready.
async fn start_log(test: &str, args: &[&str], env: &[(&str, String)]) -> String {
    let (db, _pool) = migrated(test, &[]).await;
    let log = std::env::temp_dir().join(format!("sendguard-log-{}", db.name));
    let file = std::fs::File::create(&log).expect("log file");
    let prefix = crate::support::unique_prefix(test);
    let serve =
        ServeProcess::start_with(&db.url, prefix.as_str(), env, args, Stdio::from(file)).await;
    drop(serve);
    let text = std::fs::read_to_string(&log).expect("read the log");
    let _ = std::fs::remove_file(&log);
    text
}

/// `--secret-key` stays, but every local user reads it in /proc: `serve` says so at start. The
/// same key from the environment draws no warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_warns_when_the_secret_key_is_an_argument() {
    let key = "a".repeat(40);
    let argued = start_log("keyarg", &["--secret-key", &key], &[]).await;
    assert!(argued.contains("visible to every local user"), "{argued}");
    assert!(
        !argued.contains(&key),
        "the warning repeats the key: {argued}"
    );
    let from_env = start_log("keyenv", &[], &[("SENDGUARD_SECRET_KEY", key.clone())]).await;
    assert!(
        !from_env.contains("visible to every local user"),
        "{from_env}"
    );
}

/// The value stored for app `name`'s current secret.
async fn stored_secret(pool: &PgPool, name: &str) -> String {
    sqlx::query_scalar("SELECT webhook_secret FROM apps WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("a stored secret")
}

/// Secrets stored in clear before sealing are sealed when an instance starts, and still sign;
/// moving to a configured key seals them again under it, so the previous key can go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_clear_are_sealed_at_start_and_again_under_a_new_key() {
    let secret = webhooks::new_secret();
    let receiver = WebhookReceiver::start(&secret, 0).await;
    let insert = format!(
        "INSERT INTO apps (name, webhook_url, webhook_secret) VALUES ('drawbox', '{}', '{secret}')",
        receiver.url()
    );
    let stage = Stage::start("sealatstart", &[&insert]).await;
    assert_not_stored(&stored_row(&stage.pool, "drawbox").await, &secret);
    let app_id = sendguard::apps::store::id_of(&stage.pool, "drawbox")
        .await
        .expect("app");
    enqueue(&stage.pool, app_id, "u1").await;
    assert!(receiver.wait_for(1, Duration::from_secs(15)).await);

    let key = "n".repeat(40);
    let sealed_before = stored_secret(&stage.pool, "drawbox").await;
    let mut cfg = crate::support::app::config(&stage.db, Some(stage.sink.url()));
    cfg.keys.secret_key = Some(key.clone());
    let moved = sendguard::start(&cfg).await.expect("start");
    let sealed_after = stored_secret(&stage.pool, "drawbox").await;
    assert_ne!(sealed_before, sealed_after);
    let under_new_key = sendguard::recipients::LinkKey::load(&stage.pool, &cfg.keys)
        .await
        .expect("the key")
        .secret_box()
        .open(&sealed_after)
        .expect("sealed under the configured key");
    assert_eq!(under_new_key.secret, secret);
    moved.shutdown().await;
}
