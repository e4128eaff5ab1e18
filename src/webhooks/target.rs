//! Where a webhook may go: the form of its URL, and the addresses its host may connect to.
//!
//! The same checks run when an app is saved ([`check_url`]) and at every delivery: the form and
//! IP-literal hosts in [`check_form`], host names in [`CheckedResolver`], the only resolver the
//! delivery client has, so it can only ever connect to an address that passed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::WebhookError;

const MAX_URL: usize = 2048;
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Addresses of one name looked at; a name with more is judged on these.
const MAX_ADDRS: usize = 64;

/// What an address is, for a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// On the internet.
    Public,
    /// Inside some network: allowed only with `allow_private`.
    Internal(&'static str),
    /// Never a receiver, whatever the settings.
    Never(&'static str),
}

use Reach::{Internal, Never};

const PRIVATE: Reach = Internal("a private address");
const DOCS: Reach = Never("a documentation address");

/// IPv4 special-purpose blocks; the first match wins (broadcast before 240/4).
const V4: &[(Ipv4Addr, u8, Reach)] = &[
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        Never("an unspecified address"),
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, PRIVATE),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        Internal("a shared (CGNAT) address"),
    ),
    (
        Ipv4Addr::new(127, 0, 0, 0),
        8,
        Internal("a loopback address"),
    ),
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        Internal("a link-local address"),
    ),
    (Ipv4Addr::new(172, 16, 0, 0), 12, PRIVATE),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        Never("an IETF protocol address"),
    ),
    (Ipv4Addr::new(192, 0, 2, 0), 24, DOCS),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        Never("a 6to4 relay address"),
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, PRIVATE),
    (
        Ipv4Addr::new(198, 18, 0, 0),
        15,
        Never("a benchmarking address"),
    ),
    (Ipv4Addr::new(198, 51, 100, 0), 24, DOCS),
    (Ipv4Addr::new(203, 0, 113, 0), 24, DOCS),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Never("a multicast address")),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        Never("the broadcast address"),
    ),
    (Ipv4Addr::new(240, 0, 0, 0), 4, Never("a reserved address")),
];

const fn v6(a: u16, b: u16, c: u16) -> Ipv6Addr {
    Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0)
}

/// IPv6 special-purpose blocks, after IPv4-mapped and NAT64 addresses (judged by the IPv4
/// address inside); the first match wins. Outside these, only 2000::/3 is global unicast.
const V6: &[(Ipv6Addr, u8, Reach)] = &[
    (Ipv6Addr::UNSPECIFIED, 128, Never("an unspecified address")),
    (Ipv6Addr::LOCALHOST, 128, Internal("a loopback address")),
    (v6(0, 0, 0), 96, Never("an IPv4-compatible address")),
    (v6(0x64, 0xff9b, 1), 48, Internal("a local NAT64 address")),
    (v6(0x100, 0, 0), 64, Never("a discard-only address")),
    (v6(0x2001, 0x2, 0), 48, Never("a benchmarking address")),
    (v6(0x2001, 0, 0), 23, Never("an IETF protocol address")),
    (v6(0x2001, 0xdb8, 0), 32, DOCS),
    (v6(0x2002, 0, 0), 16, Never("a 6to4 address")),
    (v6(0x3fff, 0, 0), 20, DOCS),
    (v6(0x5f00, 0, 0), 16, Never("a segment-routing address")),
    (
        v6(0xfc00, 0, 0),
        7,
        Internal("a unique-local (private) address"),
    ),
    (v6(0xfe80, 0, 0), 10, Internal("a link-local address")),
    (v6(0xfec0, 0, 0), 10, Never("a site-local address")),
    (v6(0xff00, 0, 0), 8, Never("a multicast address")),
];

fn in_v4(ip: Ipv4Addr, net: Ipv4Addr, prefix: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net)
}

