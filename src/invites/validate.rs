//! The request body of `POST /api/v1/invites`, checked field by field (DESIGN.md §4).

use std::net::IpAddr;
use std::str::FromStr;

use serde_json::{Map, Value};
use url::Url;
use utoipa::ToSchema;
use utoipa::openapi::schema::{
    AnyOfBuilder, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type,
};

use crate::apps::App;

/// Longest `sender_id`, in characters.
const SENDER_ID_MAX: usize = 128;
/// Longest `recipient`, in bytes (RFC 5321's path limit less its angle brackets).
const RECIPIENT_MAX: usize = 254;
/// Longest `resource`, in characters.
const RESOURCE_MAX: usize = 256;
/// Longest `message`, in characters.
const MESSAGE_MAX: usize = 2000;
/// Longest `sender_name`, in characters.
const SENDER_NAME_MAX: usize = 128;

// The body as sent, before any check: what the API's description shows. The limits in its
// `#[schema]` attributes must be literals there; `the_description_states_the_checks` holds
// them to the constants above.
/// An invitation to send. Every field is a string; `null` counts as absent and other fields are
/// ignored.
#[derive(Debug, ToSchema)]
#[schema(examples(json!({
    "sender_id": "u_123",
    "recipient": "ana@example.com",
    "sender_name": "Bo",
    "resource": "doc_42",
    "message": "Join my doc",
    "sender_created_at": "2025-01-15T09:30:00Z"
})))]
pub struct Invite {
    /// The sender's account in the calling app; no control characters.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub sender_id: String,
    /// An email address whose domain has a dot; the local part ASCII, the domain a name (not an
    /// IP address).
    #[schema(
        format = Email,
        max_length = 254,
        pattern = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
    )]
    pub recipient: String,
    #[schema(schema_with = ip_address)]
    pub sender_ip: Option<String>,
    /// What the sender invites to, in the calling app; single line.
    #[schema(max_length = 256, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub resource: Option<String>,
    /// The sender's own words. Line breaks and tabs allowed; no other control characters.
    #[schema(
        max_length = 2000,
        pattern = r"^[^\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f]*$"
    )]
    pub message: Option<String>,
    /// The sender's name as the email shows it: a person's name, not a domain, URL or address;
    /// single line.
    #[schema(max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub sender_name: Option<String>,
    /// When the account was created in the calling app (RFC 3339); a sender younger than
    /// SENDGUARD_NEW_SENDER_DAYS is new. Without it, age counts from the first invite sendguard
    /// saw.
    #[schema(format = DateTime)]
    pub sender_created_at: Option<String>,
    /// The link the email carries: https (http only to a loopback host), on one of the app's
    /// link hosts, without user or password, at most 2048 bytes. Without it, the app's link
    /// template fills in the invite's id and resource, when the app has one.
    #[schema(max_length = 2048)]
    pub accept_url: Option<String>,
}

/// `sender_ip`'s schema: the derive has no type for "IPv4 or IPv6".
fn ip_address() -> Schema {
    let string = |format| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(format)))
    };
    AnyOfBuilder::new()
        .item(string(KnownFormat::Ipv4))
        .item(string(KnownFormat::Ipv6))
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some("The sender's address: IPv4 or IPv6."))
        .into()
}

impl Invite {
    /// The body's fields, each of the right type: a field that is not is named.
    fn read(body: &[u8]) -> Result<Invite, InvalidBody> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| InvalidBody::NotJson(e.to_string()))?;
        let Value::Object(obj) = value else {
            return Err(InvalidBody::NotAnObject);
        };
        Ok(Invite {
            sender_id: required(&obj, "sender_id")?,
            recipient: required(&obj, "recipient")?,
            sender_ip: text(&obj, "sender_ip")?,
            resource: text(&obj, "resource")?,
            message: text(&obj, "message")?,
            sender_name: text(&obj, "sender_name")?,
            sender_created_at: text(&obj, "sender_created_at")?,
            accept_url: text(&obj, "accept_url")?,
        })
    }
}

/// An invite that passed every check; `recipient` is normalised for counting and sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidInvite {
    pub sender_id: String,
    pub recipient: String,
    pub recipient_domain: String,
    pub sender_ip: Option<IpAddr>,
    pub resource: Option<String>,
    pub message: Option<String>,
    pub sender_name: Option<String>,
    /// When the sender's account was created in the app, as the app says.
    pub sender_created_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The link the email carries (`https`, or `http` to a loopback host); its host must be
    /// one of the app's ([`check_for_app`]).
    pub accept_url: Option<Url>,
}

