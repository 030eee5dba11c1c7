//! The RabbitMQ bus (feature `rabbitmq`): [`RabbitBus`] on `lapin`, AMQP 0-9-1.
//!
//! # Queues
//!
//! Every queue is a durable *quorum* queue. Its receive limit lives in the broker: the
//! queue's `x-delivery-limit` is `max_receives - 1` (a quorum queue counts *returns* in
//! `x-delivery-count` and dead-letters a message returned more often than the limit), and its
//! dead-letter exchange [`DEAD_LETTER_EXCHANGE`] routes such messages to
//! `<queue>_dead_letter` (at-least-once dead-lettering, so the move loses nothing). A
//! delivery's receive count is `x-delivery-count + 1`. A message the archivist sets aside
//! itself is published to the same exchange with its reason in the [`REASON_HEADER`] header
//! (confirmed) and then acknowledged.
//!
//! # Receiving: a real consumer with the batch as prefetch; a presence consumer for the count
//!
//! A receiver's first `receive(max, …)` starts a `basic.consume` on the queue, on the
//! receiver's own channel, with prefetch (`basic.qos`) `max`: the batch it receives. The
//! consumer then stays until the receiver is dropped; the broker pushes up to the prefetch of
//! unacknowledged messages, a pump task moves them into the receiver's buffer, and each
//! `receive` hands out what is buffered (waiting up to `wait` for the first). So an archivist
//! that acknowledges a batch finds the next one already there. A receiver holding a whole
//! prefetch of deliveries that asks for more takes them with `basic.get` (the broker pushes
//! nothing more until some are settled).
//!
//! Why not consume only inside each `receive` and cancel when idle: a message the broker
//! sends at the moment of the cancel is returned by it, which counts as one receive of the
//! message (`x-delivery-count`), so an idle queue's messages would drift towards the
//! dead-letter queue. Why not `basic.get` alone: no prefetch, and waiting means polling. The
//! standing consumer's price: up to `prefetch` messages wait in a receiver's buffer, with no
//! visibility clock, until its next `receive`; `inspect` counts this process's buffered
//! messages as waiting; a dropped receiver returns them (a receive each, as any AMQP consumer
//! that goes away). Size the prefetch to the batch: a researcher receives one at a time.
//!
//! The broker counts consumers, but a receiver that has not received yet consumes nothing:
//! so while it lives each receiver also holds a consumer on `<queue>_consumers`, a presence
//! queue that never holds a message (declared with the queue), and `inspect` reports the
//! larger of the two consumer counts: the presence queue's (receivers of this bus) and the
//! queue's own (those that have received, and researchers written against any other AMQP
//! client, which simply consume the queue). The pending-research archivist's capacity rule
//! reads it, so it needs no `ARCHIVIST_RESEARCHERS`.
//!
//! AMQP 0-9-1 reports a queue's ready messages and consumers, not its unacknowledged ones:
//! `in_flight` counts the deliveries this process holds, and `waiting` adds what this
//! process's receivers buffered to the broker's ready count.
//!
//! # Sending
//!
//! Senders publish on a channel in confirm mode: a batch is published whole, then every
//! confirm is awaited, so `send_batch` returns once the broker has stored every message.
//!
//! # Redrive
//!
//! Dead letters go back to their queue by `basic.get` from the dead-letter queue, a confirmed
//! publish to the queue, then the acknowledgement (`redrive.rs`).
//!
//! # Connection
//!
//! One connection per bus. When it drops (the broker restarts, a proxy cuts it), the next
//! operation reconnects, at most once per backoff interval (doubling from 100 ms to 5 s):
//! a failed call says the bus is unavailable and callers retry. Messages a lost connection
//! held unacknowledged are returned by the broker; acknowledging them afterwards fails (they
//! come again), so nothing acknowledged is lost and nothing unacknowledged is lost.
//!
//! A connection that dies silently (packets dropped, nothing closed) still looks connected:
//! each broker round trip returns within [`RabbitBusConfig::request_timeout`], and each
//! whole call (a send and its confirms, a receive past its wait, an acknowledgement, a
//! redrive) within [`RabbitBusConfig::call_deadline`] (see [`crate::DEFAULT_CALL_DEADLINE`]),
//! which also covers what has no round-trip timeout (an acknowledgement, closing a channel).
//!
//! # Layout
//!
//! - `mod.rs`: [`RabbitBus`], its connection, queue declarations and counts.
//! - `sender.rs`: [`RabbitSender`] and publisher confirms.
//! - `receiver.rs`: [`RabbitReceiver`], its consumers and the acknowledger of its deliveries.
//! - `redrive.rs`: dead letters back to their queue.

