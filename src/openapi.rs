//! `/api/openapi.json`: the API's description, derived from the handlers' `#[utoipa::path]`
//! attributes and the types they read and write, so that it changes when they do. A module of
//! its own because it names the handlers of several areas, which themselves use `http`.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{appeals, invites, ops, outcomes};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sendguard",
        version = "1",
        description = "Send invitation emails through sendguard: senders over a threshold are \
            shadow-banned, their invites held for review, and every answer looks the same."
    ),
    paths(
        invites::http::create,
        outcomes::http::record,
        appeals::http::create,
        appeals::http::sender,
        ops::healthz,
        ops::readyz,
        serve
    ),
    modifiers(&ApiKey)
)]
struct Description;

/// The security scheme the API routes name: a bearer key.
struct ApiKey;

impl Modify for ApiKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "A key from `sendguard api-key create NAME [--app APP]`.",
            ))
            .build();
        openapi
            .components
            .get_or_insert_default()
            .add_security_scheme("apiKey", SecurityScheme::Http(scheme));
    }
}

/// Serialized on first use; it never changes while the process runs.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    Description::openapi()
        .to_json()
        .expect("the description is plain data with string keys")
});

/// This description
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    operation_id = "openapi",
    tag = "service",
    responses((status = 200, description = "OpenAPI 3.1.", body = Object)),
)]
pub async fn serve() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_routes_and_only_they_take_the_key() {
        let doc: serde_json::Value = serde_json::from_str(&super::DOCUMENT).expect("json");
        let key = serde_json::json!([{"apiKey": []}]);
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for operation in item.as_object().expect("operations").values() {
                let keyed = operation["security"] == key;
                assert_eq!(keyed, path.starts_with("/api/v1/"), "{path}");
            }
        }
    }
}
