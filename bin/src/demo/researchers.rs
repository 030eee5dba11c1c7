//! The demo's researchers: concurrent tasks, each a live receiver on `pending_research` (so
//! the bus counts it as a consumer). A researcher acknowledges a work item as soon as it takes
//! it (the lease, not the message, is what brings abandoned work back), researches each clip
//! with a small random delay, and sends one result per clip, the last one ending the lease.
//!
//! One researcher crashes mid-lease: after sending part of an item's results it stops for
//! good. Its lease then expires and the pending-research archivist hands the rest to others.
//!
//! The [`Ledger`] counts every research execution per pair, for the exactly-once check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use archivist::messages::{decode, encode, CompletedResearchItem, PendingResearchItem};
use chrono::{DateTime, Utc};
use messagebus::{Receiver, Sender};
use rand::Rng;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::demo::analysis;

/// How long one receive waits before checking for cancellation again.
const RECEIVE_WAIT: Duration = Duration::from_millis(200);

/// A research pair: episode title, episode air date, clip title.
pub(crate) type Pair = (String, DateTime<Utc>, String);

/// The crash the demo stages.
#[derive(Debug, Clone)]
pub(crate) struct Crash {
    pub(crate) researcher: usize,
    pub(crate) lease_id: Uuid,
    pub(crate) episode: String,
    pub(crate) sent: usize,
    pub(crate) clips: usize,
}

/// What all researchers did.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The leases each pair was researched under.
    executions: Mutex<HashMap<Pair, Vec<Uuid>>>,
    pub(crate) items: AtomicU64,
    pub(crate) results: AtomicU64,
    pub(crate) matches: AtomicU64,
    crash: Mutex<Option<Crash>>,
}

impl Ledger {
    fn executed(&self, pair: Pair, lease: Uuid) {
        let mut map = self.executions.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(pair).or_default().push(lease);
    }

    /// The leases each pair was researched under: one entry per research execution.
    pub(crate) fn executions(&self) -> HashMap<Pair, Vec<Uuid>> {
        self.executions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The staged crash, once it happened.
    pub(crate) fn crash(&self) -> Option<Crash> {
        self.crash.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One researcher's settings.
pub(crate) struct Researcher {
    pub(crate) id: usize,
    /// Crash on the `n`-th work item taken (1-based) that has at least two clips.
    pub(crate) crash_on_item: Option<u64>,
}

/// Runs one researcher until the token is cancelled (finishing the item in hand) or its
/// staged crash.
pub(crate) async fn run(
    me: Researcher,
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    results: Arc<dyn Sender>,
    ledger: Arc<Ledger>,
) -> anyhow::Result<()> {
    let mut taken = 0u64;
    while !token.is_cancelled() {
        let batch = tokio::select! {
            _ = token.cancelled() => break,
            b = receiver.receive(1, RECEIVE_WAIT) => b.context("researcher: receiving work")?,
        };
        for delivery in batch {
            let item: PendingResearchItem = match decode(delivery.body()) {
                Ok(item) => item,
                Err(e) => {
                    delivery.dead_letter(&e.to_string()).await?;
                    continue;
                }
            };
            // Taking the work: from now on the lease, not the message, brings it back.
            delivery
                .ack()
                .await
                .context("researcher: acknowledging work")?;
            ledger.items.fetch_add(1, Ordering::Relaxed);
            if item.clips.len() >= 2 {
                taken += 1;
            }
            let crash_at = match me.crash_on_item {
                Some(n) if n == taken && item.clips.len() >= 2 => Some(item.clips.len() / 2),
                _ => None,
            };
            // Fetching the episode's audio.
            pause(2..12).await;
            let last = item.clips.len().saturating_sub(1);
            for (i, clip) in item.clips.iter().enumerate() {
                if crash_at == Some(i) {
                    let crash = Crash {
                        researcher: me.id,
                        lease_id: item.lease_id,
                        episode: item.episode.title.clone(),
                        sent: i,
                        clips: item.clips.len(),
                    };
                    tracing::warn!(
                        researcher = me.id,
                        lease = %item.lease_id,
                        episode = %crash.episode,
                        "researcher crashed mid-lease after sending {} of {} results; \
                         its lease will expire and the rest will be handed out again",
                        crash.sent,
                        crash.clips
                    );
                    *ledger.crash.lock().unwrap_or_else(|p| p.into_inner()) = Some(crash);
                    return Ok(());
                }
                pause(0..2).await;
                let finding = analysis::research(&item.episode, clip);
                ledger.executed(
                    (
                        item.episode.title.clone(),
                        item.episode.date_aired,
                        clip.title.clone(),
                    ),
                    item.lease_id,
                );
                if !finding.clip_offsets_ns.is_empty() {
                    ledger.matches.fetch_add(1, Ordering::Relaxed);
                }
                let result = CompletedResearchItem {
                    lease_id: item.lease_id,
                    revoke_lease: i == last,
                    research_date: Utc::now(),
                    episode: item.episode.clone(),
                    clip: clip.clone(),
                    episode_duration_ns: finding.episode_duration_ns,
                    episode_hash: finding.episode_hash,
                    clip_duration_ns: finding.clip_duration_ns,
                    clip_hash: finding.clip_hash,
                    clip_offsets_ns: finding.clip_offsets_ns,
                    failure: None,
                };
                results
                    .send(encode(&result))
                    .await
                    .context("researcher: sending a result")?;
                ledger.results.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// A short random pause, in milliseconds.
async fn pause(range: std::ops::Range<u64>) {
    let ms = rand::thread_rng().gen_range(range);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}
