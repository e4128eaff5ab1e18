//! The dashboard's pages as a browser reads them: html5gum tokenizes a page to the WHATWG spec
//! (attributes parsed, entities decoded), and an element is the run of tokens from its start tag
//! to its end tag. The templates close what they open, so no tree needs building. Checks that
//! markup is escaped read the raw source instead: decoded text cannot tell `&#60;b&#62;` from `<b>`.

use html5gum::{StartTag, Token, Tokenizer};

/// A page: its source and its tokens.
pub struct Page {
    source: String,
    tokens: Vec<Token>,
}

/// One element of a page: its start tag, then everything up to its end tag.
#[derive(Clone, Copy)]
pub struct Element<'a>(&'a [Token]);

pub fn parse(html: &str) -> Page {
    let tokens = Tokenizer::new(html)
        .map(|token| token.expect("infallible reader"))
        .filter(|token| !matches!(token, Token::Error(_)))
        .collect();
    Page {
        source: html.to_owned(),
        tokens,
    }
}

impl Page {
    /// The markup as served, for the checks that it escapes what it shows.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The value of the first form field named `name`.
    pub fn field(&self, name: &str) -> String {
        let input = self.select(&format!("input[name={name}]")).next();
        input.and_then(|i| i.attr("value")).expect(name).to_owned()
    }

    /// Elements matching `tag`, `tag[attr]` or `tag[attr=value]` (`*` or no tag for any tag).
    pub fn select(&self, selector: &str) -> impl Iterator<Item = Element<'_>> {
        select(&self.tokens, selector)
    }

    pub fn exists(&self, selector: &str) -> bool {
        self.select(selector).next().is_some()
    }

    pub fn text(&self) -> String {
        text(&self.tokens)
    }

    /// The first table row whose text contains `needle`.
    pub fn row(&self, needle: &str) -> Option<Element<'_>> {
        self.select("tr").find(|row| row.text().contains(needle))
    }

    /// The `value`s of the buttons that post an `action`: the decisions a page offers.
    pub fn actions(&self) -> Vec<&str> {
        self.select("button[name=action]")
            .filter_map(|button| button.attr("value"))
            .collect()
    }
}

/// Shows the source, for assertion messages.
impl std::fmt::Display for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

impl<'a> Element<'a> {
    pub fn attr(&self, name: &str) -> Option<&'a str> {
        attr(start(&self.0[0])?, name)
    }

    /// Elements inside this one, as [`Page::select`].
    pub fn select(&self, selector: &str) -> impl Iterator<Item = Element<'a>> {
        select(&self.0[1..], selector)
    }

    pub fn exists(&self, selector: &str) -> bool {
        self.select(selector).next().is_some()
    }

    pub fn text(&self) -> String {
        text(self.0)
    }
}

fn start(token: &Token) -> Option<&StartTag<()>> {
    match token {
        Token::StartTag(tag) => Some(tag),
        _ => None,
    }
}

fn attr<'a>(tag: &'a StartTag<()>, name: &str) -> Option<&'a str> {
    let value = tag.attributes.get(name.as_bytes())?;
    Some(std::str::from_utf8(value).expect("UTF-8"))
}

fn select<'a>(tokens: &'a [Token], selector: &str) -> impl Iterator<Item = Element<'a>> {
    let (tag, attr) = match selector.split_once('[') {
        Some((tag, attr)) => (tag, Some(attr.strip_suffix(']').expect("a closing ]"))),
        None => (selector, None),
    };
    let attr = attr.map(|a| match a.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (a, None),
    });
    (0..tokens.len()).filter_map(move |i| {
        let found = start(&tokens[i])?;
        let tag_fits = tag.is_empty() || tag == "*" || found.name == tag.as_bytes();
        let attr_fits = attr.is_none_or(|(name, value)| {
            self::attr(found, name).is_some_and(|v| value.is_none_or(|wanted| v == wanted))
        });
        (tag_fits && attr_fits).then(|| Element(&tokens[i..i + extent(&tokens[i..])]))
    })
}

/// How many tokens the element starting `tokens` spans, up to its end tag (or the end of the
/// page, for one left open).
fn extent(tokens: &[Token]) -> usize {
    const VOID: [&str; 13] = [
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr",
    ];
    let tag = start(&tokens[0]).expect("a start tag");
    if tag.self_closing || VOID.iter().any(|v| tag.name == v.as_bytes()) {
        return 1;
    }
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::StartTag(t) if t.name == tag.name => depth += 1,
            Token::EndTag(t) if t.name == tag.name => depth -= 1,
            _ => continue,
        }
        if depth == 0 {
            return i + 1;
        }
    }
    tokens.len()
}

fn text(tokens: &[Token]) -> String {
    let strings = tokens.iter().filter_map(|token| match token {
        Token::String(s) => Some(std::str::from_utf8(s).expect("UTF-8")),
        _ => None,
    });
    strings.collect()
}
