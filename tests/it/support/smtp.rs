//! A real SMTP server on 127.0.0.1 that keeps every message it receives: what the outbox sends
//! crosses a socket and the protocol, as it would to a mail server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

#[derive(Debug, Clone)]
pub struct Received {
    pub to: Vec<String>,
    /// The message as sent (headers and body), dot-unstuffed.
    pub data: String,
}

impl Received {
    /// The message with quoted-printable undone (soft line breaks joined, `=XX` decoded): the
    /// text a mail client shows, for looking up links and phrases.
    pub fn text(&self) -> String {
        let bytes = self.data.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'=' {
                if bytes[i + 1..].starts_with(b"\r\n") {
                    i += 3;
                    continue;
                }
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .filter(|h| {
                        h.bytes()
                            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())
                    })
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(byte) = hex {
                    out.push(byte);
                    i += 3;
                    continue;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The value of header `name` (the first one), unfolded.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next()?;
        let unfolded = head.replace("\r\n ", " ").replace("\r\n\t", " ");
        let prefix = format!("{}:", name.to_ascii_lowercase());
        unfolded.split("\r\n").find_map(|line| {
            line.to_ascii_lowercase()
                .starts_with(&prefix)
                .then(|| line[prefix.len()..].trim().to_owned())
        })
    }
}

pub struct SmtpSink {
    pub addr: SocketAddr,
    messages: Arc<Mutex<Vec<Received>>>,
    /// Connections open now, the most that were open at once, and all that were opened.
    sessions: Arc<Mutex<(usize, usize, usize)>>,
    behaviour: Arc<Behaviour>,
    task: JoinHandle<()>,
}

impl SmtpSink {
    pub async fn start() -> SmtpSink {
        Self::start_on(0).await
    }

    /// On a given port (to bring a sink back where a stopped one was).
    pub async fn start_on(port: u16) -> SmtpSink {
        Self::start_refusing(port, &[]).await
    }

    /// A sink that refuses these recipients for good (550), as a mail server refuses an
    /// unknown mailbox.
    pub async fn start_refusing(port: u16, refused: &[&str]) -> SmtpSink {
        Self::serve(port, Behaviour::refusing(refused)).await
    }

    /// A sink that refuses these recipients, and keeps each message it receives, then waits
    /// for a permit from `gate` before it answers that the message was taken: the sender is
    /// left waiting, as on a slow server.
    pub async fn start_holding(refused: &[&str], gate: Arc<Semaphore>) -> SmtpSink {
        Self::serve(
            0,
            Behaviour {
                gate: Some(gate),
                ..Behaviour::refusing(refused)
            },
        )
        .await
    }

    /// A sink that keeps each message, then takes `delay` before it answers that the message
    /// was taken, as a slow mail server does: sends are in flight for that long.
    pub async fn start_slow(delay: Duration) -> SmtpSink {
        Self::serve(
            0,
            Behaviour {
                delay,
                ..Behaviour::refusing(&[])
            },
        )
        .await
    }

    /// A sink that answers the `deferred` recipients "try again later" (451), and closes the
    /// connection without a word at the `dropped` ones, every time.
    pub async fn start_deferring(deferred: &[&str], dropped: &[&str]) -> SmtpSink {
        let list = |names: &[&str]| names.iter().map(|r| r.to_string()).collect();
        Self::serve(
            0,
            Behaviour {
                deferred: list(deferred),
                dropped: list(dropped),
                ..Behaviour::refusing(&[])
            },
        )
        .await
    }

    /// A relay that refuses the sending address for good (`550 5.7.1`), as one does whose
    /// credentials or sender domain are not set up (nothing about any recipient), until
    /// [`SmtpSink::accept_the_sender`].
    pub async fn start_refusing_the_sender() -> SmtpSink {
        Self::serve(
            0,
            Behaviour {
                refuse_sender: AtomicBool::new(true),
                ..Behaviour::refusing(&[])
            },
        )
        .await
    }

    /// A server that does not offer PIPELINING (every command waits for its reply), and
    /// refuses these recipients for good.
    pub async fn start_without_pipelining(refused: &[&str]) -> SmtpSink {
        Self::serve(
            0,
            Behaviour {
                pipelining: false,
                ..Behaviour::refusing(refused)
            },
        )
        .await
    }

    /// The `MAIL` commands that came with the rest of their group, up to `DATA`, already sent
    /// (pipelined).
    pub fn pipelined_mails(&self) -> usize {
        self.behaviour.pipelined.load(Ordering::Relaxed)
    }

    /// The relay is set up: the sending address is accepted from now on.
    pub fn accept_the_sender(&self) {
        self.behaviour.refuse_sender.store(false, Ordering::Relaxed);
    }

    async fn serve(port: u16, behaviour: Behaviour) -> SmtpSink {
        let behaviour = Arc::new(behaviour);
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind sink");
        let addr = listener.local_addr().expect("sink address");
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sessions = Arc::new(Mutex::new((0, 0, 0)));
        let (store, open, shared) = (messages.clone(), sessions.clone(), behaviour.clone());
        // The sessions are the accept task's own, so that they end with it.
        let task = tokio::spawn(async move {
            let mut tasks = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                while tasks.try_join_next().is_some() {}
                let (store, behaviour, open) = (store.clone(), shared.clone(), open.clone());
                tasks.spawn(async move {
                    {
                        let mut open = open.lock().expect("sessions lock");
                        open.0 += 1;
                        open.1 = open.1.max(open.0);
                        open.2 += 1;
                    }
                    let _ = session(stream, store, &behaviour).await;
                    open.lock().expect("sessions lock").0 -= 1;
                });
            }
        });
        SmtpSink {
            addr,
            messages,
            sessions,
            behaviour,
            task,
        }
    }

