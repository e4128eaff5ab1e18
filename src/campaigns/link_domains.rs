//! The link domains of an invite (docs/DESIGN.md §3d): the registrable domains its text links
//! to, which a `link_domain` rule counts senders per. Pure: the links come from
//! [`crate::signals::links`].

use std::borrow::Cow;
use std::net::IpAddr;

use crate::signals::links::{self, LinkKind};

/// Link domains counted per invite: the first ones found. More would let one invite touch
/// many keys, and a campaign's domain is in its first links anyway.
pub const MAX_LINK_DOMAINS: usize = 4;

/// Each distinct registrable domain that the texts link to by a URL or a bare domain, at most
/// [`MAX_LINK_DOMAINS`] (the first found), sorted. The domain of an email address is not one
/// (every message that names a webmail address would count the webmail), and neither is the
/// registrable domain of one of the app's own link hosts.
pub fn link_domains<'a>(
    texts: impl IntoIterator<Item = Option<&'a str>>,
    app_link_hosts: &[String],
) -> Vec<String> {
    let own: Vec<String> = app_link_hosts
        .iter()
        .map(|h| registrable_domain(h).into_owned())
        .collect();
    let mut found: Vec<String> = Vec::new();
    let links = texts
        .into_iter()
        .flatten()
        .flat_map(links::find_read)
        .filter(|l| l.kind != LinkKind::Email);
    for link in links {
        let domain = registrable_domain(&link.host).into_owned();
        if !own.contains(&domain) && !found.contains(&domain) {
            found.push(domain);
            if found.len() == MAX_LINK_DOMAINS {
                break;
            }
        }
    }
    found.sort();
    found
}

/// The registrable domain of a host as the link scanner returns it (lower case): IDNA-encoded
/// like an app's link hosts, cut to one label below its public suffix
/// (`share.evil.example.co.uk` → `example.co.uk`). A host with no such domain (an IP address,
/// a name under no known suffix, a suffix itself) is its own.
pub fn registrable_domain(host: &str) -> Cow<'_, str> {
    let host = host.trim_end_matches('.');
    if host.parse::<IpAddr>().is_ok() {
        return Cow::Borrowed(host);
    }
    if host.is_ascii() {
        return Cow::Borrowed(psl::domain_str(host).unwrap_or(host));
    }
    let ascii = idna::domain_to_ascii(host).unwrap_or_else(|_| host.to_owned());
    Cow::Owned(psl::domain_str(&ascii).unwrap_or(&ascii).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domains(text: &str, hosts: &[&str]) -> Vec<String> {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        link_domains([Some(text)], &hosts)
    }

    #[test]
    fn registrable_domains_are_cut_below_the_public_suffix() {
        assert_eq!(
            registrable_domain("share.evil.example.co.uk"),
            "example.co.uk"
        );
        assert_eq!(registrable_domain("www.scam.com"), "scam.com");
        assert_eq!(registrable_domain("203.0.113.7"), "203.0.113.7");
        assert_eq!(registrable_domain("2001:db8::1"), "2001:db8::1");
        assert_eq!(registrable_domain("bücher.de"), "xn--bcher-kva.de");
    }

    #[test]
    fn email_domains_do_not_count() {
        assert!(domains("write to ana.lima@gmail.com or bob@mail.example.org", &[]).is_empty());
        assert_eq!(
            domains("ana@gmail.com, see gmail.com/offer", &[]),
            ["gmail.com"],
            "a link to the same domain still counts"
        );
    }

    #[test]
    fn the_apps_own_link_hosts_do_not_count() {
        let text = "Open https://share.drawbox.example/d/42 or https://drawbox.example, \
                    then claim at https://prize.scam.com/x";
        assert_eq!(domains(text, &["drawbox.example"]), ["scam.com"]);
        assert_eq!(
            domains(text, &["app.drawbox.example"]),
            ["scam.com"],
            "a sibling of the app's host shares its registrable domain"
        );
        assert_eq!(domains(text, &[]), ["drawbox.example", "scam.com"]);
    }

    #[test]
    fn disguised_links_count() {
        assert_eq!(domains("go to scam[.]com now", &[]), ["scam.com"]);
        assert_eq!(domains("hxxps://a.b.scam.net/claim", &[]), ["scam.net"]);
        assert_eq!(domains("visit scam dot org today", &[]), ["scam.org"]);
        assert_eq!(domains("ｗｗｗ．scam．com", &[]), ["scam.com"]);
    }

    #[test]
    fn at_most_four_distinct_domains_the_first_ones_sorted() {
        let text = "e.com d.com d.com/x www.d.com c.com b.com a.com";
        assert_eq!(domains(text, &[]), ["b.com", "c.com", "d.com", "e.com"]);
        let both = link_domains([Some("z.com"), None, Some("y.com z.com")], &[]);
        assert_eq!(both, ["y.com", "z.com"], "over all texts, each once");
    }
}
