//! What the slots of a researcher share, below both the run (`runtime.rs`) and the handling
//! of one item (`work.rs`): the [`Context`], the run's [`Counts`], and the [`Later`] holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use messagebus::Sender;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::analyser::Analyser;
use crate::handle::{Ended, Report};
use crate::media::Media;
use crate::printing::PrintCounters;
use crate::status::{SlotState, Status};
use crate::ResearchError;

/// How long an item whose analyser asked for a later try is held before it is released.
#[derive(Debug, Clone, Copy)]
pub struct Later {
    /// The hold at the item's first receive; doubled at each receive after
    /// (`--later-backoff`).
    pub first: Duration,
    /// The longest hold (`--later-max-backoff`).
    pub max: Duration,
}

impl Default for Later {
    fn default() -> Self {
        Later {
            first: Duration::from_secs(60),
            max: Duration::from_secs(15 * 60),
        }
    }
}

impl Later {
    /// The hold at the item's `receive`th receive (1 on the first).
    pub fn wait(&self, receive: u32) -> Duration {
        let doublings = receive.saturating_sub(1).min(30);
        self.first
            .saturating_mul(1 << doublings)
            .min(self.max.max(self.first))
    }
}

/// What the run counts, for its [`Report`].
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) received: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) results_sent: AtomicU64,
    pub(crate) errors_dropped: AtomicU64,
}

impl Counts {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn report(&self, ended: Ended) -> Report {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut report = Report::new(ended);
        report.received = get(&self.received);
        report.finished = get(&self.finished);
        report.skipped = get(&self.skipped);
        report.released = get(&self.released);
        report.dead_lettered = get(&self.dead_lettered);
        report.results_sent = get(&self.results_sent);
        report.errors_dropped = get(&self.errors_dropped);
        report
    }
}

/// What every slot shares.
pub(crate) struct Context {
    pub(crate) analyser: Arc<dyn Analyser>,
    pub(crate) media: Arc<Media>,
    /// What the researcher counts of episode prints.
    pub(crate) prints: Arc<PrintCounters>,
    pub(crate) results: Arc<dyn Sender>,
    /// Cancelled at the drain timeout after the token (or at once when the researcher stops
    /// for another reason): analysers are stopped, items released. Cancelled only through
    /// [`Context::stop_now`], which says why.
    pub(crate) hard_stop: CancellationToken,
    /// Why `hard_stop` was cancelled, in words: set once, by the first [`Context::stop_now`].
    pub(crate) stop_reason: OnceLock<String>,
    pub(crate) stall_timeout: Duration,
    pub(crate) status: Status,
    /// The queue's receive limit: an item received this many times is on its last allowed
    /// try.
    pub(crate) max_receives: u32,
    /// Holds of items whose analyser asked for a later try.
    pub(crate) later: Later,
    /// The token: once cancelled, an item held for a later try is released at once.
    pub(crate) stopping: CancellationToken,
    pub(crate) counts: Counts,
    /// The errors channel's sending side (see [`Context::report`]).
    pub(crate) errors: mpsc::Sender<ResearchError>,
}

impl Context {
    pub(crate) fn set_slot(&self, slot: usize, state: SlotState) {
        self.status.set(slot, state);
    }

    pub(crate) fn set_progress(&self, slot: usize, text: String) {
        self.status.set_progress(slot, text);
    }

    /// Stops the analysers and releases the items in hand at once, for `why` (the first
    /// reason given is the one kept).
    pub(crate) fn stop_now(&self, why: impl Into<String>) {
        let _ = self.stop_reason.set(why.into());
        self.hard_stop.cancel();
    }

    /// Why the items in hand were stopped (see [`Context::stop_now`]).
    pub(crate) fn stop_reason(&self) -> &str {
        self.stop_reason
            .get()
            .map_or("the researcher stopped", String::as_str)
    }

    /// Hands `error` to the host if it has room for it; never blocks.
    pub(crate) fn report(&self, error: ResearchError) {
        if self.errors.try_send(error).is_err() {
            Counts::add(&self.counts.errors_dropped, 1);
        }
    }
}
