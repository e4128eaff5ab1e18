//! `sendguard simulate`: generated traffic through every algorithm, compared with an exact
//! sliding window.
//!
//! Each request is judged twice: by the algorithm (in process, with the request's own timestamp)
//! and by an exact sliding window over what that algorithm admitted so far. A *false admit* is a
//! request the algorithm let through although the requests it had already admitted in the last
//! window left no room; a *false denial* is the opposite.

use std::collections::VecDeque;
use std::fmt::Write;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::algorithms::State;
use super::{Algorithm, Quota};

#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    pub limit: u64,
    pub window_secs: u64,
    /// How many windows each trace lasts.
    pub windows: u64,
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            limit: 100,
            window_secs: 3600,
            windows: 6,
            seed: 7,
        }
    }
}

/// A named sequence of request timestamps (ms, sorted).
pub struct Trace {
    pub name: &'static str,
    pub times_ms: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub trace: &'static str,
    pub algorithm: Algorithm,
    pub limit: u64,
    pub window_secs: u64,
    pub requests: u64,
    pub admitted: u64,
    pub max_admitted_in_any_window: u64,
    pub false_denials: u64,
    pub false_admits: u64,
}

/// The traces, deterministic for a seed. They start on a window boundary so fixed windows line up
/// with the boundary attack.
pub fn traces(cfg: &SimConfig) -> Vec<Trace> {
    let w = cfg.window_secs * 1000;
    let start = (1_700_000_000_000 / w) * w;
    let span = cfg.windows * w;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let steady = |per_window: u64| -> Vec<u64> {
        let n = per_window * cfg.windows;
        (0..n).map(|k| start + k * span / n).collect()
    };

    let mut bursts = Vec::new();
    let mut t = start;
    loop {
        // A burst every quarter window on average, of up to a full limit, within ten seconds.
        t += rng.random_range(1..=w / 2);
        if t >= start + span {
            break;
        }
        for _ in 0..rng.random_range(1..=cfg.limit) {
            bursts.push(t + rng.random_range(0..10_000.min(w)));
        }
    }
    bursts.sort_unstable();

    // A full limit in the last 1% of each fixed window, another in the first 1% of the next.
    let edge = (w / 100).max(cfg.limit);
    let mut attack = Vec::new();
    for k in 1..cfg.windows {
        let boundary = start + k * w;
        for n in 0..cfg.limit {
            attack.push(boundary - edge + n * edge / cfg.limit);
        }
        for n in 0..cfg.limit {
            attack.push(boundary + n * edge / cfg.limit);
        }
    }

    vec![
        Trace {
            name: "steady_under_limit",
            times_ms: steady(cfg.limit * 8 / 10),
        },
        Trace {
            name: "steady_2x_limit",
            times_ms: steady(cfg.limit * 2),
        },
        Trace {
            name: "random_bursts",
            times_ms: bursts,
        },
        Trace {
            name: "window_boundary_attack",
            times_ms: attack,
        },
    ]
}

/// Replays one trace through one algorithm.
pub fn replay(trace: &Trace, algorithm: Algorithm, cfg: &SimConfig) -> Row {
    let quota = Quota::new(cfg.limit, cfg.window_secs, algorithm);
    let w = quota.window_ms;
    let mut state = State::new(algorithm);
    let mut admitted_times: VecDeque<u64> = VecDeque::new();
    let mut row = Row {
        trace: trace.name,
        algorithm,
        limit: cfg.limit,
        window_secs: cfg.window_secs,
        requests: trace.times_ms.len() as u64,
        admitted: 0,
        max_admitted_in_any_window: 0,
        false_denials: 0,
        false_admits: 0,
    };
    for &t in &trace.times_ms {
        // The exact window is (t - w, t].
        while admitted_times.front().is_some_and(|&a| a + w <= t) {
            admitted_times.pop_front();
        }
        let exact_allows = (admitted_times.len() as u64) < cfg.limit;
        let allowed = state.decide(&quota, 1, t).allowed;
        match (allowed, exact_allows) {
            (true, false) => row.false_admits += 1,
            (false, true) => row.false_denials += 1,
            _ => {}
        }
        if allowed {
            row.admitted += 1;
            admitted_times.push_back(t);
            row.max_admitted_in_any_window = row
                .max_admitted_in_any_window
                .max(admitted_times.len() as u64);
        }
    }
    row
}

