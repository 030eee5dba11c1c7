//! What the four archivists share: the task behind an [`ArchivistHandle`] and its run state,
//! retries that report passing failures, and the receive → decode → store → settle steps of a
//! batch of deliveries.
//!
//! Settling rules, the same for every archivist: poison goes to the dead-letter queue at once;
//! a delivery is acknowledged only after the datastore committed its content; on a lasting
//! failure or a cancellation every delivery still in hand is released, never dropped.

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datastore::{DataStore, DataStoreError, TransactionalBus};
use futures::future::join_all;
use messagebus::{BusError, Delivery, Receiver, Sender, SqlReceipt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::handle::ERROR_CHANNEL_CAPACITY;
use crate::messages::{self, Message};
use crate::telemetry::{self, DeadLetterClass};
use crate::{ArchivistError, ArchivistHandle, Ended, Report, RetryError, RetryPolicy};

/// The sending side of a run's errors channel. Never blocks: a full (or abandoned) channel
/// drops the error and counts it.
pub(crate) struct ErrorSink {
    tx: mpsc::Sender<ArchivistError>,
    dropped: AtomicU64,
}

impl ErrorSink {
    /// Hands `error` to the host if it has room for it.
    pub(crate) fn report(&self, error: ArchivistError) {
        if self.tx.try_send(error).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The state of one run: what it is, how to stop and retry, and what it did so far.
pub(crate) struct Run {
    /// The archivist's name, for logs.
    pub(crate) name: &'static str,
    pub(crate) token: CancellationToken,
    pub(crate) retry: RetryPolicy,
    pub(crate) errors: ErrorSink,
    pub(crate) report: Report,
    /// Whether the last [`Run::store_batch`] acknowledged its deliveries in the datastore's
    /// own transaction (the database bus in the datastore's database): [`Run::ack_all`] then
    /// only lets go of them.
    acked_in_store: bool,
}

/// Spawns `body` as the archivist's task and returns its handle. The body gets the run state
/// and gives it back with how the run ended; the report then goes to the done channel.
pub(crate) fn spawn<F, Fut>(
    name: &'static str,
    token: CancellationToken,
    retry: RetryPolicy,
    body: F,
) -> ArchivistHandle
where
    F: FnOnce(Run) -> Fut,
    Fut: Future<Output = (Run, Ended)> + Send + 'static,
{
    let (tx, errors) = mpsc::channel(ERROR_CHANNEL_CAPACITY);
    let (done_tx, done) = oneshot::channel();
    let run = Run {
        name,
        token,
        retry,
        errors: ErrorSink {
            tx,
            dropped: AtomicU64::new(0),
        },
        report: Report::new(Ended::Finished),
        acked_in_store: false,
    };
    let task = body(run);
    // Every event of the run carries the archivist's name through this span.
    let span = tracing::info_span!("archivist", archivist = name);
    tokio::spawn(
        async move {
            let mut done_tx = done_tx;
            // A host that dropped the done channel has given up on the run (its shutdown
            // timeout ran out): the run stops where it is, and the deliveries it held are
            // dropped, which asks the bus to release them.
            let outcome = tokio::select! {
                out = task => Some(out),
                _ = done_tx.closed() => None,
            };
            if let Some((run, ended)) = outcome {
                let _ = done_tx.send(run.finish(ended));
            }
        }
        .instrument(span),
    );
    ArchivistHandle { errors, done }
}

/// Whether a datastore error condemns the data (poison) rather than the datastore.
pub(crate) fn is_poison(error: &DataStoreError) -> bool {
    matches!(
        error,
        DataStoreError::Invalid(_) | DataStoreError::Conflict(_)
    )
}

/// A datastore operation over a batch of items, one output per item, all or nothing.
#[async_trait]
pub(crate) trait StoreBatch: Sync {
    /// What is stored.
    type Item: Send + Sync;
    /// What storing one item says.
    type Out: Send;
    /// Stores `items` in one transaction, acknowledging the deliveries `acks` (empty, or one
    /// per item) in it.
    async fn store(
        &self,
        items: &[Self::Item],
        acks: &[SqlReceipt],
    ) -> Result<Vec<Self::Out>, DataStoreError>;

    /// The datastore written to.
    fn datastore(&self) -> &dyn DataStore;
}

/// The receipts of `deliveries` when the datastore can acknowledge them in its own
/// transaction (they come from the database bus in its database); else empty.
pub(crate) async fn in_store_receipts(
    store: &dyn DataStore,
    deliveries: &[Delivery],
) -> Vec<SqlReceipt> {
    let Some(tx_bus) = store.transactional_bus() else {
        return Vec::new();
    };
    let Some(receipts) = deliveries
        .iter()
        .map(Delivery::sql_receipt)
        .collect::<Option<Vec<_>>>()
    else {
        return Vec::new();
    };
    let Some(first) = receipts.first() else {
        return Vec::new();
    };
    match tx_bus.holds_bus(&first.bus_id).await {
        Ok(true) => receipts,
        Ok(false) => Vec::new(),
        Err(e) => {
            // Acknowledging after the commit is correct too, only not atomic.
            tracing::debug!(error = %e, "could not tell where the bus lives");
            Vec::new()
        }
    }
}

/// The datastore's transactional writes and the bus id, when `sender`'s queue is on the
/// database bus in the datastore's own database (publishing can then share the datastore's
/// transaction); else `None`.
pub(crate) async fn in_store_bus<'a>(
    store: &'a dyn DataStore,
    sender: &'a dyn Sender,
) -> Option<(&'a str, &'a dyn TransactionalBus)> {
    let (bus_id, tx) = (sender.sql_bus_id()?, store.transactional_bus()?);
    match tx.holds_bus(bus_id).await {
        Ok(true) => Some((bus_id, tx)),
        Ok(false) => None,
        Err(e) => {
            // Publishing after the commit is correct too, only not atomic.
            tracing::debug!(error = %e, "could not tell where the bus lives");
            None
        }
    }
}

/// Why a batch could not be finished: the run ends with this, deliveries in hand released.
pub(crate) type Stop = Ended;

impl Run {
    fn finish(mut self, ended: Ended) -> Report {
        self.report.ended = ended;
        self.report.errors_dropped = self.errors.dropped.load(Ordering::Relaxed);
        let r = &self.report;
        // A run that did nothing (an idle `--every` loop) is said at DEBUG only.
        let idle = matches!(r.ended, Ended::Finished)
            && r.received == 0
            && r.leases_created == 0
            && r.announced == 0
            && r.errors_dropped == 0;
        // Each archivist its own counters (the span names it).
        macro_rules! summary {
            ($($fields:tt)*) => {
                if idle {
                    tracing::debug!($($fields)*, "run ended")
                } else {
                    tracing::info!($($fields)*, "run ended")
                }
            };
        }
        match self.name {
            "pending-research" => summary!(
                ended = ?r.ended,
                leases_created = r.leases_created,
                published = r.published,
                pairs_reclaimed = r.pairs_reclaimed,
                leases_cancelled = r.leases_revoked,
                errors_dropped = r.errors_dropped
            ),
            "completed-research" => summary!(
                ended = ?r.ended,
                received = r.received,
                stored = r.stored,
                duplicates = r.duplicates,
                dead_lettered = r.dead_lettered,
                released = r.released,
                leases_renewed = r.leases_renewed,
                leases_revoked = r.leases_revoked,
                announced = r.announced,
                errors_dropped = r.errors_dropped
            ),
            _ => summary!(
                ended = ?r.ended,
                received = r.received,
                stored = r.stored,
                dead_lettered = r.dead_lettered,
                released = r.released,
                errors_dropped = r.errors_dropped
            ),
        }
        self.report
    }

    /// [`RetryPolicy::run`], reporting each failure that will be retried to the host.
    pub(crate) async fn retrying<T, E, F, Fut>(
        &self,
        what: &'static str,
        retryable: fn(&E) -> bool,
        mut op: F,
    ) -> Result<T, RetryError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Display + telemetry::CallSystem,
    {
        let max = self.retry.max_attempts.max(1);
        let mut attempt = 0u32;
        self.retry
            .run(&self.token, retryable, || {
                attempt += 1;
                let will_retry = attempt < max;
                let fut = op();
                async move {
                    let started = Instant::now();
                    let out = fut.await;
                    telemetry::call_took::<E>(what, started.elapsed());
                    if let Err(e) = &out {
                        if will_retry && retryable(e) {
                            tracing::warn!(attempt, error = %e, "{what} failed, will retry");
                            telemetry::count(telemetry::RETRIES, self.name, 1);
                            self.errors
                                .report(ArchivistError::Transient(format!("{what}: {e}")));
                        }
                    }
                    out
                }
            })
            .await
    }

    /// Receives up to `max` messages, retrying passing bus failures. Cancellation abandons
    /// the receive at once (nothing is lost: a message is in flight only once handed out).
    ///
    /// A bus may hand out fewer messages per call than asked (SQS: ten), so a non-empty batch
    /// is topped up with receives that do not wait, until it holds `max` or the queue has no
    /// more: one datastore transaction then covers the whole batch.
    pub(crate) async fn receive(
        &self,
        receiver: &dyn Receiver,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, Stop> {
        let mut batch = tokio::select! {
            biased;
            _ = self.token.cancelled() => return Err(Ended::Cancelled),
            out = self.retrying("receive", BusError::is_retryable, || receiver.receive(max, wait)) => {
                match out {
                    Ok(deliveries) => deliveries,
                    Err(RetryError::Cancelled(_)) => return Err(Ended::Cancelled),
                    Err(RetryError::Failed(e)) => return Err(Ended::Failed(ArchivistError::Bus(e))),
                }
            }
        };
        // Once messages are in hand they are handled, so a cancellation only stops the top-up.
        while !batch.is_empty() && batch.len() < max && !self.token.is_cancelled() {
            match receiver.receive(max - batch.len(), Duration::ZERO).await {
                Ok(more) if more.is_empty() => break,
                Ok(more) => batch.extend(more),
                Err(e) => {
                    // What is in hand gets handled; the next receive retries the bus.
                    tracing::debug!(error = %e, "topping up the batch failed");
                    self.errors.report(ArchivistError::Bus(e));
                    break;
                }
            }
        }
        Ok(batch)
    }

    /// Decodes each delivery; poison goes to the dead-letter queue at once.
    pub(crate) async fn decode_batch<M: Message>(
        &mut self,
        deliveries: Vec<Delivery>,
    ) -> Vec<(Delivery, M)> {
        self.report.received += deliveries.len() as u64;
        telemetry::count(telemetry::RECEIVED, self.name, deliveries.len() as u64);
        let mut valid = Vec::with_capacity(deliveries.len());
        let mut poison = Vec::new();
        for delivery in deliveries {
            match messages::decode::<M>(delivery.body()) {
                Ok(message) => valid.push((delivery, message)),
                Err(e) => poison.push((delivery, e.to_string())),
            }
        }
        self.dead_letter_all(poison, DeadLetterClass::Invalid).await;
        valid
    }

    /// Sets each delivery aside in the dead-letter queue with its reason.
    pub(crate) async fn dead_letter_all(
        &mut self,
        poison: Vec<(Delivery, String)>,
        class: DeadLetterClass,
    ) {
        if poison.is_empty() {
            return;
        }
        let outcomes = join_all(poison.into_iter().map(|(delivery, reason)| async move {
            let message_id = delivery.message_id().to_string();
            let out = delivery.dead_letter(&reason).await;
            (message_id, reason, out)
        }))
        .await;
        for (message_id, reason, out) in outcomes {
            match out {
                Ok(()) => {
                    self.report.dead_lettered += 1;
                    telemetry::dead_lettered(self.name, class);
                    tracing::warn!(%message_id, %reason, "dead-lettered");
                    self.errors
                        .report(ArchivistError::DeadLettered { message_id, reason });
                }
                Err(e) => {
                    // The message comes back when its visibility runs out, and is tried again.
                    tracing::warn!(%message_id, error = %e, "could not dead-letter");
                    self.errors.report(ArchivistError::Bus(e));
                }
            }
        }
    }

    /// Acknowledges deliveries whose content is stored (or lets go of them, if the store
    /// acknowledged them in its transaction).
    pub(crate) async fn ack_all(&mut self, deliveries: Vec<Delivery>) {
        if self.acked_in_store {
            deliveries.into_iter().for_each(Delivery::settled_elsewhere);
            return;
        }
        // One call for the batch (the database bus: one statement, each receipt checked).
        let ids: Vec<String> = deliveries
            .iter()
            .map(|d| d.message_id().to_string())
            .collect();
        let outcomes = messagebus::ack_all(deliveries).await;
        for (message_id, out) in ids.into_iter().zip(outcomes) {
            match out {
                Ok(()) => {}
                // Held past its visibility: another delivery has it now and settles it, and
                // storing it again changes nothing. Not a failure of this run.
                Err(e @ BusError::Stale { .. }) => {
                    tracing::warn!(%message_id, error = %e, "not acknowledged");
                }
                Err(e) => {
                    // Redelivered later; storing it again changes nothing.
                    tracing::warn!(%message_id, error = %e, "could not acknowledge");
                    self.errors.report(ArchivistError::Bus(e));
                }
            }
        }
    }

    /// Makes deliveries visible again for another try.
    pub(crate) async fn release_all(&mut self, deliveries: Vec<Delivery>) {
        let ids: Vec<String> = deliveries
            .iter()
            .map(|d| d.message_id().to_string())
            .collect();
        let outcomes = messagebus::release_all(deliveries).await;
        for (message_id, out) in ids.into_iter().zip(outcomes) {
            match out {
                Ok(()) => {
                    self.report.released += 1;
                    telemetry::count(telemetry::RELEASED, self.name, 1);
                }
                // Back on the queue already (its visibility ran out): nothing to release.
                Err(e @ BusError::Stale { .. }) => {
                    tracing::debug!(%message_id, error = %e, "not released");
                }
                Err(e) => {
                    // It comes back anyway when its visibility runs out.
                    tracing::warn!(%message_id, error = %e, "could not release");
                    self.errors.report(ArchivistError::Bus(e));
                }
            }
        }
    }

    /// Stores a batch in one call. If the datastore rejects the batch as poison, stores the
    /// items one by one so that only the poison ones are dead-lettered, with the datastore's
    /// reason. Passing failures are retried; when retries run out or the run is cancelled
    /// while waiting to retry, every delivery in hand is released and the run stops.
    pub(crate) async fn store_batch<S: StoreBatch>(
        &mut self,
        op: &S,
        batch: Vec<(Delivery, S::Item)>,
    ) -> Result<Vec<(Delivery, S::Item, S::Out)>, Stop> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let (deliveries, items): (Vec<Delivery>, Vec<S::Item>) = batch.into_iter().unzip();
        let acks = in_store_receipts(op.datastore(), &deliveries).await;
        self.acked_in_store = !acks.is_empty();
        // The busiest moment: the batch is in hand, nothing of it stored yet.
        messagebus::fail_point(&format!("{}-store", self.name)).await;
        let out = self
            .retrying("store", DataStoreError::is_retryable, || {
                op.store(&items, &acks)
            })
            .await;
        let rejected = match out {
            Ok(outs) if outs.len() == items.len() => {
                return Ok(deliveries
                    .into_iter()
                    .zip(items)
                    .zip(outs)
                    .map(|((d, i), o)| (d, i, o))
                    .collect())
            }
            Ok(outs) => {
                let e = miscount(outs.len(), items.len());
                self.release_all(deliveries).await;
                return Err(Ended::Failed(e));
            }
            Err(RetryError::Failed(e)) if is_poison(&e) => e,
            Err(RetryError::Failed(e)) => {
                self.release_all(deliveries).await;
                return Err(Ended::Failed(ArchivistError::DataStore(e)));
            }
            Err(RetryError::Cancelled(_)) => {
                self.release_all(deliveries).await;
                return Err(Ended::Cancelled);
            }
        };
        if items.len() == 1 {
            let poison = deliveries
                .into_iter()
                .map(|d| (d, rejected.to_string()))
                .collect();
            self.dead_letter_all(poison, DeadLetterClass::Rejected)
                .await;
            return Ok(Vec::new());
        }
        tracing::debug!(
            items = items.len(),
            error = %rejected,
            "batch rejected, storing one by one"
        );
        let mut stored = Vec::with_capacity(items.len());
        let mut poison = Vec::new();
        let mut pending = deliveries.into_iter().zip(items);
        while let Some((delivery, item)) = pending.next() {
            let ack: Vec<SqlReceipt> = if self.acked_in_store {
                delivery.sql_receipt().into_iter().collect()
            } else {
                Vec::new()
            };
            let out = self
                .retrying("store", DataStoreError::is_retryable, || {
                    op.store(std::slice::from_ref(&item), &ack)
                })
                .await;
            let stop = match out {
                Ok(mut outs) if outs.len() == 1 => match outs.pop() {
                    Some(o) => {
                        stored.push((delivery, item, o));
                        continue;
                    }
                    None => Ended::Failed(miscount(0, 1)),
                },
                Ok(outs) => Ended::Failed(miscount(outs.len(), 1)),
                Err(RetryError::Failed(e)) if is_poison(&e) => {
                    poison.push((delivery, e.to_string()));
                    continue;
                }
                Err(RetryError::Failed(e)) => Ended::Failed(ArchivistError::DataStore(e)),
                Err(RetryError::Cancelled(_)) => Ended::Cancelled,
            };
            // Items stored so far are released too: storing them again changes nothing, and
            // the caller's follow-up work (lease updates) is then redone with them.
            let mut release: Vec<Delivery> = stored.into_iter().map(|(d, _, _)| d).collect();
            release.push(delivery);
            release.extend(pending.map(|(d, _)| d));
            self.dead_letter_all(poison, DeadLetterClass::Rejected)
                .await;
            self.release_all(release).await;
            return Err(stop);
        }
        self.dead_letter_all(poison, DeadLetterClass::Rejected)
            .await;
        Ok(stored)
    }
}

/// A datastore that answers a batch with the wrong number of outcomes is broken: stop rather
/// than guess which message each outcome belongs to.
fn miscount(got: usize, expected: usize) -> ArchivistError {
    ArchivistError::DataStore(DataStoreError::Config(format!(
        "datastore bug: {got} outcomes for {expected} items"
    )))
}
