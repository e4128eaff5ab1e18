//! Headless Chromium driven over W3C WebDriver (Debian's chromium and chromium-driver, which
//! scripts/test installs): a real browser clicking through the dashboard.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    endpoint: String,
    http: reqwest::Client,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a fresh profile.
    pub async fn start() -> Browser {
        let port = super::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is installed (scripts/test installs chromium-driver)");
        let endpoint = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let ready = super::app::wait_for(Duration::from_secs(20), || async {
            http.get(format!("{endpoint}/status"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        assert!(ready, "chromedriver did not start");
        let profile =
            std::env::temp_dir().join(format!("sendguard-chromium-{}", uuid::Uuid::new_v4()));
        let mut browser = Browser {
            driver,
            endpoint,
            http,
            profile,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", browser.profile.display()),
                ]
            }
        }}});
        let session = browser.call("POST", "/session", Some(caps)).await;
        let id = session["sessionId"]
            .as_str()
            .expect("session id")
            .to_owned();
        browser.endpoint = format!("{}/session/{id}", browser.endpoint);
        browser
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.endpoint);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self
                .http
                .post(&url)
                .json(&body.unwrap_or_else(|| json!({}))),
        };
        let resp = request.send().await.expect("webdriver request");
        let status = resp.status();
        let value: Value = resp.json().await.expect("webdriver json");
        assert!(status.is_success(), "{method} {path}: {value}");
        value["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.call("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    pub async fn source(&self) -> String {
        self.call("GET", "/source", None)
            .await
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// Waits (up to ten seconds) until the page's source contains `text`: after a click that
    /// submits a form the next page may still be loading.
    pub async fn wait_for_text(&self, text: &str) -> bool {
        super::app::wait_for(Duration::from_secs(10), || async {
            self.source().await.contains(text)
        })
        .await
    }

    /// Waits (up to ten seconds) until the address contains `part`.
    pub async fn wait_for_url(&self, part: &str) -> bool {
        super::app::wait_for(Duration::from_secs(10), || async {
            self.url().await.contains(part)
        })
        .await
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT].as_str().expect(css).to_owned()
    }

    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call("POST", &format!("/element/{id}/click"), None)
            .await;
    }

    /// Replaces the text of an input.
    pub async fn fill(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call("POST", &format!("/element/{id}/clear"), None)
            .await;
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// The value of a cookie, HttpOnly ones included.
    pub async fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.call("GET", "/cookie", None).await;
        cookies
            .as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["value"].as_str())
            .map(str::to_owned)
    }

    /// Saves a PNG of the page as it is now.
    pub async fn screenshot(&self, path: &Path) {
        let data = self.call("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().expect("base64 screenshot"))
            .expect("decode screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot directory");
        }
        std::fs::write(path, png).expect("write screenshot");
    }

    pub async fn close(self) {
        self.call("DELETE", "", None).await;
    }
}
