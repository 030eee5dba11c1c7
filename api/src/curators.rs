//! `POST /api/v1/episodes` and `POST /api/v1/clips`: one message or JSON lines, every line
//! checked before any is sent; the answer comes once all are durably on the curated queue.

use std::sync::Arc;

use archivist::messages::{ClipInfo, EpisodeInfo, Message};
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::auth::Caller;
#[allow(unused_imports)]
use crate::error::ErrorAnswer;
use crate::lines::{self, HasMedia};
use crate::state::{Gateway, SendTo};
use crate::ApiError;

/// 202's body: how many messages are on the queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Accepted {
    /// Messages now durably on the curated queue.
    accepted: usize,
}

#[utoipa::path(
    post,
    path = "/api/v1/episodes",
    tag = "curators",
    description = "One EpisodeInfo, or one a line. Every line is checked with the archivists' rules before any is sent; media addresses must be http(s).",
    request_body(content = String, content_type = "application/x-ndjson", description = "One EpisodeInfo JSON object, or one a line"),
    responses(
        (status = 202, description = "All lines durably on the curated queue", body = Accepted),
        (status = 422, description = "Lines that break the rules; nothing sent", body = ErrorAnswer),
        (status = 400, description = "Not JSON (the line named), or no message", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 413, description = "The body is over the limit", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn episodes(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    curate::<EpisodeInfo>(&gateway, &caller, SendTo::CuratedEpisodes, body).await
}

#[utoipa::path(
    post,
    path = "/api/v1/clips",
    tag = "curators",
    description = "One ClipInfo, or one a line. Every line is checked with the archivists' rules before any is sent; media addresses must be http(s).",
    request_body(content = String, content_type = "application/x-ndjson", description = "One ClipInfo JSON object, or one a line"),
    responses(
        (status = 202, description = "All lines durably on the curated queue", body = Accepted),
        (status = 422, description = "Lines that break the rules; nothing sent", body = ErrorAnswer),
        (status = 400, description = "Not JSON (the line named), or no message", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 413, description = "The body is over the limit", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn clips(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    curate::<ClipInfo>(&gateway, &caller, SendTo::CuratedClips, body).await
}

async fn curate<M: Message + HasMedia>(
    gateway: &Gateway,
    caller: &Caller,
    to: SendTo,
    body: Body,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let body = lines::read(body, gateway.limits.max_body_bytes).await?;
    let lines = lines::split(&body, gateway.limits.max_lines)?;
    lines::decode_all::<M>(&lines, lines::http_media)?;
    // The lines as the curator wrote them (fields this version does not know kept).
    let bodies: Vec<Vec<u8>> = lines.iter().map(|l| l.bytes.to_vec()).collect();
    let accepted = bodies.len();
    gateway.sender(to).await?.send_batch(bodies).await?;
    tracing::info!(token = %caller.name, ?to, accepted, "curated messages sent");
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted })))
}
