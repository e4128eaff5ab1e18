//! Texts and domains that never count as a campaign: each app's standard texts (the messages
//! it prefills) and its link hosts, and the campaigns a reviewer marked benign. Every instance
//! keeps them in memory, reloaded when apps or campaigns change (and every second).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use sqlx::PgPool;

use super::fingerprint::{self, Index, Signature};

/// What one app's texts are measured against.
#[derive(Default)]
pub struct AppTexts {
    /// The hosts its invitation links point to: never a campaign's domain.
    pub link_hosts: Vec<String>,
    /// Its standard texts: a text like one of them gets no fingerprint.
    pub standard: Index<()>,
}

#[derive(Default)]
pub struct Known {
    pub apps: HashMap<i64, AppTexts>,
    /// Texts of campaigns marked benign, by campaign.
    pub benign_texts: Index<i64>,
    pub benign_domains: HashSet<String>,
}

impl Known {
    /// Whether a text of `signature` is an app's standard text or one marked benign.
    pub fn is_known_text(&self, app_id: i64, signature: &Signature) -> bool {
        self.apps
            .get(&app_id)
            .is_some_and(|app| app.standard.find(signature).is_some())
            || self.benign_texts.find(signature).is_some()
    }
}

#[derive(Clone, Default)]
pub struct KnownTexts(Arc<ArcSwap<Known>>);

impl KnownTexts {
    pub async fn load(pool: &PgPool) -> Result<KnownTexts, sqlx::Error> {
        let known = KnownTexts::default();
        known.0.store(Arc::new(read(pool).await?));
        Ok(known)
    }

    pub fn get(&self) -> arc_swap::Guard<Arc<Known>> {
        self.0.load()
    }

    /// Reads them again (on a notification, and every second: see [`crate::changes`]).
    pub async fn reload(&self, pool: &PgPool) {
        match read(pool).await {
            Ok(known) => self.0.store(Arc::new(known)),
            Err(e) => tracing::warn!(error = %e, "reloading standard and benign texts failed"),
        }
    }
}

/// The campaigns marked benign, read every second by every instance: through their own index
/// (migration 0023), whatever the number of campaigns.
pub const BENIGN: &str =
    "SELECT id, kind, normalised, signature FROM campaigns WHERE benign_at IS NOT NULL";

async fn read(pool: &PgPool) -> Result<Known, sqlx::Error> {
    let apps: Vec<(i64, Vec<String>, Vec<String>)> =
        sqlx::query_as("SELECT id, link_hosts, standard_texts FROM apps")
            .fetch_all(pool)
            .await?;
    let benign: Vec<(i64, String, String, Option<Vec<u8>>)> =
        sqlx::query_as(BENIGN).fetch_all(pool).await?;
    let mut known = Known::default();
    for (id, link_hosts, texts) in apps {
        let mut standard = Index::new();
        for text in &texts {
            if let Some(f) = fingerprint::of_invite(Some(text), None) {
                standard.insert(f.signature, ());
            }
        }
        known.apps.insert(
            id,
            AppTexts {
                link_hosts,
                standard,
            },
        );
    }
    for (id, kind, normalised, signature) in benign {
        match kind.as_str() {
            "link_domain" => {
                known.benign_domains.insert(normalised);
            }
            _ => {
                if let Some(s) = signature.as_deref().and_then(Signature::from_bytes) {
                    known.benign_texts.insert(s, id);
                }
            }
        }
    }
    Ok(known)
}
