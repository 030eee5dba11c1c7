use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::BusError;

/// Where a delivery of the database bus lives, so that a datastore on the same database can
/// acknowledge it inside its own transaction (see the `sql` module). The pair
/// (`message_id`, `receipt`) names one delivery: a later delivery of the same message has
/// another receipt, so a stale one settles nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlReceipt {
    /// The bus instance: a random id the bus's schema keeps in its database. A datastore
    /// settles only receipts whose bus lives in its own database.
    pub bus_id: Arc<str>,
    /// The message's row id.
    pub message_id: i64,
    /// The delivery's receipt, new at every receive.
    pub receipt: i64,
}

/// How an adapter settles one delivery. Implemented by each adapter; archivists only see
/// [`Delivery`]'s methods.
#[async_trait]
pub trait Acknowledger: Send + Sync {
    /// The message was handled: remove it from the queue.
    async fn ack(self: Box<Self>) -> Result<(), BusError>;
    /// The message could not be handled for a passing reason: make it visible again now.
    async fn release(self: Box<Self>) -> Result<(), BusError>;
    /// The message can never be handled: move it to the queue's dead-letter queue with `reason`.
    async fn dead_letter(self: Box<Self>, reason: &str) -> Result<(), BusError>;

    /// The delivery's place in a database bus, where it has one.
    fn sql_receipt(&self) -> Option<SqlReceipt> {
        None
    }

    /// The delivery was settled by another transaction (see [`SqlReceipt`]): stop holding it.
    fn settled_elsewhere(self: Box<Self>) {}

    /// The delivery's durable receipt, where the bus has them (see
    /// [`Delivery::durable_receipt`]). `None` (the default): it has not.
    fn durable_receipt(&self) -> Option<String> {
        None
    }

    /// The delivery was dropped unsettled: its holder stopped (a task aborted at the shutdown
    /// timeout, an early return). An adapter that can make the message visible again starts
    /// that here, in the background, without blocking, and [`Bus::close`](crate::Bus::close)
    /// waits for it. The default does nothing: the message comes back when its visibility
    /// timeout runs out.
    fn abandoned(self: Box<Self>) {}

    /// Where this delivery can be settled together with others of its adapter in one call
    /// ([`ack_all`], [`release_all`]): deliveries whose settlers are the same `Arc` form one
    /// batch. `None` (the default): settled one by one, concurrently.
    fn batch(&self) -> Option<Arc<dyn BatchSettler>> {
        None
    }

    /// This acknowledger as [`Any`], for its adapter's [`BatchSettler`] to take back; called
    /// only where [`batch`](Self::batch) gave a settler. Adapters that batch return
    /// `Some(self)`.
    fn into_any(self: Box<Self>) -> Option<Box<dyn Any + Send>> {
        None
    }

    /// Stops extending this delivery's visibility while it is held, without settling it: its
    /// visibility runs out as if its holder had hung. For the conformance suite's stale
    /// deliveries; the default does nothing (a bus without a heartbeat).
    #[doc(hidden)]
    fn stop_heartbeat(&mut self) {}
}

/// How [`ack_all`] and [`release_all`] settle a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// Remove the messages from the queue.
    Ack,
    /// Make the messages visible again now.
    Release,
}

/// Settles many deliveries of one adapter in one call (the database bus: one statement).
/// Implemented by adapters and reached through [`Acknowledger::batch`]; archivists call
/// [`ack_all`] and [`release_all`].
#[async_trait]
pub trait BatchSettler: Send + Sync {
    /// Settles each acknowledger (each from [`Acknowledger::into_any`] of a delivery whose
    /// [`batch`](Acknowledger::batch) returned this settler) and returns one outcome per
    /// acknowledger, in order: [`BusError::Stale`] for a delivery that can no longer settle
    /// its message (it settled nothing), the batch's error for each where the batch failed.
    async fn settle(
        &self,
        how: Settlement,
        ackers: Vec<Box<dyn Any + Send>>,
    ) -> Vec<Result<(), BusError>>;
}

