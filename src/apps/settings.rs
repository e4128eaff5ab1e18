//! What an operator may set on an app, checked before anything is stored: each error names the
//! setting (as the command line spells it) and what is wrong.

use std::str::FromStr;

use lettre::message::Mailbox;
use url::Url;
use uuid::Uuid;

use super::App;
use crate::urls;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("--{field}: {detail}")]
    Invalid { field: &'static str, detail: String },
    #[error(
        "app name `{0}`: 1-64 lower-case letters, digits, `-` or `_`, starting with a letter or digit"
    )]
    BadName(String),
    #[error("there is no app `{0}`")]
    NotFound(String),
    #[error("an app named `{0}` exists already")]
    Exists(String),
    #[error("app `{0}` has no webhook secret to rotate; set its --webhook-url first")]
    NoWebhook(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

fn invalid(field: &'static str, detail: impl Into<String>) -> AppError {
    AppError::Invalid {
        field,
        detail: detail.into(),
    }
}

/// Changes to an app. `None` keeps a setting as it is; an empty text clears it (an empty list
/// of link hosts clears the list).
#[derive(Debug, Clone, Default)]
pub struct AppChanges {
    pub product: Option<String>,
    pub link_hosts: Option<Vec<String>>,
    pub link_template: Option<String>,
    pub mail_from: Option<String>,
    pub webhook_url: Option<String>,
    /// Replaces the list; an empty list clears it.
    pub standard_texts: Option<Vec<String>>,
}

/// An app's settings after a change, each checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppValues {
    pub product: Option<String>,
    pub link_hosts: Vec<String>,
    pub link_template: Option<String>,
    pub mail_from: Option<String>,
    pub webhook_url: Option<String>,
    pub standard_texts: Vec<String>,
}

/// Standard texts an app may list, and the longest (as long as an invite's `message`).
const STANDARD_TEXTS: usize = 20;
const STANDARD_TEXT_CHARS: usize = 2000;

pub fn check_name(name: &str) -> Result<(), AppError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(AppError::BadName(name.to_owned()))
    }
}

/// `Some("")` clears, `Some(x)` sets, `None` keeps.
fn merged(change: Option<String>, current: Option<&str>) -> Option<String> {
    match change {
        Some(v) if v.trim().is_empty() => None,
        Some(v) => Some(v.trim().to_owned()),
        None => current.map(str::to_owned),
    }
}

impl AppChanges {
    /// The settings this change leaves the app with (`current`: `None` for a new app). The
    /// webhook URL is checked separately, since that resolves its host.
    pub fn apply(self, current: Option<&App>) -> Result<AppValues, AppError> {
        let product = merged(self.product, current.and_then(|a| a.product.as_deref()));
        if let Some(p) = &product
            && (p.chars().count() > 64 || p.chars().any(char::is_control))
        {
            return Err(invalid(
                "product",
                "at most 64 characters, no control characters",
            ));
        }
        // A blank host (`--link-host ""`) names none: given alone, it clears the list.
        let mut link_hosts = match self.link_hosts {
            Some(hosts) => hosts
                .iter()
                .filter(|h| !h.trim().is_empty())
                .map(|h| link_host(h))
                .collect::<Result<Vec<_>, _>>()?,
            None => current.map(|a| a.link_hosts.clone()).unwrap_or_default(),
        };
        let link_template = merged(
            self.link_template,
            current.and_then(|a| a.link_template.as_deref()),
        );
        if let Some(t) = &link_template {
            let host = template_host(t)?;
            // A template's own host is allowed by naming it; a list that names other hosts
            // only must name this one too.
            if link_hosts.is_empty() {
                link_hosts.push(host);
            } else if !link_hosts.contains(&host) {
                return Err(invalid(
                    "link-template",
                    format!("its host `{host}` is not one of the app's link hosts"),
                ));
            }
        }
        link_hosts.sort();
        link_hosts.dedup();
        let mail_from = merged(self.mail_from, current.and_then(|a| a.mail_from.as_deref()));
        if let Some(from) = &mail_from {
            Mailbox::from_str(from).map_err(|e| {
                invalid(
                    "from",
                    format!("must be a mailbox like `Drawbox <invites@drawbox.example>` ({e})"),
                )
            })?;
        }
        let webhook_url = merged(
            self.webhook_url,
            current.and_then(|a| a.webhook_url.as_deref()),
        );
        Ok(AppValues {
            product,
            link_hosts,
            link_template,
            mail_from,
            webhook_url,
            standard_texts: standard_texts(self.standard_texts, current)?,
        })
    }
}

