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

/// How a [`scripted`] server answers a command, by its verb (or a message's closing `.`).
type Script = fn(&str) -> Option<&'static [u8]>;

/// A server on `listener` for `sessions` sessions, one after the other, answering each command
/// by `reply` of its first four letters in upper case (`None`: no answer, as a server that
/// hangs; a `421` closes the session after it); after a `354` it takes the message's lines,
/// and answers its closing `.` by `reply(".")` (empty: it closes the connection). Ends with what
/// each session received after its last `354`.
fn scripted(
    listener: tokio::net::TcpListener,
    sessions: usize,
    reply: Script,
) -> tokio::task::JoinHandle<Vec<Vec<String>>> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    tokio::spawn(async move {
        let mut after_data = Vec::new();
        for _ in 0..sessions {
            let (stream, _) = listener.accept().await.expect("accept");
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            write.write_all(b"220 odd ESMTP\r\n").await.expect("greet");
            let mut data: Option<Vec<String>> = None;
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(lines) = data.as_mut() {
                    match reply(&line) {
                        Some(b"") if line == "." => break,
                        Some(answer) if line == "." => {
                            write.write_all(answer).await.expect("reply");
                            data = None;
                        }
                        _ => lines.push(line),
                    }
                    continue;
                }
                let verb = line.get(..4).unwrap_or_default().to_ascii_uppercase();
                if let Some(answer) = reply(&verb) {
                    if answer.starts_with(b"354") {
                        data = Some(Vec::new());
                    }
                    write.write_all(answer).await.expect("reply");
                    if answer.starts_with(b"421") {
                        break;
                    }
                }
            }
            after_data.push(data.unwrap_or_default());
        }
        after_data
    })
}

/// Waits for a [`scripted`] server to have served all its sessions.
async fn served(server: tokio::task::JoinHandle<Vec<Vec<String>>>) -> Vec<Vec<String>> {
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("the sessions the server waited for")
        .expect("server")
}

