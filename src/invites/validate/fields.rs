//! The checks of one field of an invite: strings present or absent, single lines without
//! controls that could deceive a reader or a mail server, and the recipient as it is counted and
//! sent to.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::{InvalidBody, RECIPIENT_MAX};

pub(super) fn field_error(field: &'static str, detail: impl Into<String>) -> InvalidBody {
    InvalidBody::Field {
        field,
        detail: detail.into(),
    }
}

/// A string field; `null` counts as absent.
pub(super) fn text(
    obj: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, InvalidBody> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(field_error(field, "must be a string")),
    }
}

pub(super) fn required(
    obj: &Map<String, Value>,
    field: &'static str,
) -> Result<String, InvalidBody> {
    text(obj, field)?.ok_or_else(|| field_error(field, "is required"))
}

/// Characters that reorder what follows them (bidi embeddings, overrides and isolates): text
/// that reads one way to a reviewer and another in a mail client.
pub(super) fn reorders(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Single-line text: no control characters (no header can be injected through it), no bidi
/// controls, no line or paragraph separators.
pub(super) fn single_line(field: &'static str, value: &str, max: usize) -> Result<(), InvalidBody> {
    if value.chars().count() > max {
        return Err(field_error(
            field,
            format!("must be at most {max} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(field_error(field, "must not contain control characters"));
    }
    if value.chars().any(reorders) {
        return Err(field_error(
            field,
            "must not contain bidirectional controls",
        ));
    }
    if value.contains(['\u{2028}', '\u{2029}']) {
        return Err(field_error(field, "must be a single line"));
    }
    Ok(())
}

/// A recipient as it is counted and sent to: the domain lower-cased and IDNA-encoded, the local
/// part ASCII (lower-cased, as mailbox providers treat it), and never an IP literal. Returns the
/// address and its domain; whatever it accepts, lettre can send to.
pub(super) fn recipient(raw: &str) -> Result<(String, String), InvalidBody> {
    let invalid = || field_error("recipient", "is not a valid email address");
    let too_long = || {
        field_error(
            "recipient",
            format!("must be at most {RECIPIENT_MAX} characters"),
        )
    };
    if raw.len() > RECIPIENT_MAX {
        return Err(too_long());
    }
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(invalid());
    }
    let (local, domain) = raw.rsplit_once('@').ok_or_else(invalid)?;
    if domain.starts_with('[') || domain.parse::<IpAddr>().is_ok() {
        return Err(field_error(
            "recipient",
            "must have a domain name, not an IP address",
        ));
    }
    if !local.is_ascii() {
        return Err(field_error(
            "recipient",
            "must have a local part (before the @) of ASCII characters",
        ));
    }
    let domain = idna::domain_to_ascii(domain).map_err(|_| invalid())?;
    // No top-level domain is numeric: `a@127.1` and the like are addresses in disguise.
    let tld = domain.rsplit('.').next().unwrap_or_default();
    if tld.is_empty() || tld.bytes().all(|b| b.is_ascii_digit()) {
        return Err(field_error(
            "recipient",
            "must have a domain name, not an IP address",
        ));
    }
    if !domain.contains('.') {
        return Err(field_error(
            "recipient",
            "must have a domain with a dot, like example.com",
        ));
    }
    let local = local.to_ascii_lowercase();
    let address = lettre::Address::new(&local, &domain).map_err(|_| invalid())?;
    let address = address.to_string();
    if address.len() > RECIPIENT_MAX {
        return Err(too_long());
    }
    Ok((address, domain))
}

/// An optional single-line field; empty counts as absent.
pub(super) fn optional_line(
    field: &'static str,
    value: Option<String>,
    max: usize,
) -> Result<Option<String>, InvalidBody> {
    if let Some(v) = &value {
        single_line(field, v, max)?;
    }
    Ok(value.filter(|v| !v.is_empty()))
}
