//! Links that must be found, and ordinary text that must not ([`super::properties`] holds
//! the scanner's properties over generated text).

use super::*;

/// The text of the first link, its kind and its host.
fn first(text: &str) -> Option<(&str, LinkKind, String)> {
    let link = find(text).into_iter().next()?;
    Some((&text[link.start..link.end], link.kind, link.host))
}

#[test]
fn finds_spam_phrasings() {
    use LinkKind::{Domain, Email, Url};
    let cases: &[(&str, &str, LinkKind, &str)] = &[
        (
            "Claim your prize at http://scam.example",
            "http://scam.example",
            Url,
            "scam.example",
        ),
        ("visit bit.ly/abc", "bit.ly/abc", Domain, "bit.ly"),
        (
            "go to paypa1-secure[.]com now",
            "paypa1-secure[.]com",
            Domain,
            "paypa1-secure.com",
        ),
        (
            "hxxps://login-verify.net/x",
            "hxxps://login-verify.net/x",
            Url,
            "login-verify.net",
        ),
        (
            "win at freemoney dot com",
            "freemoney dot com",
            Domain,
            "freemoney.com",
        ),
        (
            "contact me at john.doe@gmail.com",
            "john.doe@gmail.com",
            Email,
            "gmail.com",
        ),
        (
            "www.cheap-pills.ru",
            "www.cheap-pills.ru",
            Url,
            "www.cheap-pills.ru",
        ),
        (
            "example\u{ff0e}com",
            "example\u{ff0e}com",
            Domain,
            "example.com",
        ),
        (
            "claim\u{3002}prize\u{3002}com",
            "claim\u{3002}prize\u{3002}com",
            Domain,
            "claim.prize.com",
        ),
        (
            "visit scam\u{ff61}com",
            "scam\u{ff61}com",
            Domain,
            "scam.com",
        ),
        ("t.me/joinchat", "t.me/joinchat", Domain, "t.me"),
        ("CLICK: HTTP://EVIL.COM", "HTTP://EVIL.COM", Url, "evil.com"),
        ("shop.xn--p1ai", "shop.xn--p1ai", Domain, "shop.xn--p1ai"),
        ("site.com/path?x=1", "site.com/path?x=1", Domain, "site.com"),
        ("example(.)com", "example(.)com", Domain, "example.com"),
        ("example{.}com", "example{.}com", Domain, "example.com"),
        (
            "example [dot] com",
            "example [dot] com",
            Domain,
            "example.com",
        ),
        ("example(dot)com", "example(dot)com", Domain, "example.com"),
        (
            "free cash at scam[ . ]biz!",
            "scam[ . ]biz",
            Domain,
            "scam.biz",
        ),
        (
            "get it: hxxp[:]//malware[.]ru/payload.exe",
            "hxxp[:]//malware[.]ru/payload.exe",
            Url,
            "malware.ru",
        ),
        (
            "mirror ftp://files.warez.to/",
            "ftp://files.warez.to/",
            Url,
            "files.warez.to",
        ),
        (
            "Get rich: WWW.QUICKCASH.BIZ",
            "WWW.QUICKCASH.BIZ",
            Url,
            "www.quickcash.biz",
        ),
        (
            "Your account: secure-login.paypal.com.verify-account.xyz",
            "secure-login.paypal.com.verify-account.xyz",
            Domain,
            "secure-login.paypal.com.verify-account.xyz",
        ),
        (
            "log in at https://192.168.4.20:8080/login.",
            "https://192.168.4.20:8080/login",
            Url,
            "192.168.4.20",
        ),
        (
            "write to winner [at] lottery [dot] org",
            "winner [at] lottery [dot] org",
            Email,
            "lottery.org",
        ),
        (
            "Free gift \u{2192} archive.zip",
            "archive.zip",
            Domain,
            "archive.zip",
        ),
        ("Visit Paypal.com today", "Paypal.com", Domain, "paypal.com"),
        ("(see http://x.co/abc).", "http://x.co/abc", Url, "x.co"),
        (
            "\u{8bf7}\u{8bbf}\u{95ee}scam.com",
            "scam.com",
            Domain,
            "scam.com",
        ),
        (
            "link: https://\u{43f}\u{440}\u{438}\u{43c}\u{435}\u{440}.\u{440}\u{444}/a b",
            "https://\u{43f}\u{440}\u{438}\u{43c}\u{435}\u{440}.\u{440}\u{444}/a",
            Url,
            "\u{43f}\u{440}\u{438}\u{43c}\u{435}\u{440}.\u{440}\u{444}",
        ),
        ("hello...scam.com", "scam.com", Domain, "scam.com"),
        ("hosted on github.io", "github.io", Domain, "github.io"),
        (
            "mail sales@shop.co.uk today",
            "sales@shop.co.uk",
            Email,
            "shop.co.uk",
        ),
        (
            "visit PAYPAL-LOGIN.COM",
            "PAYPAL-LOGIN.COM",
            Domain,
            "paypal-login.com",
        ),
        (
            "hxxps[:]//evil[.]com",
            "hxxps[:]//evil[.]com",
            Url,
            "evil.com",
        ),
        (
            "http://admin:pw@bank.example/x",
            "http://admin:pw@bank.example/x",
            Url,
            "bank.example",
        ),
        (
            "Read it at notes.md/raw",
            "notes.md/raw",
            Domain,
            "notes.md",
        ),
        (
            "end of sentence.Next[.]com",
            "sentence.Next[.]com",
            Domain,
            "sentence.next.com",
        ),
        ("scam DOT COM", "scam DOT COM", Domain, "scam.com"),
        ("www\u{e9}scam.com", "scam.com", Domain, "scam.com"),
        ("win.scam.com.", "win.scam.com", Domain, "win.scam.com"),
        ("bad scam[.]Com", "scam[.]Com", Domain, "scam.com"),
        (
            "\u{8bbf}\u{95ee} https://scam.com/a\u{e9}\u{3002}\u{8c22}",
            "https://scam.com/a\u{e9}",
            Url,
            "scam.com",
        ),
    ];
    for &(text, covered, kind, host) in cases {
        assert_eq!(
            first(text),
            Some((covered, kind, host.to_string())),
            "text: {text:?}"
        );
        assert!(has_link(text), "has_link: {text:?}");
    }
    assert!(cases.len() >= 25);
}

