//! The episodes and clips archivists: long-running ingestion loops (or `once`: drain and exit).
//!
//! One generic loop serves both message types: receive up to `batch_size` messages, set poison
//! aside, upsert the rest in one datastore call (one by one if the datastore rejects the batch
//! as poison, so only the bad ones are dead-lettered), acknowledge after the commit. The token
//! is checked between batches; a receive in progress is abandoned at once.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datastore::{DataStore, DataStoreError};
use futures::future::BoxFuture;
use messagebus::{Receiver, SqlReceipt};
use tokio_util::sync::CancellationToken;

use crate::messages::{ClipInfo, EpisodeInfo, Message};
use crate::runner::{self, Run, StoreBatch};
use crate::telemetry;
use crate::{ArchivistHandle, Ended, RetryPolicy};

/// Settings of an ingestion archivist.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Messages received and upserted together, in one datastore transaction. Default 100:
    /// per-transaction commit cost dominates, so on Postgres batches of 100 move about eight
    /// times as many messages per second as batches of 10 (`benches/archivists.rs`). A bus
    /// that hands out fewer per receive (SQS: ten) is asked again until the batch is full.
    pub batch_size: usize,
    /// How long one receive waits for messages.
    pub receive_wait: Duration,
    /// Stop when the queue is empty instead of waiting for more.
    pub once: bool,
    /// Backoff for passing datastore failures.
    pub retry: RetryPolicy,
    /// Raised after each batch that stored episodes or clips (they may make new pairs), so
    /// that work assignment in the same process can look at once. `None` (the default):
    /// nobody is told.
    pub wake: Option<crate::Wake>,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            batch_size: 100,
            receive_wait: Duration::from_secs(20),
            once: false,
            retry: RetryPolicy::default(),
            wake: None,
        }
    }
}

/// Starts the episodes archivist: `curated_episodes` into the datastore.
pub fn start_episodes(
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: IngestConfig,
) -> ArchivistHandle {
    start::<EpisodeInfo>("episodes", token, receiver, store, config)
}

/// Starts the clips archivist: `curated_clips` into the datastore.
pub fn start_clips(
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: IngestConfig,
) -> ArchivistHandle {
    start::<ClipInfo>("clips", token, receiver, store, config)
}

/// A curated item type and the datastore call that upserts a batch of it.
trait Curated: Message + Send + Sync + 'static {
    fn upsert<'a>(
        store: &'a dyn DataStore,
        items: &'a [Self],
        acks: &'a [SqlReceipt],
    ) -> BoxFuture<'a, datastore::Result<()>>;
}

impl Curated for EpisodeInfo {
    fn upsert<'a>(
        store: &'a dyn DataStore,
        items: &'a [Self],
        acks: &'a [SqlReceipt],
    ) -> BoxFuture<'a, datastore::Result<()>> {
        match store.transactional_bus() {
            Some(tx) if !acks.is_empty() => tx.upsert_episodes_and_ack(items, acks),
            _ => store.upsert_episodes(items),
        }
    }
}

impl Curated for ClipInfo {
    fn upsert<'a>(
        store: &'a dyn DataStore,
        items: &'a [Self],
        acks: &'a [SqlReceipt],
    ) -> BoxFuture<'a, datastore::Result<()>> {
        match store.transactional_bus() {
            Some(tx) if !acks.is_empty() => tx.upsert_clips_and_ack(items, acks),
            _ => store.upsert_clips(items),
        }
    }
}

struct Upsert<'s, M> {
    store: &'s dyn DataStore,
    kind: PhantomData<fn() -> M>,
}

#[async_trait]
impl<M: Curated> StoreBatch for Upsert<'_, M> {
    type Item = M;
    type Out = ();

    async fn store(&self, items: &[M], acks: &[SqlReceipt]) -> Result<Vec<()>, DataStoreError> {
        M::upsert(self.store, items, acks).await?;
        Ok(vec![(); items.len()])
    }

    fn datastore(&self) -> &dyn DataStore {
        self.store
    }
}

fn start<M: Curated>(
    name: &'static str,
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: IngestConfig,
) -> ArchivistHandle {
    runner::spawn(name, token, config.retry, move |mut run| async move {
        let ended = ingest::<M>(&mut run, &*receiver, &*store, &config).await;
        (run, ended)
    })
}

async fn ingest<M: Curated>(
    run: &mut Run,
    receiver: &dyn Receiver,
    store: &dyn DataStore,
    config: &IngestConfig,
) -> Ended {
    let op = Upsert::<M> {
        store,
        kind: PhantomData,
    };
    let batch_size = config.batch_size.max(1);
    tracing::info!(queue = receiver.queue(), once = config.once, "ingesting");
    loop {
        if run.token.is_cancelled() {
            return Ended::Cancelled;
        }
        let deliveries = match run.receive(receiver, batch_size, config.receive_wait).await {
            Ok(d) => d,
            Err(stop) => return stop,
        };
        if deliveries.is_empty() {
            if config.once {
                return Ended::Finished;
            }
            continue;
        }
        let received = deliveries.len();
        let valid = run.decode_batch::<M>(deliveries).await;
        let stored = match run.store_batch(&op, valid).await {
            Ok(stored) => stored,
            Err(stop) => return stop,
        };
        run.report.stored += stored.len() as u64;
        telemetry::count(telemetry::STORED, run.name, stored.len() as u64);
        tracing::debug!(received, stored = stored.len(), "batch upserted");
        let any = !stored.is_empty();
        run.ack_all(stored.into_iter().map(|(d, _, _)| d).collect())
            .await;
        if let Some(wake) = config.wake.as_ref().filter(|_| any) {
            wake.wake();
        }
    }
}
