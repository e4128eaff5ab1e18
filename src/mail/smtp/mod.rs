//! The connections to the SMTP server: a pool of lettre's connections over sockets of our own
//! that send each write at once (`TCP_NODELAY`). lettre writes a message and its closing `.` in
//! two writes; with Nagle's algorithm the `.` waited for the server's delayed acknowledgement,
//! about 40 ms a send however fast the server (docs/PERFORMANCE.md). Where the server offers
//! PIPELINING (RFC 2920), a send writes `MAIL`, `RCPT` and `DATA` at once and reads their
//! replies together: two round trips a message instead of four, each one a wake-up of the
//! service and of the server. A message's transaction, and what a refusal leaves of the session,
//! are [`send`]'s.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use lettre::Message;
use lettre::transport::smtp::authentication::{Credentials, DEFAULT_MECHANISMS};
use lettre::transport::smtp::client::{AsyncSmtpConnection, AsyncTokioStream, TlsParameters};
use lettre::transport::smtp::commands::Ehlo;
use lettre::transport::smtp::extension::ClientId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};

use super::MailError;
use send::deliver;

mod send;

/// How long opening a session (connection, TLS, greeting, EHLO, STARTTLS, AUTH) or a send may
/// take before the server counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A connection idle longer than this is checked with a NOOP before it is used again: servers
/// close idle sessions after a few minutes (RFC 5321 asks for at least 5).
const IDLE_CHECK: Duration = Duration::from_secs(60);

/// How the session is encrypted, from the URL as lettre read it.
enum Security {
    /// `smtp://` without `tls`: none.
    Plain,
    /// `smtp://…?tls=opportunistic`: STARTTLS when the server offers it.
    Opportunistic(TlsParameters),
    /// `smtp://…?tls=required`: STARTTLS, or no session.
    Required(TlsParameters),
    /// `smtps://`: TLS from the first byte.
    Implicit(TlsConnector, ServerName<'static>),
}

/// The server and how to open a session with it.
struct Server {
    host: String,
    port: u16,
    security: Security,
    credentials: Option<Credentials>,
    hello: ClientId,
}

impl Server {
    /// Reads `SENDGUARD_SMTP_URL` as lettre's `from_url` did:
    /// `scheme://user:password@host:port/ehlo-name?tls=…`, the user and password
    /// percent-decoded, credentials only with a password, the EHLO name the machine's hostname
    /// unless a path gives one.
    fn parse(raw: &str) -> Result<Server, MailError> {
        let invalid = |e: &dyn std::fmt::Display| MailError::SmtpUrl(e.to_string());
        let url = url::Url::parse(raw).map_err(|e| invalid(&e))?;
        // An IPv6 address unbracketed, as a socket and a TLS name take it.
        let host = match url.host() {
            Some(url::Host::Domain(name)) => name.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(invalid(&"no host")),
        };
        let tls = url.query_pairs().find(|(k, _)| k == "tls").map(|(_, v)| v);
        let parameters = || TlsParameters::new(host.clone()).map_err(|e| invalid(&e));
        let (port, security) = match (url.scheme(), tls.as_deref()) {
            ("smtp", None) => (25, Security::Plain),
            ("smtp", Some("opportunistic")) => (587, Security::Opportunistic(parameters()?)),
            ("smtp", Some("required")) => (587, Security::Required(parameters()?)),
            ("smtps", _) => {
                let name = ServerName::try_from(host.clone()).map_err(|e| invalid(&e))?;
                let connector = tls_connector().map_err(|e| invalid(&e))?;
                (465, Security::Implicit(connector, name))
            }
            (scheme, tls) => {
                return Err(invalid(&format!(
                    "unknown scheme `{scheme}` or tls `{}`: smtp://, smtp://…?tls=required or smtps://",
                    tls.unwrap_or_default()
                )));
            }
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|e| invalid(&e))
        };
        let credentials = match url.password() {
            Some(password) => Some(Credentials::new(decode(url.username())?, decode(password)?)),
            None => None,
        };
        let hello = match url.path().trim_matches('/') {
            "" => ClientId::default(),
            name => ClientId::Domain(name.to_owned()),
        };
        Ok(Server {
            port: url.port().unwrap_or(port),
            host,
            security,
            credentials,
            hello,
        })
    }

    /// A TCP connection that sends each write at once.
    async fn tcp(&self) -> Result<TcpStream, MailError> {
        let unreachable = |e: io::Error| {
            MailError::Unreachable(format!("connecting to {}:{}: {e}", self.host, self.port))
        };
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(unreachable)?;
        tcp.set_nodelay(true).map_err(unreachable)?;
        Ok(tcp)
    }