    /// Stops as a restarted mail server does: when this returns the port is free again, and the
    /// sessions it had are closed.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    pub fn messages(&self) -> Vec<Received> {
        self.messages.lock().expect("sink lock").clone()
    }

    /// The most connections that were open at once.
    pub fn peak_sessions(&self) -> usize {
        self.sessions.lock().expect("sessions lock").1
    }

    /// Every connection that was opened.
    pub fn sessions_opened(&self) -> usize {
        self.sessions.lock().expect("sessions lock").2
    }
}

/// How a sink answers.
struct Behaviour {
    /// Recipients refused at `RCPT TO` (550).
    refused: Vec<String>,
    /// Recipients told to try again later at `RCPT TO` (451), as a throttling relay does.
    deferred: Vec<String>,
    /// Recipients at whose `RCPT TO` the connection is closed without a reply.
    dropped: Vec<String>,
    /// Each message is answered once a permit is taken from it.
    gate: Option<Arc<Semaphore>>,
    /// `MAIL FROM` is refused (550 5.7.1).
    refuse_sender: AtomicBool,
    /// Each message is answered this long after it is kept.
    delay: Duration,
    /// PIPELINING is offered (as Postfix offers it).
    pipelining: bool,
    /// See [`SmtpSink::pipelined_mails`].
    pipelined: AtomicUsize,
}

impl Behaviour {
    fn refusing(refused: &[&str]) -> Behaviour {
        Behaviour {
            refused: refused.iter().map(|r| r.to_string()).collect(),
            deferred: Vec::new(),
            dropped: Vec::new(),
            gate: None,
            refuse_sender: AtomicBool::new(false),
            delay: Duration::ZERO,
            pipelining: true,
            pipelined: AtomicUsize::new(0),
        }
    }
}

/// Stops accepting connections, and ends the open sessions.
impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn session(
    stream: TcpStream,
    store: Arc<Mutex<Vec<Received>>>,
    behaviour: &Behaviour,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 sink ESMTP\r\n").await?;
    let mut to = Vec::new();
    // A transaction is open: `MAIL` was accepted, and no `RSET` or `EHLO` has ended it since.
    let mut mail = false;
    // Bounded by the client closing the connection.
    while let Some(line) = lines.next_line().await? {
        let upper = line.to_ascii_uppercase();
        if upper.starts_with("EHLO") {
            let offer: &[u8] = if behaviour.pipelining {
                b"250-sink\r\n250-PIPELINING\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n"
            } else {
                b"250-sink\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n"
            };
            (mail, to) = (false, Vec::new());
            write.write_all(offer).await?;
        } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
            write.write_all(b"250 ok\r\n").await?;
        } else if upper.starts_with("RSET") {
            (mail, to) = (false, Vec::new());
            write.write_all(b"250 ok\r\n").await?;
        } else if upper.starts_with("MAIL FROM:") && mail {
            // As a server does: a transaction is ended by its message or by `RSET`.
            write
                .write_all(b"503 5.5.1 nested MAIL command\r\n")
                .await?;
        } else if upper.starts_with("MAIL FROM:") {
            let buffered = lines.get_ref().buffer();
            if buffered
                .windows(6)
                .any(|w| w.eq_ignore_ascii_case(b"DATA\r\n"))
            {
                behaviour.pipelined.fetch_add(1, Ordering::Relaxed);
            }
            to.clear();
            mail = !behaviour.refuse_sender.load(Ordering::Relaxed);
            if !mail {
                write
                    .write_all(b"550 5.7.1 sender address not authorized\r\n")
                    .await?;
            } else {
                write.write_all(b"250 ok\r\n").await?;
            }
        } else if (upper.starts_with("RCPT TO:") || upper.starts_with("DATA")) && !mail {
            write.write_all(b"503 5.5.1 need MAIL first\r\n").await?;
        } else if upper.starts_with("RCPT TO:") {
            let rcpt = line[8..].trim().trim_matches(['<', '>']).to_owned();
            if behaviour.refused.contains(&rcpt) {
                write.write_all(b"550 no such user\r\n").await?;
            } else if behaviour.dropped.contains(&rcpt) {
                return Ok(());
            } else if behaviour.deferred.contains(&rcpt) {
                write
                    .write_all(b"451 4.7.1 too many messages, try again later\r\n")
                    .await?;
            } else {
                to.push(rcpt);
                write.write_all(b"250 ok\r\n").await?;
            }
        } else if upper.starts_with("DATA") && to.is_empty() {
            // As RFC 2920 asks of a server: a client that pipelined DATA after refused
            // recipients must not have its next lines taken as a message.
            write.write_all(b"554 no valid recipients\r\n").await?;
        } else if upper.starts_with("DATA") {
            write.write_all(b"354 go ahead\r\n").await?;
            let mut data = String::new();
            // A message cut off before its `.` is not taken.
            loop {
                let Some(l) = lines.next_line().await? else {
                    return Ok(());
                };
                if l == "." {
                    break;
                }
                data.push_str(
                    l.strip_prefix('.')
                        .filter(|_| l.starts_with(".."))
                        .unwrap_or(&l),
                );
                data.push_str("\r\n");
            }
            // The message ends the transaction: the next one starts with its own MAIL.
            mail = false;
            store.lock().expect("sink lock").push(Received {
                to: std::mem::take(&mut to),
                data,
            });
            if let Some(gate) = &behaviour.gate {
                gate.acquire().await.expect("open gate").forget();
            }
            if !behaviour.delay.is_zero() {
                tokio::time::sleep(behaviour.delay).await;
            }
            write.write_all(b"250 queued\r\n").await?;
        } else if upper.starts_with("QUIT") {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else {
            write.write_all(b"502 not implemented\r\n").await?;
        }
    }
    Ok(())
}
