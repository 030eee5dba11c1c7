//! The in-memory bus: [`MemoryBus`], its [`MemoryBusConfig`], and the sender, receiver and
//! acknowledger it hands out.
//!
//! It behaves like a real queue so that tests on it mean something: a received message is
//! invisible until it is settled or its visibility timeout runs out, each delivery has its own
//! receipt (so settling a stale delivery cannot touch a newer one, as with SQS receipt
//! handles), a message received more than `max_receives` times goes to the dead-letter queue,
//! and live receivers are counted as consumers. With `misbehave` above zero it also duplicates
//! and reorders messages, as SQS standard queues may.
//!
//! All state sits behind one mutex, held only for short synchronous steps and never across an
//! `await`; receivers wait on a per-queue [`Notify`] and on the next visibility expiry. Time is
//! `tokio::time`, so tests can pause and advance it.
use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::deadline::{DeadlineReceiver, DeadlineSender};
use crate::{
    dead_letter_queue_name, Acknowledger, BatchSettler, Bus, BusError, DeadLetter, Delivery,
    QueueStats, Receiver, Sender, Settlement, DEFAULT_CALL_DEADLINE, MAX_BODY_BYTES,
};

/// Settings of a [`MemoryBus`].
#[derive(Debug, Clone)]
pub struct MemoryBusConfig {
    /// How long a received message stays invisible before it comes back.
    pub visibility_timeout: Duration,
    /// Receives after which a message that keeps coming back goes to the dead-letter queue.
    /// Zero means no limit.
    pub max_receives: u32,
    /// For tests: the chance (0.0 to 1.0) that a receive also hands out a duplicate of a
    /// message, and that fresh messages come out of order, as SQS standard queues do.
    pub misbehave: f64,
    /// How long one call may take before it returns [`BusError::Timeout`] (a receive: its
    /// wait plus this). Nothing in process waits that long; held to it as every bus is.
    pub call_deadline: Duration,
}

impl Default for MemoryBusConfig {
    fn default() -> Self {
        MemoryBusConfig {
            visibility_timeout: Duration::from_secs(30),
            max_receives: 5,
            misbehave: 0.0,
            call_deadline: DEFAULT_CALL_DEADLINE,
        }
    }
}

/// An in-process bus: named queues, each with its dead-letter queue, shared by every clone.
///
/// Cloning is cheap (one `Arc`); all clones see the same queues. Queues exist once
/// [`Bus::create_queue`] has made them and last as long as the bus.
#[derive(Clone)]
pub struct MemoryBus {
    shared: Arc<Shared>,
}

impl MemoryBus {
    /// A bus with no queues yet.
    pub fn new(config: MemoryBusConfig) -> Self {
        Self::with_rng(config, StdRng::from_entropy())
    }

    /// A bus whose misbehaviour (duplicates, reordering) follows `seed`, for repeatable tests.
    pub fn with_seed(config: MemoryBusConfig, seed: u64) -> Self {
        Self::with_rng(config, StdRng::seed_from_u64(seed))
    }

    fn with_rng(config: MemoryBusConfig, rng: StdRng) -> Self {
        // A probability outside 0..=1 (or NaN) would mean nothing; clamp it once here.
        let misbehave = if config.misbehave.is_nan() {
            0.0
        } else {
            config.misbehave.clamp(0.0, 1.0)
        };
        MemoryBus {
            shared: Arc::new(Shared {
                config: MemoryBusConfig {
                    misbehave,
                    ..config
                },
                state: Mutex::new(State {
                    queues: HashMap::new(),
                    rng,
                    next_id: 0,
                }),
            }),
        }
    }

    /// The bus's settings.
    pub fn config(&self) -> &MemoryBusConfig {
        &self.shared.config
    }
}

impl Default for MemoryBus {
    fn default() -> Self {
        MemoryBus::new(MemoryBusConfig::default())
    }
}

impl fmt::Debug for MemoryBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queues = self.shared.lock().queues.len();
        f.debug_struct("MemoryBus")
            .field("config", &self.shared.config)
            .field("queues", &queues)
            .finish()
    }
}