mod receiver;
mod redrive;
mod sender;

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::deadline::{within, DeadlineReceiver, DeadlineSender};
use crate::{
    dead_letter_queue_name, redact_url, Bus, BusError, QueueStats, Receiver, Sender,
    DEFAULT_CALL_DEADLINE,
};

use receiver::presence_arguments;
pub use receiver::{presence_queue_name, RabbitReceiver};
pub use sender::RabbitSender;

/// The direct exchange through which messages reach dead-letter queues, the broker's moves
/// (delivery limit) and the archivist's own alike; the routing key is the dead-letter
/// queue's name.
pub const DEAD_LETTER_EXCHANGE: &str = "archivist_dead_letter";

/// The header carrying the reason of a message the archivist set aside.
pub const REASON_HEADER: &str = "x-archivist-reason";

/// Settings of a [`RabbitBus`].
#[derive(Debug, Clone)]
pub struct RabbitBusConfig {
    /// How long a handed-out delivery may stay unsettled before it is returned to the queue.
    pub visibility_timeout: Duration,
    /// Receives after which a message goes to the dead-letter queue (the queues' delivery
    /// limit, set when they are created). Zero means no limit.
    pub max_receives: u32,
    /// How long one broker round trip may take before the bus counts as unavailable.
    pub request_timeout: Duration,
    /// How long one call (a send with its confirms, a receive past its wait, an
    /// acknowledgement, a redrive) may take in all before it returns [`BusError::Timeout`].
    pub call_deadline: Duration,
}

impl Default for RabbitBusConfig {
    fn default() -> Self {
        RabbitBusConfig {
            visibility_timeout: Duration::from_secs(30),
            max_receives: 5,
            request_timeout: Duration::from_secs(10),
            call_deadline: DEFAULT_CALL_DEADLINE,
        }
    }
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A bus on a RabbitMQ broker. Cloning is cheap; clones share the connection.
#[derive(Clone)]
pub struct RabbitBus {
    shared: Arc<Shared>,
}

/// What the bus, its senders, receivers and deliveries share.
pub(crate) struct Shared {
    url: String,
    pub(crate) config: RabbitBusConfig,
    link: tokio::sync::Mutex<Link>,
    /// Per queue: messages this process buffered or handed out (see `inspect`).
    counts: Mutex<HashMap<String, Arc<LocalCounts>>>,
    /// Receivers being closed: `inspect` waits for them so that a dropped receiver is no
    /// longer counted as a consumer.
    closing: Mutex<Vec<JoinHandle<()>>>,
    /// The channel used to publish dead letters (confirm mode).
    dead_letter_channel: tokio::sync::Mutex<Option<Channel>>,
    /// The channel redrives use (confirm mode), one step at a time; see `redrive.rs`.
    redrive_channel: tokio::sync::Mutex<Option<Channel>>,
}

/// The connection and the reconnection backoff.
struct Link {
    connection: Option<Arc<Connection>>,
    /// Bumped at each new connection, so that holders of an older one can tell.
    generation: u64,
    next_attempt: Option<Instant>,
    backoff: Duration,
}

/// One queue's messages held by this process.
#[derive(Default)]
pub(crate) struct LocalCounts {
    /// Pushed by the broker to a receiver, not yet handed out.
    pub(crate) buffered: AtomicU64,
    /// Handed out, not yet settled.
    pub(crate) held: AtomicU64,
}

impl LocalCounts {
    pub(crate) fn sub(counter: &AtomicU64, n: u64) {
        let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            Some(v.saturating_sub(n))
        });
    }
}

