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

    /// The delivery was dropped unsettled: its holder stopped (a task aborted at the shutdown
    /// timeout, an early return). An adapter that can make the message visible again starts
    /// that here, in the background, without blocking, and [`Bus::close`](crate::Bus::close)
    /// waits for it. The default does nothing: the message comes back when its visibility
    /// timeout runs out.
    fn abandoned(self: Box<Self>) {}
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

    /// The delivery was acknowledged inside another transaction through its
    /// [`sql_receipt`](Self::sql_receipt): let go of it without settling it again.
    pub fn settled_elsewhere(mut self) {
        if let Some(acker) = self.acker.take() {
            acker.settled_elsewhere();
        }
    }
}

impl Delivery {
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