#[async_trait]
impl Bus for MemoryBus {
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        self.shared.lock().queue(queue)?;
        let sender = Arc::new(MemorySender {
            shared: Arc::clone(&self.shared),
            queue: queue.to_owned(),
        });
        Ok(DeadlineSender::wrap(
            sender,
            self.shared.config.call_deadline,
        ))
    }

    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        let notify = {
            let mut state = self.shared.lock();
            let q = state.queue(queue)?;
            q.consumers += 1;
            Arc::clone(&q.notify)
        };
        let receiver = Arc::new(MemoryReceiver {
            shared: Arc::clone(&self.shared),
            queue: queue.to_owned(),
            notify,
        });
        Ok(DeadlineReceiver::wrap(
            receiver,
            self.shared.config.call_deadline,
        ))
    }

    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
        let dead_letter = dead_letter_queue_name(queue);
        let mut state = self.shared.lock();
        // The dead-letter queue has no dead-letter queue of its own: nothing is redriven
        // from it, as on SQS without a redrive policy.
        state
            .queues
            .entry(dead_letter.clone())
            .or_insert_with(|| QueueState::new(None));
        state
            .queues
            .entry(queue.to_owned())
            .or_insert_with(|| QueueState::new(Some(dead_letter)));
        Ok(())
    }

    /// One locked step: the oldest waiting dead letters go to the back of the queue, with a
    /// fresh receive count and no reason.
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let dlq_name = state.redrive_source(queue)?;
        let dlq = state.queue(&dlq_name)?;
        dlq.expire(now);
        let take = usize::try_from(max)
            .unwrap_or(usize::MAX)
            .min(dlq.waiting.len());
        let moved: Vec<Message> = dlq
            .waiting
            .drain(..take)
            .map(|mut m| {
                m.receive_count = 0;
                m.dead_letter_reason = None;
                m.duplicate = false;
                m
            })
            .collect();
        let q = state.queue(queue)?;
        q.waiting.extend(moved);
        q.notify.notify_waiters();
        Ok(take as u64)
    }

    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let dlq_name = state.redrive_source(queue)?;
        let dlq = state.queue(&dlq_name)?;
        dlq.expire(now);
        Ok(dlq.waiting.len() as u64)
    }
}

/// What every handle of one bus shares.
struct Shared {
    config: MemoryBusConfig,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No critical section panics part-way through a change, so a poisoned lock still
        // guards consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct State {
    queues: HashMap<String, QueueState>,
    rng: StdRng,
    /// Source of message ids and receipts, unique within the bus.
    next_id: u64,
}

impl State {
    fn queue(&mut self, name: &str) -> Result<&mut QueueState, BusError> {
        self.queues
            .get_mut(name)
            .ok_or_else(|| BusError::QueueNotFound(name.to_owned()))
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The name of `queue`'s dead-letter queue, for a redrive: `queue` must exist and not be
    /// a dead-letter queue itself.
    fn redrive_source(&mut self, queue: &str) -> Result<String, BusError> {
        self.queue(queue)?.dead_letter.clone().ok_or_else(|| {
            BusError::Unsupported(format!(
                "queue {queue:?} is a dead-letter queue: redrive the queue it belongs to"
            ))
        })
    }

    /// Puts dead-lettered messages on `queue`'s dead-letter queue and wakes its receivers.
    fn push_dead_letters(&mut self, queue: &str, messages: Vec<Message>) -> Result<(), BusError> {
        if messages.is_empty() {
            return Ok(());
        }
        let Some(dlq_name) = self.queues.get(queue).and_then(|q| q.dead_letter.clone()) else {
            return Err(BusError::Unsupported(format!(
                "queue {queue:?} has no dead-letter queue"
            )));
        };
        let dlq = self.queue(&dlq_name)?;
        dlq.waiting.extend(messages);
        dlq.notify.notify_waiters();
        Ok(())
    }
}

/// One copy of a message. A duplicate made by `misbehave` is a second copy with the same id.
#[derive(Clone)]
struct Message {
    id: String,
    body: Vec<u8>,
    /// Times this copy has been handed out.
    receive_count: u32,
    dead_letter_reason: Option<String>,
    /// Made by `misbehave`; never duplicated again, so duplication cannot run away.
    duplicate: bool,
}

struct QueueState {
    /// The dead-letter queue's name; `None` for a dead-letter queue itself.
    dead_letter: Option<String>,
    /// Visible messages, oldest first.
    waiting: VecDeque<Message>,
    /// Handed-out messages by receipt.
    in_flight: HashMap<u64, Message>,
    /// When each receipt's visibility runs out, soonest first. Entries whose receipt was
    /// settled stay until they reach the top, where they are discarded.
    expiries: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Woken whenever messages become visible.
    notify: Arc<Notify>,
    /// Live receivers.
    consumers: u64,
}

impl QueueState {
    fn new(dead_letter: Option<String>) -> Self {
        QueueState {
            dead_letter,
            waiting: VecDeque::new(),
            in_flight: HashMap::new(),
            expiries: BinaryHeap::new(),
            notify: Arc::new(Notify::new()),
            consumers: 0,
        }
    }

