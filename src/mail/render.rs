//! The invite email: subject, text and HTML parts from askama templates under the app's
//! branding, and the headers large mailbox providers require of bulk senders
//! (`List-Unsubscribe` with `List-Unsubscribe-Post: List-Unsubscribe=One-Click`, RFC 8058).
//!
//! The sender's words are the spammer's payload: the Subject names only the product and the
//! sender's display name (refused at the edge when it reads as a domain or address); the
//! resource and message stay in the body, quoted and labelled as the sender's.

use askama::Template;
use lettre::Message;
use lettre::message::header::{Header, HeaderName, HeaderValue};
use lettre::message::{Mailbox, MultiPart};
use uuid::Uuid;

use super::MailError;

#[derive(Template)]
#[template(path = "email/subject.txt")]
struct Subject<'a> {
    inviter: &'a str,
    product: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "email/invite.txt")]
struct InviteText<'a> {
    inviter: &'a str,
    product: Option<&'a str>,
    resource: Option<&'a str>,
    /// The message, each line quoted with `> `.
    quoted: Option<String>,
    link: Option<&'a str>,
    unsubscribe: &'a str,
    report: &'a str,
}

#[derive(Template)]
#[template(path = "email/invite.html")]
pub(super) struct InviteHtml<'a> {
    pub subject: &'a str,
    pub inviter: &'a str,
    pub product: Option<&'a str>,
    pub resource: Option<&'a str>,
    pub message: Option<&'a str>,
    pub link: Option<&'a str>,
    pub unsubscribe: &'a str,
    pub report: &'a str,
}

/// What the invite says, as stored.
pub struct Content<'a> {
    pub id: Uuid,
    pub recipient: &'a str,
    pub sender_name: Option<&'a str>,
    pub resource: Option<&'a str>,
    pub message: Option<&'a str>,
}

/// Whose email it is, and where its links go.
pub struct Envelope<'a> {
    pub from: &'a Mailbox,
    /// The product's name; `None`: the email names no product.
    pub product: Option<&'a str>,
    /// The invitation link; `None`: the email says to sign in to the product instead.
    pub accept: Option<&'a str>,
    pub unsubscribe: &'a str,
    pub report: &'a str,
}

/// `List-Unsubscribe: <https://…>`.
#[derive(Clone)]
struct ListUnsubscribe(String);

impl Header for ListUnsubscribe {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("List-Unsubscribe")
    }

    fn parse(s: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(ListUnsubscribe(
            s.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .into(),
        ))
    }

    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), format!("<{}>", self.0))
    }
}

/// `List-Unsubscribe-Post: List-Unsubscribe=One-Click`.
#[derive(Clone)]
struct OneClick;

impl Header for OneClick {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("List-Unsubscribe-Post")
    }

    fn parse(_: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(OneClick)
    }

    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), "List-Unsubscribe=One-Click".into())
    }
}