/// A server that takes `DATA` after refusing the only recipient, against RFC 2920: the send
/// fails on the refusal, and the session, left within a message, is closed rather than reset,
/// since a closing `.` would send an empty message. The next send opens a session of its own.
#[tokio::test]
async fn a_session_left_within_a_message_is_closed_not_reset() {
    let (listener, addr) = listener().await;
    let server = scripted(listener, 2, |verb| match verb {
        "EHLO" => Some(b"250-odd\r\n250 PIPELINING\r\n"),
        "RCPT" => Some(b"550 no such user\r\n"),
        "DATA" => Some(b"354 go ahead anyway\r\n"),
        _ => Some(b"250 ok\r\n"),
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let message = message();
    for _ in 0..2 {
        let e = pool.send(&message).await.expect_err("a refused recipient");
        assert!(e.is_permanent(), "{e}");
    }
    drop(pool);
    assert_eq!(
        served(server).await,
        vec![Vec::<String>::new(); 2],
        "a message went on"
    );
}

/// A session refused again and again is closed after [`MAX_REFUSALS`]: a server slows, then
/// ends, a session that makes many errors and delivers nothing. Four refused sends take two
/// sessions.
#[tokio::test]
async fn a_session_refused_too_often_in_a_row_is_closed() {
    let (listener, addr) = listener().await;
    let server = scripted(listener, 2, |verb| match verb {
        "EHLO" => Some(b"250-odd\r\n250 PIPELINING\r\n"),
        "RCPT" => Some(b"550 no such user\r\n"),
        "DATA" => Some(b"554 no valid recipients\r\n"),
        _ => Some(b"250 ok\r\n"),
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let message = message();
    for _ in 0..=MAX_REFUSALS {
        let e = pool.send(&message).await.expect_err("a refused recipient");
        assert!(e.is_permanent(), "{e}");
    }
    drop(pool);
    served(server).await;
}

/// A refusal read before the server stops answering (here, to `RSET`) is still the send's
/// error: a refused recipient, not an unreachable server.
#[tokio::test]
async fn a_refusal_stays_the_error_when_the_server_then_hangs() {
    let (listener, addr) = listener().await;
    let server = scripted(listener, 1, |verb| match verb {
        "EHLO" => Some(b"250 odd\r\n"),
        "RCPT" => Some(b"550 no such user\r\n"),
        "RSET" => None,
        _ => Some(b"250 ok\r\n"),
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let e = pool
        .send(&message())
        .await
        .expect_err("a refused recipient");
    assert!(e.is_permanent() && !e.is_unreachable(), "{e}");
    drop(pool);
    served(server).await;
}

/// A kept session that breaks after the server answered (here it closes on the message's `.`)
/// is not sent on again at once: the server may have taken the message. Only one closed while
/// idle, before any answer, is.
#[tokio::test]
async fn a_session_that_broke_after_answering_is_not_sent_on_again_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DOTS: AtomicUsize = AtomicUsize::new(0);
    let (listener, addr) = listener().await;
    let server = scripted(listener, 2, |verb| match verb {
        "EHLO" => Some(b"250-odd\r\n250 PIPELINING\r\n"),
        "DATA" => Some(b"354 go ahead\r\n"),
        // The second message's `.` closes the session.
        "." if DOTS.fetch_add(1, Ordering::Relaxed) == 1 => Some(b""),
        "." => Some(b"250 queued\r\n"),
        _ => Some(b"250 ok\r\n"),
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let message = message();
    pool.send(&message).await.expect("the first send");
    let e = pool.send(&message).await.expect_err("sent again at once");
    assert!(e.is_unreachable(), "{e}");
    // The next send opens the second session.
    pool.send(&message).await.expect("the third send");
    drop(pool);
    served(server).await;
}

/// A server that ends a kept session with `421` (Postfix does so to sessions idle past its
/// timeout, 10 s when it is busy) answers the next send's `MAIL` with it and closes: nothing
/// of the send was taken, so it goes at once on a new session instead of waiting for the
/// outbox's retry. Both ways the server may take commands, pipelined or not.
#[tokio::test]
async fn a_kept_session_the_server_closed_with_421_is_replaced_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    /// Per way: `MAIL`s received, messages taken.
    static COUNTS: [[AtomicUsize; 2]; 2] = [
        [AtomicUsize::new(0), AtomicUsize::new(0)],
        [AtomicUsize::new(0), AtomicUsize::new(0)],
    ];
    fn reply(verb: &str, way: usize, ehlo: &'static [u8]) -> Option<&'static [u8]> {
        let [mails, messages] = &COUNTS[way];
        match verb {
            "EHLO" => Some(ehlo),
            // The second send's `MAIL` finds the session timed out.
            "MAIL" if mails.fetch_add(1, Ordering::Relaxed) == 1 => {
                Some(b"421 4.4.2 odd Error: timeout exceeded\r\n")
            }
            "DATA" => Some(b"354 go ahead\r\n"),
            "." => {
                messages.fetch_add(1, Ordering::Relaxed);
                Some(b"250 queued\r\n")
            }
            _ => Some(b"250 ok\r\n"),
        }
    }
    let ways: [Script; 2] = [
        |verb| reply(verb, 0, b"250-odd\r\n250 PIPELINING\r\n"),
        |verb| reply(verb, 1, b"250 odd\r\n"),
    ];
    for (way, server) in ways.into_iter().enumerate() {
        let (listener, addr) = listener().await;
        let server = scripted(listener, 2, server);
        let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
        let message = message();
        pool.send(&message).await.expect("the first send");
        pool.send(&message)
            .await
            .expect("the second, on a new session");
        drop(pool);
        served(server).await;
        let [mails, messages] = &COUNTS[way];
        assert_eq!(
            (
                mails.load(Ordering::Relaxed),
                messages.load(Ordering::Relaxed)
            ),
            (3, 2),
            "way {way}: MAILs and messages"
        );
    }
}

/// A `421` on the new session too is the send's error: the send goes on a new session once, not
/// again and again. The first send opens one session and the second two, each greeted.
#[tokio::test]
async fn a_421_on_the_new_session_too_fails_the_send() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static MAILS: AtomicUsize = AtomicUsize::new(0);
    static GREETED: AtomicUsize = AtomicUsize::new(0);
    let (listener, addr) = listener().await;
    let server = scripted(listener, 3, |verb| match verb {
        "EHLO" => {
            GREETED.fetch_add(1, Ordering::Relaxed);
            Some(b"250-odd\r\n250 PIPELINING\r\n")
        }
        "MAIL" if MAILS.fetch_add(1, Ordering::Relaxed) > 0 => {
            Some(b"421 4.3.2 odd shutting down\r\n")
        }
        "DATA" => Some(b"354 go ahead\r\n"),
        _ => Some(b"250 ok\r\n"),
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    let message = message();
    pool.send(&message).await.expect("the first send");
    let per_session = GREETED.load(Ordering::Relaxed);
    let e = pool.send(&message).await.expect_err("refused on both");
    assert!(e.is_closing() && !e.is_permanent(), "{e}");
    assert_eq!(GREETED.load(Ordering::Relaxed), 2 * per_session, "sessions");
    assert_eq!(MAILS.load(Ordering::Relaxed), 3);
    server.abort();
}

/// A message the server cannot take (an address beyond ASCII, and no `SMTPUTF8`) is refused
/// before anything is written: the session stays kept, and the next send goes on it.
#[tokio::test]
async fn a_send_refused_before_anything_was_written_keeps_its_session() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static GREETED: AtomicUsize = AtomicUsize::new(0);
    let (listener, addr) = listener().await;
    let server = scripted(listener, 1, |verb| match verb {
        "EHLO" => {
            GREETED.fetch_add(1, Ordering::Relaxed);
            Some(b"250-odd\r\n250 PIPELINING\r\n")
        }
        "DATA" => Some(b"354 go ahead\r\n"),
        _ => Some(b"250 ok\r\n"),
    });
    let pool = Pool::new(&format!("smtp://{addr}"), 1).expect("pool");
    pool.send(&message()).await.expect("the first send");
    let per_session = GREETED.load(Ordering::Relaxed);
    let beyond_ascii = Message::builder()
        .from("a@example.com".parse().expect("from"))
        .to("jörg@example.com".parse().expect("to"))
        .body(String::from("hello"))
        .expect("message");
    pool.send(&beyond_ascii)
        .await
        .expect_err("no SMTPUTF8 at the server");
    pool.send(&message()).await.expect("the third send");
    assert_eq!(GREETED.load(Ordering::Relaxed), per_session, "one session");
    drop(pool);
    served(server).await;
}