impl RabbitBus {
    /// Connects to the broker at `url` (`amqp://user:password@host:port/vhost`, or
    /// `amqps://`). Fails with [`BusError::Unavailable`] if the broker cannot be reached, and
    /// [`BusError::Rejected`] if it refuses the credentials or the virtual host.
    pub async fn connect(url: &str, config: RabbitBusConfig) -> Result<Self, BusError> {
        let bus = RabbitBus {
            shared: Arc::new(Shared {
                url: url.to_string(),
                config,
                link: tokio::sync::Mutex::new(Link {
                    connection: None,
                    generation: 0,
                    next_attempt: None,
                    backoff: FIRST_BACKOFF,
                }),
                counts: Mutex::new(HashMap::new()),
                closing: Mutex::new(Vec::new()),
                dead_letter_channel: tokio::sync::Mutex::new(None),
                redrive_channel: tokio::sync::Mutex::new(None),
            }),
        };
        bus.shared.connection().await?;
        Ok(bus)
    }

    /// The bus's settings.
    pub fn config(&self) -> &RabbitBusConfig {
        &self.shared.config
    }

    /// Deletes `queue`, its dead-letter queue and its presence queue, with what they hold
    /// (benchmarks and tests clean up with it; archivist never deletes a queue).
    pub async fn delete_queue(&self, queue: &str) -> Result<(), BusError> {
        within(
            self.shared.config.call_deadline,
            self.delete_queue_now(queue),
        )
        .await
    }

    async fn delete_queue_now(&self, queue: &str) -> Result<(), BusError> {
        let (ch, _) = self.shared.channel().await?;
        for name in [
            queue.to_string(),
            dead_letter_queue_name(queue),
            presence_queue_name(queue),
        ] {
            self.shared
                .timed(
                    "deleting a queue",
                    ch.queue_delete(short(&name)?, lapin::options::QueueDeleteOptions::default()),
                )
                .await?;
        }
        let _ = ch.close(200, "done".into()).await;
        Ok(())
    }
}

impl Shared {
    /// The live connection and its generation, connecting anew if there is none (at most
    /// once per backoff interval).
    pub(crate) async fn connection(&self) -> Result<(Arc<Connection>, u64), BusError> {
        let mut link = self.link.lock().await;
        if let Some(c) = &link.connection {
            if c.status().connected() {
                return Ok((Arc::clone(c), link.generation));
            }
            link.connection = None;
        }
        if let Some(at) = link.next_attempt {
            if Instant::now() < at {
                return Err(BusError::unavailable(format!(
                    "RabbitMQ at {} is unreachable; reconnecting in {:?}",
                    redact_url(&self.url),
                    at - Instant::now()
                )));
            }
        }
        let attempt = tokio::time::timeout(
            self.config.request_timeout,
            Connection::connect(&self.url, ConnectionProperties::default()),
        )
        .await;
        match attempt {
            Ok(Ok(c)) => {
                let c = Arc::new(c);
                link.connection = Some(Arc::clone(&c));
                link.generation += 1;
                link.next_attempt = None;
                link.backoff = FIRST_BACKOFF;
                if link.generation > 1 {
                    tracing::info!(broker = %redact_url(&self.url), "reconnected to RabbitMQ");
                }
                Ok((c, link.generation))
            }
            outcome => {
                link.next_attempt = Some(Instant::now() + link.backoff);
                link.backoff = (link.backoff * 2).min(MAX_BACKOFF);
                Err(match outcome {
                    Ok(Err(e)) => self.error("connecting", e),
                    _ => BusError::Timeout(self.config.request_timeout),
                })
            }
        }
    }

    /// A fresh channel on the live connection.
    pub(crate) async fn channel(&self) -> Result<(Channel, u64), BusError> {
        let (c, generation) = self.connection().await?;
        let ch = self.timed("opening a channel", c.create_channel()).await?;
        Ok((ch, generation))
    }

