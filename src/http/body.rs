//! Deadlines and bounds for request bodies, on every route: a body must arrive whole within
//! its route group's deadline and stay under its size, or the request is answered (408, 413)
//! and its connection freed. Handlers then read a body already in memory.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use serde_json::{Map, Value};

use super::ApiError;

/// A route group's body bound.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit {
    pub max_bytes: usize,
    pub deadline: Duration,
}

/// The request with its body read whole, or the answer that refuses it.
pub(super) async fn read(limit: BodyLimit, request: Request) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let api = parts.uri.path().starts_with("/api/");
    let refuse = |status: StatusCode, api_error: ApiError| {
        if api {
            api_error.into_response()
        } else {
            let text = match status {
                StatusCode::REQUEST_TIMEOUT => "the request body did not arrive in time",
                _ => "the request body is too large",
            };
            (status, [(header::CONNECTION, "close")], text).into_response()
        }
    };
    let bytes =
        match tokio::time::timeout(limit.deadline, axum::body::to_bytes(body, limit.max_bytes))
            .await
        {
            Err(_) => return Err(refuse(StatusCode::REQUEST_TIMEOUT, ApiError::Timeout)),
            Ok(Err(_)) => {
                return Err(refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ApiError::TooLarge(limit.max_bytes),
                ));
            }
            Ok(Ok(bytes)) => bytes,
        };
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// Refuses a body that is not declared as JSON (415), before it is parsed.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// A request body as a JSON object of `known` fields only: a 400 for a body that is not JSON
/// or not an object, a 422 naming the first field that is not known.
pub fn json_object(
    body: &[u8],
    known: &'static [&'static str],
) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object".into(),
        ));
    };
    if let Some(field) = unknown_field(&obj, known) {
        return Err(ApiError::UnknownField { field, known });
    }
    Ok(obj)
}

/// The first field of `obj` that is not one of `known`: a body's fields are checked by name, so
/// that a misspelt one (`acceptUrl`) is refused rather than dropped.
pub fn unknown_field(obj: &Map<String, Value>, known: &[&str]) -> Option<String> {
    obj.keys().find(|k| !known.contains(&k.as_str())).cloned()
}
