//! The completed-research archivist: drain `completed_research`, record results, renew or
//! revoke leases, exit when the queue is empty.
//!
//! Per batch: set poison aside, record every result and update each lease the batch speaks of
//! once (revoke it if any of its items says so, else renew it) in one datastore call, one
//! transaction on the SQL datastores (idempotent: a redelivered result is a duplicate and
//! changes nothing), dead-letter results for pairs the datastore does not know, and
//! acknowledge the rest: in the recording transaction itself when the database bus lives in
//! the datastore's database, else after it. A failure anywhere before means the whole batch
//! comes back and is redone.
//!
//! Announcing (optional, [`CompletedResearchConfig::announce`]): recording an episode's last
//! pair keeps its completion in the datastore, in the recording transaction; after each batch
//! (and once at the start of the run, for completions a stopped run left) the archivist
//! publishes each kept completion as an [`EpisodeResearched`] and lets go of it. Where the
//! announcement queue is on the database bus in the datastore's database, publishing and
//! letting go are one transaction: each completion is announced exactly once. On another bus
//! the archivist first claims the completions it sends ([`DataStore::claim_completions`]), so
//! that recorders running at once send each once; a stop between sending and letting go
//! announces that one completion twice (by the next recorder, once the claim runs out), never
//! not at all. A send that fails gives its claims back.
//!
//! The bus does not keep order and several of these archivists may run at once, so a lease's
//! revoking item can be recorded before some of its other results. Revoking
//! ([`LeaseUpdate::Revoke`]) therefore does not free the lease's remaining pairs: they stay
//! held until their results are recorded (the last one ends the lease) or the lease expires
//! (work the researcher skipped), so no pair is handed out again while its result is on its
//! way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use datastore::{DataStore, DataStoreError, EpisodeCompletion, LeaseUpdate, RecordOutcome};
use messagebus::{BusError, Receiver, Sender, SqlReceipt};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::messages::{self, CompletedResearchItem, EpisodeResearched};
use crate::runner::{self, Run, StoreBatch};
use crate::telemetry::{self, DeadLetterClass};
use crate::{ArchivistError, ArchivistHandle, Ended, RetryError, RetryPolicy};

/// Settings of a result-recording run.
#[derive(Clone)]
pub struct CompletedResearchConfig {
    /// Messages received and recorded together, in one datastore transaction. Default 100:
    /// per-transaction commit cost dominates, so on Postgres batches of 100 move about eight
    /// times as many messages per second as batches of 10 (`benches/archivists.rs`). A bus
    /// that hands out fewer per receive (SQS: ten) is asked again until the batch is full.
    pub batch_size: usize,
    /// How long one receive waits; an empty receive ends the run.
    pub receive_wait: Duration,
    /// Backoff for passing datastore failures.
    pub retry: RetryPolicy,
    /// Where to announce each episode fully researched (`researched_episodes`); `None`: not
    /// announced (completions are still kept, one per episode, and announced once this is
    /// set).
    pub announce: Option<Arc<dyn Sender>>,
    /// Raised after each batch that ended a lease (a researcher's last result for an item:
    /// it is free for the next), so that work assignment in the same process can look at
    /// once. `None` (the default): nobody is told.
    pub wake: Option<crate::Wake>,
}

impl std::fmt::Debug for CompletedResearchConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletedResearchConfig")
            .field("batch_size", &self.batch_size)
            .field("receive_wait", &self.receive_wait)
            .field("retry", &self.retry)
            .field("announce", &self.announce.as_ref().map(|s| s.queue()))
            .field("wake", &self.wake.is_some())
            .finish()
    }
}

impl Default for CompletedResearchConfig {
    fn default() -> Self {
        CompletedResearchConfig {
            batch_size: 100,
            receive_wait: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            announce: None,
            wake: None,
        }
    }
}

/// Completions announced per datastore read (or per transaction on the database bus).
const ANNOUNCE_BATCH: u32 = 100;