pub(super) fn classify(ip: IpAddr) -> Reach {
    match ip {
        IpAddr::V4(ip) => V4
            .iter()
            .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
            .map_or(Reach::Public, |(_, _, reach)| *reach),
        IpAddr::V6(ip) => {
            if let Some(inner) = ip.to_ipv4_mapped() {
                return classify(IpAddr::V4(inner));
            }
            // The well-known NAT64 prefix: the connection goes on to the IPv4 address inside.
            if in_v6(ip, v6(0x64, 0xff9b, 0), 96) {
                let [.., a, b, c, d] = ip.octets();
                return classify(IpAddr::V4(Ipv4Addr::new(a, b, c, d)));
            }
            if let Some((_, _, reach)) = V6.iter().find(|(net, p, _)| in_v6(ip, *net, *p)) {
                return *reach;
            }
            if in_v6(ip, v6(0x2000, 0, 0), 3) {
                Reach::Public
            } else {
                Never("not a global unicast address")
            }
        }
    }
}

/// Whether a webhook may connect to `ip`; the refusal's reason when not.
fn allowed(ip: IpAddr, allow_private: bool) -> Result<(), &'static str> {
    match classify(ip) {
        Reach::Public => Ok(()),
        Internal(_) if allow_private => Ok(()),
        Internal(reason) | Never(reason) => Err(reason),
    }
}

/// A host as it appears in a parsed URL: an IP literal (IPv6 in brackets) or a name.
fn literal_ip(host: &str) -> Option<IpAddr> {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(inner) => inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        // The URL parser writes every IPv4 form (decimal, hex, octal) as a dotted quad.
        None => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

/// Checks what can be checked without DNS: the scheme, no credentials, a host, and an IP-literal
/// host's address. Returns the host name still to resolve, if the host is a name.
pub(super) fn check_form(url: &Url, allow_private: bool) -> Result<Option<String>, WebhookError> {
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        other => return Err(WebhookError::Scheme(other.to_owned())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(WebhookError::Credentials);
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or(WebhookError::NoHost)?;
    match literal_ip(host) {
        Some(addr) => {
            allowed(addr, allow_private)
                .map_err(|reason| WebhookError::RefusedAddress { addr, reason })?;
            Ok(None)
        }
        None => Ok(Some(host.to_owned())),
    }
}

/// Resolves a host name and checks every address: one refused address refuses the name, so a
/// name cannot mix a public address with an internal one.
pub(super) async fn resolve_checked(
    host: &str,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, WebhookError> {
    let resolve_error = |error: String| WebhookError::Resolve {
        host: host.to_owned(),
        error,
    };
    let addrs: Vec<SocketAddr> =
        tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, 0)))
            .await
            .map_err(|_| resolve_error(format!("no answer within {RESOLVE_TIMEOUT:?}")))?
            .map_err(|e| resolve_error(e.to_string()))?
            .take(MAX_ADDRS)
            .collect();
    if addrs.is_empty() {
        return Err(WebhookError::NoAddress(host.to_owned()));
    }
    for a in &addrs {
        allowed(a.ip(), allow_private).map_err(|reason| WebhookError::RefusedHost {
            host: host.to_owned(),
            addr: a.ip(),
            reason,
        })?;
    }
    Ok(addrs)
}

/// Checks a webhook URL when an app is saved: its form, then every address its host resolves
/// to. Returns the parsed URL, to be stored as written by it.
pub async fn check_url(url: &str, allow_private: bool) -> Result<Url, WebhookError> {
    let url = url.trim();
    if url.len() > MAX_URL {
        return Err(WebhookError::UrlTooLong(MAX_URL));
    }
    let url = Url::parse(url).map_err(|e| WebhookError::InvalidUrl(e.to_string()))?;
    if let Some(host) = check_form(&url, allow_private)? {
        resolve_checked(&host, allow_private).await?;
    }
    Ok(url)
}

/// The delivery client's resolver: a name resolves only to addresses that pass the check, in
/// the same lookup the connection uses, so DNS changing in between cannot slip one past.
pub(super) struct CheckedResolver {
    pub(super) allow_private: bool,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs = resolve_checked(name.as_str(), allow_private).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;
