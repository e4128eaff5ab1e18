//! The HTTP/1 server loop. Unlike `axum::serve`, it bounds how long a client may take to send
//! its headers, and how many connections one client address may hold, so idle or slow sockets
//! cannot take the service from others. HTTP/2 is not spoken: a client that starts its preface
//! is an HTTP/1 client with unfinished headers, cut off by the same deadline.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::address::{TrustedProxies, group};
use super::shares::Shares;

/// How long requests in flight may take to finish once `stop` is cancelled.
const DRAIN: Duration = Duration::from_secs(30);

/// How a listener treats its connections.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Headers must arrive within it.
    pub read_timeout: Duration,
    /// Open connections per client address group; 0: no limit.
    pub per_client: usize,
    /// Exempt from `per_client`: every client behind them shares their address.
    pub trusted: TrustedProxies,
}

/// Serves connections until `stop` is cancelled, then lets requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: Settings,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    // Open connections by client address group.
    let open = Shares::default();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.read_timeout);
    loop {
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let slot = if settings.per_client == 0 || settings.trusted.contains(peer.ip()) {
            None
        } else {
            match open.take(group(peer.ip()), settings.per_client) {
                Some(slot) => Some(slot),
                // Closed at once: this address holds its share already.
                None => continue,
            }
        };
        let service = app
            .clone()
            .layer(axum::Extension(axum::extract::ConnectInfo(peer)));
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(DRAIN) => {
            tracing::warn!("connections still open 30 s after shutdown began; closing");
        }
    }
}
