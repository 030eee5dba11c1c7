//! The database bus: queues as rows of a table in a Postgres or SQLite database, usually the
//! datastore's own, so that the whole pipeline runs on one database with no other server.
//!
//! One design, two dialects (`postgres.rs`, `sqlite.rs`, each with its schema under
//! `migrations/`); the behaviour they share lives here in [`SqlBus`]:
//!
//! - A message is a row of `bus_messages` (`queue`, `body`, `visible_at`, `receive_count`,
//!   `receipt`, `dead_letter_reason`). It is *waiting* while `visible_at` is past, *in flight*
//!   while it is in the future. A receive claims the oldest visible rows (Postgres:
//!   `FOR UPDATE SKIP LOCKED`; SQLite: one writer at a time), pushes their `visible_at` out by
//!   the queue's visibility timeout, counts the receive and draws a new `receipt`. Every
//!   settlement names (`id`, `receipt`), so a stale delivery cannot settle a newer one.
//! - A row received `max_receives` times and still there is moved to the dead-letter queue
//!   (`<queue>_dead_letter`, the same table) with its reason on the next receive, in the
//!   same statement. Dead letters are kept until a person takes them off.
//! - Queues and their settings (visibility timeout, receive limit) are rows of `bus_queues`,
//!   made by [`Bus::create_queue`]; the schema is migrated by the same call (or by
//!   `SqlBus::migrate`), never by senders and receivers.
//! - Consumers: each live [`Receiver`] has a row in `bus_consumers`, refreshed by a keeper
//!   task and deleted when it is dropped; `inspect` counts those seen within the consumer
//!   TTL, so a crashed researcher stops counting by itself.
//! - The keeper task also extends the visibility of deliveries a consumer still holds (the
//!   heartbeat), so long work is not handed to a second consumer.
//! - Waiting: Postgres receivers wake on `LISTEN/NOTIFY` (every send notifies), with a poll as
//!   the safety net. On SQLite, which cannot notify across processes, one waiting receiver per
//!   queue and process polls with a short back-off, looking without the write lock, and the
//!   others sleep until it hands on its turn. A send, a notification or a release wakes one
//!   receiver of this process; a receiver that got all it asked for wakes the next (more may
//!   be waiting), so a burst of messages wakes as many receivers as it needs, not all of them.
//! - Settling (receive, ack, release, extend, dead-letter) may be lost in a crash without harm
//!   (the message comes back), so on Postgres it commits without waiting for the disk; sends
//!   always wait.
//!
//! A datastore on the same database settles deliveries and enqueues inside its own
//! transactions through [`SqlReceipt`] and the dialects' `*_in` functions.
//!
//! The SQL a program in another language runs to use these queues is in the book
//! (docs/src/buses.md, "The database bus from other languages").

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use uuid::Uuid;

use crate::deadline::{within, DeadlineReceiver, DeadlineSender};
use crate::{
    dead_letter_queue_name, Acknowledger, BatchSettler, Bus, BusError, DeadLetter, Delivery,
    QueueStats, ReceiptAction, Receiver, Sender, Settlement, SqlReceipt, Unsent,
    DEFAULT_CALL_DEADLINE, MAX_BODY_BYTES,
};

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub(crate) use crate::fail_point::fail_point;
#[cfg(feature = "postgres")]
pub use postgres::PgBus;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteBus;

/// Settings of a database bus.
#[derive(Debug, Clone)]
pub struct SqlBusConfig {
    /// The visibility timeout of queues this bus creates.
    pub visibility_timeout: Duration,
    /// Receives after which a message goes to the dead-letter queue, for queues this bus
    /// creates. Zero: no limit.
    pub max_receives: u32,
    /// How recently a receiver must have shown it is alive to count as a consumer.
    pub consumer_ttl: Duration,
    /// How often a waiting receiver looks again without being woken (Postgres: the safety net
    /// under `LISTEN/NOTIFY`; SQLite: the longest back-off).
    pub poll_interval: Duration,
    /// How long one call (a send, a receive past its wait, a settlement, a redrive, the
    /// keeper's heartbeat) may take in all before it returns [`BusError::Timeout`]: a
    /// database that stops answering never holds a caller for good.
    pub call_deadline: Duration,
}

impl Default for SqlBusConfig {
    fn default() -> Self {
        SqlBusConfig {
            visibility_timeout: Duration::from_secs(30),
            max_receives: 5,
            consumer_ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(500),
            call_deadline: DEFAULT_CALL_DEADLINE,
        }
    }
}

/// A queue's row in `bus_queues`.
#[derive(Debug, Clone)]
pub(crate) struct QueueRow {
    pub(crate) name: String,
    /// `None` for a dead-letter queue.
    pub(crate) dead_letter_queue: Option<String>,
    pub(crate) visibility_timeout: Duration,
    pub(crate) max_receives: u32,
}

/// One claimed row.
#[derive(Debug)]
pub(crate) struct ClaimedRow {
    pub(crate) id: i64,
    pub(crate) receipt: i64,
    pub(crate) body: Vec<u8>,
    pub(crate) receive_count: u32,
    pub(crate) dead_letter_reason: Option<String>,
}

/// What one claim did.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    pub(crate) rows: Vec<ClaimedRow>,
    /// Rows found over their receive limit and moved to the dead-letter queue instead.
    pub(crate) dead_lettered: usize,
}

