//! The request body of `POST /api/v1/invites`, checked field by field (DESIGN.md §4).

use std::net::IpAddr;
use std::str::FromStr;

use serde_json::{Map, Value};

/// An invite that passed every check; `recipient` is lower-cased for counting and sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidInvite {
    pub sender_id: String,
    pub recipient: String,
    pub recipient_domain: String,
    pub sender_ip: Option<IpAddr>,
    pub resource: Option<String>,
    pub message: Option<String>,
    pub sender_name: Option<String>,
}

/// What is wrong, and with which field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBody {
    #[error("the body is not valid JSON: {0}")]
    NotJson(String),
    #[error("the body must be a JSON object")]
    NotAnObject,
    #[error("{field}: {detail}")]
    Field { field: &'static str, detail: String },
}

fn field_error(field: &'static str, detail: impl Into<String>) -> InvalidBody {
    InvalidBody::Field {
        field,
        detail: detail.into(),
    }
}

/// A string field; `null` counts as absent.
fn text(obj: &Map<String, Value>, field: &'static str) -> Result<Option<String>, InvalidBody> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(field_error(field, "must be a string")),
    }
}

fn required(obj: &Map<String, Value>, field: &'static str) -> Result<String, InvalidBody> {
    text(obj, field)?.ok_or_else(|| field_error(field, "is required"))
}

/// Single-line text: no control characters (no header can be injected through it).
fn single_line(field: &'static str, value: &str, max: usize) -> Result<(), InvalidBody> {
    if value.chars().count() > max {
        return Err(field_error(
            field,
            format!("must be at most {max} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(field_error(field, "must not contain control characters"));
    }
    Ok(())
}

fn optional_line(
    obj: &Map<String, Value>,
    field: &'static str,
    max: usize,
) -> Result<Option<String>, InvalidBody> {
    let value = text(obj, field)?;
    if let Some(v) = &value {
        single_line(field, v, max)?;
    }
    Ok(value.filter(|v| !v.is_empty()))
}

pub fn parse(body: &[u8]) -> Result<ValidInvite, InvalidBody> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| InvalidBody::NotJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(InvalidBody::NotAnObject);
    };

    let sender_id = required(&obj, "sender_id")?;
    if sender_id.is_empty() {
        return Err(field_error("sender_id", "must not be empty"));
    }
    single_line("sender_id", &sender_id, 128)?;

    let recipient = required(&obj, "recipient")?;
    if recipient.len() > 254 {
        return Err(field_error("recipient", "must be at most 254 characters"));
    }
    if recipient
        .chars()
        .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(field_error("recipient", "is not a valid email address"));
    }
    let address = lettre::Address::from_str(&recipient)
        .map_err(|_| field_error("recipient", "is not a valid email address"))?;
    if !address.domain().contains('.') {
        return Err(field_error(
            "recipient",
            "must have a domain with a dot, like example.com",
        ));
    }
    let recipient = recipient.to_lowercase();
    let recipient_domain = address.domain().to_lowercase();

    let sender_ip = match text(&obj, "sender_ip")? {
        None => None,
        Some(ip) => Some(
            IpAddr::from_str(&ip)
                .map_err(|_| field_error("sender_ip", "must be an IPv4 or IPv6 address"))?,
        ),
    };

    let resource = optional_line(&obj, "resource", 256)?;
    let sender_name = optional_line(&obj, "sender_name", 128)?;

    let message = text(&obj, "message")?;
    if let Some(m) = &message {
        if m.chars().count() > 2000 {
            return Err(field_error("message", "must be at most 2000 characters"));
        }
        if m.chars()
            .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t')
        {
            return Err(field_error(
                "message",
                "must not contain control characters other than line breaks and tabs",
            ));
        }
    }
    let message = message
        .map(|m| m.replace("\r\n", "\n").replace('\r', "\n"))
        .filter(|m| !m.trim().is_empty());

    Ok(ValidInvite {
        sender_id,
        recipient,
        recipient_domain,
        sender_ip,
        resource,
        message,
        sender_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> Option<&'static str> {
        match parse(body.as_bytes()) {
            Err(InvalidBody::Field { field, .. }) => Some(field),
            _ => None,
        }
    }

    #[test]
    fn a_full_invite_parses() {
        let v = parse(
            br#"{"sender_id":"u_1","recipient":"Ana@Example.com","sender_ip":"203.0.113.9",
                 "resource":"doc_42","message":"Join\r\nmy doc","sender_name":"Bo"}"#,
        )
        .expect("valid");
        assert_eq!(v.recipient, "ana@example.com");
        assert_eq!(v.recipient_domain, "example.com");
        assert_eq!(v.message.as_deref(), Some("Join\nmy doc"));
        assert_eq!(v.sender_ip, Some("203.0.113.9".parse().expect("ip")));
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(field_of(r#"{"recipient":"a@b.co"}"#), Some("sender_id"));
        assert_eq!(field_of(r#"{"sender_id":"u"}"#), Some("recipient"));
        assert_eq!(
            field_of(r#"{"sender_id":7,"recipient":"a@b.co"}"#),
            Some("sender_id")
        );
        assert_eq!(
            field_of(r#"{"sender_id":"","recipient":"a@b.co"}"#),
            Some("sender_id")
        );
        assert_eq!(
            field_of(r#"{"sender_id":"a\nb","recipient":"a@b.co"}"#),
            Some("sender_id")
        );
        assert_eq!(
            field_of(r#"{"sender_id":"u","recipient":"nope"}"#),
            Some("recipient")
        );
        assert_eq!(
            field_of(r#"{"sender_id":"u","recipient":"a@localhost"}"#),
            Some("recipient")
        );
        assert_eq!(
            field_of(r#"{"sender_id":"u","recipient":"a@b.co","sender_ip":"1.2.3"}"#),
            Some("sender_ip")
        );
        assert_eq!(
            field_of(r#"{"sender_id":"u","recipient":"a@b.co","sender_name":"x\r\nBcc: y"}"#),
            Some("sender_name")
        );
        let long = "x".repeat(2001);
        assert_eq!(
            field_of(&format!(
                r#"{{"sender_id":"u","recipient":"a@b.co","message":"{long}"}}"#
            )),
            Some("message")
        );
    }

    #[test]
    fn non_objects_are_refused() {
        assert_eq!(parse(b"[1]"), Err(InvalidBody::NotAnObject));
        assert!(matches!(parse(b"{"), Err(InvalidBody::NotJson(_))));
    }
}
