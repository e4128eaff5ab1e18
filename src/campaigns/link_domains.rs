//! PLACEHOLDER until the real one lands (same interface).
pub const MAX_LINK_DOMAINS: usize = 4;

pub fn link_domains<'a>(
    texts: impl IntoIterator<Item = Option<&'a str>>,
    app_link_hosts: &[String],
) -> Vec<String> {
    let own: Vec<String> = app_link_hosts.iter().map(|h| registrable(h)).collect();
    let mut out: Vec<String> = Vec::new();
    for text in texts.into_iter().flatten() {
        for link in crate::signals::links::find(text) {
            if link.kind == crate::signals::links::LinkKind::Email {
                continue;
            }
            let d = registrable(&link.host);
            if !own.contains(&d) && !out.contains(&d) && out.len() < MAX_LINK_DOMAINS {
                out.push(d);
            }
        }
    }
    out
}

fn registrable(host: &str) -> String {
    psl::domain_str(host).unwrap_or(host).to_owned()
}
