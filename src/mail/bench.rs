//! `sendguard bench smtp`: emails a second through the SMTP transport as the outbox sends them
//! (a turn on the pool each, every send of its own task). Against a server that takes every
//! message at once (`smtp-sink -c 127.0.0.1:25250 256`), what it measures is the client.

use std::time::{Duration, Instant};

use lettre::Message;
use tokio::task::JoinSet;

use super::{MailError, Transport};

/// What one run measured.
#[derive(Debug, Clone)]
pub struct SmtpBench {
    pub emails: u32,
    pub elapsed: Duration,
    /// The sends' own time, summed (waiting for a turn left out).
    pub busy: Duration,
}

impl SmtpBench {
    pub fn per_second(&self) -> f64 {
        f64::from(self.emails) / self.elapsed.as_secs_f64()
    }

    pub fn mean_send_ms(&self) -> f64 {
        self.busy.as_secs_f64() * 1000.0 / f64::from(self.emails.max(1))
    }
}

/// Sends `emails` invitation-sized emails through `url` on `connections` connections; the
/// first failure ends the run.
pub async fn run(url: &str, connections: u32, emails: u32) -> Result<SmtpBench, MailError> {
    let transport = Transport::new(Some(url), connections, std::path::Path::new(""))?;
    let body = "An invitation to a shared document, with its links.\r\n".repeat(60);
    let started = Instant::now();
    let mut sends = JoinSet::new();
    let build = |e: &dyn std::fmt::Display| MailError::Build(e.to_string());
    for n in 0..emails {
        let message = Message::builder()
            .from("Bench <bench@example.com>".parse().map_err(|e| build(&e))?)
            .to(format!("r{n}@example.com").parse().map_err(|e| build(&e))?)
            .subject("You are invited")
            .body(body.clone())
            .map_err(|e| build(&e))?;
        let transport = transport.clone();
        sends.spawn(async move {
            let _turn = transport.turn().await;
            let send = Instant::now();
            transport.send(message).await.map(|()| send.elapsed())
        });
    }
    let mut busy = Duration::ZERO;
    while let Some(took) = sends.join_next().await {
        // A task ends early only when it panicked.
        busy += took.map_err(|e| MailError::Unreachable(format!("a send stopped: {e}")))??;
    }
    Ok(SmtpBench {
        emails,
        elapsed: started.elapsed(),
        busy,
    })
}