/// The statements a dialect provides; [`SqlBus`] does the rest.
#[async_trait]
pub(crate) trait Dialect: Send + Sync + 'static {
    /// Whether sends in other processes wake this process's receivers (Postgres: NOTIFY).
    /// Without, a waiting receiver polls with a back-off; with, at the poll interval.
    const NOTIFIES: bool;
    /// Creates or upgrades the bus tables. Harmless when current.
    async fn migrate(&self) -> Result<(), BusError>;
    /// The bus instance id kept in the database; `None` when the bus has no tables there.
    async fn bus_id(&self) -> Result<Option<String>, BusError>;
    /// Inserts the queue's row unless it exists.
    async fn create_queue(&self, queue: &QueueRow) -> Result<(), BusError>;
    /// Sets the queue's receive limit to `queue.max_receives`.
    async fn update_queue(&self, queue: &QueueRow) -> Result<(), BusError>;
    /// The queue's row, or `None`.
    async fn queue(&self, name: &str) -> Result<Option<QueueRow>, BusError>;
    /// Inserts one row per body, durably, and wakes the queue's listeners.
    async fn send(&self, queue: &str, bodies: &[String]) -> Result<(), BusError>;
    /// Inserts one row per body on `queue` and deletes the row of delivery (`id`,
    /// `receipt`) in one transaction, and wakes the queue's listeners; whether the row was
    /// deleted (a stale receipt deletes nothing, and the rows are sent all the same). The
    /// commit need not wait for the disk: a commit lost in a crash loses the
    /// acknowledgement with the rows, so the message comes back and is answered again.
    async fn send_and_ack(
        &self,
        queue: &str,
        bodies: &[String],
        id: i64,
        receipt: i64,
    ) -> Result<bool, BusError>;
    /// Claims up to `max` visible rows of `queue`.
    async fn claim(&self, queue: &QueueRow, max: usize) -> Result<Claimed, BusError>;
    /// Deletes the rows of these deliveries (id, receipt) in one statement; a stale receipt
    /// deletes nothing. Whether each was deleted, in order.
    async fn ack(&self, deliveries: &[(i64, i64)]) -> Result<Vec<bool>, BusError>;
    /// Makes the row visible now.
    async fn release(&self, id: i64, receipt: i64) -> Result<bool, BusError>;
    /// Makes the rows of these deliveries visible now, in one statement (a new, empty
    /// receipt each); a stale receipt releases nothing. Whether each was released, in order.
    async fn release_batch(&self, deliveries: &[(i64, i64)]) -> Result<Vec<bool>, BusError>;
    /// Moves the row to `dead_letter_queue` with `reason`.
    async fn dead_letter(
        &self,
        id: i64,
        receipt: i64,
        dead_letter_queue: &str,
        reason: &str,
    ) -> Result<bool, BusError>;
    /// Moves up to `max` waiting rows of `dead_letter_queue` to `queue`, oldest first, in one
    /// transaction that commits durably: received as new (receive count 0, receipt 0, so that
    /// a stale delivery from the dead-letter queue settles nothing), without their reason.
    async fn redrive(
        &self,
        queue: &str,
        dead_letter_queue: &str,
        max: u64,
    ) -> Result<u64, BusError>;
    /// Waiting rows of `dead_letter_queue`.
    async fn redrivable(&self, dead_letter_queue: &str) -> Result<u64, BusError>;
    /// Pushes each row's visibility out to `visibility` from now.
    /// Returns how many deliveries it found still holding their message.
    async fn extend(&self, held: &[(i64, i64, Duration)]) -> Result<u64, BusError>;
    /// Does `action` to the row of delivery (`id`, `receipt`) if it is a message of `queue`
    /// (a durable receipt settled by [`Receiver::settle_receipt`]); whether it did. Release
    /// clears the receipt, as [`release`](Self::release) does.
    async fn settle_in_queue(
        &self,
        queue: &str,
        id: i64,
        receipt: i64,
        action: ReceiptAction,
    ) -> Result<bool, BusError>;
    /// Waiting rows of `queue`, counted up to `limit`.
    async fn waiting_up_to(&self, queue: &str, limit: u64) -> Result<u64, BusError>;
    /// Waiting, in-flight and dead-letter counts, and consumers seen within `consumer_ttl`.
    async fn inspect(
        &self,
        queue: &QueueRow,
        consumer_ttl: Duration,
    ) -> Result<QueueStats, BusError>;
    /// Up to `limit` rows of `dead_letter_queue`, oldest first, held or not, each body cut to
    /// `max_body_bytes` by the database (its bytes, UTF-8 or not). Reads only.
    async fn peek(
        &self,
        dead_letter_queue: &str,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Vec<DeadLetter>, BusError>;
    /// Marks `alive` consumers seen now and deletes `gone` ones.
    async fn consumers(&self, alive: &[(Uuid, String)], gone: &[Uuid]) -> Result<(), BusError>;
}

/// A database bus on dialect `D`: `PgBus` or `SqliteBus`. Cheap to clone.
// The dialect trait is sealed (crate-private): only this crate's dialects exist.
#[allow(private_bounds)]
pub struct SqlBus<D: Dialect> {
    shared: Arc<Shared<D>>,
}