fn quote(message: &str) -> String {
    message
        .lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Renders the email. Every sender-supplied field was checked for control characters at the
/// edge; lettre encodes header values, and askama escapes the HTML part.
pub fn render(invite: &Content<'_>, envelope: &Envelope<'_>) -> Result<Message, MailError> {
    let inviter = invite.sender_name.unwrap_or("Someone");
    // Without a product name the email says nothing in the product's name ("our app").
    let product = envelope.product;
    let build = |e: askama::Error| MailError::Build(e.to_string());
    let subject = Subject { inviter, product }.render().map_err(build)?;
    let text = InviteText {
        inviter,
        product,
        resource: invite.resource,
        quoted: invite.message.map(quote),
        link: envelope.accept,
        unsubscribe: envelope.unsubscribe,
        report: envelope.report,
    }
    .render()
    .map_err(build)?;
    let html = InviteHtml {
        subject: &subject,
        inviter,
        product,
        resource: invite.resource,
        message: invite.message,
        link: envelope.accept,
        unsubscribe: envelope.unsubscribe,
        report: envelope.report,
    }
    .render()
    .map_err(build)?;
    let to: Mailbox = invite
        .recipient
        .parse()
        .map_err(|e: lettre::address::AddressError| MailError::Build(e.to_string()))?;
    Message::builder()
        .from(envelope.from.clone())
        .to(to)
        .subject(subject)
        .message_id(Some(format!("<{}@sendguard>", invite.id)))
        .header(ListUnsubscribe(envelope.unsubscribe.to_owned()))
        .header(OneClick)
        .multipart(MultiPart::alternative_plain_html(text, html))
        .map_err(|e| MailError::Build(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from() -> Mailbox {
        "sendguard <no-reply@localhost>".parse().expect("from")
    }

    fn formatted(content: &Content<'_>, envelope: &Envelope<'_>) -> String {
        let message = render(content, envelope).expect("render").formatted();
        String::from_utf8_lossy(&message).into_owned()
    }

    fn content<'a>(name: Option<&'a str>, message: Option<&'a str>) -> Content<'a> {
        Content {
            id: Uuid::nil(),
            recipient: "ana@example.com",
            sender_name: name,
            resource: Some("Q3 plan"),
            message,
        }
    }

    #[test]
    fn user_text_is_escaped_in_the_html_part() {
        let html = InviteHtml {
            subject: "s",
            inviter: "Bo & Co",
            product: Some("Drawbox"),
            resource: Some("<b>doc</b>"),
            message: Some("<script>alert(1)</script>"),
            link: Some("https://drawbox.example/i/1"),
            unsubscribe: "https://g.example/u",
            report: "https://g.example/r",
        }
        .render()
        .expect("render");
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<b>doc"), "{html}");
        assert!(
            html.contains("Bo &#38; Co") || html.contains("Bo &amp; Co"),
            "{html}"
        );
    }

    #[test]
    fn the_subject_names_the_product_and_the_sender_and_nothing_they_wrote() {
        let from = from();
        let envelope = Envelope {
            from: &from,
            product: Some("Drawbox"),
            accept: Some("https://drawbox.example/i/1"),
            unsubscribe: "https://g.example/r/1/unsubscribe?t=x",
            report: "https://g.example/r/1/report?t=y",
        };
        let raw = formatted(&content(Some("Bo"), Some("Claim your prize")), &envelope);
        assert!(
            raw.contains("Subject: Bo invited you to Drawbox\r\n"),
            "{raw}"
        );
        assert!(
            raw.contains("Message-ID: <00000000-0000-0000-0000-000000000000@sendguard>"),
            "{raw}"
        );
        assert!(
            raw.contains("List-Unsubscribe: <https://g.example/r/1/unsubscribe?t=x>\r\n"),
            "{raw}"
        );
        assert!(
            raw.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"),
            "{raw}"
        );
        assert!(raw.contains("> Claim your prize"), "quoted: {raw}");
        let no_product = Envelope {
            product: None,
            ..envelope
        };
        let raw = formatted(&content(None, Some("hi")), &no_product);
        assert!(
            raw.contains("Subject: Someone sent you an invitation\r\n"),
            "{raw}"
        );
        assert!(!raw.contains("our app") && !raw.contains("None"), "{raw}");
        assert!(raw.contains("Someone sent you an invitation."), "{raw}");
    }

    #[test]
    fn without_a_link_the_email_says_what_to_do() {
        let from = from();
        let envelope = Envelope {
            from: &from,
            product: Some("Drawbox"),
            accept: None,
            unsubscribe: "https://g.example/u",
            report: "https://g.example/r",
        };
        let raw = formatted(&content(Some("Bo"), None), &envelope);
        assert!(raw.contains("To accept, sign in to Drawbox."), "{raw}");
        assert!(!raw.contains("Open the invitation"), "{raw}");
    }
}