    /// `fut`, within the request timeout, its error mapped.
    pub(crate) async fn timed<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = lapin::Result<T>>,
    ) -> Result<T, BusError> {
        match tokio::time::timeout(self.config.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(what, e)),
            Err(_) => Err(BusError::Timeout(self.config.request_timeout)),
        }
    }

    /// A lapin error as a [`BusError`], without the URL's credentials.
    pub(crate) fn error(&self, what: &str, e: lapin::Error) -> BusError {
        use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
        use lapin::ErrorKind;
        let message = format!("RabbitMQ at {}: {what}: {e}", redact_url(&self.url));
        let rejected = match e.kind() {
            ErrorKind::ProtocolError(p) => matches!(
                p.kind(),
                AMQPErrorKind::Soft(
                    AMQPSoftError::ACCESSREFUSED
                        | AMQPSoftError::PRECONDITIONFAILED
                        | AMQPSoftError::NOTFOUND
                        | AMQPSoftError::RESOURCELOCKED
                ) | AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED)
            ),
            ErrorKind::InvalidProtocolVersion(_)
            | ErrorKind::AuthProviderError(_)
            | ErrorKind::ParsingError(_) => true,
            _ => false,
        };
        let source: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
        if rejected {
            BusError::Rejected {
                message,
                source: Some(source),
            }
        } else {
            BusError::Unavailable {
                message,
                source: Some(source),
            }
        }
    }

    /// `queue` exists (a passive declare on a throwaway channel: a missing queue closes it).
    pub(crate) async fn check_exists(&self, queue: &str) -> Result<lapin::Queue, BusError> {
        let (ch, _) = self.channel().await?;
        let out = self
            .timed(
                "declaring a queue",
                ch.queue_declare(
                    short(queue)?,
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                ),
            )
            .await;
        match out {
            Ok(q) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(q)
            }
            Err(BusError::Rejected { source, .. })
                if source
                    .as_ref()
                    .and_then(|s| s.downcast_ref::<lapin::Error>())
                    .is_some_and(is_not_found) =>
            {
                Err(BusError::QueueNotFound(queue.to_string()))
            }
            Err(e) => Err(e),
        }
    }

    /// This process's counts for `queue`.
    pub(crate) fn counts(&self, queue: &str) -> Arc<LocalCounts> {
        let mut all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(all.entry(queue.to_string()).or_default())
    }

    /// Remembers a receiver's closing, for `inspect` to wait for.
    pub(crate) fn closing(&self, task: JoinHandle<()>) {
        let mut all = self.closing.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|t| !t.is_finished());
        all.push(task);
    }

    async fn closed_receivers(&self) {
        let tasks: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.closing.lock().unwrap_or_else(PoisonError::into_inner));
        for t in tasks {
            let _ = tokio::time::timeout(self.config.request_timeout, t).await;
        }
    }

    /// Publishes `body` to `queue`'s dead-letter queue with `reason`, and waits for the
    /// broker's confirm.
    pub(crate) async fn publish_dead_letter(
        &self,
        queue: &str,
        body: &[u8],
        message_id: &str,
        reason: &str,
    ) -> Result<(), BusError> {
        let mut slot = self.dead_letter_channel.lock().await;
        let ch = match slot.as_ref().filter(|c| c.status().connected()) {
            Some(c) => c.clone(),
            None => {
                let (ch, _) = self.channel().await?;
                self.timed(
                    "enabling publisher confirms",
                    ch.confirm_select(ConfirmSelectOptions::default()),
                )
                .await?;
                *slot = Some(ch.clone());
                ch
            }
        };
        let mut headers = FieldTable::default();
        headers.insert(
            REASON_HEADER.into(),
            AMQPValue::LongString(LongString::from(reason.as_bytes().to_vec())),
        );
        let properties = sender::properties(message_id).with_headers(headers);
        let confirm = self
            .timed(
                "publishing a dead letter",
                ch.basic_publish(
                    DEAD_LETTER_EXCHANGE.into(),
                    short(&dead_letter_queue_name(queue))?,
                    lapin::options::BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    body,
                    properties,
                ),
            )
            .await?;
        sender::confirmed(self, confirm, queue).await
    }
}