impl<D: Dialect> Clone for SqlBus<D> {
    fn clone(&self) -> Self {
        SqlBus {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlBus<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBus")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// What every handle of one bus shares.
pub(crate) struct Shared<D> {
    pub(crate) dialect: D,
    pub(crate) config: SqlBusConfig,
    /// The bus instance id, read once the schema exists.
    bus_id: tokio::sync::OnceCell<Arc<str>>,
    state: Mutex<State>,
    /// Held by the task that deletes the acknowledgements queued in `State::acks`.
    ack_flush: tokio::sync::Mutex<()>,
    /// Releases of deliveries dropped unsettled, under way; [`Bus::close`] waits for them.
    abandoned: tokio_util::task::TaskTracker,
    /// Stops the keeper (and the Postgres listener) when the last handle goes.
    stop: tokio_util::sync::CancellationToken,
}

impl<D> Drop for Shared<D> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Default)]
struct State {
    /// Per queue: wakes this process's receivers when a message may be there.
    wakers: HashMap<String, Arc<Waker>>,
    /// Live receivers: consumer id → queue.
    consumers: HashMap<Uuid, String>,
    /// Dropped receivers whose rows are still to be deleted.
    gone: Vec<Uuid>,
    /// Deliveries held by this process's consumers, for the heartbeat.
    held: HashMap<(i64, i64), Held>,
    /// Acknowledgements waiting to be deleted together, each with who waits for the outcome.
    acks: Vec<QueuedAck>,
}

/// An acknowledgement waiting for the next flush: (id, receipt), and who waits for the outcome.
type QueuedAck = (i64, i64, oneshot::Sender<Result<(), BusError>>);

struct Held {
    visibility: Duration,
    visible_until: Instant,
}

/// One queue's waiting receivers in this process.
#[derive(Default)]
struct Waker {
    /// Woken one receiver at a time.
    notify: Notify,
    /// SQLite: whether one of the receivers has the turn to poll for the others.
    polling: std::sync::atomic::AtomicBool,
}

impl Waker {
    /// The turn to poll, if no other receiver has it.
    fn take_turn(self: &Arc<Self>) -> Option<PollTurn> {
        use std::sync::atomic::Ordering;
        self.polling
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then(|| PollTurn(Arc::clone(self)))
    }
}

/// A receiver's turn to poll (SQLite). Given up when the receive ends however it ends (rows,
/// the wait over, the future dropped), and handed on: a sleeping receiver wakes to look and
/// takes the turn if it finds nothing.
struct PollTurn(Arc<Waker>);

impl Drop for PollTurn {
    fn drop(&mut self) {
        self.0
            .polling
            .store(false, std::sync::atomic::Ordering::Release);
        self.0.notify.notify_one();
    }
}

/// What a datastore's own transaction needs to wake this process's receivers of a queue.
trait LocalReceivers: Send + Sync {
    fn wake(&self, queue: &str);
}

impl<D: Dialect> LocalReceivers for Shared<D> {
    fn wake(&self, queue: &str) {
        Shared::wake(self, queue);
    }
}

/// This process's database buses with receivers, by bus id (see [`sent_in`]).
type LocalBuses = HashMap<Arc<str>, Vec<Weak<dyn LocalReceivers>>>;

fn local_buses() -> MutexGuard<'static, LocalBuses> {
    static BUSES: std::sync::OnceLock<Mutex<LocalBuses>> = std::sync::OnceLock::new();
    BUSES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Remembers that `shared`, the bus `bus_id`, has receivers in this process.
fn local_receivers<D: Dialect>(bus_id: &Arc<str>, shared: &Arc<Shared<D>>) {
    let mut buses = local_buses();
    buses.retain(|_, all| {
        all.retain(|b| b.strong_count() > 0);
        !all.is_empty()
    });
    let all = buses.entry(Arc::clone(bus_id)).or_default();
    let ptr = Arc::as_ptr(shared).cast::<()>();
    if !all.iter().any(|b| b.as_ptr().cast::<()>() == ptr) {
        let shared: Arc<dyn LocalReceivers> = Arc::clone(shared) as Arc<dyn LocalReceivers>;
        all.push(Arc::downgrade(&shared));
    }
}

/// Says that messages were sent on `queue` of the bus `bus_id` by a transaction of the caller's
/// own (a datastore's `send_in`), now committed: this process's receivers waiting on that queue
/// look at once, as they do after a send through the bus, instead of at their next poll
/// (SQLite has no notifications; on Postgres, `send_in` notifies already, and this only saves
/// the notification's round trip). Costs a look-up when this process has no such receivers.
pub fn sent_in(bus_id: &str, queue: &str) {
    let buses: Vec<Arc<dyn LocalReceivers>> = local_buses()
        .get(bus_id)
        .map(|all| all.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    for bus in buses {
        bus.wake(queue);
    }
}

/// The longest a polling SQLite receiver waits between two looks: a look is a read without
/// the write lock, and one receiver per queue and process makes it.
const POLL_TURN_NAP: Duration = Duration::from_millis(20);

impl<D: Dialect> Shared<D> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No critical section panics part-way, so a poisoned lock still guards consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn waker(&self, queue: &str) -> Arc<Waker> {
        Arc::clone(self.lock().wakers.entry(queue.to_owned()).or_default())
    }

    /// Wakes one of this process's receivers of `queue` (a send, a notification from the
    /// database, a release): if it gets all it asks for, it wakes the next.
    pub(crate) fn wake(&self, queue: &str) {
        if let Some(w) = self.lock().wakers.get(queue) {
            w.notify.notify_one();
        }
    }

    /// The bus instance id, creating the bus's tables first if `migrate`. Without, a
    /// database with no bus tables has no queues: [`BusError::QueueNotFound`] for `queue`.
    async fn bus_id(&self, migrate: bool, queue: &str) -> Result<Arc<str>, BusError> {
        if let Some(id) = self.bus_id.get() {
            return Ok(Arc::clone(id));
        }
        if migrate {
            self.dialect.migrate().await?;
        }
        let id: Arc<str> = match self.dialect.bus_id().await? {
            Some(id) => Arc::from(id),
            None => return Err(BusError::QueueNotFound(queue.to_owned())),
        };
        Ok(Arc::clone(self.bus_id.get_or_init(|| async { id }).await))
    }

    async fn existing_queue(&self, name: &str) -> Result<QueueRow, BusError> {
        self.bus_id(false, name).await?;
        self.dialect
            .queue(name)
            .await?
            .ok_or_else(|| BusError::QueueNotFound(name.to_owned()))
    }

    /// The name of `queue`'s dead-letter queue, for a redrive: `queue` must exist and not be
    /// a dead-letter queue itself.
    async fn redrive_source(&self, queue: &str) -> Result<String, BusError> {
        self.existing_queue(queue)
            .await?
            .dead_letter_queue
            .ok_or_else(|| {
                BusError::Unsupported(format!(
                    "queue {queue:?} is a dead-letter queue: redrive the queue it belongs to"
                ))
            })
    }

    /// Deletes the rows of dropped receivers and refreshes live ones.
    async fn refresh_consumers(&self, all_alive: bool) -> Result<(), BusError> {
        let (alive, gone) = {
            let mut state = self.lock();
            let gone = std::mem::take(&mut state.gone);
            let alive: Vec<(Uuid, String)> = if all_alive {
                state
                    .consumers
                    .iter()
                    .map(|(id, q)| (*id, q.clone()))
                    .collect()
            } else {
                Vec::new()
            };
            (alive, gone)
        };
        if alive.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let out = self.dialect.consumers(&alive, &gone).await;
        if out.is_err() {
            // Try again at the next refresh.
            self.lock().gone.extend(gone);
        }
        out
    }

    /// Acknowledges a delivery. Acknowledgements made at the same time (an archivist settles
    /// a batch at once) are deleted together, in one statement: whoever finds no deletion
    /// running deletes everything queued so far, and the others wait for its outcome (as
    /// group commit does). A batch of 100 then costs a few round trips instead of 100.
    async fn ack(&self, id: i64, receipt: i64) -> Result<(), BusError> {
        let (tx, rx) = oneshot::channel();
        self.lock().acks.push((id, receipt, tx));
        {
            let _turn = self.ack_flush.lock().await;
            let batch = std::mem::take(&mut self.lock().acks);
            if !batch.is_empty() {
                // Acknowledgements gathered, not yet deleted.
                fail_point("bus-ack-batch").await;
                let keys: Vec<(i64, i64)> = batch.iter().map(|(i, r, _)| (*i, *r)).collect();
                // A stale receipt deleted nothing: the message is its new holder's to settle.
                let out = self.dialect.ack(&keys).await.map(drop);
                for (_, _, waiter) in batch {
                    // The waiter may have given up (its future dropped): nothing to tell.
                    let _ = waiter.send(match &out {
                        Ok(()) => Ok(()),
                        Err(e) => Err(shared_error(e)),
                    });
                }
            }
        }
        rx.await.unwrap_or(Err(BusError::Closed))
    }

    /// Settles a batch in one statement (see [`crate::ack_all`]).
    async fn settle_batch(
        &self,
        how: Settlement,
        ackers: Vec<Box<dyn Any + Send>>,
    ) -> Vec<Result<(), BusError>> {
        let mut out: Vec<Option<Result<(), BusError>>> = Vec::with_capacity(ackers.len());
        let mut keys = Vec::with_capacity(ackers.len());
        let mut at = Vec::with_capacity(ackers.len());
        let mut queues: Vec<String> = Vec::new();
        for a in ackers {
            match a.downcast::<SqlAcker<D>>() {
                Ok(mut a) => {
                    at.push(out.len());
                    out.push(None);
                    keys.push(a.let_go());
                    if !queues.contains(&a.queue.name) {
                        queues.push(a.queue.name.clone());
                    }
                }
                Err(_) => out.push(Some(Err(BusError::Unsupported(
                    "not a delivery of this database bus".into(),
                )))),
            }
        }
        if !keys.is_empty() {
            if how == Settlement::Ack {
                // Acknowledgements gathered, not yet deleted (as in `ack`).
                fail_point("bus-ack-batch").await;
            }
            let done = match how {
                Settlement::Ack => self.dialect.ack(&keys).await,
                Settlement::Release => self.dialect.release_batch(&keys).await,
            };
            match done {
                Ok(done) => {
                    if how == Settlement::Release && done.iter().any(|&d| d) {
                        queues.iter().for_each(|q| self.wake(q));
                    }
                    for ((i, (id, _)), settled) in at.iter().zip(&keys).zip(done) {
                        out[*i] = Some(if settled {
                            Ok(())
                        } else {
                            Err(BusError::Stale {
                                message_id: id.to_string(),
                            })
                        });
                    }
                }
                Err(e) => {
                    for i in &at {
                        out[*i] = Some(Err(shared_error(&e)));
                    }
                }
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or(Err(BusError::Closed)))
            .collect()
    }

    /// Extends the visibility of held deliveries that would otherwise come back soon.
    async fn heartbeat(&self, margin: Duration) -> Result<(), BusError> {
        let now = Instant::now();
        let due: Vec<(i64, i64, Duration)> = self
            .lock()
            .held
            .iter()
            .filter(|(_, h)| h.visible_until <= now + margin.max(h.visibility / 2))
            .map(|(&(id, receipt), h)| (id, receipt, h.visibility))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let _found = self.dialect.extend(&due).await?;
        let mut state = self.lock();
        for (id, receipt, visibility) in due {
            if let Some(h) = state.held.get_mut(&(id, receipt)) {
                h.visible_until = now + visibility;
            }
        }
        Ok(())
    }
}

#[allow(private_bounds)]
impl<D: Dialect> SqlBus<D> {
    pub(crate) fn from_dialect(dialect: D, config: SqlBusConfig) -> Self {
        let shared = Arc::new(Shared {
            dialect,
            config,
            bus_id: tokio::sync::OnceCell::new(),
            state: Mutex::new(State::default()),
            ack_flush: tokio::sync::Mutex::new(()),
            abandoned: tokio_util::task::TaskTracker::new(),
            stop: tokio_util::sync::CancellationToken::new(),
        });
        tokio::spawn(keeper(Arc::downgrade(&shared), shared.stop.clone()));
        SqlBus { shared }
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn shared(&self) -> &Arc<Shared<D>> {
        &self.shared
    }

    /// Creates or upgrades the bus's tables (harmless when current) and returns the bus
    /// instance id. [`Bus::create_queue`] does this too.
    pub async fn migrate(&self) -> Result<Arc<str>, BusError> {
        self.shared.bus_id(true, "").await
    }

    /// The bus's settings.
    pub fn config(&self) -> &SqlBusConfig {
        &self.shared.config
    }

    /// Extends the visibility of the delivery `receipt` by `visibility` from now, as the
    /// heartbeat does: for tests of a heartbeat that races a settlement.
    #[cfg(feature = "test-utils")]
    #[doc(hidden)]
    pub async fn extend_visibility(
        &self,
        receipt: &SqlReceipt,
        visibility: Duration,
    ) -> Result<(), BusError> {
        self.shared
            .dialect
            .extend(&[(receipt.message_id, receipt.receipt, visibility)])
            .await
            .map(drop)
    }
}

/// The keeper: refreshes this process's consumers and extends held deliveries, once a tick,
/// until the bus is dropped.
async fn keeper<D: Dialect>(shared: Weak<Shared<D>>, stop: tokio_util::sync::CancellationToken) {
    let tick = Duration::from_millis(250);
    let mut last_refresh = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let refresh_all = last_refresh.elapsed() >= shared.config.consumer_ttl / 3;
        let deadline = shared.config.call_deadline;
        match within(deadline, shared.refresh_consumers(refresh_all)).await {
            Ok(()) if refresh_all => last_refresh = Instant::now(),
            Ok(()) => {}
            Err(e) => tracing::debug!(error = %e, "could not refresh consumers"),
        }
        if let Err(e) = within(deadline, shared.heartbeat(tick * 4)).await {
            tracing::debug!(error = %e, "could not extend held messages");
        }
    }
}

/// Checks a body the bus can carry: at most [`MAX_BODY_BYTES`], UTF-8, no NUL (Postgres text
/// cannot hold it; refused on both dialects so that they agree).
pub(crate) fn check_body(body: Vec<u8>) -> Result<String, BusError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(BusError::BodyTooLarge {
            size: body.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    let text = String::from_utf8(body).map_err(|e| {
        BusError::InvalidBody(format!(
            "not valid UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if let Some(at) = text.find('\0') {
        return Err(BusError::InvalidBody(format!(
            "contains a NUL character at offset {at}"
        )));
    }
    Ok(text)
}

/// [`check_body`] for each body: all or nothing.
pub(crate) fn check_bodies(bodies: Vec<Vec<u8>>) -> Result<Vec<String>, BusError> {
    bodies.into_iter().map(check_body).collect()
}

#[async_trait]
impl<D: Dialect> Bus for SqlBus<D> {
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        within(self.shared.config.call_deadline, self.sender_now(queue)).await
    }

    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        within(self.shared.config.call_deadline, self.receiver_now(queue)).await
    }

    async fn queue_drift(&self, queue: &str) -> Result<Vec<String>, BusError> {
        within(
            self.shared.config.call_deadline,
            self.queue_drift_now(queue),
        )
        .await
    }

    async fn update_queue(&self, queue: &str) -> Result<(), BusError> {
        within(
            self.shared.config.call_deadline,
            self.update_queue_now(queue),
        )
        .await
    }

    /// Waits for the releases of deliveries dropped unsettled (see
    /// [`Acknowledger::abandoned`]), then deletes this process's consumer rows.
    async fn close(&self) -> Result<(), BusError> {
        within(self.shared.config.call_deadline, self.close_now()).await
    }

    /// One transaction: every message it moves is moved once, or none is.
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        within(
            self.shared.config.call_deadline,
            self.redrive_now(queue, max),
        )
        .await
    }

    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        within(self.shared.config.call_deadline, self.redrivable_now(queue)).await
    }

    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
        within(
            self.shared.config.call_deadline,
            self.create_queue_now(queue),
        )
        .await
    }
}

/// The [`Bus`] calls, without the deadline [`Bus`]'s methods put on them.
#[allow(private_bounds)]
impl<D: Dialect> SqlBus<D> {
    async fn sender_now(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        let row = self.shared.existing_queue(queue).await?;
        let bus_id = self.shared.bus_id(false, queue).await?;
        let sender = Arc::new(SqlSender {
            shared: Arc::clone(&self.shared),
            queue: row,
            bus_id,
        });
        Ok(DeadlineSender::wrap(
            sender,
            self.shared.config.call_deadline,
        ))
    }