/// Acknowledges every delivery, in as few calls as each bus allows, and returns one outcome
/// per delivery, in order.
///
/// Like [`Delivery::ack`], each delivery owns its acknowledgement; this is the batch entry
/// point. Deliveries of one bus go together: the database bus deletes a whole batch in one
/// statement that checks each delivery's receipt, SQS sends `DeleteMessageBatch` requests of
/// ten, the in-memory bus takes its lock once; others (RabbitMQ) acknowledge each delivery,
/// all at once. Unlike [`Delivery::ack`], which lets a stale delivery pass quietly on
/// most buses, a delivery that could no longer settle its message (its visibility ran out
/// and the message went back to the queue, perhaps to another receiver) is reported as
/// [`BusError::Stale`]; it settled nothing, and the rest of the batch settled regardless.
pub async fn ack_all(deliveries: Vec<Delivery>) -> Vec<Result<(), BusError>> {
    settle_all(deliveries, Settlement::Ack).await
}

/// Releases every delivery (visible again now), as [`ack_all`] acknowledges: one call per
/// bus where it can (the database bus: one statement; SQS: `ChangeMessageVisibilityBatch`
/// of ten), one outcome per delivery, stale ones reported as [`BusError::Stale`].
pub async fn release_all(deliveries: Vec<Delivery>) -> Vec<Result<(), BusError>> {
    settle_all(deliveries, Settlement::Release).await
}

/// One batch of [`settle_all`]: its settler, and the positions and acknowledgers in it.
type Group = (Arc<dyn BatchSettler>, Vec<usize>, Vec<Box<dyn Any + Send>>);

pub(crate) async fn settle_all(
    deliveries: Vec<Delivery>,
    how: Settlement,
) -> Vec<Result<(), BusError>> {
    let n = deliveries.len();
    let mut results: Vec<Option<Result<(), BusError>>> = (0..n).map(|_| None).collect();
    let mut groups: Vec<Group> = Vec::new();
    let mut singles: Vec<(usize, Box<dyn Acknowledger>)> = Vec::new();
    for (i, mut d) in deliveries.into_iter().enumerate() {
        let acker = match d.take_acker() {
            Ok(a) => a,
            Err(e) => {
                results[i] = Some(Err(e));
                continue;
            }
        };
        let Some(settler) = acker.batch() else {
            singles.push((i, acker));
            continue;
        };
        let Some(any) = acker.into_any() else {
            // An adapter that names a settler must hand its acknowledger over.
            results[i] = Some(Err(BusError::Unsupported(
                "the adapter named a batch settler but gave no acknowledger".into(),
            )));
            continue;
        };
        match groups.iter_mut().find(|g| Arc::ptr_eq(&g.0, &settler)) {
            Some(g) => {
                g.1.push(i);
                g.2.push(any);
            }
            None => groups.push((settler, vec![i], vec![any])),
        }
    }
    let batches =
        futures::future::join_all(groups.into_iter().map(|(settler, at, ackers)| async move {
            let expected = at.len();
            let mut out = settler.settle(how, ackers).await;
            // A settler must answer for each; one that did not settled nothing we know of.
            out.resize_with(expected, || {
                Err(BusError::unavailable("no outcome from the batch settler"))
            });
            (at, out)
        }));
    let one_by_one = futures::future::join_all(singles.into_iter().map(|(i, a)| async move {
        let out = match how {
            Settlement::Ack => a.ack().await,
            Settlement::Release => a.release().await,
        };
        (i, out)
    }));
    let (batches, singles) = futures::future::join(batches, one_by_one).await;
    for (at, out) in batches {
        for (i, r) in at.into_iter().zip(out) {
            results[i] = Some(r);
        }
    }
    for (i, r) in singles {
        results[i] = Some(r);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or(Err(BusError::Closed)))
        .collect()
}

/// One received message. It carries its own acknowledgement: call exactly one of
/// [`ack`](Self::ack), [`release`](Self::release) or [`dead_letter`](Self::dead_letter).
/// A delivery dropped without any of them is released in the background where the adapter
/// can (SQS, the database bus: [`Bus::close`](crate::Bus::close) waits for that), else it
/// comes back when its visibility timeout runs out.
pub struct Delivery {
    body: Vec<u8>,
    message_id: String,
    receive_count: u32,
    dead_letter_reason: Option<String>,
    /// Taken by the settling call; still here when the delivery is dropped unsettled.
    acker: Option<Box<dyn Acknowledger>>,
}

