use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("a test address")
}

#[test]
fn internal_addresses_are_classified_as_such() {
    for a in [
        "127.0.0.1",
        "127.255.0.9",
        "::1",
        "10.0.0.1",
        "10.255.255.255",
        "172.16.0.1",
        "172.31.255.254",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "100.127.255.255",
        "fe80::1",
        "febf::1",
        "fc00::1",
        "fd12:3456::1",
        "::ffff:127.0.0.1",
        "::ffff:10.1.2.3",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::127.0.0.1",
    ] {
        assert!(matches!(classify(ip(a)), Reach::Internal(_)), "{a}");
        assert!(allowed(ip(a), false).is_err(), "{a}");
        assert!(allowed(ip(a), true).is_ok(), "{a} with allow_private");
    }
}

#[test]
fn unusable_addresses_are_refused_even_with_allow_private() {
    for a in [
        "0.0.0.0",
        "0.1.2.3",
        "::",
        "255.255.255.255",
        "240.0.0.1",
        "224.0.0.1",
        "239.255.255.250",
        "192.0.2.10",
        "198.51.100.7",
        "203.0.113.200",
        "198.18.0.1",
        "198.19.255.255",
        "192.0.0.8",
        "::ffff:0.0.0.0",
        "::ffff:224.0.0.1",
        "::127.0.0.1",
        "ff02::1",
        "2001:db8::1",
        "3fff::1",
        "2001::1",
        "2002:7f00:1::1",
        "100::1",
        "fec0::1",
        "4000::1",
    ] {
        assert!(matches!(classify(ip(a)), Reach::Never(_)), "{a}");
        assert!(allowed(ip(a), true).is_err(), "{a}");
    }
}

#[test]
fn public_addresses_are_allowed() {
    for a in [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.215.14",
        "172.15.255.255",
        "172.32.0.1",
        "100.63.255.255",
        "100.128.0.1",
        "192.167.255.255",
        "169.253.0.1",
        "198.20.0.1",
        "11.0.0.1",
        "223.255.255.254",
        "2606:4700:4700::1111",
        "2a00:1450:4001::1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ] {
        assert_eq!(classify(ip(a)), Reach::Public, "{a}");
        assert!(allowed(ip(a), false).is_ok(), "{a}");
    }
}

fn refusal(result: Result<Url, WebhookError>) -> String {
    match result {
        Ok(url) => panic!("{url} should be refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn check_url_refuses_what_is_not_a_public_https_url() {
    let cases = [
        ("http://example.com/hook", "https"),
        ("ftp://example.com/hook", "https"),
        ("https://user:pw@example.com/hook", "user name or password"),
        ("https://user@example.com/hook", "user name or password"),
        ("https://localhost/hook", "loopback"),
        ("https://localhost:8443/hook", "loopback"),
        ("https://127.0.0.1/hook", "loopback"),
        ("https://2130706433/hook", "loopback"),
        ("https://0x7f.1/hook", "loopback"),
        ("https://[::1]/hook", "loopback"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://10.1.2.3/hook", "private"),
        ("https://169.254.169.254/latest", "link-local"),
        ("https://[fd00::1]/hook", "unique-local"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("not a url", "not a valid URL"),
        ("https://", "not a valid URL"),
    ];
    for (url, expected) in cases {
        let message = refusal(check_url(url, false).await);
        assert!(message.contains(expected), "{url}: {message}");
    }
    let long = format!("https://example.com/{}", "a".repeat(MAX_URL));
    assert!(refusal(check_url(&long, false).await).contains("longer"));
}

#[tokio::test]
async fn check_url_allows_internal_receivers_and_http_with_allow_private() {
    for url in [
        "http://127.0.0.1:9000/hook",
        "https://[::1]/hook",
        "http://localhost:8080/hook",
        "https://10.0.0.7/hook",
    ] {
        let checked = check_url(url, true)
            .await
            .expect("allowed with allow_private");
        assert_eq!(checked.as_str(), url);
    }
    // Never a receiver, whatever the setting.
    for url in [
        "http://0.0.0.0/",
        "http://255.255.255.255/",
        "http://[ff02::1]/",
    ] {
        assert!(check_url(url, true).await.is_err(), "{url}");
    }
    assert!(check_url("ftp://127.0.0.1/", true).await.is_err());
}

#[tokio::test]
async fn check_url_accepts_a_public_ip_literal_without_dns() {
    let url = check_url(" https://93.184.215.14:8443/hooks/in?x=1 ", false)
        .await
        .expect("a public address");
    assert_eq!(url.as_str(), "https://93.184.215.14:8443/hooks/in?x=1");
}

#[tokio::test]
async fn the_resolver_refuses_a_name_with_an_internal_address() {
    let resolver = CheckedResolver {
        allow_private: false,
    };
    let name: Name = "localhost".parse().expect("a name");
    let Err(e) = resolver.resolve(name).await else {
        panic!("localhost must not resolve for a webhook");
    };
    let e = e
        .downcast_ref::<WebhookError>()
        .expect("the refusal is a WebhookError");
    assert!(e.to_string().contains("loopback"), "{e}");
    let allowing = CheckedResolver {
        allow_private: true,
    };
    let addrs: Vec<SocketAddr> = allowing
        .resolve("localhost".parse().expect("a name"))
        .await
        .expect("allowed with allow_private")
        .collect();
    assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
}
