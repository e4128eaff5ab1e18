//! The request body of `POST /api/v1/invites`, checked field by field (docs/DESIGN.md §4).

use std::net::IpAddr;
use std::str::FromStr;

use serde_json::Value;
use url::Url;
use utoipa::ToSchema;
use utoipa::openapi::schema::{
    AnyOfBuilder, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type,
};

mod fields;

use crate::apps::App;
use fields::{
    field_error, optional_line, reads_as_link, recipient, reorders, required, single_line, text,
};

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
/// An invitation to send. Every field is a string; `null` counts as absent, and any other field
/// is refused by name.
#[derive(Debug, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "sender_id": "u_123",
    "recipient": "ana@example.com",
    "sender_name": "Bo",
    "resource": "doc_42",
    "message": "Join my doc",
    "sender_created_at": "2025-01-15T09:30:00Z"
})))]
pub struct Invite {
    /// The sender's account in the calling app; no control or invisible format characters.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub sender_id: String,
    /// An email address whose domain has a dot; the local part a dot-atom of ASCII (no quoted
    /// form), the domain a name (not an IP address).
    #[schema(
        format = Email,
        max_length = 254,
        pattern = r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[^@\s]+\.[^@\s]+$"
    )]
    pub recipient: String,
    #[schema(schema_with = ip_address)]
    pub sender_ip: Option<String>,
    /// What the sender invites to, in the calling app; single line (no control or invisible
    /// format characters), and not `.` or `..` (an app's link template may put it in a path
    /// segment).
    #[schema(max_length = 256, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub resource: Option<String>,
    /// The sender's own words. Line breaks and tabs allowed; no other control characters.
    #[schema(
        max_length = 2000,
        pattern = r"^[^\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f]*$"
    )]
    pub message: Option<String>,
    /// The sender's name as the email shows it: a person's name, not a domain, URL or address,
    /// whatever its case or look-alike dots (`PayPal.Com`, `paypal . com`, `paypal,com`), and
    /// without `=?` (which mail programs decode as an encoded word); single line (no control or
    /// invisible format characters).
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

/// The fields of [`Invite`].
pub const FIELDS: &[&str] = &[
    "sender_id",
    "recipient",
    "sender_ip",
    "resource",
    "message",
    "sender_name",
    "sender_created_at",
    "accept_url",
];

impl Invite {
    /// The body's fields, each of the right type: a field that is not, or that is unknown, is
    /// named.
    fn read(body: &[u8]) -> Result<Invite, InvalidBody> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| InvalidBody::NotJson(e.to_string()))?;
        let Value::Object(obj) = value else {
            return Err(InvalidBody::NotAnObject);
        };
        if let Some(field) = crate::http::unknown_field(&obj, FIELDS) {
            return Err(InvalidBody::UnknownField(field));
        }
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
    #[error("unknown field `{0}`")]
    UnknownField(String),
}

pub fn parse(body: &[u8]) -> Result<ValidInvite, InvalidBody> {
    let invite = Invite::read(body)?;

    let sender_id = invite.sender_id;
    sender_id_is_valid(&sender_id)?;

    let (recipient, recipient_domain) = recipient(&invite.recipient)?;

    let sender_ip = match invite.sender_ip {
        None => None,
        Some(ip) => Some(
            // A mapped address (`::ffff:a.b.c.d`) is its IPv4 address, recorded and counted so.
            IpAddr::from_str(&ip)
                .map_err(|_| field_error("sender_ip", "must be an IPv4 or IPv6 address"))?
                .to_canonical(),
        ),
    };

    let resource = optional_line("resource", invite.resource, RESOURCE_MAX)?;
    // An app's link template may put the resource in a path segment of its own, where `.` and
    // `..` (however encoded) would move the link to another path of the app.
    if matches!(resource.as_deref(), Some("." | "..")) {
        return Err(field_error("resource", "must not be `.` or `..`"));
    }
    let sender_name = optional_line("sender_name", invite.sender_name, SENDER_NAME_MAX)?;
    // The name goes into the Subject under the operator's domain: a name that reads as a
    // domain, a URL or an address ("paypal.com security") would lend it that authority.
    if sender_name.as_deref().is_some_and(reads_as_link) {
        return Err(field_error(
            "sender_name",
            "must be a person's name, not a domain, URL or email address",
        ));
    }
    // Mail programs decode an encoded word (RFC 2047) in a header, so `=?utf-8?b?…?=` would
    // read as whatever it encodes, past the check above.
    if sender_name.as_deref().is_some_and(|n| n.contains("=?")) {
        return Err(field_error(
            "sender_name",
            "must not contain `=?`, which mail programs read as an encoded word",
        ));
    }
    let accept_url = match invite.accept_url {
        None => None,
        Some(raw) => Some(crate::urls::email_link(&raw).map_err(|e| field_error("accept_url", e))?),
    };

    let message = match invite.message {
        Some(m) => Some(free_text("message", &m)?),
        None => None,
    }
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

/// A sender id as every API body carries it: 1 to 128 printable characters on one line.
pub fn sender_id_is_valid(sender_id: &str) -> Result<(), InvalidBody> {
    if sender_id.is_empty() {
        return Err(field_error("sender_id", "must not be empty"));
    }
    single_line("sender_id", sender_id, SENDER_ID_MAX)
}

/// A sender's free text of at most 2,000 characters, as `message` is checked: line breaks and
/// tabs allowed, other control characters and bidirectional controls refused. Answers it with
/// its line breaks made `\n`.
pub fn free_text(field: &'static str, text: &str) -> Result<String, InvalidBody> {
    if text.chars().count() > MESSAGE_MAX {
        return Err(field_error(
            field,
            format!("must be at most {MESSAGE_MAX} characters"),
        ));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t')
    {
        return Err(field_error(
            field,
            "must not contain control characters other than line breaks and tabs",
        ));
    }
    if text.chars().any(reorders) {
        return Err(field_error(
            field,
            "must not contain bidirectional controls",
        ));
    }
    Ok(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// What only the key's app can say about an invite: where its link may point.
pub fn check_for_app(invite: &ValidInvite, app: &App) -> Result<(), InvalidBody> {
    match &invite.accept_url {
        Some(url) if !app.allows_link_to(url) => {
            let host = crate::urls::host_of(url);
            // `--link-host` replaces the list, so the command keeps the hosts the app has.
            let hosts: String = app
                .link_hosts
                .iter()
                .map(String::as_str)
                .chain([host.as_str()])
                .map(|h| format!(" --link-host {h}"))
                .collect();
            Err(field_error(
                "accept_url",
                format!(
                    "host `{host}` is not one of the app's link hosts; an operator adds it with \
                     `sendguard app update {}{hosts}`",
                    app.name
                ),
            ))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
