//! `sendguard healthcheck`: asks a running instance's `/readyz`, for container health checks
//! that need no HTTP client in the image. Exits 0 only on a 200.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Failure;

#[derive(Args)]
pub struct HealthcheckArgs {
    /// The instance's listen address; a wildcard address is asked on loopback.
    #[arg(long, env = "SENDGUARD_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
}

pub async fn run(args: &HealthcheckArgs) -> Result<(), Failure> {
    let mut target = args.listen;
    if target.ip().is_unspecified() {
        target.set_ip(match target.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    let status = tokio::time::timeout(Duration::from_secs(3), ready(target))
        .await
        .map_err(|_| format!("{target} did not answer within 3 s"))??;
    if status != "200" {
        return Err(format!("{target}/readyz answered {status}").into());
    }
    println!("ready");
    Ok(())
}

/// The status code `/readyz` answers with.
async fn ready(target: SocketAddr) -> Result<String, Failure> {
    let mut stream = TcpStream::connect(target).await?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = vec![0u8; 64];
    let n = stream.read(&mut head).await?;
    let line = String::from_utf8_lossy(&head[..n]);
    line.split_whitespace()
        .nth(1)
        .map(str::to_owned)
        .ok_or_else(|| format!("{target} answered no HTTP status").into())
}