    async fn receiver_now(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        let row = self.shared.existing_queue(queue).await?;
        let bus_id = self.shared.bus_id(false, queue).await?;
        let consumer = Uuid::new_v4();
        // A receiver of a dead-letter queue is not a consumer of anything that is counted.
        if row.dead_letter_queue.is_some() {
            match self
                .shared
                .dialect
                .consumers(&[(consumer, row.name.clone())], &[])
                .await
            {
                Ok(()) => {}
                // A locked file or a full disk passes: the keeper registers the consumer at
                // its next refresh, and receiving meanwhile retries on its own.
                Err(e) if e.is_retryable() => tracing::warn!(
                    queue = %row.name,
                    error = %e,
                    "could not register as a consumer yet; the keeper tries again"
                ),
                Err(e) => return Err(e),
            }
            self.shared
                .lock()
                .consumers
                .insert(consumer, row.name.clone());
        }
        let waker = self.shared.waker(&row.name);
        local_receivers(&bus_id, &self.shared);
        let receiver = Arc::new(SqlReceiver {
            shared: Arc::clone(&self.shared),
            queue: row,
            bus_id,
            consumer,
            waker,
        });
        Ok(DeadlineReceiver::wrap(
            receiver,
            self.shared.config.call_deadline,
        ))
    }

