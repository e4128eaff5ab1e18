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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Sends `SENDGUARD_BENCH_EMAILS` (2,000) emails through `SENDGUARD_BENCH_SMTP_URL` as the
    /// outbox does (a turn each, 8 connections) and prints emails a second and the mean send.
    /// Against a server that takes every message at once (`smtp-sink -c 127.0.0.1:25250 256`),
    /// what it measures is the client: docs/PERFORMANCE.md.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement, against an SMTP server of one's own"]
    async fn smtp_throughput() {
        let url = std::env::var("SENDGUARD_BENCH_SMTP_URL").expect("SENDGUARD_BENCH_SMTP_URL");
        let emails: u32 = std::env::var("SENDGUARD_BENCH_EMAILS")
            .map_or(2000, |n| n.parse().expect("SENDGUARD_BENCH_EMAILS"));
        let transport = Transport::new(Some(&url), 8, Path::new("unused")).expect("transport");
        let body = "An invitation to a shared document, with its links.\r\n".repeat(60);
        let started = std::time::Instant::now();
        let mut sends = tokio::task::JoinSet::new();
        for n in 0..emails {
            let transport = transport.clone();
            let message = Message::builder()
                .from("Bench <bench@example.com>".parse().expect("from"))
                .to(format!("r{n}@example.com").parse().expect("to"))
                .subject("You are invited")
                .body(body.clone())
                .expect("message");
            sends.spawn(async move {
                let _turn = transport.turn().await;
                let send = std::time::Instant::now();
                transport.send(message).await.expect("send");
                send.elapsed()
            });
        }
        let mut busy = Duration::ZERO;
        while let Some(took) = sends.join_next().await {
            busy += took.expect("send task");
        }
        let elapsed = started.elapsed();
        println!(
            "{emails} emails in {:.2} s: {:.0} emails/s, mean send {:.2} ms",
            elapsed.as_secs_f64(),
            f64::from(emails) / elapsed.as_secs_f64(),
            busy.as_secs_f64() * 1000.0 / f64::from(emails)
        );
    }
}
