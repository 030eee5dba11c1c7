//! The researcher's run: its settings, the slots (one receiver each, so one consumer each on
//! the buses that count them; a slot receives only when it is free), and shutdown (stop
//! taking items, the drain timeout for those in hand, then stop the analysers and release at
//! once).

use std::sync::Arc;
use std::time::Duration;

use messagebus::{Receiver, Sender};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::analyser::Analyser;
use crate::context::{Context, Counts, Later};
use crate::handle::{Ended, ResearcherHandle, ERROR_CHANNEL_CAPACITY};
use crate::media::Media;
use crate::printing::PrintCounters;
use crate::status::Status;
use crate::work::{self, Answer, Handled};
use crate::ResearchError;

/// Settings of a researcher's run. Each names the `archivist research` option or variable
/// that sets it; the defaults are that command's.
#[derive(Debug, Clone)]
pub struct ResearcherSettings {
    /// Take the items waiting now, finish them, and end (`--once`): a slot ends when a
    /// receive finds nothing.
    pub once: bool,
    /// Stop an analyser that writes no line (progress lines count) for this long; the item
    /// fails (`--stall-timeout`).
    pub stall_timeout: Duration,
    /// After the token is cancelled, how long items in hand may take to finish before their
    /// analysers are stopped and the items released (`--drain-timeout`).
    pub drain_timeout: Duration,
    /// Holds of items whose analyser asked for a later try.
    pub later: Later,
    /// The queue's receive limit (`ARCHIVIST_MAX_RECEIVES`): an item received this many
    /// times is on its last allowed try, and one that fails then is given up (its
    /// unanswered pairs sent as failed research, the item dead-lettered). 0: no limit known.
    pub max_receives: u32,
    /// With `once`: how long the bus may stay unreachable before the run ends with
    /// [`ResearchError::Unreachable`] (`ARCHIVIST_RETRY_BUDGET`). A long-running researcher
    /// keeps trying.
    pub retry_budget: Duration,
    /// Where the researcher counts what it does with episode prints (an analyser that
    /// prints counts into it too; the host may read it, for the demo's summary).
    pub print_counters: Arc<PrintCounters>,
}

impl Default for ResearcherSettings {
    fn default() -> Self {
        ResearcherSettings {
            once: false,
            stall_timeout: Duration::from_secs(10 * 60),
            drain_timeout: Duration::from_secs(30),
            later: Later::default(),
            max_receives: 5,
            retry_budget: Duration::from_secs(30),
            print_counters: Arc::default(),
        }
    }
}

/// How long a long-running slot waits in one receive (SQS's longest poll).
const RECEIVE_WAIT: Duration = Duration::from_secs(20);
/// How long a `once` slot waits for an item before it decides the queue is drained.
const ONCE_WAIT: Duration = Duration::from_secs(2);
/// A slot's pause after an item went back to the queue; doubled for each such item in a row.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Starts a researcher: one slot per receiver in `receivers` (each on the pending-research
/// queue; made before the start, so that each counts as a researcher from the start and work
/// assignment sees the whole capacity at once), its results sent with `results` (the
/// completed-research queue), `analyser` run on each item, its media fetched by `media`.
///
/// It runs until `token` is cancelled (then the drain: [`ResearcherSettings::drain_timeout`]
/// for the items in hand, after which their analysers are stopped and the items released) or,
/// with [`ResearcherSettings::once`], until the queue is drained. The caller owns the bus and
/// closes it after [`ResearcherHandle::done`] resolved. Must be called inside a Tokio runtime.
pub fn start(
    token: CancellationToken,
    receivers: Vec<Arc<dyn Receiver>>,
    results: Arc<dyn Sender>,
    analyser: Arc<dyn Analyser>,
    media: Media,
    settings: ResearcherSettings,
) -> ResearcherHandle {
    let (errors_tx, errors) = mpsc::channel(ERROR_CHANNEL_CAPACITY);
    let (done_tx, done) = oneshot::channel();
    let concurrency = receivers.len();
    let status = Status::new(analyser.describe(), concurrency);
    let ctx = Arc::new(Context {
        analyser,
        media: Arc::new(media),
        prints: settings.print_counters.clone(),
        results,
        hard_stop: CancellationToken::new(),
        stop_reason: std::sync::OnceLock::new(),
        stall_timeout: settings.stall_timeout,
        status: status.clone(),
        max_receives: settings.max_receives,
        later: settings.later,
        stopping: token.clone(),
        counts: Counts::default(),
        errors: errors_tx,
    });
    tokio::spawn(async move {
        let mut done_tx = done_tx;
        // A host that dropped the done channel has given up on the run: it stops where it
        // is (its slots aborted with their items, which asks the bus to release them).
        let ran = {
            let ctx = ctx.clone();
            tokio::select! {
                ended = run(ctx, receivers, &settings, token) => Some(ended),
                _ = done_tx.closed() => None,
            }
        };
        if let Some(ended) = ran {
            let _ = done_tx.send(ctx.counts.report(ended));
        }
    });
    ResearcherHandle {
        errors,
        done,
        status,
    }
}