    async fn queue_drift_now(&self, queue: &str) -> Result<Vec<String>, BusError> {
        let row = self.shared.existing_queue(queue).await?;
        let want = self.shared.config.max_receives;
        Ok(
            if row.dead_letter_queue.is_some() && row.max_receives != want {
                vec![format!(
                    "its receive limit is {}, ARCHIVIST_MAX_RECEIVES is {want}",
                    row.max_receives
                )]
            } else {
                Vec::new()
            },
        )
    }

    async fn update_queue_now(&self, queue: &str) -> Result<(), BusError> {
        let row = self.shared.existing_queue(queue).await?;
        if row.dead_letter_queue.is_none() {
            return Ok(());
        }
        self.shared
            .dialect
            .update_queue(&QueueRow {
                max_receives: self.shared.config.max_receives,
                ..row
            })
            .await
    }

    async fn close_now(&self) -> Result<(), BusError> {
        let tracker = &self.shared.abandoned;
        tracker.close();
        tracker.wait().await;
        tracker.reopen();
        let all: Vec<Uuid> = {
            let mut state = self.shared.lock();
            let mut all: Vec<Uuid> = state.consumers.drain().map(|(id, _)| id).collect();
            all.append(&mut state.gone);
            all
        };
        if all.is_empty() {
            return Ok(());
        }
        self.shared.dialect.consumers(&[], &all).await
    }