/// Characters that draw nothing, and dots that look like full stops, hide no link from the
/// count; text without them is read as it is, with no copy.
#[test]
fn invisible_characters_and_dot_leaders_hide_no_link() {
    for text in [
        "visit evil-site.\u{200b}com today",
        "visit evil-site.c\u{ad}om today",
        "visit evil\u{2060}-site.com today",
        "visit evil-site\u{2024}com today",
        "visit evil-site\u{fe52}com today",
        "visit \u{feff}evil-site.com today",
        "visit evil-site.\u{34f}com today",
        "visit evil-site.c\u{fe0f}om today",
        "visit evil-site.\u{3164}com today",
    ] {
        assert!(has_link(text), "{text:?}");
        assert!(
            find(&as_read(text))
                .iter()
                .any(|l| l.host == "evil-site.com"),
            "{text:?}"
        );
    }
    let text = "see evil-\u{200b}site\u{2024}com now";
    let link = &find_read(text)[0];
    assert_eq!(&text[link.start..link.end], "evil-\u{200b}site\u{2024}com");
    assert_eq!(link.host, "evil-site.com");
    assert!(matches!(as_read("plain text"), Cow::Borrowed(_)));
    assert!(matches!(as_read("caf\u{e9} au lait"), Cow::Borrowed(_)));
    // Joiners inside an emoji sequence change nothing a link could be made of.
    assert!(!has_link("team \u{1f469}\u{200d}\u{1f4bb} at work"));
}

