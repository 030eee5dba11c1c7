//! Test scaffolding: an environment (memory bus with the four queues, a fresh SQLite store),
//! message builders, and wrappers that inject faults into a datastore, a sender or a receiver.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use archivist::messages::{encode, CompletedResearchItem, PendingResearchItem};
use archivist::{ArchivistHandle, Ended, Report, RetryPolicy};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use datastore::{
    ClipInfo, DataStore, DataStoreError, EpisodeInfo, Lease, LeaseRequest, LeaseUpdate, Match,
    MatchFilter, RecordOutcome, ResearchResult, SqliteDataStore, Status,
};
use messagebus::{
    dead_letter_queue_name, Bus, BusError, Delivery, MemoryBus, MemoryBusConfig, QueueStats,
    Receiver, Sender,
};
use tokio::sync::mpsc;
use uuid::Uuid;

pub(crate) use datastore::testing::{clip, episode};

pub(crate) const EPISODES: &str = "curated_episodes";
pub(crate) const CLIPS: &str = "curated_clips";
pub(crate) const PENDING: &str = "pending_research";
pub(crate) const COMPLETED: &str = "completed_research";

/// A memory bus with the four queues, and a migrated SQLite store in a temporary directory.
pub(crate) struct Env {
    pub(crate) bus: MemoryBus,
    pub(crate) store: Arc<dyn DataStore>,
    /// Keeps the store's backing alive: a temporary directory or a test database.
    _guard: Box<dyn std::any::Any + Send>,
}

/// Which datastore an [`Env`] runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backend {
    /// A file in a temporary directory.
    Sqlite,
    /// A fresh database on the test server (`ARCHIVIST_TEST_PG_URL`), dropped afterwards.
    Postgres,
}

impl Env {
    pub(crate) async fn new() -> Env {
        Env::with_bus(MemoryBusConfig::default()).await
    }

    pub(crate) async fn with_bus(config: MemoryBusConfig) -> Env {
        Env::on(Backend::Sqlite, config).await
    }

    pub(crate) async fn on(backend: Backend, config: MemoryBusConfig) -> Env {
        let bus = MemoryBus::with_seed(config, 7);
        for q in [EPISODES, CLIPS, PENDING, COMPLETED] {
            bus.create_queue(q).await.unwrap();
        }
        let (store, guard): (Arc<dyn DataStore>, Box<dyn std::any::Any + Send>) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("archive.sqlite").display());
                let store = SqliteDataStore::connect(&url).await.unwrap();
                store.migrate().await.unwrap();
                (Arc::new(store), Box::new(dir))
            }
            Backend::Postgres => {
                let (store, db) = datastore::testing_pg::fresh_pg_store().await;
                (Arc::new(store), Box::new(db))
            }
        };
        Env {
            bus,
            store,
            _guard: guard,
        }
    }

    pub(crate) async fn sender(&self, queue: &str) -> Arc<dyn Sender> {
        self.bus.sender(queue).await.unwrap()
    }

    pub(crate) async fn receiver(&self, queue: &str) -> Arc<dyn Receiver> {
        self.bus.receiver(queue).await.unwrap()
    }

    pub(crate) async fn send(&self, queue: &str, bodies: Vec<Vec<u8>>) {
        self.sender(queue).await.send_batch(bodies).await.unwrap();
    }

    pub(crate) async fn stats(&self, queue: &str) -> QueueStats {
        self.sender(queue).await.inspect().await.unwrap()
    }

    /// Takes every visible message off `queue` (acknowledging it) and returns the bodies.
    pub(crate) async fn drain(&self, queue: &str) -> Vec<Vec<u8>> {
        let rx = self.receiver(queue).await;
        let mut out = Vec::new();
        loop {
            let batch = rx.receive(100, Duration::ZERO).await.unwrap();
            if batch.is_empty() {
                return out;
            }
            for d in batch {
                out.push(d.body().to_vec());
                d.ack().await.unwrap();
            }
        }
    }

    /// Takes every dead letter of `queue`: (body, reason).
    pub(crate) async fn dead_letters(&self, queue: &str) -> Vec<(Vec<u8>, String)> {
        let rx = self.receiver(&dead_letter_queue_name(queue)).await;
        let mut out = Vec::new();
        loop {
            let batch = rx.receive(100, Duration::ZERO).await.unwrap();
            if batch.is_empty() {
                return out;
            }
            for d in batch {
                out.push((
                    d.body().to_vec(),
                    d.dead_letter_reason().unwrap_or_default().to_string(),
                ));
                d.ack().await.unwrap();
            }
        }
    }

    pub(crate) async fn status(&self) -> Status {
        self.store.status(Utc::now()).await.unwrap()
    }
}

/// Retries quickly so that tests of passing failures take milliseconds.
pub(crate) fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        budget: None,
    }
}

