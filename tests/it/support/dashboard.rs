//! The dashboard as a browser-like HTTP client sees it: cookies and the login form.

use reqwest::redirect::Policy;

use crate::support::html;

/// Keeps cookies and does not follow redirects (so tests see them).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(Policy::none())
        .build()
        .expect("client")
}

/// Opens the login page at `base`, which sets the form's token cookie, and answers the token.
pub async fn login_form(client: &reqwest::Client, base: &str) -> String {
    let page = client
        .get(format!("{base}/admin/login"))
        .send()
        .await
        .expect("login page")
        .text()
        .await
        .expect("login page body");
    html::parse(&page).field("csrf")
}

/// Opens the login page at `base` and submits it.
pub async fn log_in(
    client: &reqwest::Client,
    base: &str,
    username: &str,
    password: &str,
) -> reqwest::Response {
    let csrf = login_form(client, base).await;
    client
        .post(format!("{base}/admin/login"))
        .form(&[
            ("csrf", csrf.as_str()),
            ("username", username),
            ("password", password),
        ])
        .send()
        .await
        .expect("login")
}