/// How long a recorder holds the completions it claimed to announce on a bus outside the
/// datastore's database: longer than sending a batch of them takes, retries included. One
/// that stops before letting them go leaves them to the next recorder after this.
const CLAIM_HOLD: chrono::Duration = chrono::Duration::minutes(10);

/// Starts one run draining `receiver` (the `completed_research` queue).
pub fn start(
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: CompletedResearchConfig,
) -> ArchivistHandle {
    runner::spawn(
        "completed-research",
        token,
        config.retry,
        move |mut run| async move {
            let ended = drain(&mut run, &*receiver, &*store, &config).await;
            (run, ended)
        },
    )
}

/// Records a batch, updating its leases in the same call.
struct Record<'s> {
    store: &'s dyn DataStore,
    /// Lease id → whether the batch ends it.
    leases: &'s BTreeMap<Uuid, bool>,
    /// How many items the batch has: only a call with all of them updates the leases (the
    /// one-by-one calls after a batch was rejected as poison do not).
    batch: usize,
    /// What each lease update answered, in `leases`' order, once a call made them.
    updated: Mutex<Option<Vec<bool>>>,
}

impl Record<'_> {
    /// The lease updates, as of now (a retry renews from its own time).
    fn updates(&self) -> Vec<(Uuid, LeaseUpdate)> {
        let now = Utc::now();
        self.leases
            .iter()
            .map(|(&id, &revoke)| {
                let update = if revoke {
                    LeaseUpdate::Revoke
                } else {
                    LeaseUpdate::Renew { now }
                };
                (id, update)
            })
            .collect()
    }

    fn take_updated(&self) -> Option<Vec<bool>> {
        self.updated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[async_trait]
impl StoreBatch for Record<'_> {
    type Item = CompletedResearchItem;
    type Out = RecordOutcome;

    async fn store(
        &self,
        items: &[CompletedResearchItem],
        acks: &[SqlReceipt],
    ) -> Result<Vec<RecordOutcome>, DataStoreError> {
        let results: Vec<_> = items.iter().map(CompletedResearchItem::to_result).collect();
        let updates = if items.len() == self.batch {
            self.updates()
        } else {
            Vec::new()
        };
        let (outcomes, updated) = match self.store.transactional_bus() {
            Some(tx) if !acks.is_empty() => {
                tx.record_results_and_ack(&results, &updates, acks).await?
            }
            _ => {
                self.store
                    .record_results_updating_leases(&results, &updates)
                    .await?
            }
        };
        if !updates.is_empty() {
            *self.updated.lock().unwrap_or_else(PoisonError::into_inner) = Some(updated);
        }
        Ok(outcomes)
    }

    fn datastore(&self) -> &dyn DataStore {
        self.store
    }
}

