use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{BusError, Delivery};

/// The largest message body any archivist bus accepts, in bytes (SQS's limit: 1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The most dead letters one [`Bus::redrive`] call moves on a bus that moves them a batch at a
/// time (RabbitMQ; SQS moves ten, its batch limit).
pub const REDRIVE_BATCH: u64 = 100;

/// The name of `queue`'s dead-letter queue.
pub fn dead_letter_queue_name(queue: &str) -> String {
    format!("{queue}_dead_letter")
}

/// A snapshot of one queue, as far as the bus knows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages waiting to be received.
    pub waiting: u64,
    /// Messages received and not yet acknowledged, released or dead-lettered.
    pub in_flight: u64,
    /// Live receivers on the queue, where the bus can count them (SQS cannot: `None`).
    pub consumers: Option<u64>,
    /// Messages in the queue's dead-letter queue.
    pub dead_letters: u64,
}

/// A message in a dead-letter queue, as [`Sender::peek_dead_letters`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The bus's id of the message.
    pub message_id: String,
    /// The body as it was sent, its first `max_body_bytes` bytes at most (as asked of
    /// [`Sender::peek_dead_letters`]); any bytes, UTF-8 or not.
    pub body: Vec<u8>,
    /// The whole body's size in bytes (more than `body.len()` when it was cut).
    pub body_bytes: usize,
    /// Why it was set aside, where the bus recorded a reason.
    pub reason: Option<String>,
}

impl DeadLetter {
    /// A dead letter of `body`, cut to its first `max_body_bytes` bytes.
    pub fn cut(
        message_id: String,
        mut body: Vec<u8>,
        max_body_bytes: usize,
        reason: Option<String>,
    ) -> Self {
        let body_bytes = body.len();
        body.truncate(max_body_bytes);
        DeadLetter {
            message_id,
            body,
            body_bytes,
            reason,
        }
    }
}

/// Publishes messages to one queue. Cheap to clone behind an `Arc`; shared by many tasks.
#[async_trait]
pub trait Sender: Send + Sync {
    /// Sends every body, in order, as one message each. The primitive: adapters batch as the
    /// bus allows (SQS: ten per request). Fails before sending anything if any body is too
    /// large or cannot be carried; on a failure mid-way some bodies may have been sent.
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError>;

    /// Sends one message.
    async fn send(&self, body: Vec<u8>) -> Result<(), BusError> {
        self.send_batch(vec![body]).await
    }

    /// Counts of waiting, in-flight and dead-lettered messages, and consumers where known.
    async fn inspect(&self) -> Result<QueueStats, BusError>;

    /// Whether at least `n` messages wait on the queue (as [`QueueStats::waiting`] counts
    /// them). The database bus stops counting at `n`, so a look at a long queue costs no more
    /// than at a short one; other buses answer from [`inspect`](Self::inspect).
    async fn waiting_at_least(&self, n: u64) -> Result<bool, BusError> {
        Ok(self.inspect().await?.waiting >= n)
    }

    /// Up to `limit` messages of the queue's dead-letter queue, without taking them: a
    /// read-only look for people (the status page). `None` where the bus cannot look without
    /// taking messages in a way that could cost one (RabbitMQ); the count is in
    /// [`inspect`](Self::inspect). What each bus shows, and what a look costs:
    ///
    /// - the in-memory and database buses: the oldest first, whether or not someone holds
    ///   them; nothing changes;
    /// - SQS: a receive with a visibility timeout of zero, so no message is hidden from
    ///   others; it shows a sample (up to ten, as SQS samples its servers) and adds one to
    ///   each shown message's receive count, which a dead-letter queue (it has no redrive
    ///   policy) never acts on.
    ///
    /// Each body is cut to its first `max_body_bytes` bytes (a body may be up to 1 MiB), by
    /// the database itself on the database bus, so that a look reads no more than it shows;
    /// SQS sends whole bodies, cut on arrival.
    async fn peek_dead_letters(
        &self,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError>;

    /// Sends every body as [`send_batch`](Self::send_batch) does, and acknowledges
    /// `answered`, the delivery (taken off another queue of this bus) that these messages
    /// answer: as one step where the bus can (the database bus: one transaction, so that
    /// neither happens without the other, and a commit lost in a power cut loses both: the
    /// message comes back and is answered again), otherwise the send, then the
    /// acknowledgement ([`send_then_ack`]).
    ///
    /// When the send failed, `answered` comes back unsettled in [`Unsent`], for the caller to
    /// try again or to release. Once the messages are sent, an acknowledgement that failed is
    /// only reported, as the inner error: the message comes back after its visibility
    /// timeout and is answered again, as after any lost acknowledgement.
    async fn send_and_ack(
        &self,
        bodies: Vec<Vec<u8>>,
        answered: Delivery,
    ) -> Result<Result<(), BusError>, Unsent> {
        send_then_ack(self, bodies, answered).await
    }

    /// The queue's name.
    fn queue(&self) -> &str;

    /// For the database bus: the bus instance's id (see [`SqlReceipt`](crate::SqlReceipt)),
    /// so that a datastore on the same database can enqueue inside its own transaction.
    fn sql_bus_id(&self) -> Option<&str> {
        None
    }
}

/// A [`Sender::send_and_ack`] whose send failed: nothing was acknowledged.
#[derive(Debug)]
pub struct Unsent {
    /// Why the send failed.
    pub error: BusError,
    /// The delivery the messages answered, not settled.
    pub delivery: Delivery,
}

/// [`Sender::send_and_ack`] as two steps: the send, then (only once it succeeded) the
/// acknowledgement. What buses that cannot do both in one step do.
pub async fn send_then_ack<S: Sender + ?Sized>(
    sender: &S,
    bodies: Vec<Vec<u8>>,
    answered: Delivery,
) -> Result<Result<(), BusError>, Unsent> {
    if let Err(error) = sender.send_batch(bodies).await {
        return Err(Unsent {
            error,
            delivery: answered,
        });
    }
    Ok(answered.ack().await)
}

/// Takes messages off one queue.
///
/// A live `Receiver` counts as one consumer of its queue where the bus can count consumers
/// (the in-memory bus does). Dropping a [`Receiver::receive`] future before it completes
/// loses nothing: a message is only in flight once it has been handed out.
#[async_trait]
pub trait Receiver: Send + Sync {
    /// Receives up to `max` messages, waiting at most `wait` for the first one. Returns an
    /// empty vector when nothing arrived in time. Each delivery stays invisible to other
    /// receivers until it is acknowledged, released, dead-lettered, or its visibility runs out.
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError>;

