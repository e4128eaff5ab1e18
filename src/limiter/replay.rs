//! `sendguard bench replay`: the script calls of real traffic, captured with `MONITOR`, sent
//! again one at a time to an idle Redis loaded with the same data, to split what each call costs
//! Redis: the call with its keys and arguments alone (the same call to a script that only
//! returns), the commands the script runs, and the rest, the script's own Lua.
//!
//! Under load the scripts' times in `INFO commandstats` (or `SLOWLOG`) are wall time, and on a
//! busy machine they include every moment Redis waited for a core: a replay on an idle server
//! measures the work alone. Redis's own profile cannot split it either, since Debian's server
//! carries no symbols for the Lua interpreter inside it.

use std::collections::HashMap;

use redis::Value;

use super::bench::command_stats;
use super::{LimiterError, RedisConnection, RedisSettings};

/// A script the replay knows: a name for the report and its source.
pub struct Known<'a> {
    pub name: &'a str,
    pub source: &'a str,
}

/// What one script's calls cost Redis in the replay, per call.
#[derive(Debug, Clone)]
pub struct ReplayRow {
    pub script: String,
    pub calls: usize,
    /// Time in Redis of the whole call (`INFO commandstats`), its commands included.
    pub call_us: f64,
    /// Commands the script ran, and their time.
    pub commands: f64,
    pub commands_us: f64,
    /// The same calls to a script that only returns: reading the call and its arguments.
    pub bare_call_us: f64,
    /// Redis's CPU (`INFO cpu`, user and system) a call, its socket included.
    pub cpu_us: f64,
}

impl ReplayRow {
    /// What is left to the script's own Lua.
    pub fn lua_us(&self) -> f64 {
        self.call_us - self.commands_us - self.bare_call_us
    }
}

/// One command of a `MONITOR` capture: whether a script ran it, and its arguments.
#[derive(Debug, PartialEq)]
pub struct Monitored {
    pub from_script: bool,
    pub args: Vec<Vec<u8>>,
}

/// Parses one line of `redis-cli monitor`: `TIME [DB CLIENT] "ARG" "ARG" ...`, each argument
/// quoted with Redis's escapes (`\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`, `\xHH`). `None` for a
/// line that is not a command (the `OK` that starts a capture).
pub fn parse_monitor_line(line: &str) -> Option<Monitored> {
    let open = line.find(" [")?;
    let close = open + line[open..].find("] ")?;
    let client = line[open + 2..close].split_once(' ')?.1;
    let mut args = Vec::new();
    let mut bytes = line[close + 2..].bytes();
    loop {
        match bytes.next() {
            None => break,
            Some(b' ') => continue,
            Some(b'"') => {}
            Some(_) => return None,
        }
        let mut arg = Vec::new();
        loop {
            match bytes.next()? {
                b'"' => break,
                b'\\' => {
                    let escaped = match bytes.next()? {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'a' => 7,
                        b'b' => 8,
                        b'x' => {
                            let hex = [bytes.next()?, bytes.next()?];
                            u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
                        }
                        other => other,
                    };
                    arg.push(escaped);
                }
                b => arg.push(b),
            }
        }
        args.push(arg);
    }
    (!args.is_empty()).then_some(Monitored {
        from_script: client == "lua",
        args,
    })
}

/// The top-level script calls of a capture (`EVALSHA`), in order.
pub fn script_calls(capture: &str) -> Vec<Vec<Vec<u8>>> {
    capture
        .lines()
        .filter_map(parse_monitor_line)
        .filter(|m| {
            !m.from_script && m.args[0].eq_ignore_ascii_case(b"EVALSHA") && m.args.len() > 2
        })
        .map(|m| m.args)
        .collect()
}

/// A script that only returns: the cost of a call with the same keys and arguments.
const BARE: &str = "return 0";