/// The standard texts after a change: each non-blank, at most as long as a message, with no
/// control characters but line breaks; blank ones are dropped (a lone blank clears the list).
fn standard_texts(
    change: Option<Vec<String>>,
    current: Option<&App>,
) -> Result<Vec<String>, AppError> {
    let Some(texts) = change else {
        return Ok(current
            .map(|a| a.standard_texts.clone())
            .unwrap_or_default());
    };
    let texts: Vec<String> = texts
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if texts.len() > STANDARD_TEXTS {
        return Err(invalid(
            "standard-text",
            format!("at most {STANDARD_TEXTS} texts"),
        ));
    }
    let bad = texts.iter().any(|t| {
        t.chars().count() > STANDARD_TEXT_CHARS
            || t.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t')
    });
    if bad {
        return Err(invalid(
            "standard-text",
            format!("each at most {STANDARD_TEXT_CHARS} characters, no control characters"),
        ));
    }
    Ok(texts)
}

/// A host invitation links may point to, as stored: lower case, IDNA-encoded, nothing else.
fn link_host(raw: &str) -> Result<String, AppError> {
    let bad = || {
        invalid(
            "link-host",
            format!("`{raw}` must be a host name or address alone (no scheme, port or path)"),
        )
    };
    let raw = raw.trim();
    if raw.is_empty() || raw.contains(['/', '?', '#', '@']) {
        return Err(bad());
    }
    let url = Url::parse(&format!("https://{raw}/")).map_err(|_| bad())?;
    if url.port().is_some() || url.path() != "/" {
        return Err(bad());
    }
    Ok(urls::host_of(&url))
}

/// The host of a link template, after checking that it fills in to a link an email may carry.
fn template_host(template: &str) -> Result<String, AppError> {
    let sample = super::fill(template, Uuid::nil(), Some("resource"));
    if sample.contains(['{', '}']) {
        return Err(invalid(
            "link-template",
            "the only placeholders are {invite_id} and {resource}",
        ));
    }
    let url = urls::email_link(&sample).map_err(|e| invalid("link-template", e))?;
    Ok(urls::host_of(&url))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change() -> AppChanges {
        AppChanges::default()
    }

    #[test]
    fn names_are_slugs() {
        assert!(check_name("drawbox").is_ok());
        assert!(check_name("web-2_staging").is_ok());
        for bad in ["", "Drawbox", "-x", "a b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_template_brings_its_host_and_must_fill_in_to_a_link() {
        let v = AppChanges {
            link_template: Some("https://Drawbox.example/i/{invite_id}".into()),
            ..change()
        }
        .apply(None)
        .expect("valid");
        assert_eq!(v.link_hosts, ["drawbox.example"]);
        for bad in [
            "http://drawbox.example/i/{invite_id}",
            "https://drawbox.example/i/{id}",
            "not a url {invite_id}",
        ] {
            let e = AppChanges {
                link_template: Some(bad.into()),
                ..change()
            }
            .apply(None);
            assert!(
                matches!(
                    e,
                    Err(AppError::Invalid {
                        field: "link-template",
                        ..
                    })
                ),
                "{bad}: {e:?}"
            );
        }
        let elsewhere = AppChanges {
            link_hosts: Some(vec!["app.example".into()]),
            link_template: Some("https://other.example/{invite_id}".into()),
            ..change()
        }
        .apply(None);
        assert!(elsewhere.is_err());
    }

    #[test]
    fn hosts_are_hosts_alone() {
        let v = AppChanges {
            link_hosts: Some(vec!["APP.example".into(), "127.0.0.1".into()]),
            ..change()
        }
        .apply(None)
        .expect("valid");
        assert_eq!(v.link_hosts, ["127.0.0.1", "app.example"]);
        for bad in ["https://app.example", "app.example/x", "app.example:8080"] {
            let e = AppChanges {
                link_hosts: Some(vec![bad.into()]),
                ..change()
            }
            .apply(None);
            assert!(e.is_err(), "{bad}");
        }
    }

    #[test]
    fn empty_text_clears_and_absent_keeps() {
        let current = App {
            id: 1,
            name: "a".into(),
            product: Some("Drawbox".into()),
            link_hosts: vec!["drawbox.example".into()],
            link_template: None,
            mail_from: Some("Drawbox <i@drawbox.example>".into()),
            webhook_url: None,
            standard_texts: vec!["Join my doc".into()],
        };
        let v = AppChanges {
            product: Some(String::new()),
            ..change()
        }
        .apply(Some(&current))
        .expect("valid");
        assert_eq!(v.product, None);
        assert_eq!(v.link_hosts, ["drawbox.example"]);
        assert_eq!(v.mail_from.as_deref(), Some("Drawbox <i@drawbox.example>"));
        let cleared = AppChanges {
            link_hosts: Some(vec![String::new()]),
            ..change()
        }
        .apply(Some(&current))
        .expect("valid");
        assert!(cleared.link_hosts.is_empty(), "{:?}", cleared.link_hosts);
        let bad_from = AppChanges {
            mail_from: Some("not a mailbox".into()),
            ..change()
        }
        .apply(Some(&current));
        assert!(bad_from.is_err());
    }
}
