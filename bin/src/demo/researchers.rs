//! The demo's researchers: `archivist research`'s own runtime (its slots, media handling, line
//! checks and settlement), in this process, running the reference analyser on the demo's
//! audio. The analyser is wrapped in a [`StagedAnalyser`], which keeps the [`Ledger`] of every
//! answer per pair (for the exactly-once check) and stages one failure: on one work item the
//! analyser stops answering halfway through. The researcher's stall timeout stops it and
//! releases the item; by then its lease has expired and the pending-research archivist has
//! handed the unanswered pairs to another researcher, so the item, when it comes back, is
//! skipped as expired. The reference analyser keeps episode prints in the demo's own store
//! (beside its media): the new clip's pass is answered from them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use research::{Analyser, BoxError, Ending, EpisodeMedia, Run};

/// A research pair: episode title, episode air date, clip title.
pub(crate) type Pair = (String, DateTime<Utc>, String);

/// The stall the demo stages.
#[derive(Debug, Clone)]
pub(crate) struct Stall {
    pub(crate) lease_id: Uuid,
    pub(crate) episode: String,
    pub(crate) answered: usize,
    pub(crate) clips: usize,
}

/// What all researchers did.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The leases each pair was answered under, once per answer.
    executions: Mutex<HashMap<Pair, Vec<Uuid>>>,
    pub(crate) items: AtomicU64,
    pub(crate) results: AtomicU64,
    pub(crate) matches: AtomicU64,
    stall: Mutex<Option<Stall>>,
}

impl Ledger {
    fn executed(&self, pair: Pair, lease: Uuid) {
        let mut map = self.executions.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(pair).or_default().push(lease);
    }

    /// The leases each pair was answered under: one entry per answer.
    pub(crate) fn executions(&self) -> HashMap<Pair, Vec<Uuid>> {
        self.executions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The staged stall, once it happened.
    pub(crate) fn stall(&self) -> Option<Stall> {
        self.stall.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The reference analyser, with the ledger kept and one stall staged.
pub(crate) struct StagedAnalyser {
    inner: Arc<dyn Analyser>,
    ledger: Arc<Ledger>,
    /// Stall on the `n`-th work item (1-based) that has at least two clips.
    stall_on_item: u64,
    taken: AtomicU64,
}

impl StagedAnalyser {
    pub(crate) fn new(inner: Arc<dyn Analyser>, ledger: Arc<Ledger>, stall_on_item: u64) -> Self {
        StagedAnalyser {
            inner,
            ledger,
            stall_on_item,
            taken: AtomicU64::new(0),
        }
    }
}

/// What the wrapper reads of the item the runtime hands the analyser.
#[derive(serde::Deserialize)]
struct Input {
    lease_id: Uuid,
    episode: Titled,
    clips: Vec<Titled>,
}

#[derive(serde::Deserialize)]
struct Titled {
    title: String,
    #[serde(default)]
    date_aired: Option<DateTime<Utc>>,
}

/// What the wrapper reads of an answer.
#[derive(serde::Deserialize)]
struct Answer {
    clip_title: Option<String>,
    #[serde(default)]
    clip_offsets_ns: Vec<i64>,
}

impl StagedAnalyser {
    /// Wraps the inner analyser's `run` of `item`.
    fn staged(&self, item: Input, run: Box<dyn Run>) -> Box<dyn Run> {
        self.ledger.items.fetch_add(1, Ordering::Relaxed);
        let stall_after = if item.clips.len() >= 2 {
            let n = self.taken.fetch_add(1, Ordering::Relaxed) + 1;
            (n == self.stall_on_item).then_some(item.clips.len() / 2)
        } else {
            None
        };
        Box::new(StagedRun {
            run,
            ledger: self.ledger.clone(),
            lease_id: item.lease_id,
            episode: item.episode.title,
            aired: item.episode.date_aired.unwrap_or_default(),
            clips: item.clips.len(),
            answered: 0,
            stall_after,
            stalled: false,
        })
    }
}

#[async_trait]
impl Analyser for StagedAnalyser {
    async fn start(&self, input: Vec<u8>, lease: &str) -> Result<Box<dyn Run>, BoxError> {
        let item: Input = serde_json::from_slice(&input)?;
        let run = self.inner.start(input, lease).await?;
        Ok(self.staged(item, run))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn fetches_episode(&self) -> bool {
        self.inner.fetches_episode()
    }

    async fn start_fetching(
        &self,
        input: Vec<u8>,
        lease: &str,
        episode: EpisodeMedia,
    ) -> Result<Box<dyn Run>, BoxError> {
        let item: Input = serde_json::from_slice(&input)?;
        let run = self.inner.start_fetching(input, lease, episode).await?;
        Ok(self.staged(item, run))
    }
}

struct StagedRun {
    run: Box<dyn Run>,
    ledger: Arc<Ledger>,
    lease_id: Uuid,
    episode: String,
    aired: DateTime<Utc>,
    clips: usize,
    answered: usize,
    stall_after: Option<usize>,
    stalled: bool,
}

#[async_trait]
impl Run for StagedRun {
    async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
        if self.stalled {
            return std::future::pending().await;
        }
        let line = self.run.next_line().await?;
        let Some(text) = &line else {
            return Ok(line);
        };
        let Ok(Answer {
            clip_title: Some(clip),
            clip_offsets_ns,
        }) = serde_json::from_str::<Answer>(text)
        else {
            return Ok(line);
        };
        if self.stall_after == Some(self.answered) {
            self.stalled = true;
            let stall = Stall {
                lease_id: self.lease_id,
                episode: self.episode.clone(),
                answered: self.answered,
                clips: self.clips,
            };
            tracing::warn!(
                lease = %self.lease_id,
                episode = %stall.episode,
                "the analyser stopped answering after {} of {} clips (staged); the stall \
                 timeout will stop it, and the lease will expire and hand the rest out again",
                stall.answered,
                stall.clips
            );
            *self.ledger.stall.lock().unwrap_or_else(|p| p.into_inner()) = Some(stall);
            return std::future::pending().await;
        }
        self.answered += 1;
        self.ledger
            .executed((self.episode.clone(), self.aired, clip), self.lease_id);
        self.ledger.results.fetch_add(1, Ordering::Relaxed);
        if !clip_offsets_ns.is_empty() {
            self.ledger.matches.fetch_add(1, Ordering::Relaxed);
        }
        Ok(line)
    }

    async fn finish(&mut self) -> Ending {
        self.run.finish().await
    }

    async fn stop(self: Box<Self>) {
        self.run.stop().await
    }

    fn episode_hash(&self) -> Option<String> {
        self.run.episode_hash()
    }
}
