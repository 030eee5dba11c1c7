//! The server's print store for its researchers: `GET /api/v1/prints/{key}` and
//! `PUT /api/v1/prints/{key}`, with a researcher's token.
//!
//! A print crosses the network in the store's envelope (`prints::envelope`: a magic string,
//! the payload's length and its SHA-256), both ways, so that a print cut short or changed on
//! the way is found by whoever reads it. The server keeps a print only if its envelope holds
//! (422 else, nothing kept), and sends one only if the store found it whole. What a print
//! says is still a researcher's word: the researcher that reads it checks it as it checks
//! its own (its format, its parameters, its media's identity).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prints::{PrintStore, StoreError};

use crate::auth::Caller;
#[allow(unused_imports)]
use crate::error::ErrorAnswer;
use crate::state::Gateway;
use crate::{lines, ApiError};

fn store_of(gateway: &Gateway) -> Result<&Arc<dyn PrintStore>, ApiError> {
    gateway.holdings.prints.as_ref().ok_or_else(|| {
        ApiError::NotFound("this server keeps no print store (`serve --api --print-store`)".into())
    })
}

/// `key` if it is a print key (64 lowercase hex digits), else 400.
fn checked(key: &str) -> Result<&str, ApiError> {
    prints::check_key(key).map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// The answer to a store's error: what it is about, never where the store is.
fn refused(e: StoreError) -> ApiError {
    match e {
        StoreError::Damaged { .. } => ApiError::Conflict(e.to_string()),
        StoreError::BadKey(_) => ApiError::BadRequest(e.to_string()),
        other => {
            tracing::warn!(error = %other, "the print store failed");
            ApiError::Unavailable(
                "the print store cannot be read or written now: try again later".into(),
            )
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/prints/{key}",
    tag = "researchers",
    description = "An episode's print, in the print store's envelope (checked by the store before it is sent).",
    params(("key" = String, Path, description = "The print's key (64 lowercase hex digits)")),
    responses(
        (status = 200, description = "The print in its envelope", content_type = "application/octet-stream"),
        (status = 404, description = "No such print, or no print store", body = ErrorAnswer),
        (status = 409, description = "The print kept is damaged: not sent", body = ErrorAnswer),
        (status = 400, description = "Not a print key", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn get(
    State(gateway): State<Arc<Gateway>>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let key = checked(&key)?;
    let store = store_of(&gateway)?;
    match store.get(key).await.map_err(refused)? {
        Some(payload) => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            prints::envelope::wrap(&payload),
        )
            .into_response()),
        None => Err(ApiError::NotFound(format!(
            "the print store holds no {key}"
        ))),
    }
}

#[utoipa::path(
    put,
    path = "/api/v1/prints/{key}",
    tag = "researchers",
    description = "Gives the print store an episode's print, in the print store's envelope; it replaces the print kept under the key.",
    params(("key" = String, Path, description = "The print's key (64 lowercase hex digits)")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The print in its envelope"),
    responses(
        (status = 204, description = "Kept"),
        (status = 422, description = "Not a whole print envelope: nothing kept", body = ErrorAnswer),
        (status = 413, description = "Longer than the server takes (`max_print_bytes` of `GET /api/v1/archive`)", body = ErrorAnswer),
        (status = 404, description = "No print store", body = ErrorAnswer),
        (status = 400, description = "Not a print key", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn put(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let key = checked(&key)?.to_string();
    let store = store_of(&gateway)?;
    let body = lines::read(body, gateway.limits.max_print_bytes).await?;
    let payload = prints::envelope::unwrap(&body)
        .map_err(|why| ApiError::Unprocessable(format!("not a whole print envelope: {why}")))?;
    store.put(&key, payload).await.map_err(refused)?;
    tracing::info!(token = %caller.name, print = %key, bytes = payload.len(), "a print given and kept");
    Ok(StatusCode::NO_CONTENT.into_response())
}