    async fn redrive_now(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        let dlq = self.shared.redrive_source(queue).await?;
        if max == 0 {
            return Ok(0);
        }
        let moved = self.shared.dialect.redrive(queue, &dlq, max).await?;
        if moved > 0 {
            self.shared.wake(queue);
        }
        Ok(moved)
    }

    async fn redrivable_now(&self, queue: &str) -> Result<u64, BusError> {
        let dlq = self.shared.redrive_source(queue).await?;
        self.shared.dialect.redrivable(&dlq).await
    }

    async fn create_queue_now(&self, queue: &str) -> Result<(), BusError> {
        self.shared.bus_id(true, queue).await?;
        let config = &self.shared.config;
        let dead_letter = dead_letter_queue_name(queue);
        self.shared
            .dialect
            .create_queue(&QueueRow {
                name: dead_letter.clone(),
                dead_letter_queue: None,
                visibility_timeout: config.visibility_timeout,
                max_receives: 0,
            })
            .await?;
        self.shared
            .dialect
            .create_queue(&QueueRow {
                name: queue.to_owned(),
                dead_letter_queue: Some(dead_letter),
                visibility_timeout: config.visibility_timeout,
                max_receives: config.max_receives,
            })
            .await
    }
}

struct SqlSender<D: Dialect> {
    shared: Arc<Shared<D>>,
    queue: QueueRow,
    bus_id: Arc<str>,
}

#[async_trait]
impl<D: Dialect> Sender for SqlSender<D> {
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        let bodies = check_bodies(bodies)?;
        if bodies.is_empty() {
            return Ok(());
        }
        self.shared.dialect.send(&self.queue.name, &bodies).await?;
        self.shared.wake(&self.queue.name);
        Ok(())
    }

    async fn send_and_ack(
        &self,
        bodies: Vec<Vec<u8>>,
        answered: Delivery,
    ) -> Result<Result<(), BusError>, Unsent> {
        // A delivery of this bus, with its receipt: one transaction. Any other (another bus,
        // another database): two steps.
        let Some(receipt) = answered.sql_receipt().filter(|r| *r.bus_id == *self.bus_id) else {
            return crate::send_then_ack(self, bodies, answered).await;
        };
        let bodies = match check_bodies(bodies) {
            Ok(bodies) => bodies,
            Err(error) => {
                return Err(Unsent {
                    error,
                    delivery: answered,
                })
            }
        };
        match self
            .shared
            .dialect
            .send_and_ack(
                &self.queue.name,
                &bodies,
                receipt.message_id,
                receipt.receipt,
            )
            .await
        {
            Ok(_) => {
                // A stale receipt deleted nothing: the message is its new holder's to settle,
                // as with `Delivery::ack`.
                answered.settled_elsewhere();
                if !bodies.is_empty() {
                    self.shared.wake(&self.queue.name);
                }
                Ok(Ok(()))
            }
            Err(error) => Err(Unsent {
                error,
                delivery: answered,
            }),
        }
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        // Receivers dropped in this process stop counting at once.
        self.shared.refresh_consumers(false).await?;
        let mut stats = self
            .shared
            .dialect
            .inspect(&self.queue, self.shared.config.consumer_ttl)
            .await?;
        if self.queue.dead_letter_queue.is_none() {
            stats.consumers = Some(0);
        }
        Ok(stats)
    }

    async fn waiting_at_least(&self, n: u64) -> Result<bool, BusError> {
        if n == 0 {
            return Ok(true);
        }
        let waiting = self
            .shared
            .dialect
            .waiting_up_to(&self.queue.name, n)
            .await?;
        Ok(waiting >= n)
    }

    async fn peek_dead_letters(
        &self,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        let Some(dlq) = &self.queue.dead_letter_queue else {
            return Ok(Some(Vec::new()));
        };
        Ok(Some(
            self.shared.dialect.peek(dlq, limit, max_body_bytes).await?,
        ))
    }

    fn queue(&self) -> &str {
        &self.queue.name
    }

    fn sql_bus_id(&self) -> Option<&str> {
        Some(&self.bus_id)
    }
}

struct SqlReceiver<D: Dialect> {
    shared: Arc<Shared<D>>,
    queue: QueueRow,
    bus_id: Arc<str>,
    consumer: Uuid,
    waker: Arc<Waker>,
}

impl<D: Dialect> Drop for SqlReceiver<D> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if state.consumers.remove(&self.consumer).is_some() {
            state.gone.push(self.consumer);
        }
    }
}

