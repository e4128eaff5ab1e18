//! `POST /api/v1/events`: the calling app reports what happened to an invite (docs/DESIGN.md §4).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{OutcomeError, OutcomeType, Outcomes};
use crate::http::{ApiError, ApiKey, Problem, RetryAfter, json_object, require_json};

/// The fields of [`Event`].
const FIELDS: &[&str] = &["invite_id", "type"];

/// What the handler needs.
#[derive(Clone)]
pub struct Events {
    pub outcomes: Outcomes,
}

/// What happened to an invite. Any other field is refused by name.
#[derive(Debug, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The id the invite's 200 answer carried.
    pub invite_id: Uuid,
    #[schema(rename = "type", inline)]
    pub kind: OutcomeType,
}

// Named `Recorded` in the description, as it always was; `super::Recorded` is the domain's.
/// The answer to an event, the same whether it was new or a repeat: it is counted once either
/// way.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Recorded)]
pub struct Receipt {
    #[schema(inline)]
    pub status: ReceiptStatus,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptStatus {
    Recorded,
}

/// Report what happened to an invite
///
/// A bounce, a complaint or an acceptance, counted once per invite and type however often it is
/// posted, against the invite's sender at the time it arrives.
#[utoipa::path(
    post,
    path = "/api/v1/events",
    operation_id = "recordEvent",
    tag = "events",
    security(("apiKey" = [])),
    request_body = Event,
    responses(
        (status = 202, description = "Recorded (or recorded before).", body = Receipt),
        (status = 400, description = "The body is not a JSON object.", body = Problem,
            content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No invite of the key's app has this id.", body = Problem,
            content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than 16 KiB.", body = Problem,
            content_type = "application/problem+json"),
        (status = 415, description = "The body is not application/json.", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "A field is invalid or unknown; `field` names it.",
            body = Problem,
            content_type = "application/problem+json"),
        (status = 503, description = "The event could not be recorded; retry later.",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = inline(RetryAfter)))),
    ),
)]
pub async fn record(
    State(events): State<Events>,
    key: ApiKey,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let event = parse(&body)?;
    events
        .outcomes
        .record(event.invite_id, event.kind, Some(key.app_id))
        .await?;
    let receipt = Receipt {
        status: ReceiptStatus::Recorded,
    };
    Ok((StatusCode::ACCEPTED, Json(receipt)).into_response())
}

fn parse(body: &[u8]) -> Result<Event, ApiError> {
    let obj = json_object(body, FIELDS)?;
    let invalid = |field, detail: &str| ApiError::Invalid {
        field,
        detail: detail.into(),
    };
    let invite_id = obj
        .get("invite_id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("invite_id", "is required, as a string"))?
        .parse::<Uuid>()
        .map_err(|_| invalid("invite_id", "must be an invite's id (a UUID)"))?;
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("type", "is required: bounce, complaint or accepted"))?
        .parse::<OutcomeType>()
        .map_err(|_| invalid("type", "must be bounce, complaint or accepted"))?;
    Ok(Event { invite_id, kind })
}

impl From<OutcomeError> for ApiError {
    fn from(e: OutcomeError) -> Self {
        match e {
            OutcomeError::NotFound => ApiError::NotFound,
            OutcomeError::Db(_) | OutcomeError::Limiter(_) | OutcomeError::Task(_) => {
                ApiError::Unavailable {
                    detail: "the event could not be recorded; retry later".into(),
                    cause: Some(e.to_string()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn the_description_names_every_outcome_type() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(Event::schema()).expect("schema");
        let names: Vec<&str> = OutcomeType::VARIANTS.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            schema["properties"]["type"]["enum"],
            serde_json::json!(names)
        );
        assert_eq!(schema["required"], serde_json::json!(FIELDS));
        assert_eq!(schema["additionalProperties"], false);
        let event =
            parse(br#"{"invite_id":"67e55044-10b1-426f-9247-bb680e5fe0c8","type":"bounce"}"#)
                .expect("event");
        assert_eq!(event.kind, OutcomeType::Bounce);
    }
}
