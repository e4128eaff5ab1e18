//! The transport chosen at startup (SMTP through lettre, or .eml files) and what a mail
//! server's refusal means for an invite.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use lettre::message::Mailbox;
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
        matches!(self, MailError::Smtp(e) if e.status().is_none() && !e.is_client())
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

/// Where messages go, chosen once at startup.
#[derive(Clone)]
pub enum Transport {
    /// With one permit per send at once: lettre's pool bounds only the connections it keeps
    /// idle, so without them every send of a round would open a connection of its own (a
    /// connection goes back to the pool in a task of its own, so for a moment after a send the
    /// next one may still open another).
    Smtp(AsyncSmtpTransport<Tokio1Executor>, Arc<Semaphore>),
    File(Arc<Folders>),
}

/// `.eml` files in a folder per hour of the mail directory (`YYYY-MM-DD-HH`, UTC): creating a
/// file in a folder that holds every message ever written costs the kernel more than the send.
pub struct Folders {
    root: PathBuf,
    /// The hour whose folder was made, and the transport into it.
    current: std::sync::Mutex<Option<(String, AsyncFileTransport<Tokio1Executor>)>>,
}

impl Folders {
    /// The transport into this hour's folder, made when the hour is new.
    async fn this_hour(&self) -> Result<AsyncFileTransport<Tokio1Executor>, MailError> {
        let hour = chrono::Utc::now().format("%Y-%m-%d-%H").to_string();
        if let Some((made, transport)) =
            &*self.current.lock().unwrap_or_else(PoisonError::into_inner)
            && *made == hour
        {
            return Ok(transport.clone());
        }
        let dir = self.root.join(&hour);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| MailError::MailDir(dir.clone(), e))?;
        let transport = AsyncFileTransport::new(&dir);
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((hour, transport.clone()));
        Ok(transport)
    }
}

impl Transport {
    /// SMTP when a URL is given (pooled connections), otherwise .eml files in hourly folders of
    /// `mail_dir`.
    pub fn new(
        smtp_url: Option<&str>,
        connections: u32,
        mail_dir: &Path,
    ) -> Result<Self, MailError> {
        match smtp_url {
            Some(url) => {
                let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .map_err(|e| MailError::SmtpUrl(e.to_string()))?
                    .timeout(Some(Duration::from_secs(10)))
                    .pool_config(PoolConfig::new().max_size(connections))
                    .build();
                let permits = Arc::new(Semaphore::new(connections as usize));
                Ok(Transport::Smtp(transport, permits))
            }
            None => {
                std::fs::create_dir_all(mail_dir)
                    .map_err(|e| MailError::MailDir(mail_dir.to_owned(), e))?;
                Ok(Transport::File(Arc::new(Folders {
                    root: mail_dir.to_owned(),
                    current: std::sync::Mutex::default(),
                })))
            }
        }
    }

    /// Waits for a connection to send on; a file needs none.
    pub(super) async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        match self {
            // The semaphore is never closed.
            Transport::Smtp(_, permits) => permits.clone().acquire_owned().await.ok(),
            Transport::File(_) => None,
        }
    }

    pub(super) async fn send(&self, message: Message) -> Result<(), MailError> {
        match self {
            Transport::Smtp(t, _) => t.send(message).await.map(drop).map_err(Into::into),
            Transport::File(folders) => {
                let transport = folders.this_hour().await?;
                transport.send(message).await.map(drop).map_err(Into::into)
            }
        }
    }
}

/// Parses `SENDGUARD_MAIL_FROM`.
pub fn parse_from(from: &str) -> Result<Mailbox, MailError> {
    from.parse().map_err(|_| MailError::From(from.to_owned()))
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