/// The arguments of `queue` as this bus creates it.
fn queue_arguments(queue: &str, config: &RabbitBusConfig) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    if config.max_receives > 0 {
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(i64::from(config.max_receives) - 1),
        );
    }
    args.insert(
        "x-dead-letter-exchange".into(),
        long_string(DEAD_LETTER_EXCHANGE),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        long_string(&dead_letter_queue_name(queue)),
    );
    // At-least-once dead-lettering: the broker keeps a message until the dead-letter queue
    // has it (it requires reject-publish overflow).
    args.insert(
        "x-dead-letter-strategy".into(),
        long_string("at-least-once"),
    );
    args.insert("x-overflow".into(), long_string("reject-publish"));
    args
}

fn dead_letter_queue_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    args
}

fn long_string(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

/// A queue name as AMQP carries it (at most 255 bytes).
pub(crate) fn short(name: &str) -> Result<ShortString, BusError> {
    ShortString::try_new(name).map_err(|_| BusError::Rejected {
        message: format!("queue name {name:?} is longer than AMQP allows (255 bytes)"),
        source: None,
    })
}

fn is_not_found(e: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p)
        if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

fn is_precondition_failed(e: &BusError) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    match e {
        BusError::Rejected {
            source: Some(s), ..
        } => s.downcast_ref::<lapin::Error>().is_some_and(|e| {
            matches!(e.kind(), lapin::ErrorKind::ProtocolError(p)
                if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)))
        }),
        _ => false,
    }
}

/// The id of a message that carries none (published by another client): stable across
/// redeliveries, as the body does not change.
pub(crate) fn body_id(body: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    body.hash(&mut h);
    format!("body-{:016x}", h.finish())
}

#[async_trait]
impl Bus for RabbitBus {
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        within(self.shared.config.call_deadline, async {
            self.shared.check_exists(queue).await?;
            let sender = Arc::new(RabbitSender::new(Arc::clone(&self.shared), queue));
            Ok(DeadlineSender::wrap(
                sender,
                self.shared.config.call_deadline,
            ))
        })
        .await
    }

    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        within(self.shared.config.call_deadline, async {
            self.shared.check_exists(queue).await?;
            let receiver = RabbitReceiver::start(Arc::clone(&self.shared), queue).await?;
            Ok(DeadlineReceiver::wrap(
                receiver,
                self.shared.config.call_deadline,
            ))
        })
        .await
    }

    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
        within(
            self.shared.config.call_deadline,
            self.create_queue_now(queue),
        )
        .await
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

    /// A batch (at most [`REDRIVE_BATCH`](crate::REDRIVE_BATCH)) per call, each message
    /// confirmed on the queue before it leaves the dead-letter queue (see `redrive.rs`).
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        within(
            self.shared.config.call_deadline,
            redrive::redrive(&self.shared, queue, max),
        )
        .await
    }

    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        within(
            self.shared.config.call_deadline,
            redrive::redrivable(&self.shared, queue),
        )
        .await
    }

    async fn close(&self) -> Result<(), BusError> {
        self.shared.closed_receivers().await;
        Ok(())
    }
}

/// The [`Bus`] calls, without the deadline [`Bus`]'s methods put on them.
impl RabbitBus {
    async fn create_queue_now(&self, queue: &str) -> Result<(), BusError> {
        let dead = dead_letter_queue_name(queue);
        let (ch, _) = self.shared.channel().await?;
        let s = &self.shared;
        s.timed(
            "declaring the dead-letter exchange",
            ch.exchange_declare(
                DEAD_LETTER_EXCHANGE.into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ),
        )
        .await?;
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        s.timed(
            "declaring a dead-letter queue",
            ch.queue_declare(short(&dead)?, durable, dead_letter_queue_arguments()),
        )
        .await
        .map_err(|e| settings_differ(e, &dead))?;
        let (ch, _) = if ch.status().connected() {
            (ch, 0)
        } else {
            s.channel().await?
        };
        s.timed(
            "binding a dead-letter queue",
            ch.queue_bind(
                short(&dead)?,
                DEAD_LETTER_EXCHANGE.into(),
                short(&dead)?,
                QueueBindOptions::default(),
                FieldTable::default(),
            ),
        )
        .await?;
        s.timed(
            "declaring a queue",
            ch.queue_declare(short(queue)?, durable, queue_arguments(queue, &s.config)),
        )
        .await
        .map_err(|e| settings_differ(e, queue))?;
        s.timed(
            "declaring a presence queue",
            ch.queue_declare(
                short(&presence_queue_name(queue))?,
                durable,
                presence_arguments(),
            ),
        )
        .await?;
        let _ = ch.close(200, "done".into()).await;
        Ok(())
    }