impl ValidInvite {
    /// Whether the sender's words carry a URL, a domain name or an email address.
    pub fn has_links(&self) -> bool {
        crate::signals::any_link([
            self.resource.as_deref(),
            self.message.as_deref(),
            self.sender_name.as_deref(),
        ])
    }
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

/// Characters that reorder what follows them (bidi embeddings, overrides and isolates): text
/// that reads one way to a reviewer and another in a mail client.
fn reorders(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Single-line text: no control characters (no header can be injected through it), no bidi
/// controls, no line or paragraph separators.
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
fn recipient(raw: &str) -> Result<(String, String), InvalidBody> {
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
fn optional_line(
    field: &'static str,
    value: Option<String>,
    max: usize,
) -> Result<Option<String>, InvalidBody> {
    if let Some(v) = &value {
        single_line(field, v, max)?;
    }
    Ok(value.filter(|v| !v.is_empty()))
}

pub fn parse(body: &[u8]) -> Result<ValidInvite, InvalidBody> {
    let invite = Invite::read(body)?;

    let sender_id = invite.sender_id;
    if sender_id.is_empty() {
        return Err(field_error("sender_id", "must not be empty"));
    }
    single_line("sender_id", &sender_id, SENDER_ID_MAX)?;

    let (recipient, recipient_domain) = recipient(&invite.recipient)?;

    let sender_ip = match invite.sender_ip {
        None => None,
        Some(ip) => Some(
            IpAddr::from_str(&ip)
                .map_err(|_| field_error("sender_ip", "must be an IPv4 or IPv6 address"))?,
        ),
    };

    let resource = optional_line("resource", invite.resource, RESOURCE_MAX)?;
    let sender_name = optional_line("sender_name", invite.sender_name, SENDER_NAME_MAX)?;
    // The name goes into the Subject under the operator's domain: a name that reads as a
    // domain, a URL or an address ("paypal.com security") would lend it that authority.
    if sender_name
        .as_deref()
        .is_some_and(crate::signals::links::has_link)
    {
        return Err(field_error(
            "sender_name",
            "must be a person's name, not a domain, URL or email address",
        ));
    }
    let accept_url = match invite.accept_url {
        None => None,
        Some(raw) => Some(crate::urls::email_link(&raw).map_err(|e| field_error("accept_url", e))?),
    };

    let message = invite.message;
    if let Some(m) = &message {
        if m.chars().count() > MESSAGE_MAX {
            return Err(field_error(
                "message",
                format!("must be at most {MESSAGE_MAX} characters"),
            ));
        }
        if m.chars()
            .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t')
        {
            return Err(field_error(
                "message",
                "must not contain control characters other than line breaks and tabs",
            ));
        }
        if m.chars().any(reorders) {
            return Err(field_error(
                "message",
                "must not contain bidirectional controls",
            ));
        }
    }
    let message = message
        .map(|m| m.replace("\r\n", "\n").replace('\r', "\n"))
        .filter(|m| !m.trim().is_empty());

    let sender_created_at = match invite.sender_created_at {
        None => None,
        Some(at) => Some(
            chrono::DateTime::parse_from_rfc3339(&at)
                .map_err(|_| field_error("sender_created_at", "must be an RFC 3339 time"))?
                .with_timezone(&chrono::Utc),
        ),
    };

    Ok(ValidInvite {
        sender_id,
        recipient,
        recipient_domain,
        sender_ip,
        resource,
        message,
        sender_name,
        sender_created_at,
        accept_url,
    })
}

/// What only the key's app can say about an invite: where its link may point.
pub fn check_for_app(invite: &ValidInvite, app: &App) -> Result<(), InvalidBody> {
    match &invite.accept_url {
        Some(url) if !app.allows_link_to(url) => Err(field_error(
            "accept_url",
            format!(
                "host `{}` is not one of the app's link hosts",
                crate::urls::host_of(url)
            ),
        )),
        _ => Ok(()),
    }
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

    fn refused(recipient: &str) -> bool {
        let body = serde_json::json!({"sender_id": "u", "recipient": recipient}).to_string();
        field_of(&body) == Some("recipient")
    }

    #[test]
    fn recipients_are_normalised_and_ip_literals_refused() {
        for bad in [
            "ana@[127.0.0.1]",
            "ana@127.0.0.1",
            "ana@[IPv6:::1]",
            "ana@127.1",
            "ana@example.com.",
            "ána@example.com",
            "ana@exa mple.com",
        ] {
            assert!(refused(bad), "{bad}");
        }
        let parse_one = |r: &str| {
            let body = serde_json::json!({"sender_id": "u", "recipient": r}).to_string();
            parse(body.as_bytes()).expect("valid")
        };
        let v = parse_one("Ana@Example.COM");
        assert_eq!(
            (v.recipient.as_str(), v.recipient_domain.as_str()),
            ("ana@example.com", "example.com")
        );
        let v = parse_one("jo@Bücher.example");
        assert_eq!(v.recipient, "jo@xn--bcher-kva.example");
    }

    #[test]
    fn bidi_controls_and_separators_are_refused() {
        let with = |field: &str, value: &str| {
            let mut body = serde_json::json!({"sender_id": "u", "recipient": "a@b.co"});
            body[field] = serde_json::json!(value);
            field_of(&body.to_string())
        };
        assert_eq!(with("sender_name", "Pay\u{202e}lap"), Some("sender_name"));
        assert_eq!(
            with("sender_name", "a\u{2067}b\u{2069}"),
            Some("sender_name")
        );
        assert_eq!(with("resource", "doc\u{2028}x"), Some("resource"));
        assert_eq!(with("sender_id", "u\u{2029}"), Some("sender_id"));
        assert_eq!(with("message", "see \u{202e}fdp.exe"), Some("message"));
        assert_eq!(with("message", "line\nbreaks\tand tabs"), None);
    }

    proptest::proptest! {
        /// Whatever the validator accepts, lettre can address a message to: an accepted invite
        /// never fails in the outbox for its address.
        #[test]
        fn every_accepted_address_can_be_sent_to(
            local in "[A-Za-z0-9.!#$%&'*+/=?^_`{|}~\"(),:;<>@ü -]{0,24}",
            domain in "[A-Za-z0-9.\\-\\[\\]:ü_]{0,24}",
            raw in ".{0,40}",
        ) {
            for candidate in [format!("{local}@{domain}"), raw.clone()] {
                let body = serde_json::json!({"sender_id": "u", "recipient": candidate}).to_string();
                if let Ok(v) = parse(body.as_bytes()) {
                    let mailbox = v.recipient.parse::<lettre::message::Mailbox>();
                    proptest::prop_assert!(mailbox.is_ok(), "{} accepted as {}", candidate, v.recipient);
                    let built = lettre::Message::builder()
                        .from("a <a@example.com>".parse::<lettre::message::Mailbox>().expect("from"))
                        .to(mailbox.expect("mailbox"))
                        .body(String::new());
                    proptest::prop_assert!(built.is_ok(), "{}", v.recipient);
                }
            }
        }
    }

    /// The characters `char::is_control` refuses, less `allowed`, as a regex class body.
    fn control_class(allowed: &[char]) -> String {
        let refused: Vec<u32> = (0..=0x10FFFF)
            .filter_map(char::from_u32)
            .filter(|c| c.is_control() && !allowed.contains(c))
            .map(u32::from)
            .collect();
        let mut class = String::new();
        let mut run = 0;
        while run < refused.len() {
            let first = refused[run];
            let mut last = first;
            while refused.get(run + 1) == Some(&(last + 1)) {
                last += 1;
                run += 1;
            }
            class += &format!("\\u{first:04x}");
            if last > first {
                class += &format!("-\\u{last:04x}");
            }
            run += 1;
        }
        class
    }

    #[test]
    fn the_description_states_the_checks() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(Invite::schema()).expect("schema");
        let property = |field: &str| &schema["properties"][field];
        for (field, max) in [
            ("sender_id", SENDER_ID_MAX),
            ("recipient", RECIPIENT_MAX),
            ("resource", RESOURCE_MAX),
            ("message", MESSAGE_MAX),
            ("sender_name", SENDER_NAME_MAX),
            ("accept_url", crate::urls::MAX_LINK),
        ] {
            assert_eq!(property(field)["maxLength"], max, "{field}");
        }
        assert_eq!(property("sender_id")["minLength"], 1);
        assert_eq!(
            schema["required"],
            serde_json::json!(["sender_id", "recipient"])
        );
        let single_line = format!("^[^{}]*$", control_class(&[]));
        for field in ["sender_id", "resource", "sender_name"] {
            assert_eq!(property(field)["pattern"], single_line, "{field}");
        }
        let message = format!("^[^{}]*$", control_class(&['\n', '\r', '\t']));
        assert_eq!(property("message")["pattern"], message);
        // Each field the description shows is one `Invite::read` takes under that name.
        let shown = schema["properties"].as_object().expect("properties");
        for field in shown.keys() {
            let mut body = serde_json::json!({"sender_id": "u", "recipient": "a@b.co"});
            body[field] = serde_json::json!(7);
            assert_eq!(field_of(&body.to_string()), Some(field.as_str()), "{field}");
        }
    }

    #[test]
    fn non_objects_are_refused() {
        assert_eq!(parse(b"[1]"), Err(InvalidBody::NotAnObject));
        assert!(matches!(parse(b"{"), Err(InvalidBody::NotJson(_))));
    }
}
