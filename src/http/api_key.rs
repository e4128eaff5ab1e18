//! The API key: `Authorization: Bearer <key>`, checked by `http::guard` before the body is read;
//! the extractor hands handlers the key it found.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Semaphore;

use super::ApiError;
use crate::api_keys::{self, ApiKeyCache};

/// What checking a key needs.
#[derive(Clone)]
pub struct ApiKeys {
    pub pool: PgPool,
    pub cache: ApiKeyCache,
    /// Database lookups of uncached keys at once: a flood of unknown keys can take these
    /// connections of the pool, never all of it.
    pub lookups: Arc<Semaphore>,
}

/// How long a request waits for a lookup permit before it is answered 503.
const LOOKUP_WAIT: Duration = Duration::from_millis(250);

/// The live API key the request carries, and its app.
#[derive(Debug, Clone, Copy)]
pub struct ApiKey {
    pub id: i64,
    pub app_id: i64,
}

impl ApiKeys {
    /// The live key `headers` carry. A malformed key is refused without a query, and uncached
    /// keys wait only briefly for one of the few lookups at once.
    pub(super) async fn check(&self, headers: &HeaderMap) -> Result<ApiKey, ApiError> {
        let key = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            // The scheme in any case (RFC 9110, section 11.1).
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .filter(|k| api_keys::well_formed(k))
            .ok_or(ApiError::Unauthorized)?;
        if let Some((id, app_id)) = self.cache.cached(key) {
            return Ok(ApiKey { id, app_id });
        }
        let _permit = tokio::time::timeout(LOOKUP_WAIT, self.lookups.acquire())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| ApiError::unavailable("too many key checks at once; retry shortly"))?;
        api_keys::verify(&self.pool, &self.cache, key)
            .await?
            .map(|(id, app_id)| ApiKey { id, app_id })
            .ok_or(ApiError::Unauthorized)
    }
}

/// The key `http::guard` checked before the request's body was read.
impl<S: Send + Sync> FromRequestParts<S> for ApiKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<ApiKey>()
            .copied()
            .ok_or(ApiError::Unauthorized)
    }
}
