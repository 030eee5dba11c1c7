//! `/api/clips`, `/api/clips/{id}`, `/api/episodes`, `/api/episodes/{id}`: the archive's pages
//! as JSON. Listings take `q` (title words), `cursor` and `limit` (1 to 500, default 50) and
//! answer `{"items": […], "next_cursor": "…" | null}`; a clip's page pages its occurrences the
//! same way. With a media archive, a clip's occurrences and an episode's timeline name the copy
//! each was measured on (`episode_media_sha256`). A bad cursor or limit answers 400, an unknown id 404, a datastore that cannot
//! answer 503, each with `{"error": why}`.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::Serialize;
use serde_json::json;

use super::app::App;
use super::browse::{browser, id, within, Params, Refusal, PAGE_ROWS};

/// Forgets the copies results were measured on where the server has no media archive: the
/// field names a kept copy (`episode_media_sha256`), as `matches` does.
fn without_copies(app: &App, page: &mut datastore::ClipPage) {
    if app.archive.is_none() {
        for o in &mut page.occurrences.items {
            o.episode_media_sha256 = None;
        }
    }
}

fn answer<T: Serialize>(result: Result<T, Refusal>) -> Response {
    match result {
        Ok(v) => Json(v).into_response(),
        Err(refusal) => (refusal.status(), Json(json!({ "error": refusal.why() }))).into_response(),
    }
}

pub(super) async fn clips(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw);
    answer(
        async {
            let query = params.query(PAGE_ROWS)?;
            within(&app, "the clips", browser(&app)?.list_clips(&query)).await
        }
        .await,
    )
}

pub(super) async fn episodes(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw);
    answer(
        async {
            let query = params.query(PAGE_ROWS)?;
            within(&app, "the episodes", browser(&app)?.list_episodes(&query)).await
        }
        .await,
    )
}

pub(super) async fn clip(
    State(app): State<Arc<App>>,
    Path(id_text): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw);
    answer(
        async {
            let id = id(&id_text, "clip")?;
            let query = params.query(PAGE_ROWS)?;
            let mut page = within(&app, "the clip", browser(&app)?.clip_page(id, &query))
                .await?
                .ok_or_else(|| Refusal::NotFound(format!("there is no clip {id}")))?;
            without_copies(&app, &mut page);
            Ok(page)
        }
        .await,
    )
}

pub(super) async fn episode(State(app): State<Arc<App>>, Path(id_text): Path<String>) -> Response {
    answer(
        async {
            let id = id(&id_text, "episode")?;
            let now = Utc::now();
            let mut page = within(&app, "the episode", browser(&app)?.episode_page(id, now))
                .await?
                .ok_or_else(|| Refusal::NotFound(format!("there is no episode {id}")))?;
            if app.archive.is_none() {
                for t in &mut page.timeline {
                    t.episode_media_sha256 = None;
                }
            }
            Ok(page)
        }
        .await,
    )
}
