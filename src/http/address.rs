//! Who the client is: the TCP peer, or the address a trusted proxy forwarded. Limits keyed by
//! address group IPv6 clients by their /64, since one host usually holds a whole /64.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::request::Parts;
use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Arc<Vec<IpNet>>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies(Arc::new(nets))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client behind `peer`: walking `X-Forwarded-For` from the right, each hop is believed
    /// only while the one that reported it is a trusted proxy. An IPv4 address written as IPv6
    /// (`::ffff:10.0.0.1`, as a dual-stack listener sees IPv4 peers) is taken as the IPv4 one,
    /// so that it matches IPv4 proxies and counts with the same address written plainly.
    pub fn client(&self, peer: IpAddr, forwarded_for: &[&str]) -> IpAddr {
        let mut client = peer.to_canonical();
        let hops = forwarded_for
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for hop in hops.into_iter().rev() {
            if !self.contains(client) {
                break;
            }
            match hop.parse::<IpAddr>() {
                Ok(ip) => client = ip.to_canonical(),
                Err(_) => break,
            }
        }
        client
    }
}

/// The address group limits count by: an IPv4 address (a mapped one as itself), or an IPv6
/// /64, since one subscriber or host is usually given a whole /64.
pub fn group(ip: IpAddr) -> IpNet {
    let ip = ip.to_canonical();
    let prefix = match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 64,
    };
    IpNet::new(ip, prefix)
        .map(|net| net.trunc())
        .unwrap_or_else(|_| IpNet::from(ip))
}

/// The client's address group, as [`TrustedProxies::client`] finds it.
pub struct ClientAddr(pub IpNet);

impl<S> FromRequestParts<S> for ClientAddr
where
    TrustedProxies: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let forwarded: Vec<&str> = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let client = TrustedProxies::from_ref(state).client(peer, &forwarded);
        Ok(ClientAddr(group(client)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().expect("net")]);
        let xff = ["203.0.113.7, 10.1.1.1"];
        assert_eq!(proxies.client(ip("10.2.2.2"), &xff), ip("203.0.113.7"));
        assert_eq!(
            proxies.client(ip("198.51.100.1"), &xff),
            ip("198.51.100.1"),
            "an untrusted peer's header is ignored"
        );
        assert_eq!(
            proxies.client(ip("10.2.2.2"), &["6.6.6.6, 203.0.113.7"]),
            ip("203.0.113.7"),
            "a hop added by the client itself is not believed"
        );
        assert_eq!(proxies.client(ip("10.2.2.2"), &["junk"]), ip("10.2.2.2"));
        assert_eq!(
            TrustedProxies::default().client(ip("10.2.2.2"), &xff),
            ip("10.2.2.2")
        );
    }

    #[test]
    fn ipv4_written_as_ipv6_is_the_ipv4_address() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().expect("net")]);
        // A dual-stack listener sees the IPv4 proxy as ::ffff:10.1.2.3.
        let mapped = ip("::ffff:10.1.2.3");
        assert_eq!(proxies.client(mapped, &["203.0.113.9"]), ip("203.0.113.9"));
        assert_eq!(
            proxies.client(ip("10.1.2.3"), &["::ffff:203.0.113.9"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            proxies.client(ip("::ffff:198.51.100.7"), &[]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn ipv6_clients_are_grouped_by_their_64() {
        assert_eq!(
            group(ip("2001:db8:1:2:3:4:5:6")).to_string(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            group(ip("2001:db8:1:2::9")),
            group(ip("2001:db8:1:2:ffff::1"))
        );
        assert_eq!(group(ip("192.0.2.1")).to_string(), "192.0.2.1/32");
    }
}