    /// The queue's name.
    fn queue(&self) -> &str;

    /// Settles or extends a delivery of this queue by its durable receipt
    /// ([`Delivery::durable_receipt`]), from any process, also one that never received it
    /// (the API gateway after a restart). `Ok(false)` when the receipt no longer holds its
    /// message (settled, or handed to another receiver since its visibility ran out) or is
    /// not a receipt of this bus: nothing changed. A bus without durable receipts (the
    /// in-memory bus, RabbitMQ) answers [`BusError::Unsupported`].
    async fn settle_receipt(&self, receipt: &str, action: ReceiptAction) -> Result<bool, BusError> {
        let _ = (receipt, action);
        Err(BusError::Unsupported(
            "this bus has no durable receipts".into(),
        ))
    }
}

/// What [`Receiver::settle_receipt`] does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceiptAction {
    /// Keep it invisible to others for this long from now.
    Extend(Duration),
    /// The message was handled: remove it from the queue.
    Ack,
    /// Make it visible again now.
    Release,
}

/// A bus: hands out senders and receivers for named queues.
#[async_trait]
pub trait Bus: Send + Sync {
    /// A sender for `queue`. Fails with [`BusError::QueueNotFound`] if it does not exist.
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError>;

    /// A receiver for `queue`. Fails with [`BusError::QueueNotFound`] if it does not exist.
    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError>;

    /// Creates `queue` and its dead-letter queue if they are missing. Harmless if they exist.
    async fn create_queue(&self, queue: &str) -> Result<(), BusError>;

    /// Where the existing `queue`'s settings differ from those this bus creates queues with
    /// (its receive limit, its retention), in words; empty when they agree, or when the bus
    /// keeps no settings per queue. [`create_queue`](Self::create_queue) never changes an
    /// existing queue: this tells whether [`update_queue`](Self::update_queue) would.
    async fn queue_drift(&self, queue: &str) -> Result<Vec<String>, BusError> {
        let _ = queue;
        Ok(Vec::new())
    }

    /// Gives the existing `queue` the settings this bus creates queues with. Harmless when
    /// they agree; nothing to do on a bus that keeps no settings per queue.
    async fn update_queue(&self, queue: &str) -> Result<(), BusError> {
        let _ = queue;
        Ok(())
    }

    /// Moves up to `max` of the dead letters waiting in `queue`'s dead-letter queue back onto
    /// `queue` (after the fault that set them aside was fixed), and returns how many it moved.
    ///
    /// A moved message is received as if it were new: its receive count starts again (its
    /// next receive is its first, so one more failure does not send it straight back) and
    /// it carries no dead-letter reason. Dead letters a reader holds (`receive` on the
    /// dead-letter queue) are not moved. Each call is one step that an interruption leaves
    /// whole or undone as far as the bus allows: the database bus and the in-memory bus move
    /// everything in one transaction (every message moved once, or none); SQS moves one
    /// batch of at most ten per call and RabbitMQ at most [`REDRIVE_BATCH`] (each message
    /// sent, confirmed, then deleted from the dead-letter queue, so a crash between the two
    /// leaves that batch in both queues: at least once, never lost). So a call may move
    /// fewer than `max` while more wait: call again until enough moved or it returns 0.
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError>;

    /// How many dead letters of `queue` a [`redrive`](Self::redrive) would move now: those
    /// waiting in its dead-letter queue (on SQS, SQS's approximate count), not those a
    /// reader holds. Moves nothing.
    async fn redrivable(&self, queue: &str) -> Result<u64, BusError>;

    /// Lets go of what this process holds in the bus beyond messages: a bus that counts its
    /// consumers from another process (the database bus) stops counting this process's
    /// receivers at once, rather than when they stop showing they are alive. Call it before
    /// a short-lived process exits. Harmless on other buses.
    async fn close(&self) -> Result<(), BusError> {
        Ok(())
    }
}