    /// A session ready to send: connected, encrypted as the URL says, greeted, authenticated.
    async fn open(&self) -> Result<Session, MailError> {
        let tcp = self.tcp().await?;
        let stream: Box<dyn AsyncTokioStream> = match &self.security {
            Security::Implicit(connector, name) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    MailError::Unreachable(format!("TLS with {}:{}: {e}", self.host, self.port))
                })?;
                Box::new(Tls(tls))
            }
            _ => Box::new(tcp),
        };
        let mut session = AsyncSmtpConnection::connect_with_transport(stream, &self.hello).await?;
        match &self.security {
            Security::Required(tls) => session.starttls(tls.clone(), &self.hello).await?,
            Security::Opportunistic(tls) if session.can_starttls() => {
                session.starttls(tls.clone(), &self.hello).await?;
            }
            _ => {}
        }
        // lettre keeps only the extensions it uses from its EHLO, so the session asks once
        // more (a repeated EHLO only resets the transaction), before AUTH as the first was.
        let offered = session.command(Ehlo::new(self.hello.clone())).await?;
        let pipelining = offered.message().any(|line| {
            line.split_whitespace()
                .next()
                .is_some_and(|word| word.eq_ignore_ascii_case("PIPELINING"))
        });
        if let Some(credentials) = &self.credentials {
            session.auth(DEFAULT_MECHANISMS, credentials).await?;
        }
        Ok(Session {
            conn: session,
            pipelining,
            broken: false,
            answered: false,
            refusals: 0,
        })
    }
}

/// A session with the server, and whether the server takes commands in groups.
struct Session {
    conn: AsyncSmtpConnection,
    pipelining: bool,
    /// Not to be used again: it failed other than by a reply, or was left within a message.
    broken: bool,
    /// The server answered the current send's first command, and not with `421`: the session
    /// was open.
    answered: bool,
    /// Refusals since the session last delivered a message.
    refusals: u32,
}

/// Refusals in a row after which a session is closed rather than kept: a server counts the
/// errors of a session that delivers nothing, and slows its replies, then ends it (Postfix:
/// after 10 and 20 errors; a recipient refused in a pipelined send is two, `RCPT` and `DATA`).
const MAX_REFUSALS: u32 = 3;

/// The TLS of `smtps://` as lettre's own: ring, TLS 1.2 and 1.3, the webpki roots.
fn tls_connector() -> Result<TlsConnector, tokio_rustls::rustls::Error> {
    let roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A TLS stream over our socket, in the form lettre speaks SMTP over.
#[derive(Debug)]
struct Tls(tokio_rustls::client::TlsStream<TcpStream>);

impl AsyncRead for Tls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for Tls {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.get_ref().0.peer_addr()
    }
}

/// Sessions with the SMTP server, at most `connections`: every send holds a turn, and a
/// session is either in a send or idle here. One that broke is dropped, never reused; one that
/// was refused is reset and kept, up to [`MAX_REFUSALS`] in a row.
pub struct Pool {
    server: Server,
    turns: Arc<Semaphore>,
    /// The most recently used last: it is taken first, and the others can age out.
    idle: Mutex<Vec<(Session, Instant)>>,
    connections: usize,
}

impl Pool {
    pub fn new(url: &str, connections: u32) -> Result<Pool, MailError> {
        let connections = connections as usize;
        Ok(Pool {
            server: Server::parse(url)?,
            turns: Arc::new(Semaphore::new(connections)),
            idle: Mutex::new(Vec::with_capacity(connections)),
            connections,
        })
    }

    /// Waits for a turn to send.
    pub async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        // The semaphore is never closed.
        self.turns.clone().acquire_owned().await.ok()
    }

    pub fn connections(&self) -> usize {
        self.connections
    }

    pub async fn send(&self, message: &Message) -> Result<(), MailError> {
        let (envelope, email) = (message.envelope(), message.formatted());
        if let Some(mut session) = self.idle_session().await {
            match deliver(&mut session, envelope, &email).await {
                // A kept session the server closed while it was idle (a restart, its own idle
                // timeout) breaks before any reply, or answers the first command with `421`:
                // the message goes once more on a new session. One that broke later may have
                // had its message taken, and is retried by the outbox like any failed send;
                // a send refused before anything was written (lettre's own path, for a
                // message the server cannot take) keeps its session.
                Err(e @ MailError::Smtp(_))
                    if !session.answered && (e.is_unreachable() || e.is_closing()) => {}
                sent => {
                    self.park(session);
                    return sent;
                }
            }
        }
        let mut session = self.open().await?;
        let sent = deliver(&mut session, envelope, &email).await;
        self.park(session);
        sent
    }

    async fn open(&self) -> Result<Session, MailError> {
        tokio::time::timeout(TIMEOUT, self.server.open())
            .await
            .unwrap_or_else(|_| {
                Err(MailError::Unreachable(format!(
                    "no session with {}:{} within {} s",
                    self.server.host,
                    self.server.port,
                    TIMEOUT.as_secs()
                )))
            })
    }

    /// A kept session, checked with a NOOP when it has been idle for a while.
    async fn idle_session(&self) -> Option<Session> {
        // Bounded by the sessions kept.
        while let Some((mut session, since)) = self.take_idle() {
            if since.elapsed() < IDLE_CHECK
                || tokio::time::timeout(TIMEOUT, session.conn.test_connected())
                    .await
                    .unwrap_or(false)
            {
                return Some(session);
            }
        }
        None
    }

    fn take_idle(&self) -> Option<(Session, Instant)> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Keeps a session for the next send, unless it broke or was refused too often in a row.
    fn park(&self, session: Session) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let usable = !session.broken && !session.conn.has_broken();
        if usable && session.refusals < MAX_REFUSALS && idle.len() < self.connections {
            idle.push((session, Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests;
