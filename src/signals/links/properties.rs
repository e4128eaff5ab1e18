//! Properties of the scanner over generated text: its ranges are sound, its early answer
//! agrees with the full search, and its shortcuts lose nothing.

use super::*;
use proptest::prelude::*;

/// Fragments that exercise the scanner's branches when glued together.
fn tricky_text() -> impl Strategy<Value = String> {
    let fragments = prop::sample::select(vec![
        "http",
        "hxxps",
        "ftp",
        "://",
        "[:]//",
        ":",
        "/",
        "//",
        "\\\\",
        "www",
        ".",
        "..",
        "[.]",
        "( dot )",
        " dot ",
        "dot",
        "the",
        "com",
        "Com",
        "io",
        "xn--p1ai",
        "@",
        "[at]",
        "\u{ff20}",
        "\u{ff0e}",
        "\u{3002}",
        "\u{ff61}",
        "\u{200b}",
        "\u{ad}",
        "\u{2024}",
        "\u{e9}",
        "\u{4e2d}",
        " ",
        "\t",
        "\n",
        "-",
        "_",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "?",
        "#",
        "8080",
        "a",
        "Z",
        "9",
        "github",
        "co",
        "uk",
        "https://x.io/",
        "scam.com/",
        "www.a/",
        "me@y.org",
    ]);
    prop_oneof![
        any::<String>(),
        prop::collection::vec(fragments, 0..40).prop_map(|v| v.concat()),
    ]
}

/// Lower-case words that are not a public suffix on their own, nor `www`.
fn plain_word() -> impl Strategy<Value = String> {
    "[a-z]{1,10}".prop_filter("word must not be a known suffix", |w| {
        w != "www" && !psl::suffix(w.as_bytes()).is_some_and(|s| s.is_known())
    })
}

/// Title-case words; these may well be TLDs (`Next`, `Com`), but not
/// `Www`, which makes any name a host.
fn title_word() -> impl Strategy<Value = String> {
    ("[A-Z]", "[a-z]{1,9}")
        .prop_map(|(a, b)| a + &b)
        .prop_filter("not www", |w| !w.eq_ignore_ascii_case("www"))
}

fn prose_token() -> impl Strategy<Value = String> {
    prop_oneof![
        plain_word(),
        title_word(),
        "[0-9]{1,4}",
        "[0-9]{1,3}\\.[0-9]{1,3}",
        "[vV][0-9]\\.[0-9]{1,2}\\.[0-9]{1,2}",
        (plain_word(), plain_word()).prop_map(|(a, b)| format!("{a}.{b}")),
        (title_word(), plain_word()).prop_map(|(a, b)| format!("{a}.{b}")),
        (plain_word(), title_word()).prop_map(|(a, b)| format!("{a}.{b}")),
        (title_word(), "[A-Z]{2,3}").prop_map(|(a, b)| format!("{a}.{b}")),
        ("[0-9]{1,2}", plain_word()).prop_map(|(a, b)| format!("{a}.{b}")),
    ]
}

proptest! {
    #[test]
    fn ranges_are_sound(text in tricky_text()) {
        for links in [find(&text), find_read(&text)] {
            let mut previous_end = 0;
            for link in &links {
                prop_assert!(link.start < link.end);
                prop_assert!(link.start >= previous_end);
                prop_assert!(link.end <= text.len());
                prop_assert!(text.is_char_boundary(link.start));
                prop_assert!(text.is_char_boundary(link.end));
                prop_assert!(!link.host.is_empty());
                previous_end = link.end;
            }
        }
    }

    #[test]
    fn has_link_agrees_with_find_read(text in tricky_text()) {
        prop_assert_eq!(has_link(&text), !find_read(&text).is_empty());
    }

    /// The search for runs worth a look only saves time: looking at
    /// every word start finds the same links.
    #[test]
    fn skipping_prose_loses_nothing(text in tricky_text()) {
        let every_word = Scanner {
            full_look_before: usize::MAX,
            ..Scanner::new(&text)
        };
        let expected: Vec<(usize, usize)> = every_word.map(|f| (f.start, f.end)).collect();
        let found: Vec<(usize, usize)> = find(&text).iter().map(|l| (l.start, l.end)).collect();
        prop_assert_eq!(found, expected);
    }

    #[test]
    fn inserted_url_is_found(
        words in prop::collection::vec(tricky_text(), 0..8),
        at in any::<prop::sample::Index>(),
    ) {
        let mut words = words;
        let index = at.index(words.len() + 1);
        words.insert(index, "https://spam.example.com/x".to_string());
        let text = words.join(" ");
        prop_assert!(has_link(&text), "text: {:?}", text);
        prop_assert!(
            find(&text).iter().any(|l| l.host.ends_with("spam.example.com")),
            "text: {:?}",
            text
        );
    }

    #[test]
    fn prose_has_no_link(
        sentences in prop::collection::vec(prop::collection::vec(prose_token(), 1..12), 1..6),
    ) {
        let text = sentences
            .iter()
            .map(|words| words.join(" "))
            .collect::<Vec<_>>()
            .join(". ");
        prop_assert_eq!(find(&text), Vec::new(), "text: {:?}", text);
    }
}