    /// Moves in-flight messages whose visibility ran out by `now` back to waiting, and
    /// returns when the next one will run out.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        let mut woke = false;
        while let Some(&Reverse((at, receipt))) = self.expiries.peek() {
            if !self.in_flight.contains_key(&receipt) {
                self.expiries.pop();
                continue;
            }
            if at > now {
                break;
            }
            self.expiries.pop();
            if let Some(message) = self.in_flight.remove(&receipt) {
                self.waiting.push_back(message);
                woke = true;
            }
        }
        if woke {
            self.notify.notify_waiters();
        }
        self.expiries.peek().map(|Reverse((at, _))| *at)
    }
}

/// Publishes to one queue of a [`MemoryBus`].
struct MemorySender {
    shared: Arc<Shared>,
    queue: String,
}

#[async_trait]
impl Sender for MemorySender {
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        if let Some(body) = bodies.iter().find(|b| b.len() > MAX_BODY_BYTES) {
            return Err(BusError::BodyTooLarge {
                size: body.len(),
                limit: MAX_BODY_BYTES,
            });
        }
        let mut state = self.shared.lock();
        let mut ids = Vec::with_capacity(bodies.len());
        for _ in &bodies {
            ids.push(state.next_id());
        }
        let q = state.queue(&self.queue)?;
        q.waiting
            .extend(bodies.into_iter().zip(ids).map(|(body, id)| Message {
                id: format!("mem-{id}"),
                body,
                receive_count: 0,
                dead_letter_reason: None,
                duplicate: false,
            }));
        q.notify.notify_waiters();
        Ok(())
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let q = state.queue(&self.queue)?;
        q.expire(now);
        let mut stats = QueueStats {
            waiting: q.waiting.len() as u64,
            in_flight: q.in_flight.len() as u64,
            consumers: Some(q.consumers),
            dead_letters: 0,
        };
        if let Some(dlq_name) = q.dead_letter.clone() {
            let dlq = state.queue(&dlq_name)?;
            dlq.expire(now);
            stats.dead_letters = (dlq.waiting.len() + dlq.in_flight.len()) as u64;
        }
        Ok(stats)
    }

    async fn peek_dead_letters(
        &self,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        let mut state = self.shared.lock();
        let Some(dlq_name) = state.queue(&self.queue)?.dead_letter.clone() else {
            return Ok(Some(Vec::new()));
        };
        let dlq = state.queue(&dlq_name)?;
        // Held ones too (someone is reading them off), oldest first: ids are `mem-N`, so a
        // shorter id is older.
        let mut all: Vec<&Message> = dlq.waiting.iter().chain(dlq.in_flight.values()).collect();
        all.sort_by_key(|m| (m.id.len(), m.id.clone()));
        Ok(Some(
            all.into_iter()
                .take(limit)
                .map(|m| DeadLetter {
                    message_id: m.id.clone(),
                    body: m.body[..m.body.len().min(max_body_bytes)].to_vec(),
                    body_bytes: m.body.len(),
                    reason: m.dead_letter_reason.clone(),
                })
                .collect(),
        ))
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}