async fn drain(
    run: &mut Run,
    receiver: &dyn Receiver,
    store: &dyn DataStore,
    config: &CompletedResearchConfig,
) -> Ended {
    let batch_size = config.batch_size.max(1);
    let announcer = config.announce.as_deref();
    if let Some(sender) = announcer {
        // Completions a stopped run recorded but did not announce.
        if let Err(stop) = announce(run, store, sender).await {
            return stop;
        }
    }
    loop {
        if run.token.is_cancelled() {
            return Ended::Cancelled;
        }
        let deliveries = match run.receive(receiver, batch_size, config.receive_wait).await {
            Ok(d) => d,
            Err(stop) => return stop,
        };
        if deliveries.is_empty() {
            return Ended::Finished;
        }
        let received = deliveries.len();
        let valid = run.decode_batch::<CompletedResearchItem>(deliveries).await;
        // Lease id → whether any item of the batch ends it. Ordered, so that concurrent
        // archivists update leases in the same order.
        let mut leases: BTreeMap<Uuid, bool> = BTreeMap::new();
        for (_, item) in &valid {
            *leases.entry(item.lease_id).or_default() |= item.revoke_lease;
        }
        // The leases are updated in the recording call (one transaction on the SQL
        // datastores, after the results): where results are acknowledged in that
        // transaction, nothing may fail after it.
        let op = Record {
            store,
            leases: &leases,
            batch: valid.len(),
            updated: Mutex::new(None),
        };
        let recorded = match run.store_batch(&op, valid).await {
            Ok(recorded) => recorded,
            Err(stop) => return stop,
        };
        match op.take_updated() {
            Some(updated) => count_lease_updates(run, &leases, &updated),
            // The batch was rejected as poison and recorded one by one: its leases are
            // updated now, as a batch that comes back would update them.
            None if !leases.is_empty() => {
                if let Err(stop) = update_leases(run, store, &leases).await {
                    run.release_all(recorded.into_iter().map(|(d, _, _)| d).collect())
                        .await;
                    return stop;
                }
            }
            None => {}
        }

        let mut settled = Vec::with_capacity(recorded.len());
        let mut unknown = Vec::new();
        // Only a newly recorded pair can complete an episode.
        let mut new_pairs = false;
        for (delivery, item, outcome) in recorded {
            match outcome {
                RecordOutcome::Recorded => {
                    new_pairs = true;
                    run.report.stored += 1;
                    telemetry::count(telemetry::STORED, run.name, 1);
                    settled.push(delivery);
                }
                RecordOutcome::Duplicate => {
                    run.report.stored += 1;
                    run.report.duplicates += 1;
                    telemetry::count(telemetry::STORED, run.name, 1);
                    telemetry::count(telemetry::DUPLICATES, run.name, 1);
                    settled.push(delivery);
                }
                RecordOutcome::UnknownEpisode | RecordOutcome::UnknownClip => {
                    unknown.push((delivery, unknown_pair(&item, outcome)))
                }
            }
        }
        run.dead_letter_all(unknown, DeadLetterClass::Unknown).await;
        tracing::debug!(
            received,
            recorded = settled.len(),
            leases = leases.len(),
            "batch recorded"
        );
        run.ack_all(settled).await;
        if let Some(wake) = config
            .wake
            .as_ref()
            .filter(|_| leases.values().any(|&ends| ends))
        {
            wake.wake();
        }
        if let Some(sender) = announcer.filter(|_| new_pairs) {
            // The batch recorded and acknowledged, its completions kept, none announced yet.
            messagebus::fail_point("completed-research-announce").await;
            if let Err(stop) = announce(run, store, sender).await {
                return stop;
            }
        }
    }
}

/// Publishes every kept completion on `sender`'s queue and lets go of it: in one transaction
/// where that queue is on the database bus in the datastore's database, else claimed, each
/// one sent, then let go. Reads stop when none is left; a completion kept meanwhile by another recorder
/// is that recorder's to announce (or the next batch's).
async fn announce(run: &mut Run, store: &dyn DataStore, sender: &dyn Sender) -> Result<(), Ended> {
    let in_store = runner::in_store_bus(store, sender).await;
    loop {
        if let Some((bus_id, tx)) = in_store {
            let encode = |c: &EpisodeCompletion| encode_announcement(c.clone());
            let published = run
                .retrying("announce", DataStoreError::is_retryable, || {
                    tx.announce_completions(ANNOUNCE_BATCH, bus_id, sender.queue(), &encode)
                })
                .await
                .map_err(|e| stop_on(e, ArchivistError::DataStore))?;
            counted(run, published);
            if published < u64::from(ANNOUNCE_BATCH) {
                return Ok(());
            }
            continue;
        }
        // Claimed first, so that recorders running at once send each completion once.
        let now = Utc::now();
        let claimed = run
            .retrying("claim_completions", DataStoreError::is_retryable, || {
                store.claim_completions(ANNOUNCE_BATCH, now, now + CLAIM_HOLD)
            })
            .await
            .map_err(|e| stop_on(e, ArchivistError::DataStore))?;
        let more = claimed.len() >= ANNOUNCE_BATCH as usize;
        let ids: Vec<_> = claimed.iter().map(|c| c.id).collect();
        for (sent, completion) in claimed.into_iter().enumerate() {
            let id = completion.id;
            let body = encode_announcement(completion);
            let out = run
                .retrying("announce", BusError::is_retryable, || {
                    sender.send(body.clone())
                })
                .await;
            if let Err(e) = out {
                // Not sent: the rest go back for the next run at once (a failure here leaves
                // them to come back when the claim runs out).
                release(store, &ids[sent..]).await;
                return Err(stop_on(e, ArchivistError::Bus));
            }
            // Sent, not yet let go of: a stop here announces it again once the claim runs out.
            messagebus::fail_point("completed-research-announced").await;
            let out = run
                .retrying(
                    "completions_announced",
                    DataStoreError::is_retryable,
                    || store.completions_announced(std::slice::from_ref(&id)),
                )
                .await;
            if let Err(e) = out {
                release(store, &ids[sent + 1..]).await;
                return Err(stop_on(e, ArchivistError::DataStore));
            }
            counted(run, 1);
        }
        if !more {
            return Ok(());
        }
    }
}

