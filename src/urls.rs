//! Links built from or checked against untrusted text: one URL component percent-encoded, and
//! the links emails may carry (`https`, or `http` to a loopback host for local setups).

use std::net::IpAddr;

use url::{Host, Url};

/// The longest link an invite may carry (docs/DESIGN.md §4).
pub const MAX_LINK: usize = 2048;

/// `s` as one URL component (a path segment or a query value): every byte but letters, digits
/// and `-._~` percent-encoded, so no text can add a segment, a query or a fragment.
pub fn component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether a URL's host is this machine (`localhost`, 127.0.0.0/8, `::1`).
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

/// A link an email may carry: absolute, `https` (or `http` to a loopback host), with a host,
/// without user or password, at most [`MAX_LINK`] bytes. The error says what is wrong.
pub fn email_link(raw: &str) -> Result<Url, String> {
    if raw.len() > MAX_LINK {
        return Err(format!("must be at most {MAX_LINK} bytes"));
    }
    let url = Url::parse(raw).map_err(|e| format!("must be an absolute URL ({e})"))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(&url) => {}
        "http" => return Err("must use https (http only for loopback hosts)".into()),
        _ => return Err("must be an https URL".into()),
    }
    match url.host() {
        None | Some(Host::Domain("")) => return Err("must name a host".into()),
        // What a DNS name can be (IDNA has made it ASCII): anything else is no host an email
        // could reach, and would be repeated in the hint that names the app's link hosts.
        Some(Host::Domain(name))
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) =>
        {
            return Err("must name a host of letters, digits, hyphens and dots".into());
        }
        Some(_) => {}
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password".into());
    }
    Ok(url)
}

/// The host of a checked link as apps list them: lower case, IDNA-encoded, no port.
pub fn host_of(url: &Url) -> String {
    url.host_str().unwrap_or_default().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_cannot_add_structure() {
        assert_eq!(component("doc 42/../x?y#z"), "doc%2042%2F..%2Fx%3Fy%23z");
        assert_eq!(component("a-b.c_d~"), "a-b.c_d~");
        assert_eq!(component("é"), "%C3%A9");
    }

    #[test]
    fn email_links_are_https_or_loopback() {
        assert!(email_link("https://app.example/i/1").is_ok());
        assert!(email_link("http://127.0.0.1:3000/i/1").is_ok());
        assert!(email_link("http://localhost/i").is_ok());
        assert!(email_link("http://[::1]/i").is_ok());
        for bad in [
            "http://app.example/i",
            "javascript:alert(1)",
            "ftp://app.example/",
            "https://user:pw@app.example/",
            "/relative",
            "https://",
        ] {
            assert!(email_link(bad).is_err(), "{bad}");
        }
        assert!(email_link(&format!("https://a.example/{}", "x".repeat(MAX_LINK))).is_err());
        let idn = email_link("https://BÜCHER.example/x").expect("idn");
        assert_eq!(host_of(&idn), "xn--bcher-kva.example");
    }
}