/// Every trace through every algorithm.
pub fn run(cfg: &SimConfig) -> Vec<Row> {
    let traces = traces(cfg);
    traces
        .iter()
        .flat_map(|trace| Algorithm::ALL.map(|a| replay(trace, a, cfg)))
        .collect()
}

const HEADER: [&str; 9] = [
    "trace",
    "algorithm",
    "limit",
    "window_secs",
    "requests",
    "admitted",
    "max_admitted_in_any_window",
    "false_denials",
    "false_admits",
];

fn cells(row: &Row) -> [String; 9] {
    [
        row.trace.to_string(),
        row.algorithm.to_string(),
        row.limit.to_string(),
        row.window_secs.to_string(),
        row.requests.to_string(),
        row.admitted.to_string(),
        row.max_admitted_in_any_window.to_string(),
        row.false_denials.to_string(),
        row.false_admits.to_string(),
    ]
}

pub fn to_csv(rows: &[Row]) -> String {
    let mut out = HEADER.join(",");
    out.push('\n');
    for row in rows {
        out.push_str(&cells(row).join(","));
        out.push('\n');
    }
    out
}

/// A plain-text table with aligned columns; numbers right-aligned.
pub fn to_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        for (cell, w) in cells.zip(&widths) {
            if !first {
                out.push_str("  ");
            }
            if cell.parse::<f64>().is_ok() {
                let _ = write!(out, "{cell:>w$}");
            } else {
                let _ = write!(out, "{cell:<w$}");
            }
            first = false;
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

pub fn to_text(rows: &[Row]) -> String {
    let body: Vec<Vec<String>> = rows.iter().map(|r| cells(r).to_vec()).collect();
    to_table(&HEADER, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::EdgeMode;

    fn row<'a>(rows: &'a [Row], trace: &str, algorithm: Algorithm) -> &'a Row {
        rows.iter()
            .find(|r| r.trace == trace && r.algorithm == algorithm)
            .expect("row exists")
    }

    #[test]
    fn the_exact_log_never_disagrees_with_the_exact_window() {
        let rows = run(&SimConfig::default());
        for r in rows.iter().filter(|r| r.algorithm == Algorithm::SlidingLog) {
            assert_eq!((r.false_admits, r.false_denials), (0, 0), "{r:?}");
            assert!(r.max_admitted_in_any_window <= r.limit);
        }
    }

    #[test]
    fn the_boundary_attack_doubles_a_fixed_window_but_not_harsh_counters() {
        let cfg = SimConfig::default();
        let rows = run(&cfg);
        let fixed = row(&rows, "window_boundary_attack", Algorithm::FixedWindow);
        assert_eq!(fixed.max_admitted_in_any_window, 2 * cfg.limit);
        let harsh = row(
            &rows,
            "window_boundary_attack",
            Algorithm::HashCounters(EdgeMode::Harsh),
        );
        assert!(harsh.max_admitted_in_any_window <= cfg.limit);
        assert_eq!(harsh.false_admits, 0);
    }

    #[test]
    fn under_the_limit_nothing_is_denied() {
        let rows = run(&SimConfig::default());
        for r in rows.iter().filter(|r| r.trace == "steady_under_limit") {
            assert_eq!(r.admitted, r.requests, "{r:?}");
        }
    }

    #[test]
    fn csv_has_the_contract_header_and_one_row_per_pair() {
        let rows = run(&SimConfig::default());
        let csv = to_csv(&rows);
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some(
                "trace,algorithm,limit,window_secs,requests,admitted,max_admitted_in_any_window,false_denials,false_admits"
            )
        );
        assert_eq!(lines.count(), 4 * Algorithm::ALL.len());
    }
}
