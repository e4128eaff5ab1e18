//! Clear errors on the command line (docs/OPERATING.md): each mistake says what is wrong in
//! words and exits non-zero, and no command but `serve` and `migrate` creates a database.

use std::process::{Command, Output, Stdio};

use crate::support::app::{self, TestDb};

/// `sendguard ARGS` on `database_url`, without a terminal and without the operator's names.
fn cli(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sendguard"));
    command
        .args(args)
        .env("DATABASE_URL", database_url)
        .env_remove("SENDGUARD_OPERATOR")
        .env_remove("SENDGUARD_ADMIN_PASSWORD")
        .stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run sendguard")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A name taken, a password nowhere to be read: said in words, never a database error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_name_and_a_missing_password_are_said_in_words() {
    let db = TestDb::create("clinames").await;
    let first = cli(&db.url, &["api-key", "create", "ci"], &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let again = cli(&db.url, &["api-key", "create", "ci"], &[]);
    assert!(!again.status.success());
    let error = stderr(&again);
    assert!(error.contains("`ci` is taken"), "{error}");
    assert!(!error.contains("constraint"), "{error}");

    let app = cli(&db.url, &["app", "create", "default"], &[]);
    assert!(!app.status.success());
    assert!(stderr(&app).contains("exists already"), "{}", stderr(&app));

    let admin = cli(&db.url, &["admin", "add", "bo"], &[]);
    assert!(!admin.status.success());
    let error = stderr(&admin);
    assert!(error.contains("set SENDGUARD_ADMIN_PASSWORD"), "{error}");
}

/// A mistyped database name is not created: the command names it and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_serve_and_migrate_create_the_database() {
    let db = TestDb::create("climissing").await;
    let missing = format!("{}_typo", db.name);
    let url = format!("{}_typo", db.url);
    for args in [
        &["api-key", "list"][..],
        &["rules", "export"],
        &["admin", "list"],
    ] {
        let output = cli(&url, args, &[]);
        assert!(!output.status.success(), "{args:?}");
        let error = stderr(&output);
        assert!(
            error.contains(&format!("database `{missing}` does not exist")),
            "{args:?}: {error}"
        );
    }
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&missing)
            .fetch_one(&mut app::admin().await)
            .await
            .expect("pg_database");
    assert!(!exists, "no command created `{missing}`");
}

/// A rules file's mistakes point at the line, and an unknown name lists the valid ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_file_mistake_points_at_the_fix() {
    let db = TestDb::create("clirules").await;
    let dir = std::env::temp_dir().join(format!("sendguard-clirules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("rules.toml");
    let path = file.to_str().expect("path");
    let head = "[[rule]]\nname = \"x\"\nlimit = 1\nwindow = 60\n";
    std::fs::write(&file, format!("{head}scope = \"sender\"\nbad line\n")).expect("write");
    let output = cli(&db.url, &["rules", "apply", path], &[]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("line 6"), "{}", stderr(&output));

    let bad = "scope = \"planet\"\nsignal = \"vibes\"\naction = \"zap\"\n";
    std::fs::write(&file, format!("{head}{bad}")).expect("write");
    let output = cli(&db.url, &["rules", "apply", path], &[]);
    assert!(!output.status.success());
    let error = stderr(&output);
    for listed in [
        "unknown scope `planet`; one of sender, ip, recipient, recipient_domain, global",
        "unknown signal `vibes`; one of",
        "unknown action `zap`; one of",
    ] {
        assert!(error.contains(listed), "{listed}: {error}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A setting out of its range stops `serve` before it starts, naming the setting: a new-sender
/// age of a billion days used to overflow the date arithmetic of every invite.
#[test]
fn a_setting_out_of_range_is_named() {
    for (name, value, flag) in [
        (
            "SENDGUARD_NEW_SENDER_DAYS",
            "200000000000",
            "--new-sender-days",
        ),
        ("SENDGUARD_NEW_SENDER_DAYS", "-1", "--new-sender-days"),
        (
            "SENDGUARD_MAIL_LEASE_SECS",
            "18446744073709551615",
            "--mail-lease-secs",
        ),
    ] {
        let output = cli("postgres://unused", &["serve"], &[(name, value)]);
        assert!(!output.status.success(), "{name}={value}");
        assert!(
            stderr(&output).contains(flag),
            "{name}={value}: {}",
            stderr(&output)
        );
    }
}

/// Positional arguments are described in `--help`.
#[test]
fn positional_arguments_are_described() {
    for (args, positional) in [
        (&["api-key", "create"][..], "<NAME>"),
        (&["api-key", "revoke"], "<NAME>"),
        (&["app", "create"], "<NAME>"),
        (&["admin", "add"], "<USERNAME>"),
        (&["admin", "disable"], "<USERNAME>"),
        (&["rules", "apply"], "<FILE>"),
        (&["sender", "ban"], "<APP>"),
        (&["sender", "ban"], "<SENDER_ID>"),
        (&["sender", "lift"], "<SENDER_ID>"),
    ] {
        let mut with_help = args.to_vec();
        with_help.push("--help");
        let help = stdout(&cli("postgres://unused", &with_help, &[]));
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(positional))
            .unwrap_or_default();
        assert!(
            line.trim_start().len() > positional.len() + 2,
            "{args:?}: `{line}` in\n{help}"
        );
    }
}

/// `admin list` shows the admins; a CLI action is audited under the host user when neither
/// SENDGUARD_OPERATOR nor the login name is set, never "operator".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_are_listed_and_audited_under_the_host_user() {
    let db = TestDb::create("cliadmins").await;
    let host_user = Command::new("id").arg("-un").output().expect("id -un");
    let host_user = String::from_utf8_lossy(&host_user.stdout).trim().to_owned();
    let mut add = Command::new(env!("CARGO_BIN_EXE_sendguard"));
    let added = add
        .args(["admin", "add", "mo", "--role", "moderator"])
        .env("DATABASE_URL", &db.url)
        .env("SENDGUARD_ADMIN_PASSWORD", "correct horse battery")
        .env_remove("SENDGUARD_OPERATOR")
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .expect("admin add");
    assert!(added.status.success(), "{}", stderr(&added));
    let actor: String =
        sqlx::query_scalar("SELECT actor FROM audit_log WHERE action = 'admin_add'")
            .fetch_one(&db.pool().await)
            .await
            .expect("audited");
    assert_eq!(actor, host_user);

    let list = cli(&db.url, &["admin", "list"], &[]);
    assert!(list.status.success(), "{}", stderr(&list));
    let table = stdout(&list);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("mo ") && l.contains("moderator")),
        "{table}"
    );
}
