//! How the pages write times, windows, reasons and links.

pub type Time = chrono::DateTime<chrono::Utc>;

/// Rows per page of every list.
pub const PAGE: i64 = 25;

/// The page number asked for, from 1.
pub fn page_number(asked: Option<i64>) -> i64 {
    asked.unwrap_or(1).max(1)
}

pub fn time(t: Option<Time>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "—".into())
}

pub fn window(secs: i64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

pub fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Why an invite got its status, in one line, from its decision record.
pub fn why(decision: &serde_json::Value) -> String {
    let exceeded: Vec<String> = decision["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .filter(|r| r["outcome"] == "exceeded")
                .map(|r| {
                    format!(
                        "{} {}/{}",
                        r["rule"].as_str().unwrap_or("?"),
                        r["count"],
                        r["limit"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    match decision["reason"].as_str() {
        Some("trusted") => "trusted sender".into(),
        Some(reason) if reason.starts_with("sender_") => {
            format!(
                "sender was {}",
                reason.trim_start_matches("sender_").replace('_', "-")
            )
        }
        _ if exceeded.is_empty() => String::new(),
        _ => format!("exceeded {}", exceeded.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn windows_read_in_their_largest_whole_unit() {
        assert_eq!(window(86_400 * 2), "2 d");
        assert_eq!(window(3600), "1 h");
        assert_eq!(window(900), "15 min");
        assert_eq!(window(61), "61 s");
    }

    #[test]
    fn why_names_the_exceeded_rules_or_the_state() {
        let held = json!({"reason": "rules", "rules": [
            {"rule": "sender-hourly", "count": 61, "limit": 60, "outcome": "exceeded"},
            {"rule": "ip-hourly", "count": 2, "limit": 300, "outcome": "ok"}]});
        assert_eq!(why(&held), "exceeded sender-hourly 61/60");
        assert_eq!(
            why(&json!({"reason": "sender_shadow_banned"})),
            "sender was shadow-banned"
        );
        assert_eq!(why(&json!({"reason": "trusted"})), "trusted sender");
        assert_eq!(why(&json!({"reason": "rules", "rules": []})), "");
    }
}
