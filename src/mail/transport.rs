//! The transport chosen at startup: SMTP through the pool of [`super::smtp`], or .eml files.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use lettre::message::Mailbox;
use lettre::{AsyncFileTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::sync::OwnedSemaphorePermit;

use super::MailError;
use super::smtp::Pool;

/// Where messages go, chosen once at startup.
#[derive(Clone)]
pub enum Transport {
    Smtp(Arc<Pool>),
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
            Some(url) => Ok(Transport::Smtp(Arc::new(Pool::new(url, connections)?))),
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
            Transport::Smtp(pool) => pool.turn().await,
            Transport::File(_) => None,
        }
    }

    /// The most sends at once: one per connection; files take any number.
    pub(super) fn turns(&self) -> Option<usize> {
        match self {
            Transport::Smtp(pool) => Some(pool.connections()),
            Transport::File(_) => None,
        }
    }

    pub(super) async fn send(&self, message: Message) -> Result<(), MailError> {
        match self {
            Transport::Smtp(pool) => pool.send(&message).await,
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