/// Each known script's calls from `capture`, replayed `repeat` times one at a time on a single
/// server that holds the data they were captured on, then again to a script that only returns.
/// Times come from `INFO commandstats`, so nothing else may use the server meanwhile.
pub async fn run(
    settings: &RedisSettings,
    capture: &str,
    known: &[Known<'_>],
    repeat: usize,
) -> Result<Vec<ReplayRow>, LimiterError> {
    if repeat == 0 {
        return Err(LimiterError::Replay(
            "--repeat must be at least 1: a replay sends each call at least once".into(),
        ));
    }
    let conn = RedisConnection::open(settings).await?;
    if conn.is_cluster() {
        return Err(LimiterError::Config(
            "bench replay times calls on one Redis server, not a cluster".into(),
        ));
    }
    let mut by_sha: HashMap<Vec<u8>, usize> = HashMap::new();
    for (n, script) in known.iter().enumerate() {
        by_sha.insert(load(&conn, script.source).await?.into_bytes(), n);
    }
    let bare = load(&conn, BARE).await?;
    let mut calls: Vec<Vec<Vec<Vec<u8>>>> = vec![Vec::new(); known.len()];
    for call in script_calls(capture) {
        let n = by_sha.get(&call[1].to_ascii_lowercase()).ok_or_else(|| {
            LimiterError::Replay(format!(
                "the capture calls script {}, which is not one of this build's",
                String::from_utf8_lossy(&call[1])
            ))
        })?;
        calls[*n].push(call);
    }
    let mut rows = Vec::new();
    for (script, calls) in known.iter().zip(&calls) {
        if calls.is_empty() {
            continue;
        }
        let real = pass(&conn, calls, None, repeat).await?;
        let bare = pass(&conn, calls, Some(bare.as_bytes()), repeat).await?;
        let per = |total: u64| total as f64 / real.calls as f64;
        rows.push(ReplayRow {
            script: script.name.to_owned(),
            calls: real.calls as usize,
            call_us: per(real.calls_us),
            commands: per(real.commands),
            commands_us: per(real.commands_us),
            bare_call_us: bare.calls_us as f64 / bare.calls as f64,
            cpu_us: real.cpu_us / real.calls as f64,
        });
    }
    Ok(rows)
}

/// What one pass over a script's calls cost Redis, in all.
struct Pass {
    calls: u64,
    calls_us: u64,
    /// Commands the scripts ran, and their time.
    commands: u64,
    commands_us: u64,
    cpu_us: f64,
}

async fn pass(
    conn: &RedisConnection,
    calls: &[Vec<Vec<u8>>],
    sha: Option<&[u8]>,
    repeat: usize,
) -> Result<Pass, LimiterError> {
    let mut c = conn.clone();
    let before = command_stats(conn).await?;
    let cpu_before = cpu_secs(conn).await?;
    for _ in 0..repeat {
        for call in calls {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha.unwrap_or(&call[1])).arg(&call[2..]);
            let _: Value = cmd.query_async(&mut c).await?;
        }
    }
    let cpu_us = (cpu_secs(conn).await? - cpu_before) * 1e6;
    let after = command_stats(conn).await?;
    let mut out = Pass {
        calls: 0,
        calls_us: 0,
        commands: 0,
        commands_us: 0,
        cpu_us,
    };
    for (name, stat) in &after {
        let was = before.get(name).copied().unwrap_or_default();
        // Saturating: a `CONFIG RESETSTAT` meanwhile would make a count go back.
        let calls = stat.calls.saturating_sub(was.calls);
        let usec = stat.usec.saturating_sub(was.usec);
        match name.as_str() {
            "evalsha" => (out.calls, out.calls_us) = (calls, usec),
            // The replay's own reading of the server.
            "info" => {}
            _ => {
                out.commands += calls;
                out.commands_us += usec;
            }
        }
    }
    let expected = (calls.len() * repeat) as u64;
    if out.calls != expected {
        return Err(LimiterError::Replay(format!(
            "Redis ran {} script calls during the replay of {expected}: another client is using it",
            out.calls
        )));
    }
    Ok(out)
}

async fn load(conn: &RedisConnection, source: &str) -> Result<String, LimiterError> {
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(&mut conn.clone())
        .await?)
}

/// Redis's CPU so far, user and system, in seconds.
async fn cpu_secs(conn: &RedisConnection) -> Result<f64, LimiterError> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut conn.clone())
        .await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .ok_or_else(|| LimiterError::Replay(format!("INFO cpu without {name}")))
    };
    Ok(field("used_cpu_user")? + field("used_cpu_sys")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_parse_with_every_escape() {
        let line = r#"1795946124.122642 [0 127.0.0.1:39538] "EVALSHA" "58f5" "1" "k:{a b}" "\x01\xff\"\\\n\r\t\a\b" "plain""#;
        let m = parse_monitor_line(line).expect("a command");
        assert!(!m.from_script);
        assert_eq!(
            m.args,
            vec![
                b"EVALSHA".to_vec(),
                b"58f5".to_vec(),
                b"1".to_vec(),
                b"k:{a b}".to_vec(),
                vec![1, 0xff, b'"', b'\\', b'\n', b'\r', b'\t', 7, 8],
                b"plain".to_vec(),
            ]
        );
        let inner =
            parse_monitor_line(r#"1795946124.122791 [0 lua] "HGET" "k" "m""#).expect("a command");
        assert!(inner.from_script);
        assert_eq!(parse_monitor_line("OK"), None);
        // Cut short inside an argument or an escape: not a command.
        assert_eq!(parse_monitor_line(r#"1.0 [0 lua] "HGET" "k"#), None);
        assert_eq!(parse_monitor_line(r#"1.0 [0 lua] "HGET" "\x4"#), None);
    }

    #[test]
    fn only_top_level_script_calls_are_replayed() {
        let capture = "OK\n\
            1.0 [0 127.0.0.1:1] \"EVALSHA\" \"ab\" \"0\"\n\
            1.1 [0 lua] \"HGET\" \"k\" \"m\"\n\
            1.2 [0 127.0.0.1:1] \"PING\"\n\
            1.3 [0 unix:/run/redis.sock] \"evalsha\" \"cd\" \"1\" \"k\"\n";
        let calls = script_calls(capture);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0][1], b"ab");
        assert_eq!(calls[1][3], b"k");
    }
}