/// Waits for a run's report, whatever it ended with.
pub(crate) async fn done(handle: ArchivistHandle) -> Report {
    handle.done.await.unwrap()
}

pub(crate) fn finished(report: &Report) -> bool {
    matches!(report.ended, Ended::Finished)
}

pub(crate) fn cancelled(report: &Report) -> bool {
    matches!(report.ended, Ended::Cancelled)
}

pub(crate) fn episodes(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range.map(|i| encode(&episode(i))).collect()
}

pub(crate) fn clips(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range.map(|i| encode(&clip(i))).collect()
}

/// A researcher's answer for one clip of `item`; `last` ends the lease. Clips whose number is
/// divisible by three are "found" at an offset derived from the episode.
pub(crate) fn completed(
    item: &PendingResearchItem,
    clip: &ClipInfo,
    last: bool,
) -> CompletedResearchItem {
    let found = clip
        .title
        .trim_start_matches("Clip ")
        .parse::<u32>()
        .is_ok_and(|n| n % 3 == 0);
    CompletedResearchItem {
        lease_id: item.lease_id,
        revoke_lease: last,
        research_date: Utc::now(),
        episode: item.episode.clone(),
        clip: clip.clone(),
        episode_duration_ns: 3_600_000_000_000,
        episode_hash: format!("sha256:{}", item.episode.title),
        clip_duration_ns: 4_000_000_000,
        clip_hash: format!("sha256:{}", clip.title),
        clip_offsets_ns: if found {
            vec![i64::from(item.episode.date_aired.timestamp_subsec_nanos()) + 1_000]
        } else {
            Vec::new()
        },
        clip_match_scores: None,
        failure: None,
        clip_findability: None,
    }
}

/// Every answer for `item`, the last one revoking the lease.
pub(crate) fn answers(item: &PendingResearchItem) -> Vec<CompletedResearchItem> {
    let n = item.clips.len();
    item.clips
        .iter()
        .enumerate()
        .map(|(i, c)| completed(item, c, i + 1 == n))
        .collect()
}

/// A work item for a lease taken directly from the store.
pub(crate) fn item_for(lease: &Lease) -> PendingResearchItem {
    PendingResearchItem {
        lease_id: lease.id,
        lease_expires_at: lease.expires_at,
        episode: lease.episode.clone(),
        clips: lease.clips.clone(),
    }
}

pub(crate) async fn lease(
    store: &dyn DataStore,
    max_clips: u32,
    duration: chrono::Duration,
    now: DateTime<Utc>,
) -> Option<Lease> {
    store
        .lease_next(LeaseRequest {
            max_clips,
            duration,
            now,
            lease_id: uuid::Uuid::new_v4(),
        })
        .await
        .unwrap()
}

pub(crate) fn unavailable() -> DataStoreError {
    DataStoreError::Unavailable(sqlx::Error::PoolTimedOut)
}

