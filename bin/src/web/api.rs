//! `/api/…`: the status page's data as JSON, one endpoint per section. A section that
//! cannot be read answers 503 with `{"error": why}` (credentials masked).
//!
//! - `/api/status`: the counts, as `archivist status --json` has them, with `read_at` and
//!   `percent_researched`; with a media archive, its figures under `media_archive`.
//! - `/api/progress`: the samples of research progress this server took, oldest first, and
//!   the rate over the last five minutes.
//! - `/api/leases`: leases holding pairs with their episode, age and state.
//! - `/api/queues`: each queue's depths, and the configured queues that do not exist yet
//!   (`null`: the queues live in another process).
//! - `/api/dead-letters`: each existing queue's dead letters, the first ones with reason and
//!   body.
//! - `/api/matches`: the most recently researched matches.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;

use super::app::App;
use super::history::{rate_per_minute, Sample};
use super::snapshot::{self, Section, ShownLetter};
use crate::depths::QueueDepth;

fn answer<T: Serialize>(section: Section<T>) -> Response {
    match section {
        Ok(v) => Json(v).into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": why })),
        )
            .into_response(),
    }
}

/// `/api/status`: the counts, and with a media archive its figures (`media_archive`, or
/// `{"error": why}` when they cannot be counted now).
#[derive(Serialize)]
struct StatusBody {
    #[serde(flatten)]
    counts: snapshot::Counts,
    #[serde(skip_serializing_if = "Option::is_none")]
    media_archive: Option<ArchiveSection>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ArchiveSection {
    Counted(Arc<super::archive_view::ArchiveFigures>),
    Unavailable { error: String },
}

pub(super) async fn status(State(app): State<Arc<App>>) -> Response {
    let (counts, archive) = tokio::join!(snapshot::counts(&app), snapshot::archive(&app));
    answer(counts.map(|counts| StatusBody {
        counts,
        media_archive: archive.map(|a| match a {
            Ok(figures) => ArchiveSection::Counted(figures),
            Err(error) => ArchiveSection::Unavailable { error },
        }),
    }))
}

#[derive(Serialize)]
struct Progress {
    samples: Vec<Sample>,
    researched_per_minute: Option<f64>,
}

pub(super) async fn progress(State(app): State<Arc<App>>) -> Response {
    // A fresh reading first, so that the newest sample is now.
    if let Err(why) = snapshot::counts(&app).await {
        return answer::<()>(Err(why));
    }
    let samples = app.history.samples();
    answer(Ok(Progress {
        researched_per_minute: rate_per_minute(&samples),
        samples,
    }))
}

pub(super) async fn leases(State(app): State<Arc<App>>) -> Response {
    answer(snapshot::leases(&app).await)
}

#[derive(Serialize)]
struct QueueDepths {
    queues: Vec<QueueDepth>,
    /// Configured queues that do not exist yet (`archivist queues` creates them).
    missing: Vec<String>,
}

pub(super) async fn queues(State(app): State<Arc<App>>) -> Response {
    answer(snapshot::queues(&app, false).await.map(|qs| {
        qs.map(|qs| QueueDepths {
            queues: qs.views.into_iter().map(|q| q.depth).collect(),
            missing: qs.missing,
        })
    }))
}

#[derive(Serialize)]
struct QueueDeadLetters {
    queue: String,
    dead_letter_queue: String,
    /// How many there are.
    dead_letters: u64,
    /// The first of them; `null` where the bus cannot look without taking them (RabbitMQ).
    shown: Option<Vec<ShownLetter>>,
}

pub(super) async fn dead_letters(State(app): State<Arc<App>>) -> Response {
    answer(snapshot::queues(&app, true).await.map(|qs| {
        qs.map(|qs| {
            qs.views
                .into_iter()
                .map(|q| QueueDeadLetters {
                    queue: q.depth.queue,
                    dead_letter_queue: q.depth.dead_letter_queue,
                    dead_letters: q.depth.dead_letters,
                    shown: q.dead_letters,
                })
                .collect::<Vec<_>>()
        })
    }))
}

pub(super) async fn matches(State(app): State<Arc<App>>) -> Response {
    answer(snapshot::recent_matches(&app).await)
}