/// The slots until they end; how the run ended.
async fn run(
    ctx: Arc<Context>,
    receivers: Vec<Arc<dyn Receiver>>,
    settings: &ResearcherSettings,
    token: CancellationToken,
) -> Ended {
    let concurrency = receivers.len();
    if concurrency == 0 {
        return Ended::Failed(ResearchError::Config(
            "a researcher needs at least one slot (one receiver)".into(),
        ));
    }
    metrics::gauge!("archivist_researcher_slots").set(concurrency as f64);
    tracing::info!(
        analyser = %ctx.analyser.describe(),
        concurrency,
        once = settings.once,
        "researcher started"
    );

    // The drain: once the token is cancelled, items in hand get the drain timeout.
    let drain = {
        let (token, ctx, timeout) = (token.clone(), ctx.clone(), settings.drain_timeout);
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                // The slots ended by themselves (`once`, a fatal error).
                _ = ctx.hard_stop.cancelled() => return,
            }
            tokio::select! {
                _ = ctx.hard_stop.cancelled() => {}
                _ = tokio::time::sleep(timeout) => {
                    tracing::info!("drain timeout: stopping the analysers and releasing their items");
                    ctx.stop_now(format!(
                        "not finished within the drain timeout ({})",
                        humantime::format_duration(timeout)
                    ));
                }
            }
        })
    };
    // The slots stop with the run when its task is dropped (the host gave up on it).
    let _stop_drain = DropGuard(ctx.clone());

    let mut set = JoinSet::new();
    for (slot, receiver) in receivers.into_iter().enumerate() {
        let (ctx, token) = (ctx.clone(), token.clone());
        let (budget, once) = (settings.retry_budget, settings.once);
        set.spawn(async move { run_slot(&ctx, slot, receiver, &token, once, budget).await });
    }
    let mut failed = None;
    while let Some(joined) = set.join_next().await {
        let result = joined.unwrap_or_else(|e| Err(ResearchError::SlotStopped(e.to_string())));
        if let Err(e) = result {
            if failed.is_none() {
                // One slot cannot reach the bus: the others cannot either. Stop them all.
                token.cancel();
                ctx.stop_now(format!("another slot stopped the researcher: {e}"));
                failed = Some(e);
            }
        }
    }
    ctx.stop_now("every slot ended");
    let _ = drain.await;
    match failed {
        Some(e) => Ended::Failed(e),
        None if token.is_cancelled() => Ended::Cancelled,
        None => Ended::Finished,
    }
}

/// Stops the items in hand when dropped.
struct DropGuard(Arc<Context>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0
            .stop_now("the researcher's host stopped waiting for it");
    }
}

/// One slot: receives one item when free, handles it, and again, until the token is
/// cancelled (or with `once`, until a receive finds nothing).
///
/// A finished item's last results and its acknowledgement (one transaction on the database
/// bus) go on while the slot asks for its next item and starts on it: the slot is free once
/// its analyser is done, and the round trip of its answer stays off the path between two
/// items. A slot still runs one item at a time in its analyser, and has at most one answer
/// under way: the next waits for it. The slot ends only once it is done.
async fn run_slot(
    ctx: &Context,
    slot: usize,
    receiver: Arc<dyn Receiver>,
    token: &CancellationToken,
    once: bool,
    retry_budget: Duration,
) -> Result<(), ResearchError> {
    let mut state = SlotRun {
        wait: if once { ONCE_WAIT } else { RECEIVE_WAIT },
        backoff: Duration::from_millis(200),
        failing_since: None,
        pause: Duration::ZERO,
    };
    let mut answering: Option<Answer> = None;
    loop {
        let answer = answering.take();
        let (_, step) = tokio::join!(
            async {
                if let Some(answer) = answer {
                    work::answer_and_ack(ctx, answer).await;
                }
            },
            state.step(ctx, slot, &*receiver, token, once, retry_budget)
        );
        match step {
            Step::End(ended) => return ended,
            Step::Next => {}
            Step::Answer(answer) => answering = Some(answer),
        }
    }
}