/// Decides, before each call of a writing method, whether it fails: gets the method's name
/// and the 1-based number of the call among writing calls.
pub(crate) type Hook = Arc<dyn Fn(&'static str, u64) -> Option<DataStoreError> + Send + Sync>;

/// A datastore that passes calls through to another, failing some as its hook says.
pub(crate) struct HookedStore {
    inner: Arc<dyn DataStore>,
    hook: Hook,
    calls: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl HookedStore {
    pub(crate) fn new(inner: Arc<dyn DataStore>, hook: Hook) -> Arc<HookedStore> {
        Arc::new(HookedStore {
            inner,
            hook,
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    /// Fails the first `n` writing calls with a passing error.
    pub(crate) fn failing_first(inner: Arc<dyn DataStore>, n: u64) -> Arc<HookedStore> {
        HookedStore::new(
            inner,
            Arc::new(move |_, call| (call <= n).then(unavailable)),
        )
    }

    /// Fails every writing call with a passing error: a datastore that stays down.
    pub(crate) fn down(inner: Arc<dyn DataStore>) -> Arc<HookedStore> {
        HookedStore::new(inner, Arc::new(|_, _| Some(unavailable())))
    }

    fn before(&self, method: &'static str) -> datastore::Result<()> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        match (self.hook)(method, call) {
            Some(e) => {
                self.failed.fetch_add(1, Ordering::SeqCst);
                Err(e)
            }
            None => Ok(()),
        }
    }
}

#[async_trait]
impl DataStore for HookedStore {
    async fn migrate(&self) -> datastore::Result<()> {
        self.inner.migrate().await
    }
    async fn missing_migrations(&self) -> datastore::Result<Vec<String>> {
        self.inner.missing_migrations().await
    }
    async fn upsert_episodes(&self, episodes: &[EpisodeInfo]) -> datastore::Result<()> {
        self.before("upsert_episodes")?;
        self.inner.upsert_episodes(episodes).await
    }
    async fn upsert_clips(&self, clips: &[ClipInfo]) -> datastore::Result<()> {
        self.before("upsert_clips")?;
        self.inner.upsert_clips(clips).await
    }
    async fn lease_next(&self, request: LeaseRequest) -> datastore::Result<Option<Lease>> {
        self.before("lease_next")?;
        self.inner.lease_next(request).await
    }
    async fn update_lease(&self, lease_id: Uuid, update: LeaseUpdate) -> datastore::Result<bool> {
        self.before("update_lease")?;
        self.inner.update_lease(lease_id, update).await
    }
    async fn record_results(
        &self,
        results: &[ResearchResult],
    ) -> datastore::Result<Vec<RecordOutcome>> {
        self.before("record_results")?;
        self.inner.record_results(results).await
    }
    async fn status(&self, now: DateTime<Utc>) -> datastore::Result<Status> {
        self.inner.status(now).await
    }
    async fn matches(&self, filter: &MatchFilter) -> datastore::Result<Vec<Match>> {
        self.inner.matches(filter).await
    }
    async fn recent_matches(&self, limit: u32) -> datastore::Result<Vec<Match>> {
        self.inner.recent_matches(limit).await
    }
    async fn leases(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> datastore::Result<Vec<datastore::LeaseSummary>> {
        self.inner.leases(now, limit).await
    }
    async fn retry_failed(
        &self,
        episode_title: Option<&str>,
        clip_title: Option<&str>,
    ) -> datastore::Result<u64> {
        self.inner.retry_failed(episode_title, clip_title).await
    }
    async fn forget_episode_results(
        &self,
        title: &str,
        date_aired: chrono::DateTime<chrono::Utc>,
    ) -> datastore::Result<Option<u64>> {
        self.inner.forget_episode_results(title, date_aired).await
    }
    async fn failure_reasons(
        &self,
        limit: u32,
    ) -> datastore::Result<Vec<datastore::FailureReason>> {
        self.inner.failure_reasons(limit).await
    }
    async fn completions(
        &self,
        limit: u32,
    ) -> datastore::Result<Vec<datastore::EpisodeCompletion>> {
        self.before("completions")?;
        self.inner.completions(limit).await
    }
    async fn completions_announced(
        &self,
        ids: &[datastore::CompletionId],
    ) -> datastore::Result<u64> {
        self.before("completions_announced")?;
        self.inner.completions_announced(ids).await
    }
    async fn claim_completions(
        &self,
        limit: u32,
        now: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> datastore::Result<Vec<datastore::EpisodeCompletion>> {
        self.before("claim_completions")?;
        self.inner.claim_completions(limit, now, until).await
    }
    async fn release_completions(&self, ids: &[datastore::CompletionId]) -> datastore::Result<u64> {
        self.before("release_completions")?;
        self.inner.release_completions(ids).await
    }
}

/// A sender that fails every send with `error()`, and can hide the consumer count.
pub(crate) struct FailingSender {
    pub(crate) inner: Arc<dyn Sender>,
    pub(crate) error: Option<fn() -> BusError>,
    pub(crate) hide_consumers: bool,
    /// Cancelled at each send, to stop a run while it retries publishing.
    pub(crate) cancel_on_send: Option<tokio_util::sync::CancellationToken>,
    pub(crate) sends: AtomicU64,
}

impl FailingSender {
    pub(crate) fn new(
        inner: Arc<dyn Sender>,
        error: Option<fn() -> BusError>,
    ) -> Arc<FailingSender> {
        Arc::new(FailingSender {
            inner,
            error,
            hide_consumers: false,
            cancel_on_send: None,
            sends: AtomicU64::new(0),
        })
    }
}

#[async_trait]
impl Sender for FailingSender {
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        if let Some(token) = &self.cancel_on_send {
            token.cancel();
        }
        match self.error {
            Some(error) => Err(error()),
            None => self.inner.send_batch(bodies).await,
        }
    }
    async fn inspect(&self) -> Result<QueueStats, BusError> {
        let mut stats = self.inner.inspect().await?;
        if self.hide_consumers {
            stats.consumers = None;
        }
        Ok(stats)
    }
    async fn peek_dead_letters(
        &self,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Option<Vec<messagebus::DeadLetter>>, BusError> {
        self.inner.peek_dead_letters(limit, max_body_bytes).await
    }
    fn queue(&self) -> &str {
        self.inner.queue()
    }
}

/// A receiver that says (on `entered`) each time a waiting receive starts, with its 1-based
/// number.
pub(crate) struct WatchedReceiver {
    inner: Arc<dyn Receiver>,
    calls: AtomicU64,
    entered: mpsc::UnboundedSender<u64>,
}

impl WatchedReceiver {
    pub(crate) fn new(
        inner: Arc<dyn Receiver>,
    ) -> (Arc<WatchedReceiver>, mpsc::UnboundedReceiver<u64>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Arc::new(WatchedReceiver {
                inner,
                calls: AtomicU64::new(0),
                entered: tx,
            }),
            rx,
        )
    }
}

#[async_trait]
impl Receiver for WatchedReceiver {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        // Only receives that wait: the top-ups that fill a batch do not.
        if !wait.is_zero() {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = self.entered.send(n);
        }
        self.inner.receive(max, wait).await
    }
    fn queue(&self) -> &str {
        self.inner.queue()
    }
}

/// A datastore held in memory that only keeps episodes and clips: for tests on a paused
/// clock, where SQLite's pool would see its own timeouts fire (the clock jumps ahead while
/// the runtime waits on SQLite's worker thread).
#[derive(Default)]
pub(crate) struct CuratedOnlyStore {
    episodes: std::sync::Mutex<std::collections::HashMap<(String, DateTime<Utc>), EpisodeInfo>>,
    clips: std::sync::Mutex<std::collections::HashMap<String, ClipInfo>>,
}

#[async_trait]
impl DataStore for CuratedOnlyStore {
    async fn migrate(&self) -> datastore::Result<()> {
        Ok(())
    }
    async fn missing_migrations(&self) -> datastore::Result<Vec<String>> {
        Ok(Vec::new())
    }
    async fn upsert_episodes(&self, episodes: &[EpisodeInfo]) -> datastore::Result<()> {
        let mut map = self.episodes.lock().unwrap();
        for e in episodes {
            map.insert((e.title.clone(), e.date_aired), e.clone());
        }
        Ok(())
    }
    async fn upsert_clips(&self, clips: &[ClipInfo]) -> datastore::Result<()> {
        let mut map = self.clips.lock().unwrap();
        for c in clips {
            map.insert(c.title.clone(), c.clone());
        }
        Ok(())
    }
    async fn lease_next(&self, _: LeaseRequest) -> datastore::Result<Option<Lease>> {
        Ok(None)
    }
    async fn update_lease(&self, _: Uuid, _: LeaseUpdate) -> datastore::Result<bool> {
        Ok(false)
    }
    async fn record_results(
        &self,
        results: &[ResearchResult],
    ) -> datastore::Result<Vec<RecordOutcome>> {
        Ok(vec![RecordOutcome::UnknownEpisode; results.len()])
    }
    async fn status(&self, _: DateTime<Utc>) -> datastore::Result<Status> {
        let episodes = self.episodes.lock().unwrap().len() as u64;
        let clips = self.clips.lock().unwrap().len() as u64;
        Ok(Status {
            episodes,
            clips,
            research_pairs: episodes * clips,
            ..Status::default()
        })
    }
    async fn matches(&self, _: &MatchFilter) -> datastore::Result<Vec<Match>> {
        Ok(Vec::new())
    }
    async fn recent_matches(&self, _: u32) -> datastore::Result<Vec<Match>> {
        Ok(Vec::new())
    }
    async fn leases(
        &self,
        _: DateTime<Utc>,
        _: u32,
    ) -> datastore::Result<Vec<datastore::LeaseSummary>> {
        Ok(Vec::new())
    }
    async fn retry_failed(&self, _: Option<&str>, _: Option<&str>) -> datastore::Result<u64> {
        Ok(0)
    }
    async fn forget_episode_results(
        &self,
        _: &str,
        _: chrono::DateTime<chrono::Utc>,
    ) -> datastore::Result<Option<u64>> {
        Ok(None)
    }
    async fn failure_reasons(&self, _: u32) -> datastore::Result<Vec<datastore::FailureReason>> {
        Ok(Vec::new())
    }
    async fn completions(&self, _: u32) -> datastore::Result<Vec<datastore::EpisodeCompletion>> {
        Ok(Vec::new())
    }
    async fn completions_announced(&self, _: &[datastore::CompletionId]) -> datastore::Result<u64> {
        Ok(0)
    }
    async fn claim_completions(
        &self,
        _: u32,
        _: chrono::DateTime<chrono::Utc>,
        _: chrono::DateTime<chrono::Utc>,
    ) -> datastore::Result<Vec<datastore::EpisodeCompletion>> {
        Ok(Vec::new())
    }
    async fn release_completions(&self, _: &[datastore::CompletionId]) -> datastore::Result<u64> {
        Ok(0)
    }
}

/// A receiver that hands out at most `cap` messages per receive, as SQS hands out ten.
pub(crate) struct CappedReceiver {
    pub(crate) inner: Arc<dyn Receiver>,
    pub(crate) cap: usize,
}

#[async_trait]
impl Receiver for CappedReceiver {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        self.inner.receive(max.min(self.cap), wait).await
    }
    fn queue(&self) -> &str {
        self.inner.queue()
    }
}
