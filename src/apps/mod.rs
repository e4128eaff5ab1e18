//! Apps: the products that call sendguard (docs/DESIGN.md §2). Each API key belongs to one app, and
//! an app has its own senders, the hosts its invitation links may point to, a link template,
//! its email branding and its webhook. Every instance keeps all apps in memory (a handful of
//! rows), reloaded when the table changes.

pub mod settings;
pub mod store;
pub mod webhook_secret;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sqlx::PgPool;
use url::Url;
use uuid::Uuid;

pub use settings::{AppChanges, AppError};

/// The app every installation starts with; keys and senders from before apps live here.
pub const DEFAULT_APP: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct App {
    pub id: i64,
    pub name: String,
    /// The product's name in emails; `None`: emails name no product.
    pub product: Option<String>,
    /// Hosts an invite's `accept_url` may point to (lower case, IDNA-encoded).
    pub link_hosts: Vec<String>,
    /// The accept link of invites that carry none: `{invite_id}` and `{resource}` filled in.
    pub link_template: Option<String>,
    /// The From mailbox of this app's emails; `None`: the service's.
    pub mail_from: Option<String>,
    pub webhook_url: Option<String>,
    /// The messages the app prefills: a text like one of them never counts as a campaign
    /// (docs/DESIGN.md §3d).
    pub standard_texts: Vec<String>,
}

impl App {
    /// Whether an invite's `accept_url` may point to this host.
    pub fn allows_link_to(&self, url: &Url) -> bool {
        let host = crate::urls::host_of(url);
        self.link_hosts.contains(&host)
    }

    /// The link an invite's email carries: its own `accept_url`, else the app's template with
    /// the invite's id and resource filled in (each URL-encoded), else none.
    pub fn invite_link(
        &self,
        accept_url: Option<&Url>,
        invite_id: Uuid,
        resource: Option<&str>,
    ) -> Option<String> {
        if let Some(url) = accept_url {
            return Some(url.to_string());
        }
        self.link_template
            .as_deref()
            .map(|t| fill(t, invite_id, resource))
    }

    /// How emails name the product: its name, or a plain phrase.
    pub fn product_or_default(&self) -> &str {
        self.product.as_deref().unwrap_or("the app")
    }
}

/// A link template with its placeholders filled in.
pub(crate) fn fill(template: &str, invite_id: Uuid, resource: Option<&str>) -> String {
    template
        .replace("{invite_id}", &invite_id.to_string())
        .replace(
            "{resource}",
            &crate::urls::component(resource.unwrap_or("")),
        )
}

#[derive(Default)]
struct Apps {
    by_id: HashMap<i64, Arc<App>>,
    by_name: HashMap<String, Arc<App>>,
}

impl Apps {
    fn new(apps: Vec<App>) -> Apps {
        let mut out = Apps::default();
        for app in apps {
            let app = Arc::new(app);
            out.by_name.insert(app.name.clone(), app.clone());
            out.by_id.insert(app.id, app);
        }
        out
    }
}

/// Every app, as this instance last read them; a change reaches every instance through
/// NOTIFY (and a reload each second, see [`crate::changes`]).
#[derive(Clone)]
pub struct AppCache {
    apps: Arc<ArcSwap<Apps>>,
}

impl AppCache {
    pub async fn load(pool: &PgPool) -> Result<Self, sqlx::Error> {
        Ok(AppCache {
            apps: Arc::new(ArcSwap::from_pointee(Apps::new(store::all(pool).await?))),
        })
    }

    pub fn get(&self, id: i64) -> Option<Arc<App>> {
        self.apps.load().by_id.get(&id).cloned()
    }

    pub fn by_name(&self, name: &str) -> Option<Arc<App>> {
        self.apps.load().by_name.get(name).cloned()
    }

    /// Every app, by name.
    pub fn all(&self) -> Vec<Arc<App>> {
        let mut apps: Vec<_> = self.apps.load().by_id.values().cloned().collect();
        apps.sort_by(|a, b| a.name.cmp(&b.name));
        apps
    }

    /// The app of `id`, reading the table again when this instance has not seen it yet (an app
    /// created a moment ago on another instance).
    pub async fn fetch(&self, pool: &PgPool, id: i64) -> Result<Option<Arc<App>>, sqlx::Error> {
        if let Some(app) = self.get(id) {
            return Ok(Some(app));
        }
        self.apps
            .store(Arc::new(Apps::new(store::all(pool).await?)));
        Ok(self.get(id))
    }

    /// Reads the table again (on a notification, and every second).
    pub async fn reload(&self, pool: &PgPool) {
        match store::all(pool).await {
            Ok(apps) => {
                let current = self.apps.load();
                let same = apps.len() == current.by_id.len()
                    && apps
                        .iter()
                        .all(|a| current.by_id.get(&a.id).is_some_and(|c| **c == *a));
                if !same {
                    tracing::info!(apps = apps.len(), "apps reloaded");
                    self.apps.store(Arc::new(Apps::new(apps)));
                }
            }
            Err(e) => tracing::warn!(error = %e, "reloading apps failed; keeping the last ones"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(template: Option<&str>) -> App {
        App {
            id: 1,
            name: "drawbox".into(),
            product: Some("Drawbox".into()),
            link_hosts: vec!["drawbox.example".into()],
            link_template: template.map(Into::into),
            mail_from: None,
            webhook_url: None,
            standard_texts: Vec::new(),
        }
    }

    #[test]
    fn an_invite_links_to_its_url_else_the_template_else_nothing() {
        let id = Uuid::nil();
        let own = Url::parse("https://drawbox.example/accept/9").expect("url");
        let t = app(Some("https://drawbox.example/i/{invite_id}?doc={resource}"));
        assert_eq!(
            t.invite_link(Some(&own), id, None).as_deref(),
            Some("https://drawbox.example/accept/9")
        );
        assert_eq!(
            t.invite_link(None, id, Some("Q3 plan/../&x=1")).as_deref(),
            Some(
                "https://drawbox.example/i/00000000-0000-0000-0000-000000000000\
                 ?doc=Q3%20plan%2F..%2F%26x%3D1"
            )
        );
        assert_eq!(app(None).invite_link(None, id, Some("doc")), None);
    }

    #[test]
    fn link_hosts_compare_in_lower_case() {
        let a = app(None);
        assert!(a.allows_link_to(&Url::parse("https://DRAWBOX.example/x").expect("url")));
        assert!(!a.allows_link_to(&Url::parse("https://drawbox.example.evil/x").expect("url")));
    }
}
