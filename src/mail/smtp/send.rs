//! One message's transaction on a session: `MAIL`, `RCPT` and `DATA` (pipelined where the server
//! offers it), the message, and what a refusal leaves of the session. A refusal is a reply from a
//! working server: the refused transaction is ended with `RSET` and the session carries the
//! next send, where a new one would cost a relay's TLS handshake and login, and count against
//! its limit on connections.

use lettre::address::Envelope;
use lettre::transport::smtp::Error;
use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::commands::{Data, Mail, Rcpt, Rset};
use lettre::transport::smtp::extension::{Extension, MailBodyParameter, MailParameter};

use super::{Session, TIMEOUT};
use crate::mail::MailError;
use crate::mail::failure::closing;

/// A message on its way: its commands, the message itself, and the first refusal read.
struct Transaction<'a> {
    envelope: &'a Envelope,
    /// `MAIL` with the parameters the message needs.
    mail: Mail,
    email: &'a [u8],
    /// Kept here rather than returned, so that it stays the send's error when the session then
    /// fails while the transaction is ended.
    refusal: Option<Error>,
}

/// Sends on a session, within [`TIMEOUT`]. The first refusal is the send's error, even when the
/// session then fails while its transaction is ended. A session that failed otherwise is marked
/// broken, and [`super::Pool::park`] drops it.
pub(super) async fn deliver(
    session: &mut Session,
    envelope: &Envelope,
    email: &[u8],
) -> Result<(), MailError> {
    session.answered = false;
    let mut transaction =
        mail_parameters(&session.conn, envelope, email).map(|parameters| Transaction {
            envelope,
            mail: Mail::new(envelope.from().cloned(), parameters),
            email,
            refusal: None,
        });
    let sent = async {
        let Some(transaction) = transaction.as_mut() else {
            // lettre's own send refuses what the server cannot take, with its reason, before
            // writing anything.
            return session.conn.send(envelope, email).await.map(drop);
        };
        if session.pipelining {
            pipelined(session, transaction).await
        } else {
            one_by_one(session, transaction).await
        }
    };
    let outcome = tokio::time::timeout(TIMEOUT, sent).await;
    let refusal = transaction.and_then(|t| t.refusal);
    let failed = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => {
            session.broken = true;
            if refusal.is_none() {
                return Err(MailError::Unreachable(format!(
                    "no answer to a send within {} s",
                    TIMEOUT.as_secs()
                )));
            }
            None
        }
    };
    if failed.as_ref().is_some_and(|e| !e.is_client()) {
        session.broken = true;
    }
    match (refusal, failed) {
        (Some(refusal), _) => {
            session.refusals += 1;
            Err(MailError::Smtp(refusal))
        }
        (None, Some(e)) => Err(MailError::Smtp(e)),
        (None, None) => {
            session.refusals = 0;
            Ok(())
        }
    }
}

/// The parameters of `MAIL` as lettre's own send gives them (SMTPUTF8 for addresses beyond
/// ASCII, 8BITMIME for a body beyond it), or none when the server lacks what the message needs.
fn mail_parameters(
    conn: &AsyncSmtpConnection,
    envelope: &Envelope,
    email: &[u8],
) -> Option<Vec<MailParameter>> {
    let info = conn.server_info();
    let mut parameters = Vec::new();
    let addresses = envelope.from().into_iter().chain(envelope.to());
    if addresses.map(AsRef::<str>::as_ref).any(|a| !a.is_ascii()) {
        if !info.supports_feature(Extension::SmtpUtfEight) {
            return None;
        }
        parameters.push(MailParameter::SmtpUtfEight);
    }
    if !email.is_ascii() {
        if !info.supports_feature(Extension::EightBitMime) {
            return None;
        }
        parameters.push(MailParameter::Body(MailBodyParameter::EightBitMime));
    }
    Some(parameters)
}

/// `MAIL`, every `RCPT` and `DATA` in one write, their replies read in order, then the message.
/// The first refusal goes to the transaction. Every reply is read before the transaction is reset, so
/// that none is left for the next send; a server that took `DATA` after a refusal (RFC 2920 asks
/// it not to) has the session left within a message, so it is closed rather than reset: a
/// closing `.` would send an empty message. An error is returned only when the session failed
/// without a reply.
async fn pipelined(session: &mut Session, transaction: &mut Transaction<'_>) -> Result<(), Error> {
    let mut commands = transaction.mail.to_string();
    for to in transaction.envelope.to() {
        commands.push_str(&Rcpt::new(to.clone(), Vec::new()).to_string());
    }
    commands.push_str(&Data.to_string());
    let expected = transaction.envelope.to().len() + 2;
    // `command` writes the group and reads the first reply (MAIL's); one more per RCPT and
    // DATA, until one is not a reply (the session is gone then).
    let mut replies = Vec::with_capacity(expected);
    replies.push(session.conn.command(commands).await.map(drop));
    session.answered = replies.last().is_some_and(took_part);
    while replies.len() < expected && replies.last().is_some_and(is_reply) {
        replies.push(session.conn.read_response().await.map(drop));
    }
    let within_message = replies.len() == expected && replies.last().is_some_and(Result::is_ok);
    let mut failures = replies.into_iter().filter_map(Result::err);
    let Some(first) = failures.next() else {
        return message(session, transaction).await;
    };
    if first.status().is_none() {
        return Err(first);
    }
    transaction.refusal = Some(first);
    if let Some(gone) = failures.find(|e| e.status().is_none()) {
        return Err(gone);
    }
    if within_message {
        session.broken = true;
    } else {
        reset(session).await;
    }
    Ok(())
}

