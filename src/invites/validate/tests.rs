use super::*;

fn field_of(body: &str) -> Option<&'static str> {
    match parse(body.as_bytes()) {
        Err(InvalidBody::Field { field, .. }) => Some(field),
        _ => None,
    }
}

#[test]
fn a_full_invite_parses() {
    let v = parse(
        br#"{"sender_id":"u_1","recipient":"Ana@Example.com","sender_ip":"203.0.113.9",
             "resource":"doc_42","message":"Join\r\nmy doc","sender_name":"Bo"}"#,
    )
    .expect("valid");
    assert_eq!(v.recipient, "ana@example.com");
    assert_eq!(v.recipient_domain, "example.com");
    assert_eq!(v.message.as_deref(), Some("Join\nmy doc"));
    assert_eq!(v.sender_ip, Some("203.0.113.9".parse().expect("ip")));
}

#[test]
fn each_bad_field_is_named() {
    assert_eq!(field_of(r#"{"recipient":"a@b.co"}"#), Some("sender_id"));
    assert_eq!(field_of(r#"{"sender_id":"u"}"#), Some("recipient"));
    assert_eq!(
        field_of(r#"{"sender_id":7,"recipient":"a@b.co"}"#),
        Some("sender_id")
    );
    assert_eq!(
        field_of(r#"{"sender_id":"","recipient":"a@b.co"}"#),
        Some("sender_id")
    );
    assert_eq!(
        field_of(r#"{"sender_id":"a\nb","recipient":"a@b.co"}"#),
        Some("sender_id")
    );
    assert_eq!(
        field_of(r#"{"sender_id":"u","recipient":"nope"}"#),
        Some("recipient")
    );
    assert_eq!(
        field_of(r#"{"sender_id":"u","recipient":"a@localhost"}"#),
        Some("recipient")
    );
    assert_eq!(
        field_of(r#"{"sender_id":"u","recipient":"a@b.co","sender_ip":"1.2.3"}"#),
        Some("sender_ip")
    );
    assert_eq!(
        field_of(r#"{"sender_id":"u","recipient":"a@b.co","sender_name":"x\r\nBcc: y"}"#),
        Some("sender_name")
    );
    for dots in [".", ".."] {
        assert_eq!(
            field_of(&format!(
                r#"{{"sender_id":"u","recipient":"a@b.co","resource":"{dots}"}}"#
            )),
            Some("resource"),
            "a dot segment in the app's link: {dots}"
        );
    }
    for fine in ["...", "a..b", ".hidden"] {
        let body = format!(r#"{{"sender_id":"u","recipient":"a@b.co","resource":"{fine}"}}"#);
        assert!(parse(body.as_bytes()).is_ok(), "{fine}");
    }
    let long = "x".repeat(2001);
    assert_eq!(
        field_of(&format!(
            r#"{{"sender_id":"u","recipient":"a@b.co","message":"{long}"}}"#
        )),
        Some("message")
    );
}

fn refused(recipient: &str) -> bool {
    let body = serde_json::json!({"sender_id": "u", "recipient": recipient}).to_string();
    field_of(&body) == Some("recipient")
}

#[test]
fn recipients_are_normalised_and_ip_literals_refused() {
    for bad in [
        "ana@[127.0.0.1]",
        "ana@127.0.0.1",
        "ana@[IPv6:::1]",
        "ana@127.1",
        "ana@example.com.",
        "ána@example.com",
        "ana@exa mple.com",
    ] {
        assert!(refused(bad), "{bad}");
    }
    let parse_one = |r: &str| {
        let body = serde_json::json!({"sender_id": "u", "recipient": r}).to_string();
        parse(body.as_bytes()).expect("valid")
    };
    let v = parse_one("Ana@Example.COM");
    assert_eq!(
        (v.recipient.as_str(), v.recipient_domain.as_str()),
        ("ana@example.com", "example.com")
    );
    let v = parse_one("jo@Bücher.example");
    assert_eq!(v.recipient, "jo@xn--bcher-kva.example");
}

#[test]
fn bidi_controls_and_separators_are_refused() {
    let with = |field: &str, value: &str| {
        let mut body = serde_json::json!({"sender_id": "u", "recipient": "a@b.co"});
        body[field] = serde_json::json!(value);
        field_of(&body.to_string())
    };
    assert_eq!(with("sender_name", "Pay\u{202e}lap"), Some("sender_name"));
    assert_eq!(
        with("sender_name", "a\u{2067}b\u{2069}"),
        Some("sender_name")
    );
    assert_eq!(with("resource", "doc\u{2028}x"), Some("resource"));
    assert_eq!(with("sender_id", "u\u{2029}"), Some("sender_id"));
    assert_eq!(with("message", "see \u{202e}fdp.exe"), Some("message"));
    assert_eq!(with("message", "line\nbreaks\tand tabs"), None);
}

proptest::proptest! {
    /// Whatever the validator accepts, lettre can address a message to: an accepted invite
    /// never fails in the outbox for its address.
    #[test]
    fn every_accepted_address_can_be_sent_to(
        local in "[A-Za-z0-9.!#$%&'*+/=?^_`{|}~\"(),:;<>@ü -]{0,24}",
        domain in "[A-Za-z0-9.\\-\\[\\]:ü_]{0,24}",
        raw in ".{0,40}",
    ) {
        for candidate in [format!("{local}@{domain}"), raw.clone()] {
            let body = serde_json::json!({"sender_id": "u", "recipient": candidate}).to_string();
            if let Ok(v) = parse(body.as_bytes()) {
                let mailbox = v.recipient.parse::<lettre::message::Mailbox>();
                proptest::prop_assert!(mailbox.is_ok(), "{} accepted as {}", candidate, v.recipient);
                let built = lettre::Message::builder()
                    .from("a <a@example.com>".parse::<lettre::message::Mailbox>().expect("from"))
                    .to(mailbox.expect("mailbox"))
                    .body(String::new());
                proptest::prop_assert!(built.is_ok(), "{}", v.recipient);
            }
        }
    }
}

/// The characters `char::is_control` refuses, less `allowed`, as a regex class body.
fn control_class(allowed: &[char]) -> String {
    let refused: Vec<u32> = (0..=0x10FFFF)
        .filter_map(char::from_u32)
        .filter(|c| c.is_control() && !allowed.contains(c))
        .map(u32::from)
        .collect();
    let mut class = String::new();
    let mut run = 0;
    while run < refused.len() {
        let first = refused[run];
        let mut last = first;
        while refused.get(run + 1) == Some(&(last + 1)) {
            last += 1;
            run += 1;
        }
        class += &format!("\\u{first:04x}");
        if last > first {
            class += &format!("-\\u{last:04x}");
        }
        run += 1;
    }
    class
}

#[test]
fn the_description_states_the_checks() {
    use utoipa::PartialSchema;
    let schema = serde_json::to_value(Invite::schema()).expect("schema");
    let property = |field: &str| &schema["properties"][field];
    // Unknown fields are refused: the description says so, and lists exactly the known ones.
    assert_eq!(schema["additionalProperties"], false);
    let mut described: Vec<&str> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .map(String::as_str)
        .collect();
    let mut known = FIELDS.to_vec();
    described.sort_unstable();
    known.sort_unstable();
    assert_eq!(described, known);
    for (field, max) in [
        ("sender_id", SENDER_ID_MAX),
        ("recipient", RECIPIENT_MAX),
        ("resource", RESOURCE_MAX),
        ("message", MESSAGE_MAX),
        ("sender_name", SENDER_NAME_MAX),
        ("accept_url", crate::urls::MAX_LINK),
    ] {
        assert_eq!(property(field)["maxLength"], max, "{field}");
    }
    assert_eq!(property("sender_id")["minLength"], 1);
    assert_eq!(
        schema["required"],
        serde_json::json!(["sender_id", "recipient"])
    );
    let single_line = format!("^[^{}]*$", control_class(&[]));
    for field in ["sender_id", "resource", "sender_name"] {
        assert_eq!(property(field)["pattern"], single_line, "{field}");
    }
    let message = format!("^[^{}]*$", control_class(&['\n', '\r', '\t']));
    assert_eq!(property("message")["pattern"], message);
    // Each field the description shows is one `Invite::read` takes under that name.
    let shown = schema["properties"].as_object().expect("properties");
    for field in shown.keys() {
        let mut body = serde_json::json!({"sender_id": "u", "recipient": "a@b.co"});
        body[field] = serde_json::json!(7);
        assert_eq!(field_of(&body.to_string()), Some(field.as_str()), "{field}");
    }
}

#[test]
fn non_objects_are_refused() {
    assert_eq!(parse(b"[1]"), Err(InvalidBody::NotAnObject));
    assert!(matches!(parse(b"{"), Err(InvalidBody::NotJson(_))));
}

/// The field an invite with `sender_name` set to `name` is refused for, if any.
fn name_refused(name: &str) -> Option<&'static str> {
    field_of(
        &serde_json::json!({"sender_id": "u", "recipient": "a@b.co", "sender_name": name})
            .to_string(),
    )
}

#[test]
fn format_characters_are_refused_but_joiners_where_a_script_needs_them() {
    for refused in [
        "a\u{200b}b",
        "a\u{00ad}b",
        "\u{feff}a",
        "a\u{2060}",
        "ab\u{200d}",
        "a\u{200c}b",
        "gb\u{e0073}\u{e0063}\u{e0074}\u{e007f}",
    ] {
        assert_eq!(name_refused(refused), Some("sender_name"), "{refused:?}");
    }
    for allowed in [
        "👩\u{200d}💻",
        "👩🏽\u{200d}💻",
        "می\u{200c}خواهم",
        "क्\u{200d}ष",
        "क्\u{200c}ष",
        // An emoji tag sequence: the flag of Scotland.
        "Ana \u{1f3f4}\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f}",
    ] {
        assert_eq!(name_refused(allowed), None, "{allowed:?}");
    }
}

#[test]
fn names_are_read_as_the_domains_they_imitate() {
    for domain in [
        "PayPal.Com",
        "ＰａｙＰａｌ．ｃｏｍ",
        "paypal . com",
        "paypal .com",
        "paypal·com",
        "paypal,com",
    ] {
        assert_eq!(name_refused(domain), Some("sender_name"), "{domain}");
    }
    for name in [
        "Acme, Inc",
        "Ana, Paris",
        "Dr. Love",
        "J. R. R. Tolkien",
        "Ana,",
    ] {
        assert_eq!(name_refused(name), None, "{name}");
    }
}
