//! The API-key extractor: `Authorization: Bearer <key>`.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;
use sqlx::PgPool;

use super::ApiError;
use crate::api_keys::{self, ApiKeyCache};

/// What checking a key needs.
#[derive(Clone)]
pub struct ApiKeys {
    pub pool: PgPool,
    pub cache: ApiKeyCache,
}

/// The id of the live API key the request carries.
pub struct ApiKey(pub i64);

impl<S> FromRequestParts<S> for ApiKey
where
    ApiKeys: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let keys = ApiKeys::from_ref(state);
        let key = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|k| !k.is_empty() && k.len() <= 128)
            .ok_or(ApiError::Unauthorized)?;
        api_keys::verify(&keys.pool, &keys.cache, key)
            .await?
            .map(ApiKey)
            .ok_or(ApiError::Unauthorized)
    }
}