/// `MAIL`, every `RCPT` and `DATA`, each after the reply to the one before, then the message;
/// a refusal goes to the transaction, as in [`pipelined`].
async fn one_by_one(session: &mut Session, transaction: &mut Transaction<'_>) -> Result<(), Error> {
    let mail = session.conn.command(&transaction.mail).await.map(drop);
    session.answered = took_part(&mail);
    let conn = &mut session.conn;
    let opened = async {
        mail?;
        for to in transaction.envelope.to() {
            conn.command(Rcpt::new(to.clone(), Vec::new())).await?;
        }
        conn.command(Data).await.map(drop)
    }
    .await;
    match opened {
        Ok(()) => message(session, transaction).await,
        Err(e) if e.status().is_some() => {
            transaction.refusal = Some(e);
            reset(session).await;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The message and its closing `.`, in one write: lettre's own writes the two apart, a second
/// segment and a second wake-up for both ends of every send. A refusal of it ends its
/// transaction, as its acceptance does, so the session needs no `RSET`.
async fn message(session: &mut Session, transaction: &mut Transaction<'_>) -> Result<(), Error> {
    let sent = match std::str::from_utf8(transaction.email) {
        Ok(email) => session.conn.command(on_the_wire(email)).await,
        // The messages built here are text; anything else goes as lettre sends it.
        Err(_) => session.conn.message(transaction.email).await,
    };
    match sent {
        Ok(_) => Ok(()),
        Err(e) if e.status().is_some() => {
            transaction.refusal = Some(e);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The message as it crosses the wire after `DATA` (RFC 5321 §4.5.2): a `.` that begins a line
/// doubled, as lettre's codec does (a line begins after CRLF), then the closing `.` line.
fn on_the_wire(email: &str) -> String {
    let mut wire = String::with_capacity(email.len() + 16);
    if email.starts_with('.') {
        wire.push('.');
    }
    let mut done = 0;
    for (at, _) in email.match_indices("\r\n.") {
        wire.push_str(&email[done..at + 3]);
        wire.push('.');
        done = at + 3;
    }
    wire.push_str(&email[done..]);
    wire.push_str("\r\n.\r\n");
    wire
}

/// Ends a refused transaction, so that the session can carry the next send.
async fn reset(session: &mut Session) {
    if session.conn.command(Rset).await.is_err() {
        session.broken = true;
    }
}

/// An answer from the server, positive or not, rather than a broken session.
fn is_reply(reply: &Result<(), Error>) -> bool {
    reply.as_ref().err().is_none_or(|e| e.status().is_some())
}

/// Whether the server took part in a send, by its reply to the send's first command: it
/// answered, and not with `421`, by which it closes the session before the transaction
/// begins (RFC 5321 §3.8). Postfix writes one, unasked, when a session's idle timeout fires,
/// and the next send reads it as its reply.
fn took_part(first: &Result<(), Error>) -> bool {
    is_reply(first) && !first.as_ref().err().is_some_and(closing)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::on_the_wire;

    #[test]
    fn a_dot_that_begins_a_line_is_doubled_and_the_message_closed() {
        assert_eq!(on_the_wire("a\r\nb"), "a\r\nb\r\n.\r\n");
        assert_eq!(on_the_wire(".a\r\n.\r\n..b"), "..a\r\n..\r\n...b\r\n.\r\n");
        // Only a CRLF begins a line, as in lettre's codec.
        assert_eq!(on_the_wire("a\n.b\r.c"), "a\n.b\r.c\r\n.\r\n");
        assert_eq!(on_the_wire("a\r\r\n.b"), "a\r\r\n..b\r\n.\r\n");
        assert_eq!(on_the_wire(""), "\r\n.\r\n");
    }

    proptest! {
        /// What a server reads back (the closing line cut, a line's leading `.` dropped) is the
        /// message, and no line of it ends the message early.
        #[test]
        fn a_server_reads_back_the_message(parts in prop::collection::vec(
            prop::sample::select(vec!["a", ".", "..", "\r\n", "\r", "\n", " .", "é"]), 0..40))
        {
            let email: String = parts.concat();
            let wire = on_the_wire(&email);
            let body = wire.strip_suffix("\r\n.\r\n").expect("closed");
            let lines: Vec<&str> = body.split("\r\n").collect();
            prop_assert!(lines.iter().all(|line| *line != "."));
            let read: Vec<&str> = lines
                .iter()
                .map(|line| line.strip_prefix('.').unwrap_or(line))
                .collect();
            prop_assert_eq!(read.join("\r\n"), email);
        }
    }
}