/// Takes messages off one queue of a [`MemoryBus`]; counts as one consumer while alive.
struct MemoryReceiver {
    shared: Arc<Shared>,
    queue: String,
    notify: Arc<Notify>,
}

/// The outcome of one locked attempt to receive.
enum Take {
    Got(Vec<Delivery>),
    /// Nothing visible; the next visibility expiry, if any message is in flight.
    Empty(Option<Instant>),
}

impl MemoryReceiver {
    /// Hands out up to `max` visible messages, all in one locked step, so that a dropped
    /// receive future can never have taken a message it did not return.
    fn take(&self, max: usize) -> Result<Take, BusError> {
        let config = &self.shared.config;
        let now = Instant::now();
        let mut guard = self.shared.lock();
        let state = &mut *guard;
        let q = state
            .queues
            .get_mut(&self.queue)
            .ok_or_else(|| BusError::QueueNotFound(self.queue.clone()))?;
        let next_expiry = q.expire(now);
        let redrive = q.dead_letter.is_some() && config.max_receives > 0;
        let mut out = Vec::new();
        let mut dead = Vec::new();
        let mut duplicates = Vec::new();
        while out.len() < max && !q.waiting.is_empty() {
            let index = if config.misbehave > 0.0
                && q.waiting.len() > 1
                && state.rng.gen::<f64>() < config.misbehave
            {
                state.rng.gen_range(0..q.waiting.len())
            } else {
                0
            };
            let Some(mut message) = q.waiting.remove(index) else {
                break;
            };
            if redrive && message.receive_count >= config.max_receives {
                message.dead_letter_reason =
                    Some(format!("exceeded {} receives", config.max_receives));
                message.receive_count = 0;
                message.duplicate = false;
                dead.push(message);
                continue;
            }
            message.receive_count += 1;
            if config.misbehave > 0.0
                && !message.duplicate
                && state.rng.gen::<f64>() < config.misbehave
            {
                // The duplicate waits for a later receive, possibly by another consumer,
                // and may outlive the original's acknowledgement, as on SQS.
                let mut copy = message.clone();
                copy.duplicate = true;
                duplicates.push(copy);
            }
            state.next_id += 1;
            let receipt = state.next_id;
            let visible_at = now + config.visibility_timeout;
            q.expiries.push(Reverse((visible_at, receipt)));
            out.push(Delivery::new(
                message.body.clone(),
                message.id.clone(),
                message.receive_count,
                message.dead_letter_reason.clone(),
                Box::new(MemoryAcker {
                    shared: Arc::clone(&self.shared),
                    queue: self.queue.clone(),
                    receipt,
                    message_id: message.id.clone(),
                }),
            ));
            q.in_flight.insert(receipt, message);
        }
        q.waiting.extend(duplicates);
        if !dead.is_empty() {
            tracing::debug!(
                queue = %self.queue,
                count = dead.len(),
                max_receives = config.max_receives,
                "messages exceeded the maximum receive count; moved to the dead-letter queue"
            );
            state.push_dead_letters(&self.queue, dead)?;
        }
        if out.is_empty() {
            // Nothing was handed out, so the next expiry is still the one found above.
            Ok(Take::Empty(next_expiry))
        } else {
            Ok(Take::Got(out))
        }
    }
}

#[async_trait]
impl Receiver for MemoryReceiver {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + wait;
        loop {
            // Registered before looking, so a message sent after the look still wakes us.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_expiry = match self.take(max)? {
                Take::Got(deliveries) => return Ok(deliveries),
                Take::Empty(next_expiry) => next_expiry,
            };
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            let wake_at = next_expiry.map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}