    async fn queue_drift_now(&self, queue: &str) -> Result<Vec<String>, BusError> {
        // RabbitMQ does not tell a queue's arguments over AMQP; declaring with ours tells
        // whether they agree (a mismatch closes the throwaway channel).
        self.shared.check_exists(queue).await?;
        let (ch, _) = self.shared.channel().await?;
        let out = self
            .shared
            .timed(
                "declaring a queue",
                ch.queue_declare(
                    short(queue)?,
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    queue_arguments(queue, &self.shared.config),
                ),
            )
            .await;
        match out {
            Ok(_) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(Vec::new())
            }
            Err(e) if is_precondition_failed(&e) => Ok(vec![format!(
                "its arguments differ from this archivist's (quorum queue, delivery limit {}, \
                 dead-letter exchange {DEAD_LETTER_EXCHANGE}); RabbitMQ cannot change them: \
                 delete the queue, or set a policy",
                self.shared.config.max_receives.saturating_sub(1)
            )]),
            Err(e) => Err(e),
        }
    }

    async fn update_queue_now(&self, queue: &str) -> Result<(), BusError> {
        let drift = self.queue_drift_now(queue).await?;
        match drift.into_iter().next() {
            None => Ok(()),
            Some(d) => Err(BusError::Rejected {
                message: format!("queue {queue:?}: {d}"),
                source: None,
            }),
        }
    }
}

fn settings_differ(e: BusError, queue: &str) -> BusError {
    if is_precondition_failed(&e) {
        BusError::Rejected {
            message: format!(
                "queue {queue:?} exists with other arguments than this archivist gives it \
                 (a quorum queue with a delivery limit and dead-letter exchange \
                 {DEAD_LETTER_EXCHANGE}); RabbitMQ cannot change them: delete the queue, or \
                 set a policy"
            ),
            source: match e {
                BusError::Rejected { source, .. } => source,
                _ => None,
            },
        }
    } else {
        e
    }
}

/// Counts for `queue` (see the module documentation): ready messages and consumers from the
/// broker, plus what this process buffered or holds.
pub(crate) async fn inspect(shared: &Shared, queue: &str) -> Result<QueueStats, BusError> {
    shared.closed_receivers().await;
    let main = shared.check_exists(queue).await?;
    let dead_name = dead_letter_queue_name(queue);
    let dead = shared.check_exists(&dead_name).await?;
    let local = shared.counts(queue);
    let local_dead = shared.counts(&dead_name);
    // Every receiver is on the presence queue, and on the queue itself once it has
    // received; a researcher on another AMQP client consumes the queue only. Each counts
    // once where all consumers are of one kind.
    let present = match shared.check_exists(&presence_queue_name(queue)).await {
        Ok(q) => q.consumer_count(),
        Err(BusError::QueueNotFound(_)) => 0,
        Err(e) => return Err(e),
    };
    Ok(QueueStats {
        waiting: u64::from(main.message_count()) + local.buffered.load(Ordering::SeqCst),
        in_flight: local.held.load(Ordering::SeqCst),
        consumers: Some(u64::from(main.consumer_count().max(present))),
        dead_letters: u64::from(dead.message_count())
            + local_dead.buffered.load(Ordering::SeqCst)
            + local_dead.held.load(Ordering::SeqCst),
    })
}