#[async_trait]
impl<D: Dialect> Receiver for SqlReceiver<D> {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + wait;
        // SQLite has no notifications across processes: the receiver with the turn looks again
        // soon, then less often.
        let mut backoff = Duration::from_millis(5);
        let mut turn: Option<PollTurn> = None;
        // Claim (on entry, and when woken) or only look first (SQLite, polling).
        let mut claim = true;
        loop {
            // Registered before looking, so a send between the look and the wait still wakes us.
            let woken = self.waker.notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if !claim {
                // A look takes no write lock; a claim would, found something or not.
                claim = self
                    .shared
                    .dialect
                    .waiting_up_to(&self.queue.name, 1)
                    .await?
                    > 0;
            }
            if claim {
                let claimed = self.shared.dialect.claim(&self.queue, max).await?;
                if !claimed.rows.is_empty() {
                    // More may be waiting: the next receiver looks (a turn to poll, given up,
                    // wakes one already).
                    if claimed.rows.len() + claimed.dead_lettered >= max && turn.is_none() {
                        self.waker.notify.notify_one();
                    }
                    return Ok(self.deliveries(claimed.rows));
                }
                if claimed.dead_lettered > 0 {
                    continue;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let poll = self.shared.config.poll_interval;
            let nap = if D::NOTIFIES {
                poll
            } else {
                if turn.is_none() {
                    turn = self.waker.take_turn();
                }
                match turn {
                    Some(_) => backoff.min(POLL_TURN_NAP).min(poll),
                    None => poll,
                }
            }
            .min(deadline - now);
            backoff = backoff.saturating_mul(2);
            tokio::select! {
                _ = woken => {
                    backoff = Duration::from_millis(5);
                    claim = true;
                }
                _ = tokio::time::sleep(nap) => claim = D::NOTIFIES,
            }
        }
    }

    fn queue(&self) -> &str {
        &self.queue.name
    }

    async fn settle_receipt(&self, receipt: &str, action: ReceiptAction) -> Result<bool, BusError> {
        let Some((id, receipt)) = parse_receipt(receipt) else {
            return Ok(false);
        };
        // Row ids are the bus's, not the queue's: each statement also names this receiver's
        // queue, so that a receipt of another queue settles nothing here; the delivery's
        // random receipt is what makes a receipt unguessable.
        let done = self
            .shared
            .dialect
            .settle_in_queue(&self.queue.name, id, receipt, action)
            .await?;
        if done && action == ReceiptAction::Release {
            self.shared.wake(&self.queue.name);
        }
        Ok(done)
    }
}

/// A durable receipt of the database bus: the message's row id and its delivery's random
/// receipt, as `ID.RECEIPT`.
fn format_receipt(id: i64, receipt: i64) -> String {
    format!("{id}.{receipt}")
}

/// The row id and receipt of [`format_receipt`]'s string; `None` for anything else. Receipt 0
/// is what a message not held carries: never a delivery's.
fn parse_receipt(text: &str) -> Option<(i64, i64)> {
    let (id, receipt) = text.split_once('.')?;
    let (id, receipt) = (id.parse().ok()?, receipt.parse().ok()?);
    (receipt != 0).then_some((id, receipt))
}

impl<D: Dialect> SqlReceiver<D> {
    fn deliveries(&self, rows: Vec<ClaimedRow>) -> Vec<Delivery> {
        let visibility = self.queue.visibility_timeout;
        let visible_until = Instant::now() + visibility;
        let mut state = self.shared.lock();
        rows.into_iter()
            .map(|row| {
                state.held.insert(
                    (row.id, row.receipt),
                    Held {
                        visibility,
                        visible_until,
                    },
                );
                let acker = SqlAcker {
                    shared: Arc::clone(&self.shared),
                    queue: self.queue.clone(),
                    receipt: SqlReceipt {
                        bus_id: Arc::clone(&self.bus_id),
                        message_id: row.id,
                        receipt: row.receipt,
                    },
                    settled: false,
                };
                Delivery::new(
                    row.body,
                    row.id.to_string(),
                    row.receive_count,
                    row.dead_letter_reason,
                    Box::new(acker),
                )
            })
            .collect()
    }
}

struct SqlAcker<D: Dialect> {
    shared: Arc<Shared<D>>,
    queue: QueueRow,
    receipt: SqlReceipt,
    settled: bool,
}

impl<D: Dialect> SqlAcker<D> {
    /// Stops the heartbeat for this delivery: it is being settled.
    fn let_go(&mut self) -> (i64, i64) {
        self.settled = true;
        let key = (self.receipt.message_id, self.receipt.receipt);
        self.shared.lock().held.remove(&key);
        key
    }
}

impl<D: Dialect> Drop for SqlAcker<D> {
    fn drop(&mut self) {
        // A delivery dropped unsettled comes back when its visibility runs out.
        if !self.settled {
            self.let_go();
        }
    }
}

#[async_trait]
impl<D: Dialect> Acknowledger for SqlAcker<D> {
    async fn ack(mut self: Box<Self>) -> Result<(), BusError> {
        let (id, receipt) = self.let_go();
        // A stale receipt means the message was handed to someone else: theirs to settle.
        self.shared.ack(id, receipt).await
    }

    async fn release(mut self: Box<Self>) -> Result<(), BusError> {
        let (id, receipt) = self.let_go();
        if self.shared.dialect.release(id, receipt).await? {
            self.shared.wake(&self.queue.name);
        }
        Ok(())
    }

    async fn dead_letter(mut self: Box<Self>, reason: &str) -> Result<(), BusError> {
        let (id, receipt) = self.let_go();
        let Some(dlq) = self.queue.dead_letter_queue.clone() else {
            return Err(BusError::Unsupported(format!(
                "queue {:?} is a dead-letter queue and has none of its own",
                self.queue.name
            )));
        };
        if self
            .shared
            .dialect
            .dead_letter(id, receipt, &dlq, reason)
            .await?
        {
            self.shared.wake(&dlq);
        }
        Ok(())
    }

    fn sql_receipt(&self) -> Option<SqlReceipt> {
        Some(self.receipt.clone())
    }

    fn durable_receipt(&self) -> Option<String> {
        Some(format_receipt(
            self.receipt.message_id,
            self.receipt.receipt,
        ))
    }

    fn settled_elsewhere(mut self: Box<Self>) {
        self.let_go();
    }

    fn batch(&self) -> Option<Arc<dyn BatchSettler>> {
        Some(Arc::clone(&self.shared) as Arc<dyn BatchSettler>)
    }