impl Delivery {
    /// Builds a delivery; for adapters.
    pub fn new(
        body: Vec<u8>,
        message_id: String,
        receive_count: u32,
        dead_letter_reason: Option<String>,
        acker: Box<dyn Acknowledger>,
    ) -> Self {
        Delivery {
            body,
            message_id,
            receive_count,
            dead_letter_reason,
            acker: Some(acker),
        }
    }

    /// Replaces the acknowledger by `wrap` of it (the deadline on every settlement,
    /// `deadline.rs`).
    pub(crate) fn wrap_acker(
        &mut self,
        wrap: impl FnOnce(Box<dyn Acknowledger>) -> Box<dyn Acknowledger>,
    ) {
        if let Some(acker) = self.acker.take() {
            self.acker = Some(wrap(acker));
        }
    }

    fn take_acker(&mut self) -> Result<Box<dyn Acknowledger>, BusError> {
        // Only a settling call takes it, and each consumes the delivery: never absent here.
        self.acker.take().ok_or(BusError::Closed)
    }

    /// The message body as sent.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The bus's id for the message; the same on every redelivery.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// How many times the message has been received, this time included (1 on first delivery).
    pub fn receive_count(&self) -> u32 {
        self.receive_count
    }

    /// Why the message was dead-lettered, for messages read from a dead-letter queue.
    pub fn dead_letter_reason(&self) -> Option<&str> {
        self.dead_letter_reason.as_deref()
    }

    /// The message was handled: remove it from the queue.
    pub async fn ack(mut self) -> Result<(), BusError> {
        self.take_acker()?.ack().await
    }

    /// Retry later: make the message visible again now.
    pub async fn release(mut self) -> Result<(), BusError> {
        self.take_acker()?.release().await
    }

    /// Set the message aside in the queue's dead-letter queue with `reason`.
    pub async fn dead_letter(mut self, reason: &str) -> Result<(), BusError> {
        self.take_acker()?.dead_letter(reason).await
    }

    /// The delivery's place in a database bus, for acknowledging it inside a datastore
    /// transaction on the same database. `None` on other buses.
    pub fn sql_receipt(&self) -> Option<SqlReceipt> {
        self.acker.as_ref().and_then(|a| a.sql_receipt())
    }

    /// A string that settles or extends this delivery later, from any process
    /// ([`Receiver::settle_receipt`](crate::Receiver::settle_receipt) on a receiver of the
    /// same queue), where the bus has such receipts: the database bus (the message's row and
    /// its delivery's random receipt, so that a guessed one settles nothing) and SQS (its
    /// receipt handle). `None` on the in-memory bus and RabbitMQ, whose deliveries live only
    /// as long as the receiving process holds them. Hand the delivery over with
    /// [`let_expire`](Self::let_expire) (its heartbeat stops: from then on, only extending
    /// the receipt keeps the message invisible).
    pub fn durable_receipt(&self) -> Option<String> {
        self.acker.as_ref().and_then(|a| a.durable_receipt())
    }

    /// The delivery was acknowledged inside another transaction through its
    /// [`sql_receipt`](Self::sql_receipt): let go of it without settling it again.
    pub fn settled_elsewhere(mut self) {
        if let Some(acker) = self.acker.take() {
            acker.settled_elsewhere();
        }
    }
}

impl Delivery {
    /// Stops the heartbeat for this delivery while it is still held, so that its visibility
    /// runs out and another receiver can get the message: what a hung holder looks like.
    /// For the conformance suite (feature `test-utils`).
    #[cfg(any(test, feature = "test-utils"))]
    #[doc(hidden)]
    pub fn stop_heartbeat(&mut self) {
        if let Some(acker) = self.acker.as_mut() {
            acker.stop_heartbeat();
        }
    }

    /// Stops holding the delivery without settling it: the message comes back when its
    /// visibility timeout runs out, as a crashed holder's messages do (dropping it instead
    /// releases it where the bus can).
    pub fn let_expire(mut self) {
        if let Some(acker) = self.acker.take() {
            // Stops the heartbeat and settles nothing, on every adapter.
            acker.settled_elsewhere();
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(acker) = self.acker.take() {
            acker.abandoned();
        }
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("message_id", &self.message_id)
            .field("receive_count", &self.receive_count)
            .field("body_len", &self.body.len())
            .field("dead_letter_reason", &self.dead_letter_reason)
            .finish()
    }
}