/// Gives back claimed completions that this run will not send.
async fn release(store: &dyn DataStore, ids: &[datastore::CompletionId]) {
    if let Err(error) = store.release_completions(ids).await {
        tracing::warn!(
            %error,
            completions = ids.len(),
            "could not give back the completions not announced: they are announced once \
             their claim runs out"
        );
    }
}

fn counted(run: &mut Run, announced: u64) {
    if announced > 0 {
        run.report.announced += announced;
        telemetry::count(telemetry::ANNOUNCED, run.name, announced);
        tracing::debug!(announced, "episodes announced fully researched");
    }
}

fn stop_on<E>(e: RetryError<E>, wrap: fn(E) -> ArchivistError) -> Ended {
    match e {
        RetryError::Cancelled(_) => Ended::Cancelled,
        RetryError::Failed(e) => Ended::Failed(wrap(e)),
    }
}

/// The announcement's body. One that would exceed the bus's message limit (thousands of
/// matches, long clip descriptions) drops the matched clips' descriptions, then its last
/// matches, until it fits: `clips_matched` still counts them all, and `archivist matches`
/// lists them. An announcement is never held back by its size.
pub(crate) fn encode_announcement(completion: EpisodeCompletion) -> Vec<u8> {
    let mut message = EpisodeResearched::from(completion);
    let body = messages::encode(&message);
    if body.len() <= messages::MAX_BODY_BYTES {
        return body;
    }
    for m in &mut message.matches {
        m.clip.description.clear();
    }
    let mut body = messages::encode(&message);
    let all = message.matches.len();
    while body.len() > messages::MAX_BODY_BYTES && !message.matches.is_empty() {
        let keep = message.matches.len() * 9 / 10;
        message.matches.truncate(keep);
        body = messages::encode(&message);
    }
    tracing::warn!(
        episode = %message.episode.title,
        matches = all,
        kept = message.matches.len(),
        "announcement over the bus's message limit: clip descriptions dropped, and matches \
         past the limit"
    );
    body
}

/// Counts what the recording call's lease updates did.
fn count_lease_updates(run: &mut Run, leases: &BTreeMap<Uuid, bool>, updated: &[bool]) {
    for ((&lease_id, &revoke), &done) in leases.iter().zip(updated) {
        match (done, revoke) {
            (true, true) => {
                run.report.leases_revoked += 1;
                telemetry::leases("revoked", 1);
            }
            (true, false) => {
                run.report.leases_renewed += 1;
                telemetry::leases("renewed", 1);
            }
            (false, _) => tracing::debug!(%lease_id, revoke, "lease unknown, expired or ended"),
        }
    }
}

