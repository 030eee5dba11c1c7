//! What the status page and the API show, read from the datastore and the bus. Each section
//! is read on its own, within [`CHECK_TIMEOUT`]: one that fails says why (credentials masked)
//! and the others are still shown.

use std::future::Future;

use chrono::{DateTime, Utc};
use datastore::{FailureReason, LeaseSummary, Match, Status};
use messagebus::DeadLetter;
use serde::Serialize;

use super::app::{App, CHECK_TIMEOUT};
use crate::depths::QueueDepth;

/// Leases listed (expired first, then the oldest).
pub(crate) const LEASES_SHOWN: u32 = 50;
/// Dead letters shown per queue.
pub(crate) const DEAD_LETTERS_SHOWN: usize = 10;
/// Failure reasons listed (the most common first).
pub(crate) const FAILURE_REASONS_SHOWN: u32 = 5;
/// Recent matches listed.
pub(crate) const MATCHES_SHOWN: u32 = 20;
/// The most of a dead letter's body shown, in bytes (a body may be up to 1 MiB).
const BODY_SHOWN: usize = 2048;

/// A section, or why it could not be read.
pub(crate) type Section<T> = Result<T, String>;

/// The datastore's counts, as `status --json` has them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Counts {
    pub(crate) read_at: DateTime<Utc>,
    #[serde(flatten)]
    pub(crate) status: Status,
    /// Pairs neither researched, nor failed, nor leased.
    pub(crate) unresearched_pairs: u64,
    pub(crate) percent_researched: f64,
    /// The most common reasons of failed pairs, most pairs first.
    pub(crate) failure_reasons: Vec<FailureReason>,
}

/// A lease with its age, as listed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LeaseRow {
    #[serde(flatten)]
    pub(crate) lease: LeaseSummary,
    /// Seconds since it was taken.
    pub(crate) age_seconds: i64,
    /// Seconds until it expires; negative once expired.
    pub(crate) expires_in_seconds: i64,
}

/// A queue's depths and, when asked for and the bus can look, its first dead letters.
#[derive(Debug, Clone)]
pub(crate) struct QueueView {
    pub(crate) depth: QueueDepth,
    /// `None`: not asked for, or the bus cannot look without taking (RabbitMQ).
    pub(crate) dead_letters: Option<Vec<ShownLetter>>,
}

/// A dead letter as shown: its body as text, cut at [`BODY_SHOWN`] bytes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ShownLetter {
    pub(crate) message_id: String,
    pub(crate) reason: Option<String>,
    pub(crate) body: String,
    /// The whole body's size.
    pub(crate) body_bytes: usize,
    pub(crate) body_truncated: bool,
}

impl From<DeadLetter> for ShownLetter {
    /// `d` as read: its body already cut by the bus at [`BODY_SHOWN`] bytes. A body that is
    /// not UTF-8 shows with replacement characters where its bytes are not (U+FFFD).
    fn from(d: DeadLetter) -> Self {
        let read = d.body.len().min(BODY_SHOWN);
        let truncated = d.body_bytes > read;
        let mut cut = read;
        // A cut inside a UTF-8 sequence would show a replacement character: cut before it.
        if truncated {
            let start = cut.saturating_sub(3);
            if let Some(back) = (start..cut).rev().find(|&i| {
                d.body[i] & 0b1100_0000 == 0b1100_0000
                    && std::str::from_utf8(&d.body[i..cut]).is_err()
            }) {
                cut = back;
            }
        }
        ShownLetter {
            message_id: d.message_id,
            reason: d.reason,
            body: String::from_utf8_lossy(&d.body[..cut]).into_owned(),
            body_bytes: d.body_bytes,
            body_truncated: truncated,
        }
    }
}

/// Runs `read` within [`CHECK_TIMEOUT`], its error in words with credentials masked.
async fn within<T, E: std::fmt::Display>(
    app: &App,
    what: &str,
    read: impl Future<Output = Result<T, E>>,
) -> Section<T> {
    match tokio::time::timeout(CHECK_TIMEOUT, read).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failed(app, what, e)),
        Err(_) => Err(late(what)),
    }
}

fn failed(app: &App, what: &str, e: impl std::fmt::Display) -> String {
    app.sources.redactor.apply(&format!("{what}: {e}"))
}

