//! What each slot of a researcher is working on, since when: [`Status`], shared by the slots
//! and whoever shows it, and [`router`], which answers `/api/researcher` with it.
//!
//! The library gives the route and not a server: where a researcher listens, whether it
//! listens at all, and what else that server shows (the `archivist` binary adds Prometheus
//! `/metrics`, whose recorder is process-wide, and `/healthz`) are the host's. What
//! `/api/researcher` answers is the researcher's own, so it lives beside the slots it shows.

use std::sync::{Arc, Mutex, PoisonError};

use archivist::messages::PendingResearchItem;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// What one slot is doing, as `/api/researcher` shows it (`"state": "idle"` or
/// `"working"`).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SlotState {
    /// Waiting for a work item.
    Idle,
    /// Researching a work item.
    Working {
        /// The item's lease.
        lease_id: uuid::Uuid,
        /// The item's episode.
        episode_title: String,
        /// When that episode aired.
        episode_date_aired: DateTime<Utc>,
        /// Clips in the item.
        clips: usize,
        /// Since when the slot has the item.
        since: DateTime<Utc>,
        /// The analyser's latest progress line.
        #[serde(skip_serializing_if = "Option::is_none")]
        progress: Option<String>,
    },
}

impl SlotState {
    pub(crate) fn working(item: &PendingResearchItem) -> Self {
        SlotState::Working {
            lease_id: item.lease_id,
            episode_title: item.episode.title.clone(),
            episode_date_aired: item.episode.date_aired,
            clips: item.clips.len(),
            since: Utc::now(),
            progress: None,
        }
    }
}

/// A researcher's slots, as they are now. Cheap to clone: every clone sees the same slots.
#[derive(Debug, Clone)]
pub struct Status {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    analyser: String,
    slots: Mutex<Vec<SlotState>>,
}

/// A copy of a researcher's [`Status`] at one moment.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Snapshot {
    /// The analyser, as [`Analyser::describe`](crate::Analyser::describe) names it.
    pub analyser: String,
    /// Each slot's state, slot 0 first.
    pub slots: Vec<SlotState>,
}

impl Snapshot {
    /// Slots working on an item.
    pub fn busy(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, SlotState::Working { .. }))
            .count()
    }
}

impl Status {
    /// `slots` idle slots of a researcher running `analyser` (as described).
    pub(crate) fn new(analyser: String, slots: usize) -> Self {
        Status {
            inner: Arc::new(Inner {
                analyser,
                slots: Mutex::new(vec![SlotState::Idle; slots]),
            }),
        }
    }

    /// The slots now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            analyser: self.inner.analyser.clone(),
            slots: self
                .inner
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    pub(crate) fn set(&self, slot: usize, state: SlotState) {
        let mut slots = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = slots.get_mut(slot) {
            *s = state;
        }
    }

    pub(crate) fn set_progress(&self, slot: usize, text: String) {
        let mut slots = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(SlotState::Working { progress, .. }) = slots.get_mut(slot) {
            *progress = Some(text);
        }
    }
}

/// `GET /api/researcher`: the analyser, the slots (`concurrency`), how many are `busy`, and
/// each slot's state. Merge it into the host's router; it shows episode titles and leases,
/// so serve it as the status page is (`net::server`: on loopback, to loopback host names
/// only).
pub fn router(status: Status) -> Router {
    Router::new()
        .route("/api/researcher", get(researcher))
        .with_state(status)
}

async fn researcher(State(status): State<Status>) -> impl IntoResponse {
    let snapshot = status.snapshot();
    Json(serde_json::json!({
        "analyser": snapshot.analyser,
        "concurrency": snapshot.slots.len(),
        "busy": snapshot.busy(),
        "slots": snapshot.slots,
    }))
}
