//! The visibility heartbeat: keeps messages a consumer still holds invisible to others.
//!
//! Every delivery handed out is *held* until it is acknowledged, released, dead-lettered or
//! dropped. One task per receiver wakes every heartbeat interval and extends, with
//! `ChangeMessageVisibilityBatch` (ten per request), each held message whose visibility ends
//! within two intervals. Work that outlasts the visibility timeout thus is not handed to a
//! second consumer, and work that is quick costs no heartbeat request at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::batcher::{EntryOutcome, MAX_BATCH};
use super::client::BusInner;
use super::visibility::change_visibility;

/// The heartbeat of one receiver: the messages its deliveries hold, and what it needs to
/// extend them.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    bus: Arc<BusInner>,
    queue: String,
    url: String,
    pub(crate) held: HeldSet,
    /// Releases wait on this gate, so no extension can land after a release and hide the
    /// message again.
    pub(crate) gate: tokio::sync::Mutex<()>,
}

impl Heartbeat {
    /// The heartbeat of a receiver of `queue` (at `url`), holding nothing yet.
    pub(crate) fn new(bus: Arc<BusInner>, queue: String, url: String) -> Self {
        Heartbeat {
            bus,
            queue,
            url,
            held: HeldSet::default(),
            gate: tokio::sync::Mutex::new(()),
        }
    }
}

/// One held message.
#[derive(Debug)]
struct Held {
    receipt: String,
    visible_until: Instant,
    /// No longer extended (`Delivery::stop_heartbeat`, for tests of stale deliveries).
    frozen: bool,
}

/// The messages a receiver's consumers hold.
#[derive(Debug, Default)]
pub(crate) struct HeldSet {
    map: Mutex<HashMap<u64, Held>>,
    next: AtomicU64,
}

impl HeldSet {
    /// Starts holding `receipt`, invisible until `visible_until`; returns its key.
    pub(crate) fn insert(&self, receipt: String, visible_until: Instant) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            id,
            Held {
                receipt,
                visible_until,
                frozen: false,
            },
        );
        id
    }

    /// Stops holding `id`.
    pub(crate) fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// How many messages are held.
    /// Until when the held delivery `id` is invisible to others, as far as this process
    /// knows (counted from a little before SQS did).
    pub(crate) fn visible_until(&self, id: u64) -> Option<Instant> {
        self.lock().get(&id).map(|h| h.visible_until)
    }

    /// Stops extending the held delivery `id`.
    pub(crate) fn freeze(&self, id: u64) {
        if let Some(h) = self.lock().get_mut(&id) {
            h.frozen = true;
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Held messages whose visibility ends before `horizon`.
    fn due(&self, horizon: Instant) -> Vec<(u64, String)> {
        self.lock()
            .iter()
            .filter(|(_, h)| !h.frozen && h.visible_until <= horizon)
            .map(|(id, h)| (*id, h.receipt.clone()))
            .collect()
    }

    fn extended(&self, id: u64, visible_until: Instant) {
        if let Some(h) = self.lock().get_mut(&id) {
            h.visible_until = visible_until;
        }
    }
}

/// The heartbeat task of one receiver; ends when the receiver and all its deliveries are gone
/// (they hold `shared`).
pub(crate) async fn run(shared: Weak<Heartbeat>, interval: Duration) {
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        beat(&shared, interval).await;
    }
}

/// One round: extends every held message whose visibility ends within two intervals.
async fn beat(shared: &Heartbeat, interval: Duration) {
    let _gate = shared.gate.lock().await;
    let due = shared.held.due(Instant::now() + interval * 2);
    if due.is_empty() {
        return;
    }
    let visibility = shared.bus.config.visibility_timeout;
    let secs = shared.bus.config.visibility_secs();
    for chunk in due.chunks(MAX_BATCH) {
        let started = Instant::now();
        let receipts: Vec<&str> = chunk.iter().map(|(_, r)| r.as_str()).collect();
        let extended =
            change_visibility(&shared.bus, &shared.queue, &shared.url, &receipts, secs).await;
        match extended {
            Ok(outcomes) => {
                for ((id, _), outcome) in chunk.iter().zip(outcomes) {
                    match outcome {
                        EntryOutcome::Done => shared.held.extended(*id, started + visibility),
                        // Next round tries again.
                        EntryOutcome::Retry(e) => {
                            tracing::debug!(queue = %shared.queue, error = %e, "visibility extension to retry");
                        }
                        // The receipt is stale (the message came back and was received again,
                        // or the 12 h limit is reached): holding it longer is pointless.
                        EntryOutcome::Failed(e) => {
                            tracing::warn!(queue = %shared.queue, error = %e, "cannot extend a held message's visibility; it may be delivered again");
                            shared.held.remove(*id);
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(queue = %shared.queue, error = %e, "visibility heartbeat failed; retrying next round");
            }
        }
    }
}