    fn into_any(self: Box<Self>) -> Option<Box<dyn Any + Send>> {
        Some(self)
    }

    fn stop_heartbeat(&mut self) {
        let key = (self.receipt.message_id, self.receipt.receipt);
        self.shared.lock().held.remove(&key);
    }

    fn abandoned(mut self: Box<Self>) {
        let (id, receipt) = self.let_go();
        // Outside a runtime nothing can be sent: the visibility timeout brings it back.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let queue = self.queue.name.clone();
        let tracker = shared.abandoned.clone();
        runtime.spawn(tracker.track_future(async move {
            let deadline = shared.config.call_deadline;
            match within(deadline, shared.dialect.release(id, receipt)).await {
                Ok(true) => shared.wake(&queue),
                Ok(false) => {}
                Err(e) => tracing::debug!(%queue, error = %e, "could not release a dropped delivery; it comes back when its visibility runs out"),
            }
        }));
    }
}

/// One statement per batch, each delivery's receipt checked: the database bus's fast path
/// for [`crate::ack_all`] and [`crate::release_all`].
#[async_trait]
impl<D: Dialect> BatchSettler for Shared<D> {
    async fn settle(
        &self,
        how: Settlement,
        ackers: Vec<Box<dyn Any + Send>>,
    ) -> Vec<Result<(), BusError>> {
        self.settle_batch(how, ackers).await
    }
}

/// A queue's row from its columns as stored (the dialects store the numbers in integer
/// columns of their own widths).
pub(crate) fn queue_row(
    name: &str,
    dead_letter_queue: Option<String>,
    visibility_timeout_ms: i64,
    max_receives: i64,
) -> QueueRow {
    QueueRow {
        name: name.to_owned(),
        dead_letter_queue,
        visibility_timeout: Duration::from_millis(count(visibility_timeout_ms)),
        max_receives: u32::try_from(max_receives).unwrap_or(0),
    }
}

/// The statistics of `inspect` from a row of (waiting, in flight, dead letters, consumers).
pub(crate) fn queue_stats<R: sqlx::Row>(row: &R) -> Result<QueueStats, BusError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
{
    let count = |i: usize| -> Result<u64, BusError> {
        row.try_get::<i64, _>(i)
            .map(count)
            .map_err(|e| db_error("inspecting a queue", e))
    };
    Ok(QueueStats {
        waiting: count(0)?,
        in_flight: count(1)?,
        dead_letters: count(2)?,
        consumers: Some(count(3)?),
    })
}

/// Dead letters from rows of (id, body as cut, the body's whole length, reason).
pub(crate) fn dead_letters(
    rows: impl IntoIterator<Item = (i64, Vec<u8>, i64, Option<String>)>,
) -> Vec<DeadLetter> {
    rows.into_iter()
        .map(|(id, body, bytes, reason)| DeadLetter {
            message_id: id.to_string(),
            body,
            body_bytes: usize::try_from(bytes).unwrap_or(0),
            reason,
        })
        .collect()
}

/// `n` from the database as a count.
pub(crate) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Which of `keys` (id, receipt) are among `done`, in order.
pub(crate) fn which_done(keys: &[(i64, i64)], done: &[(i64, i64)]) -> Vec<bool> {
    let done: std::collections::HashSet<(i64, i64)> = done.iter().copied().collect();
    keys.iter().map(|k| done.contains(k)).collect()
}

/// Milliseconds of `d`, for the schema's integer columns.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The reason a message over its receive limit is dead-lettered with.
pub(crate) fn over_limit_reason(max_receives: u32) -> String {
    format!(
        "received {max_receives} times without being handled (the queue's receive limit, \
         ARCHIVIST_MAX_RECEIVES)"
    )
}

/// Database errors that say nothing about the request: a broken connection, a busy or
/// restarting server, a serialization failure or deadlock, a locked SQLite file, a full disk
/// under an SQLite file (room may be made; retrying is how the run goes on then). Shared
/// with the datastore, which classifies its own errors the same way.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => true,
        // The connection closed before the server answered the TLS request (sqlx reads the
        // missing byte as 0x00): a server going away, as an I/O error would say.
        sqlx::Error::Protocol(message) => {
            message.starts_with("unexpected response from SSLRequest: 0x00")
        }
        sqlx::Error::Database(db) => {
            let code = db.code();
            matches!(
                code.as_deref(),
                // Postgres: serialization_failure, deadlock_detected, lock_not_available,
                // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections,
                // connection_exception class.
                Some("40001" | "40P01" | "55P03" | "57P01" | "57P02" | "57P03" | "53300")
                    // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6) and their extended
                    // codes; SQLITE_FULL (13).
                    | Some("5" | "6" | "261" | "517" | "262" | "13")
            ) || code.as_deref().is_some_and(|c| c.starts_with("08"))
        }
        _ => false,
    }
}

/// A database error as a bus error: passing failures ([`is_transient`]) are
/// [`BusError::Unavailable`], the rest [`BusError::Rejected`].
pub(crate) fn db_error(what: &str, e: sqlx::Error) -> BusError {
    let passing = is_transient(&e);
    let message = format!("{what}: {e}");
    let source = Some(Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
    if passing {
        BusError::Unavailable { message, source }
    } else {
        BusError::Rejected { message, source }
    }
}

/// One error told to several waiters: the same class (passing or not), the same words.
fn shared_error(e: &BusError) -> BusError {
    if e.is_retryable() {
        BusError::unavailable(e.to_string())
    } else {
        BusError::Rejected {
            message: e.to_string(),
            source: None,
        }
    }
}

/// A migration failure as a bus error.
pub(crate) fn migrate_error(e: sqlx::migrate::MigrateError) -> BusError {
    match e {
        sqlx::migrate::MigrateError::Execute(inner) => db_error("creating the bus tables", inner),
        other => BusError::Rejected {
            message: format!("creating the bus tables: {other}"),
            source: Some(Box::new(other)),
        },
    }
}