#[test]
fn ignores_ordinary_text() {
    let cases = [
        "v2.0",
        "e.g. this one",
        "i.e. that one",
        "doc_42",
        "report.pdf",
        "file.txt",
        "1.5 hours",
        "Q3.2024",
        "version 3.11.7",
        "Mr. Smith",
        "end of sentence.Next sentence",
        "Join my doc",
        "hello...world",
        "hello..world",
        "pi is 3.14",
        "notes.md",
        "main.rs and script.py and setup.sh",
        "Thanks.Regards",
        "meet at 10 a.m. or 3 p.m.",
        "the U.S.A. office",
        "Ph.D. thesis",
        "room No.1, see fig.3",
        "it costs $3.50",
        "the dot com bubble",
        "ping @john",
        "user@localhost",
        "call 555.123.4567",
        "hello . world",
        "see www",
        "http:// nothing",
        "mail me@work.example",
        "we are done\u{3002}\u{4e2d}\u{56fd}\u{5f88}\u{5927}",
        "a co.uk office",
        "Go to Settings.Profile and press Save.",
        "built with Socket.IO",
    ];
    for text in cases {
        assert_eq!(find(text), Vec::new(), "text: {text:?}");
        assert!(!has_link(text), "has_link: {text:?}");
    }
}

#[test]
fn finds_every_link_in_order() {
    let text = "Hi! Go to scam[.]com, then https://evil.net/a?b=1 or mail x@y.org.";
    let links = find(text);
    let spans: Vec<(&str, &str)> = links
        .iter()
        .map(|l| (&text[l.start..l.end], l.host.as_str()))
        .collect();
    assert_eq!(
        spans,
        [
            ("scam[.]com", "scam.com"),
            ("https://evil.net/a?b=1", "evil.net"),
            ("x@y.org", "y.org"),
        ]
    );
}

#[test]
fn long_labels_are_not_hosts() {
    let long = "a".repeat(MAX_LABEL + 1);
    assert!(!has_link(&format!("{long}.com")));
    assert!(has_link(&format!("{long}.scam.com")));
}

#[test]
fn pathological_input_is_scanned_whole() {
    // Each of these is 100 KB; a scan that restarts inside a run it has
    // already rejected would take minutes here (the suite's time would show
    // it; `sendguard bench links` measures the common case).
    let texts = [
        "a+", "a.", "b dot ", "dot ", "x@", "x:", "a [", "http://@", "a ",
    ]
    .map(|piece| piece.repeat(100_000 / piece.len()))
    .into_iter()
    .chain([
        "a+".repeat(50_000) + ".b",
        "a-".repeat(50_000) + "@",
        "a".to_string() + &" ".repeat(50_000) + &"(".repeat(50_000),
    ]);
    for text in texts {
        // Only the run of `http://@` holds links (each `@` leads to the next `http`).
        let found = find(&text).len();
        if text.starts_with("http") {
            assert!(found > 1000, "{found} links in a run of `http://@`");
        } else {
            assert_eq!(found, 0, "{:?}", &text[..8]);
        }
    }
}

#[test]
fn the_alphanumeric_bitmap_agrees_with_the_standard_library() {
    for c in (0..0x1000).filter_map(char::from_u32) {
        assert_eq!(text::is_alphanumeric(c), c.is_alphanumeric(), "{c:?}");
    }
}

/// A wide dot or `@` still starts a look for a host (the scanner looks at their lead byte only
/// when a whole wide dot or `@` follows); full-width digits and letters, which share it, are no
/// link.
#[test]
fn full_width_characters_are_not_taken_for_wide_separators() {
    let host = |text: &str| first(text).map(|(_, _, host)| host);
    assert_eq!(
        host("see example\u{ff0e}com today").as_deref(),
        Some("example.com")
    );
    assert_eq!(
        host("mail me at ann\u{ff20}example.com").as_deref(),
        Some("example.com")
    );
    assert_eq!(
        host("call \u{ff11}\u{ff12}\u{ff13} or \u{ff41}\u{ff42}c"),
        None
    );
}