impl Drop for MemoryReceiver {
    fn drop(&mut self) {
        if let Some(q) = self.shared.lock().queues.get_mut(&self.queue) {
            q.consumers = q.consumers.saturating_sub(1);
        }
    }
}

/// Settles one delivery by its receipt; a stale receipt (the visibility ran out and the
/// message went back or out again) settles nothing.
struct MemoryAcker {
    shared: Arc<Shared>,
    queue: String,
    receipt: u64,
    message_id: String,
}

impl MemoryAcker {
    /// Acknowledges or releases under the bus's lock, held by the caller; `Stale` when the
    /// receipt is no longer in flight.
    fn settle_locked(&self, state: &mut State, how: Settlement) -> Result<(), BusError> {
        let action = match how {
            Settlement::Ack => "ack",
            Settlement::Release => "release",
        };
        let Some(message) = self.take_in_flight(state, action) else {
            return Err(BusError::Stale {
                message_id: self.message_id.clone(),
            });
        };
        if how == Settlement::Release {
            if let Some(q) = state.queues.get_mut(&self.queue) {
                q.waiting.push_back(message);
                q.notify.notify_waiters();
            }
        }
        Ok(())
    }
}

/// The whole batch under one taking of the lock.
#[async_trait]
impl BatchSettler for Shared {
    async fn settle(
        &self,
        how: Settlement,
        ackers: Vec<Box<dyn Any + Send>>,
    ) -> Vec<Result<(), BusError>> {
        let mut state = self.lock();
        ackers
            .into_iter()
            .map(|a| match a.downcast::<MemoryAcker>() {
                Ok(a) => a.settle_locked(&mut state, how),
                Err(_) => Err(BusError::Unsupported(
                    "not a delivery of this in-memory bus".into(),
                )),
            })
            .collect()
    }
}

impl MemoryAcker {
    fn take_in_flight(&self, state: &mut State, action: &str) -> Option<Message> {
        let flight = state
            .queues
            .get_mut(&self.queue)
            .and_then(|q| q.in_flight.remove(&self.receipt));
        if flight.is_none() {
            tracing::debug!(
                queue = %self.queue,
                action,
                "stale delivery: its visibility ran out before it was settled; nothing done"
            );
        }
        flight
    }
}

#[async_trait]
impl Acknowledger for MemoryAcker {
    fn batch(&self) -> Option<Arc<dyn BatchSettler>> {
        Some(Arc::clone(&self.shared) as Arc<dyn BatchSettler>)
    }

    fn into_any(self: Box<Self>) -> Option<Box<dyn Any + Send>> {
        Some(self)
    }

    async fn ack(self: Box<Self>) -> Result<(), BusError> {
        let mut state = self.shared.lock();
        self.take_in_flight(&mut state, "ack");
        Ok(())
    }

    async fn release(self: Box<Self>) -> Result<(), BusError> {
        let mut state = self.shared.lock();
        if let Some(message) = self.take_in_flight(&mut state, "release") {
            if let Some(q) = state.queues.get_mut(&self.queue) {
                q.waiting.push_back(message);
                q.notify.notify_waiters();
            }
        }
        Ok(())
    }

    async fn dead_letter(self: Box<Self>, reason: &str) -> Result<(), BusError> {
        let mut state = self.shared.lock();
        let has_dlq = state
            .queues
            .get(&self.queue)
            .is_some_and(|q| q.dead_letter.is_some());
        if !has_dlq {
            // Leave the message in flight: it comes back rather than vanishing.
            return Err(BusError::Unsupported(format!(
                "queue {:?} has no dead-letter queue",
                self.queue
            )));
        }
        if let Some(mut message) = self.take_in_flight(&mut state, "dead_letter") {
            message.dead_letter_reason = Some(reason.to_owned());
            message.receive_count = 0;
            message.duplicate = false;
            tracing::debug!(queue = %self.queue, id = %message.id, reason, "message dead-lettered");
            state.push_dead_letters(&self.queue, vec![message])?;
        }
        Ok(())
    }
}
