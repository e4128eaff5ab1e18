use super::*;

/// A message from `a@example.com` to `b@example.com`.
fn message() -> Message {
    Message::builder()
        .from("a@example.com".parse().expect("from"))
        .to("b@example.com".parse().expect("to"))
        .body(String::from("hello"))
        .expect("message")
}

/// A listener on a free port of the loopback address.
async fn listener() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let addr = listener.local_addr().expect("address");
    (listener, addr)
}

fn parsed(url: &str) -> Server {
    match Server::parse(url) {
        Ok(server) => server,
        Err(e) => panic!("{url}: {e}"),
    }
}

#[test]
fn every_form_of_the_url_reads_as_lettre_read_it() {
    let plain = parsed("smtp://127.0.0.1:2525");
    assert_eq!((plain.host.as_str(), plain.port), ("127.0.0.1", 2525));
    assert!(matches!(plain.security, Security::Plain));
    assert!(plain.credentials.is_none());
    assert_eq!(plain.hello, ClientId::default());
    assert_eq!(parsed("smtp://mail.example.com").port, 25);

    let implicit = parsed("smtps://user:p%40ss%2Bword@smtp.example.com");
    assert_eq!(
        (implicit.host.as_str(), implicit.port),
        ("smtp.example.com", 465)
    );
    assert!(matches!(implicit.security, Security::Implicit(..)));
    assert_eq!(
        implicit.credentials,
        Some(Credentials::new("user".into(), "p@ss+word".into()))
    );

    let required = parsed("smtp://user:password@smtp.example.com:587?tls=required");
    assert_eq!(required.port, 587);
    assert!(matches!(required.security, Security::Required(_)));
    assert!(required.credentials.is_some());
    let opportunistic = parsed("smtp://smtp.example.com?tls=opportunistic");
    assert_eq!(opportunistic.port, 587);
    assert!(matches!(opportunistic.security, Security::Opportunistic(_)));

    // A user without a password is no login; a path names the client in EHLO.
    let named = parsed("smtp://user@[::1]:2525/relay.example.org");
    assert_eq!((named.host.as_str(), named.port), ("::1", 2525));
    assert!(named.credentials.is_none());
    assert_eq!(named.hello, ClientId::Domain("relay.example.org".into()));
}

#[test]
fn a_url_lettre_refused_is_refused() {
    for url in [
        "http://smtp.example.com",
        "smtp://smtp.example.com?tls=always",
        "smtp:relay",
        "smtp.example.com:25",
    ] {
        assert!(
            matches!(Server::parse(url), Err(MailError::SmtpUrl(_))),
            "{url} was taken"
        );
    }
}

/// The point of the pool: its sockets send the closing `.` of a message without waiting for
/// the server to acknowledge the body.
#[tokio::test]
async fn the_pool_opens_sockets_that_send_each_write_at_once() {
    let (_listener, addr) = listener().await;
    let server = parsed(&format!("smtp://{addr}"));
    let tcp = server.tcp().await.expect("connection");
    assert!(tcp.nodelay().expect("TCP_NODELAY"));
}

#[tokio::test]
async fn a_server_that_is_not_there_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let message = message();
    let e = pool.send(&message).await.expect_err("sent to nobody");
    assert!(e.is_unreachable() && !e.is_permanent(), "{e}");
}

/// A server that takes `DATA` after refusing the only recipient, against RFC 2920: the send
/// fails on the refusal, and the session, left within a message, is closed rather than reset,
/// since a closing `.` would send an empty message. The next send opens a session of its own.
#[tokio::test]
async fn a_session_left_within_a_message_is_closed_not_reset() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let (listener, addr) = listener().await;
    // What each session received after its `354`.
    let after_data = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let seen = after_data.clone();
    let server = tokio::spawn(async move {
        // Two sessions at most: the test sends twice.
        for _ in 0..2 {
            let (stream, _) = listener.accept().await.expect("accept");
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            write.write_all(b"220 odd ESMTP\r\n").await.expect("greet");
            let mut data: Option<Vec<String>> = None;
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(data) = data.as_mut() {
                    data.push(line);
                    continue;
                }
                let reply: &[u8] = match line.get(..4).map(str::to_ascii_uppercase).as_deref() {
                    Some("EHLO") => b"250-odd\r\n250 PIPELINING\r\n",
                    Some("RCPT") => b"550 no such user\r\n",
                    Some("DATA") => {
                        data = Some(Vec::new());
                        b"354 go ahead anyway\r\n"
                    }
                    _ => b"250 ok\r\n",
                };
                write.write_all(reply).await.expect("reply");
            }
            seen.lock().expect("lock").push(data.unwrap_or_default());
        }
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let message = message();
    for _ in 0..2 {
        let e = pool.send(&message).await.expect_err("a refused recipient");
        assert!(e.is_permanent(), "{e}");
    }
    drop(pool);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("two sessions, each closed")
        .expect("server");
    let after_data = after_data.lock().expect("lock").clone();
    assert_eq!(
        after_data,
        vec![Vec::<String>::new(); 2],
        "a message went on"
    );
}