/// Renews or revokes each lease once. An unknown, expired or revoked lease is fine: the
/// results are recorded and nothing else changes (a renewal does not extend a revoked lease).
async fn update_leases(
    run: &mut Run,
    store: &dyn DataStore,
    leases: &BTreeMap<Uuid, bool>,
) -> Result<(), Ended> {
    for (&lease_id, &revoke) in leases {
        let update = || {
            if revoke {
                LeaseUpdate::Revoke
            } else {
                LeaseUpdate::Renew { now: Utc::now() }
            }
        };
        let out = run
            .retrying("update_lease", DataStoreError::is_retryable, || {
                store.update_lease(lease_id, update())
            })
            .await;
        match out {
            Ok(true) if revoke => {
                run.report.leases_revoked += 1;
                telemetry::leases("revoked", 1);
            }
            Ok(true) => {
                run.report.leases_renewed += 1;
                telemetry::leases("renewed", 1);
            }
            Ok(false) => tracing::debug!(%lease_id, revoke, "lease unknown, expired or ended"),
            Err(RetryError::Cancelled(_)) => return Err(Ended::Cancelled),
            Err(RetryError::Failed(e)) => return Err(Ended::Failed(ArchivistError::DataStore(e))),
        }
    }
    Ok(())
}

fn unknown_pair(item: &CompletedResearchItem, outcome: RecordOutcome) -> String {
    if outcome == RecordOutcome::UnknownClip {
        format!(
            "unknown clip: no clip titled {:?} in the datastore (the episode is known)",
            item.clip.title
        )
    } else {
        format!(
            "unknown episode: no episode titled {:?} aired {} in the datastore",
            item.episode.title,
            item.episode.date_aired.to_rfc3339()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use chrono::{TimeZone, Utc};
    use datastore::{ClipInfo, ClipMatch, CompletionId, EpisodeInfo};

    use super::*;

    fn completion(matches: usize, description: usize) -> EpisodeCompletion {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        EpisodeCompletion {
            id: CompletionId::default(),
            episode: EpisodeInfo {
                initial_date_curated: at,
                last_date_curated: at,
                curator_information: "test".into(),
                date_aired: at,
                title: "Episode".into(),
                description: String::new(),
                media_uri: "https://example.test/e.mp3".into(),
                media_type: "mp3".into(),
                priority: 0,
            },
            completed_at: at,
            clips_researched: matches as u64,
            clips_matched: matches as u64,
            clips_failed: 0,
            matches: (0..matches)
                .map(|i| ClipMatch {
                    clip: ClipInfo {
                        initial_date_curated: at,
                        last_date_curated: at,
                        curator_information: "test".into(),
                        title: format!("Clip {i}"),
                        description: "d".repeat(description),
                        media_uri: format!("https://example.test/{i}.mp3"),
                        media_type: "mp3".into(),
                        priority: 0,
                    },
                    clip_offsets_ns: vec![i as i64],
                })
                .collect(),
        }
    }

    #[test]
    fn an_announcement_that_fits_is_whole() {
        let body = encode_announcement(completion(3, 100));
        let m: EpisodeResearched = messages::decode(&body).unwrap();
        assert_eq!(m.matches.len(), 3);
        assert_eq!(m.matches[0].clip.description.len(), 100);
    }

    /// Too large for the bus: descriptions go first, then the last matches; the counts stay.
    #[test]
    fn an_announcement_over_the_limit_sheds_descriptions_then_matches() {
        let body = encode_announcement(completion(80, 16 * 1024));
        assert!(body.len() <= messages::MAX_BODY_BYTES);
        let m: EpisodeResearched = messages::decode(&body).unwrap();
        assert_eq!(m.matches.len(), 80);
        assert!(m.matches.iter().all(|c| c.clip.description.is_empty()));

        let body = encode_announcement(completion(20_000, 0));
        assert!(body.len() <= messages::MAX_BODY_BYTES);
        let m: EpisodeResearched = messages::decode(&body).unwrap();
        assert!(m.matches.len() < 20_000 && !m.matches.is_empty());
        assert_eq!(m.clips_matched, 20_000);
        assert_eq!(m.matches[0].clip.title, "Clip 0");
    }
}
