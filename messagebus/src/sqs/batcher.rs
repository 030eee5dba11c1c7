//! The settlement batcher: coalesces acknowledgements (or releases) of one receiver into
//! `DeleteMessageBatch` (or `ChangeMessageVisibilityBatch`) requests of up to ten entries.
//!
//! One background task per batcher. A batch goes when it has ten entries, when no delivery of
//! the receiver is left unsettled (nothing more can come soon), or when the linger runs out.
//! Each waiter learns its own entry's outcome: a batch call answers per entry, and an entry
//! that failed for a passing reason is retried alone-or-with-others in a later batch, never
//! taken as proof that the whole batch failed or succeeded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::error::duplicate;
use crate::BusError;

/// SQS's largest batch.
pub(crate) const MAX_BATCH: usize = 10;
/// Tries per entry whose failure the service calls passing (`SenderFault: false`).
const MAX_ENTRY_ATTEMPTS: u32 = 3;
/// Pause before retrying such entries, times the attempt number.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// What became of one entry of a batch call.
#[derive(Debug)]
pub(crate) enum EntryOutcome {
    /// Done.
    Done,
    /// Failed for a passing reason: try again.
    Retry(BusError),
    /// Failed for good.
    Failed(BusError),
}

/// One batch operation on receipt handles.
#[async_trait]
pub(crate) trait BatchCall: Send + Sync + 'static {
    /// Runs the batch call; on success the outcome of each entry, in order.
    async fn call(&self, receipts: &[&str]) -> Result<Vec<EntryOutcome>, BusError>;
}

struct Pending {
    receipt: String,
    done: oneshot::Sender<Result<(), BusError>>,
    attempts: u32,
}

/// The handle to a batcher task; the task ends once every handle is gone and its queue is done.
#[derive(Debug)]
pub(crate) struct Batcher {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Batcher {
    /// Starts the task. `unsettled` counts the receiver's deliveries not yet settled.
    pub(crate) fn spawn(
        runtime: &tokio::runtime::Handle,
        call: impl BatchCall,
        linger: Duration,
        unsettled: Arc<AtomicUsize>,
    ) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(run(rx, call, linger, unsettled));
        Batcher { tx }
    }

    /// Queues `receipt` and waits for its own outcome. Dropping the future does not withdraw
    /// the entry: it is still carried out.
    pub(crate) async fn submit(&self, receipt: String) -> Result<(), BusError> {
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Pending {
                receipt,
                done,
                attempts: 0,
            })
            .map_err(|_| BusError::Closed)?;
        rx.await.map_err(|_| BusError::Closed)?
    }
}

async fn run(
    mut rx: mpsc::UnboundedReceiver<Pending>,
    call: impl BatchCall,
    linger: Duration,
    unsettled: Arc<AtomicUsize>,
) {
    let mut carry: Vec<Pending> = Vec::new();
    loop {
        let mut batch = std::mem::take(&mut carry);
        if let Some(attempts) = batch.iter().map(|p| p.attempts).max() {
            tokio::time::sleep(RETRY_BACKOFF * attempts).await;
        } else {
            match rx.recv().await {
                Some(p) => batch.push(p),
                None => return,
            }
        }
        let deadline = Instant::now() + linger;
        while batch.len() < MAX_BATCH && unsettled.load(Ordering::Acquire) > 0 {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(p)) => batch.push(p),
                Ok(None) | Err(_) => break,
            }
        }
        // Whatever is queued already rides along.
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let receipts: Vec<&str> = batch.iter().map(|p| p.receipt.as_str()).collect();
        let result = call.call(&receipts).await;
        match result {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for mut p in batch {
                    let outcome = outcomes.next().unwrap_or_else(|| {
                        EntryOutcome::Retry(BusError::unavailable("no result for the entry"))
                    });
                    match outcome {
                        EntryOutcome::Done => {
                            let _ = p.done.send(Ok(()));
                        }
                        EntryOutcome::Failed(e) => {
                            let _ = p.done.send(Err(e));
                        }
                        EntryOutcome::Retry(e) => {
                            p.attempts += 1;
                            if p.attempts >= MAX_ENTRY_ATTEMPTS {
                                let _ = p.done.send(Err(e));
                            } else {
                                tracing::debug!(error = %e, attempt = p.attempts, "retrying one batch entry");
                                carry.push(p);
                            }
                        }
                    }
                }
            }
            Err(e) => {
                for p in batch {
                    let _ = p.done.send(Err(duplicate(&e)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::sync::Mutex;

    use super::*;

    /// Records each call; fails the entry named "flaky" once, and "bad" for good.
    #[derive(Clone, Default)]
    struct Recorder {
        calls: Arc<Mutex<Vec<Vec<String>>>>,
    }

    #[async_trait]
    impl BatchCall for Recorder {
        async fn call(&self, receipts: &[&str]) -> Result<Vec<EntryOutcome>, BusError> {
            let mut calls = self.calls.lock().unwrap();
            let flaky_seen = calls.iter().flatten().any(|r| r == "flaky");
            calls.push(receipts.iter().map(|r| r.to_string()).collect());
            Ok(receipts
                .iter()
                .map(|r| match *r {
                    "flaky" if !flaky_seen => EntryOutcome::Retry(BusError::unavailable("x")),
                    "bad" => EntryOutcome::Failed(BusError::Rejected {
                        message: "bad".into(),
                        source: None,
                    }),
                    _ => EntryOutcome::Done,
                })
                .collect())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn coalesces_and_reports_each_entry() {
        let rec = Recorder::default();
        let unsettled = Arc::new(AtomicUsize::new(0));
        let b = Batcher::spawn(
            &tokio::runtime::Handle::current(),
            rec.clone(),
            Duration::from_millis(20),
            unsettled.clone(),
        );
        let names: Vec<String> = (0..12).map(|i| format!("r{i}")).collect();
        let results = futures::future::join_all(names.into_iter().map(|n| b.submit(n))).await;
        assert!(results.iter().all(Result::is_ok));
        let calls = rec.calls.lock().unwrap().clone();
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), vec![10, 2]);

        let results =
            futures::future::join_all(["ok", "flaky", "bad"].map(|n| b.submit(n.to_string())))
                .await;
        assert!(results[0].is_ok());
        assert!(results[1].is_ok(), "retried alone and done");
        assert!(matches!(results[2], Err(BusError::Rejected { .. })));
        let calls = rec.calls.lock().unwrap().clone();
        assert_eq!(calls[2], vec!["ok", "flaky", "bad"]);
        assert_eq!(calls[3], vec!["flaky"]);
    }
}
