//! `GET /api/v1/status` and `GET /api/v1/matches`: the objects of `archivist status --json`
//! (the datastore's counts) and `archivist matches` (one match a line), for reader tokens.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use datastore::{FailureReason, MatchFilter, Status};
use serde::{Deserialize, Serialize};

#[allow(unused_imports)]
use crate::error::ErrorAnswer;
use crate::state::Gateway;
use crate::ApiError;

/// The failure reasons `GET /api/v1/status` lists, most pairs first (as `archivist status`).
const REASONS_SHOWN: u32 = 5;

/// The most matches one request lists (`limit` asks for fewer).
pub const MAX_MATCHES: u64 = 100_000;

#[derive(Serialize)]
pub(crate) struct StatusBody {
    #[serde(flatten)]
    status: Status,
    /// Pairs neither researched, nor failed, nor leased.
    unresearched_pairs: u64,
    /// Nothing is left to do: there are pairs, and each is researched or failed.
    done: bool,
    /// The most common reasons of failed pairs, most pairs first.
    failure_reasons: Vec<FailureReason>,
    /// When the counts were read.
    read_at: DateTime<Utc>,
}

#[utoipa::path(
    get,
    path = "/api/v1/status",
    tag = "readers",
    description = "The datastore's counts, as `archivist status --json` has them.",
    responses(
        (status = 200, description = "The counts (episodes, clips, research_pairs, researched_pairs, matched_pairs, failed_pairs, active_leases, expired_leases, …), `done` (every pair researched or failed) and `failure_reasons`", content_type = "application/json"),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn status(State(gateway): State<Arc<Gateway>>) -> Result<Response, ApiError> {
    let now = Utc::now();
    let status = gateway.store.status(now).await?;
    let failure_reasons = if status.failed_pairs == 0 {
        Vec::new()
    } else {
        gateway.store.failure_reasons(REASONS_SHOWN).await?
    };
    Ok(Json(StatusBody {
        unresearched_pairs: status
            .research_pairs
            .saturating_sub(status.researched_pairs)
            .saturating_sub(status.failed_pairs)
            .saturating_sub(status.leased_pairs),
        done: status.research_pairs > 0
            && status.researched_pairs.saturating_add(status.failed_pairs) >= status.research_pairs,
        failure_reasons,
        status,
        read_at: now,
    })
    .into_response())
}

/// `matches`' filters, as `archivist matches` takes them.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct MatchesQuery {
    /// Only matches of the clip with this title.
    clip: Option<String>,
    /// Only matches in episodes with this title.
    episode: Option<String>,
    /// At most this many (and at most 100,000).
    limit: Option<u64>,
    /// Only matches researched at or after this time (RFC 3339).
    since: Option<DateTime<Utc>>,
}

#[utoipa::path(
    get,
    path = "/api/v1/matches",
    tag = "readers",
    description = "Recorded matches, one JSON object a line, as `archivist matches` prints them.",
    params(MatchesQuery),
    responses(
        (status = 200, description = "One match a line", content_type = "application/x-ndjson"),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn matches(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<MatchesQuery>,
) -> Result<Response, ApiError> {
    let filter = MatchFilter {
        clip_title: query.clip,
        episode_title: query.episode,
        limit: Some(query.limit.unwrap_or(MAX_MATCHES).min(MAX_MATCHES)),
        since: query.since,
    };
    let mut found = gateway.store.matches(&filter).await?;
    // The copy a match was measured on is named only where the server keeps copies (as
    // local `matches` names it only with `--media-archive`).
    if gateway.holdings.archive.is_none() {
        for m in &mut found {
            m.episode_media_sha256 = None;
        }
    }
    let mut body = Vec::new();
    for m in &found {
        serde_json::to_writer(&mut body, m)
            .map_err(|e| ApiError::Unavailable(format!("a match could not be written: {e}")))?;
        body.push(b'\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}
