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
use crate::gateway::Gateway;
use crate::lines::{self, HasMedia};
use crate::ApiError;

/// 202's body: how many messages are on the queue.
#[derive(Debug, Serialize)]
pub(crate) struct Accepted {
    accepted: usize,
}

pub(crate) async fn episodes(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let queue = gateway.queues.curated_episodes.clone();
    curate::<EpisodeInfo>(&gateway, &caller, 0, &queue, body).await
}

pub(crate) async fn clips(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let queue = gateway.queues.curated_clips.clone();
    curate::<ClipInfo>(&gateway, &caller, 1, &queue, body).await
}

async fn curate<M: Message + HasMedia>(
    gateway: &Gateway,
    caller: &Caller,
    sender: usize,
    queue: &str,
    body: Body,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let body = lines::read(body, gateway.limits.max_body_bytes).await?;
    let lines = lines::split(&body)?;
    lines::decode_all::<M>(&lines, lines::http_media)?;
    // The lines as the curator wrote them (fields this version does not know kept).
    let bodies: Vec<Vec<u8>> = lines.iter().map(|l| l.bytes.to_vec()).collect();
    let accepted = bodies.len();
    gateway.sender(sender, queue).await?.send_batch(bodies).await?;
    tracing::info!(token = %caller.name, queue, accepted, "curated messages sent");
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted })))
}