fn late(what: &str) -> String {
    format!(
        "{what}: no answer within {}",
        humantime::format_duration(CHECK_TIMEOUT)
    )
}

/// The counts, read now (and added to the progress history).
pub(crate) async fn counts(app: &App) -> Section<Counts> {
    let now = Utc::now();
    let status = within(app, "datastore", app.sources.store.status(now)).await?;
    app.history.record(now, &status);
    let failure_reasons = if status.failed_pairs == 0 {
        Vec::new()
    } else {
        within(
            app,
            "datastore",
            app.sources.store.failure_reasons(FAILURE_REASONS_SHOWN),
        )
        .await?
    };
    let percent_researched = if status.research_pairs == 0 {
        0.0
    } else {
        100.0 * status.researched_pairs as f64 / status.research_pairs as f64
    };
    Ok(Counts {
        read_at: now,
        status,
        unresearched_pairs: status
            .research_pairs
            .saturating_sub(status.researched_pairs)
            .saturating_sub(status.failed_pairs)
            .saturating_sub(status.leased_pairs),
        percent_researched,
        failure_reasons,
    })
}

/// The leases that hold pairs, judged now.
pub(crate) async fn leases(app: &App) -> Section<Vec<LeaseRow>> {
    let now = Utc::now();
    let leases = within(
        app,
        "datastore",
        app.sources.store.leases(now, LEASES_SHOWN),
    )
    .await?;
    Ok(leases
        .into_iter()
        .map(|lease| LeaseRow {
            age_seconds: (now - lease.created_at).num_seconds(),
            expires_in_seconds: (lease.expires_at - now).num_seconds(),
            lease,
        })
        .collect())
}

/// The most recently researched matches; each names the copy it was measured on
/// (`episode_media_sha256`) only where the server has a media archive.
pub(crate) async fn recent_matches(app: &App) -> Section<Vec<Match>> {
    let mut matches = within(
        app,
        "datastore",
        app.sources.store.recent_matches(MATCHES_SHOWN),
    )
    .await?;
    if app.archive.is_none() {
        for m in &mut matches {
            m.episode_media_sha256 = None;
        }
    }
    Ok(matches)
}

/// The media archive's figures: `None` without an archive. Counted at most once a minute,
/// in the background (see `archive_view.rs`).
pub(crate) async fn archive(
    app: &App,
) -> Option<Section<std::sync::Arc<super::archive_view::ArchiveFigures>>> {
    Some(app.archive.as_ref()?.figures().await)
}

/// The queues as read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queues {
    pub(crate) views: Vec<QueueView>,
    /// Configured queues that do not exist (yet): `archivist queues` creates them.
    pub(crate) missing: Vec<String>,
}

/// Every queue's depths, and with `peek` its first dead letters. `None` when the queues
/// live in another process (the in-memory bus).
pub(crate) async fn queues(app: &App, peek: bool) -> Section<Option<Queues>> {
    let Some(bus) = app
        .sources
        .bus
        .get()
        .map_err(|why| format!("the bus cannot be read: {why}"))?
    else {
        return Ok(None);
    };
    let mut read = Queues::default();
    for queue in &app.sources.queues {
        let what = format!("queue {queue}");
        let sender = match tokio::time::timeout(CHECK_TIMEOUT, bus.sender(queue)).await {
            Ok(Err(messagebus::BusError::QueueNotFound(_))) => {
                read.missing.push(queue.clone());
                continue;
            }
            Ok(Ok(sender)) => sender,
            Ok(Err(e)) => return Err(failed(app, &what, e)),
            Err(_) => return Err(late(&what)),
        };
        let stats = within(app, &what, sender.inspect()).await?;
        let dead_letters = if peek && stats.dead_letters > 0 {
            within(
                app,
                &format!("dead letters of {queue}"),
                sender.peek_dead_letters(DEAD_LETTERS_SHOWN, BODY_SHOWN),
            )
            .await?
            .map(|letters| letters.into_iter().map(ShownLetter::from).collect())
        } else if peek {
            Some(Vec::new())
        } else {
            None
        };
        read.views.push(QueueView {
            depth: QueueDepth::new(queue, stats),
            dead_letters,
        });
    }
    Ok(Some(read))
}
