//! The completed-research archivist: drain `completed_research`, record results, renew or
//! revoke leases, exit when the queue is empty.
//!
//! Per batch: set poison aside, update each lease the batch speaks of once (revoke it if any
//! of its items says so, else renew it), record every result in one datastore call
//! (idempotent: a redelivered result is a duplicate and changes nothing), dead-letter results
//! for pairs the datastore does not know, and acknowledge the rest: in the recording
//! transaction itself when the database bus lives in the datastore's database, else after it.
//! A failure anywhere before means the whole batch comes back and is redone.
//!
//! The bus does not keep order and several of these archivists may run at once, so a lease's
//! revoking item can be recorded before some of its other results. Revoking
//! ([`LeaseUpdate::Revoke`]) therefore does not free the lease's remaining pairs: they stay
//! held until their results are recorded (the last one ends the lease) or the lease expires
//! (work the researcher skipped), so no pair is handed out again while its result is on its
//! way.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use datastore::{DataStore, DataStoreError, LeaseUpdate, RecordOutcome};
use messagebus::{Receiver, SqlReceipt};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::messages::CompletedResearchItem;
use crate::runner::{self, Run, StoreBatch};
use crate::telemetry::{self, DeadLetterClass};
use crate::{ArchivistError, ArchivistHandle, Ended, RetryError, RetryPolicy};

/// Settings of a result-recording run.
#[derive(Debug, Clone)]
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
}

impl Default for CompletedResearchConfig {
    fn default() -> Self {
        CompletedResearchConfig {
            batch_size: 100,
            receive_wait: Duration::from_secs(1),
            retry: RetryPolicy::default(),
        }
    }
}

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

struct Record<'s> {
    store: &'s dyn DataStore,
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
        match self.store.transactional_bus() {
            Some(tx) if !acks.is_empty() => tx.record_results_and_ack(&results, acks).await,
            _ => self.store.record_results(&results).await,
        }
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
    let op = Record { store };
    let batch_size = config.batch_size.max(1);
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
        // Leases first: where results are acknowledged in the recording transaction, nothing
        // may fail after it. Renewing before recording is harmless; revoking before is what
        // a revoking item that overtakes its lease's other results does anyway (the lease
        // keeps the pairs whose results are not recorded yet).
        if let Err(stop) = update_leases(run, store, &leases).await {
            run.release_all(valid.into_iter().map(|(d, _)| d).collect())
                .await;
            return stop;
        }
        let recorded = match run.store_batch(&op, valid).await {
            Ok(recorded) => recorded,
            Err(stop) => return stop,
        };

        let mut settled = Vec::with_capacity(recorded.len());
        let mut unknown = Vec::new();
        for (delivery, item, outcome) in recorded {
            match outcome {
                RecordOutcome::Recorded => {
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