/// What a slot keeps from one item to the next.
struct SlotRun {
    /// How long one receive waits.
    wait: Duration,
    /// The wait before the next receive after one failed.
    backoff: Duration,
    /// Since when receives have been failing.
    failing_since: Option<tokio::time::Instant>,
    /// The pause after an item went back to the queue.
    pause: Duration,
}

/// How one step of a slot ended.
enum Step {
    /// The slot ends.
    End(Result<(), ResearchError>),
    /// On to the next item.
    Next,
    /// An item is done: send its last results and acknowledge it (while the slot takes the
    /// next).
    Answer(Answer),
}

impl SlotRun {
    /// One receive, and the item it brought if any.
    async fn step(
        &mut self,
        ctx: &Context,
        slot: usize,
        receiver: &dyn Receiver,
        token: &CancellationToken,
        once: bool,
        retry_budget: Duration,
    ) -> Step {
        if token.is_cancelled() {
            return Step::End(Ok(()));
        }
        let received = tokio::select! {
            _ = token.cancelled() => return Step::End(Ok(())),
            r = receiver.receive(1, self.wait) => r,
        };
        let deliveries = match received {
            Ok(d) => {
                self.failing_since = None;
                self.backoff = Duration::from_millis(200);
                d
            }
            Err(e) if e.is_retryable() => {
                let since = *self
                    .failing_since
                    .get_or_insert_with(tokio::time::Instant::now);
                if once && since.elapsed() >= retry_budget {
                    return Step::End(Err(ResearchError::Unreachable {
                        queue: receiver.queue().to_string(),
                        source: e,
                    }));
                }
                tracing::warn!(slot, error = %e, retry_in = ?self.backoff, "cannot receive work items; trying again");
                ctx.report(ResearchError::Bus(e));
                tokio::select! {
                    _ = token.cancelled() => return Step::End(Ok(())),
                    _ = tokio::time::sleep(self.backoff) => {}
                }
                self.backoff = (self.backoff * 2).min(Duration::from_secs(10));
                return Step::Next;
            }
            Err(e) => {
                return Step::End(Err(ResearchError::Receive {
                    queue: receiver.queue().to_string(),
                    source: e,
                }))
            }
        };
        let Some(delivery) = deliveries.into_iter().next() else {
            return if once { Step::End(Ok(())) } else { Step::Next };
        };
        match work::handle(ctx, slot, delivery).await {
            Handled::Answer(answer) => {
                self.pause = Duration::ZERO;
                Step::Answer(answer)
            }
            Handled::Settled => {
                self.pause = Duration::ZERO;
                Step::Next
            }
            Handled::WentBack => {
                // What went back would come straight back to this free slot: give it (and
                // a busy analyser asking for later) a moment, longer after each failure in
                // a row.
                self.pause = (self.pause * 2).clamp(FIRST_PAUSE, MAX_PAUSE);
                tokio::select! {
                    _ = token.cancelled() => return Step::End(Ok(())),
                    _ = tokio::time::sleep(self.pause) => {}
                }
                Step::Next
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn later_holds_double_at_each_receive_up_to_the_max() {
        let later = Later::default();
        let minutes: Vec<u64> = (1..=6).map(|r| later.wait(r).as_secs() / 60).collect();
        assert_eq!(minutes, [1, 2, 4, 8, 15, 15]);
        assert_eq!(later.wait(u32::MAX), Duration::from_secs(15 * 60));
        let odd = Later {
            first: Duration::from_secs(10),
            max: Duration::from_secs(1),
        };
        assert_eq!(
            odd.wait(3),
            Duration::from_secs(10),
            "never below the first"
        );
    }
}
