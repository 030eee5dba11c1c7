//! Waking work assignment when capacity frees, instead of on a timer alone.
//!
//! Where the four archivists share one process (`archivist run`), the others can tell the
//! pending-research archivist that a run may find something to do: the completed-research
//! archivist when a batch ended a lease (a researcher finished an item), the ingestion
//! archivists when they stored new episodes or clips, and [`watch_capacity`] when a look at
//! the work queue shows more free researchers than the look before (an item was taken, a
//! researcher started). A run started on a wake-up follows the capacity rule like any other:
//! waking only decides *when* it looks, never how much it leases.

use std::sync::Arc;
use std::time::Duration;

use messagebus::Sender;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A wake-up for work assignment, shared by whoever may free capacity or bring work and the
/// loop that repeats the runs. Coalesced: any number of [`Wake::wake`] calls before the next
/// [`Wake::woken`] count as one. Cloning shares the signal.
#[derive(Debug, Clone, Default)]
pub struct Wake {
    notify: Arc<Notify>,
}

impl Wake {
    /// A new signal, not yet raised.
    pub fn new() -> Self {
        Wake::default()
    }

    /// Says that a run may find something to do now. Never blocks; costs nothing when the
    /// signal is already raised.
    pub fn wake(&self) {
        // `notify_one` keeps one permit when nobody waits: a wake-up that comes while a run
        // is going on starts the next one as soon as it ends.
        self.notify.notify_one();
    }

    /// Waits until the signal is raised, and lowers it.
    pub async fn woken(&self) {
        self.notify.notified().await;
    }
}

/// Why [`Pace::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The interval ran out.
    Timer,
    /// The [`Wake`] was raised.
    Woken,
}

/// When a repeated run starts again: `every` after the previous one ended, or as soon as the
/// wake-up is raised, but never sooner than `min_gap` after the previous one started (a storm
/// of results wakes work assignment at most once per `min_gap`, so it cannot hammer the
/// datastore).
#[derive(Debug, Clone)]
pub struct Pace {
    /// The fallback interval (`--every`): expired leases, pairs freed by another process.
    pub every: Duration,
    /// The wake-up, if any; `None`: the timer alone.
    pub wake: Option<Wake>,
    /// The shortest time between two starts when woken.
    pub min_gap: Duration,
}

impl Pace {
    /// Waits until the next run should start, the previous one having started at `started`
    /// and ended at `ended`. Returns `None` when the token is cancelled first.
    pub async fn wait(
        &self,
        started: Instant,
        ended: Instant,
        token: &CancellationToken,
    ) -> Option<Cause> {
        let timer = tokio::time::sleep_until(ended + self.every);
        let cause = match &self.wake {
            None => {
                tokio::select! {
                    _ = token.cancelled() => return None,
                    _ = timer => Cause::Timer,
                }
            }
            Some(wake) => {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => return None,
                    _ = wake.woken() => Cause::Woken,
                    _ = timer => Cause::Timer,
                }
            }
        };
        if cause == Cause::Woken {
            tokio::select! {
                _ = token.cancelled() => return None,
                _ = tokio::time::sleep_until(started + self.min_gap) => {}
            }
        }
        Some(cause)
    }
}

/// Looks at the work queue every `interval` until the token is cancelled, and raises `wake`
/// whenever it shows more free researchers than the look before: capacity = researchers −
/// items waiting, the researchers being `researchers` when given, else the bus's consumer
/// count. An item taken or a researcher started raises it; an item published or a researcher
/// gone does not, and neither does capacity that stays free because there is no work (that
/// would start a run at every look for nothing). A look that fails is skipped: the runs
/// themselves report the bus's failures.
pub async fn watch_capacity(
    token: CancellationToken,
    queue: Arc<dyn Sender>,
    researchers: Option<u64>,
    interval: Duration,
    wake: Wake,
) {
    let mut last_free: Option<u64> = None;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let stats = tokio::select! {
            _ = token.cancelled() => return,
            stats = queue.inspect() => stats,
        };
        let stats = match stats {
            Ok(stats) => stats,
            Err(e) => {
                tracing::debug!(queue = queue.queue(), error = %e, "could not look at the work queue");
                continue;
            }
        };
        let Some(count) = researchers.or(stats.consumers) else {
            // The run says what to configure; nothing to watch.
            return;
        };
        let free = count.saturating_sub(stats.waiting);
        if last_free.is_some_and(|last| free > last) {
            tracing::trace!(free, waiting = stats.waiting, "capacity freed");
            wake.wake();
        }
        last_free = Some(free);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_timer_alone_waits_the_interval() {
        let pace = Pace {
            every: Duration::from_secs(10),
            wake: None,
            min_gap: Duration::from_millis(25),
        };
        let start = Instant::now();
        let cause = pace.wait(start, start, &CancellationToken::new()).await;
        assert_eq!(cause, Some(Cause::Timer));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_comes_early_but_not_before_the_gap_and_coalesces() {
        let wake = Wake::new();
        let pace = Pace {
            every: Duration::from_secs(10),
            wake: Some(wake.clone()),
            min_gap: Duration::from_millis(25),
        };
        let start = Instant::now();
        // Raised three times during the run: one early start.
        wake.wake();
        wake.wake();
        wake.wake();
        let cause = pace.wait(start, start, &CancellationToken::new()).await;
        assert_eq!(cause, Some(Cause::Woken));
        assert_eq!(start.elapsed(), Duration::from_millis(25));
        let next = Instant::now();
        assert_eq!(
            pace.wait(next, next, &CancellationToken::new()).await,
            Some(Cause::Timer)
        );
        assert_eq!(next.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_ends_the_wait() {
        let token = CancellationToken::new();
        token.cancel();
        let pace = Pace {
            every: Duration::from_secs(10),
            wake: Some(Wake::new()),
            min_gap: Duration::ZERO,
        };
        assert_eq!(
            pace.wait(Instant::now(), Instant::now(), &token).await,
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_taken_raises_the_wake_up_and_an_item_published_does_not() {
        use messagebus::{Bus, MemoryBus, MemoryBusConfig};
        let bus = MemoryBus::new(MemoryBusConfig::default());
        bus.create_queue("pending_research").await.unwrap();
        let sender = bus.sender("pending_research").await.unwrap();
        // One researcher, one item waiting for it: no capacity.
        let receiver = bus.receiver("pending_research").await.unwrap();
        sender.send(b"{}".to_vec()).await.unwrap();
        let (wake, token) = (Wake::new(), CancellationToken::new());
        let watch = tokio::spawn(watch_capacity(
            token.clone(),
            sender.clone(),
            None,
            Duration::from_millis(20),
            wake.clone(),
        ));
        // Looked at twice, nothing changed: not raised.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let quiet = tokio::time::timeout(Duration::ZERO, wake.woken()).await;
        assert!(quiet.is_err(), "raised with nothing taken");
        // The researcher takes it: capacity frees, and the next look says so.
        let taken = receiver.receive(1, Duration::ZERO).await.unwrap();
        assert_eq!(taken.len(), 1);
        tokio::time::timeout(Duration::from_millis(100), wake.woken())
            .await
            .expect("an item taken raises the wake-up");
        // A new item published (as a run would): capacity shrinks, nothing raised.
        sender.send(b"{}".to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let quiet = tokio::time::timeout(Duration::ZERO, wake.woken()).await;
        assert!(quiet.is_err(), "raised by an item published");
        token.cancel();
        watch.await.unwrap();
        drop(taken);
    }
}
