//! The HTTP/1 server loop. Unlike `axum::serve`, it bounds how long a client may take to send
//! its headers, so a slow client cannot hold a connection forever.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long requests in flight may take to finish once `stop` is cancelled.
const DRAIN: Duration = Duration::from_secs(30);

/// Serves connections until `stop` is cancelled, then lets requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    read_timeout: Duration,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    loop {
        let (stream, peer) = tokio::select! {
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
        let service = app
            .clone()
            .layer(axum::Extension(axum::extract::ConnectInfo(peer)));
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
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
