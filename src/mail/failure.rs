//! What a failed send means for an invite: a bounce, an outage of the mail server, or a
//! setting or message to fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("invalid SENDGUARD_SMTP_URL: {0}")]
    SmtpUrl(String),
    #[error("invalid SENDGUARD_MAIL_FROM `{0}`")]
    From(String),
    #[error("cannot create the mail directory {0}: {1}")]
    MailDir(PathBuf, std::io::Error),
    #[error("building the message: {0}")]
    Build(String),
    #[error("smtp: {0}")]
    Smtp(#[from] lettre::transport::smtp::Error),
    /// No session with the mail server: no connection, no TLS, or no answer in time.
    #[error("smtp: {0}")]
    Unreachable(String),
    #[error("writing the message: {0}")]
    File(#[from] lettre::transport::file::Error),
    #[error("the invite's app: {0}")]
    App(String),
}

impl MailError {
    /// The mail server refused the recipient for good: a bounce of the invite, counted against
    /// its sender. Only a refusal of the recipient's address or mailbox is one: an enhanced
    /// status (RFC 3463) of `5.1.1`, `5.1.2`, `5.1.3`, `5.1.6`, `5.1.10` or `5.2.1`, or without
    /// one a `550`, `551` or `553`. Every other 5xx is about the sender's address, the relay's
    /// set-up (`535` for its credentials, `550 5.7.1` for a sending address it does not accept)
    /// or the message, and says nothing about the recipient.
    pub(super) fn is_refusal(&self) -> bool {
        let MailError::Smtp(e) = self else {
            return false;
        };
        let Some(code) = e.status().filter(|_| e.is_permanent()) else {
            return false;
        };
        let text = std::error::Error::source(e).map(ToString::to_string);
        refuses_recipient(&code.to_string(), text.as_deref().unwrap_or_default())
    }

    /// The mail server could not be reached, or did not answer: no connection, a timeout, a
    /// broken session or TLS. Unlike a reply (`451` when a relay throttles), this says the
    /// server is down, and the first send that succeeds afterwards says it is back.
    pub(super) fn is_unreachable(&self) -> bool {
        match self {
            MailError::Smtp(e) => e.status().is_none() && !e.is_client(),
            MailError::Unreachable(_) => true,
            _ => false,
        }
    }

    /// The server's `421`: it is closing the session.
    pub(super) fn is_closing(&self) -> bool {
        matches!(self, MailError::Smtp(e) if closing(e))
    }

    /// An answer that no retry will change: a refused recipient, a message that cannot be
    /// built. The relay's other refusals are retried and raise the SMTP incident, as an outage
    /// does, for `SENDGUARD_MAIL_MAX_ATTEMPTS`: an operator can fix a setting in that time.
    pub(super) fn is_permanent(&self) -> bool {
        match self {
            MailError::Smtp(_) => self.is_refusal(),
            MailError::Build(_) | MailError::From(_) => true,
            _ => false,
        }
    }
}

/// The server's `421`, whatever the command was: it is closing the session (RFC 5321 §3.8).
pub(super) fn closing(e: &lettre::transport::smtp::Error) -> bool {
    e.status().is_some_and(|code| u16::from(code) == 421)
}

/// Whether a permanent reply (`code`, then `text`) refuses the recipient's address or mailbox.
fn refuses_recipient(code: &str, text: &str) -> bool {
    match enhanced_status(text) {
        Some(status) => matches!(status, (1, 1 | 2 | 3 | 6 | 10) | (2, 1)),
        None => matches!(code, "550" | "551" | "553"),
    }
}

/// The subject and detail of the enhanced status code (`5.1.1`) in a reply's text: the first
/// word that is one, as RFC 2034 puts it first, or as some servers write it later (`(#5.7.1)`).
fn enhanced_status(text: &str) -> Option<(u16, u16)> {
    text.split_whitespace().find_map(|word| {
        let mut parts = word.trim_matches(['(', ')', '#', ',', ';']).split('.');
        let class = parts.next()?;
        let subject = parts.next()?.parse().ok()?;
        let detail = parts.next()?.parse().ok()?;
        (matches!(class, "2" | "4" | "5") && parts.next().is_none()).then_some((subject, detail))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enhanced_status_codes_are_read_from_the_start_of_a_reply() {
        assert_eq!(enhanced_status("5.1.1 no such user"), Some((1, 1)));
        assert_eq!(enhanced_status("5.7.1 sender not authorized"), Some((7, 1)));
        assert_eq!(enhanced_status("4.2.2 mailbox full"), Some((2, 2)));
        assert_eq!(enhanced_status("no such user"), None);
        assert_eq!(enhanced_status("5.1 short"), None);
        assert_eq!(
            enhanced_status("sorry, that domain isn't allowed (#5.7.1)"),
            Some((7, 1))
        );
        assert_eq!(enhanced_status("1.2.3.4 looks like an address"), None);
        assert_eq!(enhanced_status(""), None);
    }

    #[test]
    fn only_a_refused_recipient_is_a_bounce() {
        for (code, text, bounce) in [
            ("550", "5.1.1 user unknown", true),
            ("553", "5.1.3 bad recipient address syntax", true),
            ("550", "5.2.1 mailbox disabled", true),
            ("550", "no such user", true),
            ("550", "5.7.1 relaying denied", false),
            ("535", "5.7.8 authentication failed", false),
            (
                "553",
                "5.1.8 sender address rejected: domain not found",
                false,
            ),
            (
                "553",
                "sorry, that domain isn't in my list of allowed rcpthosts (#5.7.1)",
                false,
            ),
            ("554", "5.7.1 message rejected as spam", false),
            ("552", "5.2.2 mailbox full", false),
            ("554", "transaction failed", false),
        ] {
            assert_eq!(refuses_recipient(code, text), bounce, "{code} {text}");
        }
    }
}
