//! [`RabbitReceiver`]: a standing consumer with a prefetch, a buffer, and deliveries that
//! carry their own acknowledgement and visibility timer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};

use super::{body_id, short, LocalCounts, Shared, REASON_HEADER};
use crate::{Acknowledger, BusError, Delivery, Receiver};

/// Takes messages off one queue of a [`RabbitBus`](super::RabbitBus). It is one consumer of
/// the queue at the broker from the moment it is made until it is dropped.
pub struct RabbitReceiver {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    queue: String,
    prefetch: u16,
    counts: Arc<LocalCounts>,
    /// Deliveries pushed by the broker, not yet handed out.
    buffer: Arc<Buffer>,
    /// The current consumer; one receive at a time uses it.
    consumer: tokio::sync::Mutex<Option<Consuming>>,
}

/// Filled by the pump task, emptied by `receive`.
struct Buffer {
    deliveries: Mutex<VecDeque<(lapin::message::Delivery, Arc<ChannelGuard>)>>,
    arrived: Notify,
    /// The consumer stopped (connection lost, queue deleted): start another.
    broken: AtomicBool,
}

struct Consuming {
    guard: Arc<ChannelGuard>,
    tag: String,
    pump: JoinHandle<()>,
}

/// Closes a receiver's channel once neither the receiver nor any delivery from it needs it
/// (closing it earlier would return held deliveries to the queue).
struct ChannelGuard {
    channel: Channel,
}

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        let channel = self.channel.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if channel.status().connected() {
                    let _ = channel.close(200, "receiver done".into()).await;
                }
            });
        }
    }
}

impl RabbitReceiver {
    pub(crate) async fn start(
        shared: Arc<Shared>,
        queue: &str,
        prefetch: u16,
    ) -> Result<Arc<Self>, BusError> {
        let inner = Arc::new(Inner {
            counts: shared.counts(queue),
            shared,
            queue: queue.to_string(),
            prefetch,
            buffer: Arc::new(Buffer {
                deliveries: Mutex::new(VecDeque::new()),
                arrived: Notify::new(),
                broken: AtomicBool::new(false),
            }),
            consumer: tokio::sync::Mutex::new(None),
        });
        {
            let mut slot = inner.consumer.lock().await;
            *slot = Some(inner.consume().await?);
        }
        Ok(Arc::new(RabbitReceiver { inner }))
    }

    /// The prefetch this receiver consumes with.
    pub fn prefetch(&self) -> u16 {
        self.inner.prefetch
    }
}

impl Inner {
    /// A new channel with a consumer on the queue, and its pump.
    async fn consume(&self) -> Result<Consuming, BusError> {
        let (channel, _) = self.shared.channel().await?;
        let s = &self.shared;
        s.timed(
            "setting the prefetch",
            channel.basic_qos(self.prefetch, BasicQosOptions::default()),
        )
        .await?;
        let consumer = s
            .timed(
                "starting a consumer",
                channel.basic_consume(
                    short(&self.queue)?,
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                ),
            )
            .await?;
        let tag = consumer.tag().to_string();
        let guard = Arc::new(ChannelGuard { channel });
        self.buffer.broken.store(false, Ordering::SeqCst);
        let pump = tokio::spawn(pump(
            consumer,
            Arc::clone(&self.buffer),
            Arc::clone(&self.counts),
            Arc::downgrade(&guard),
        ));
        Ok(Consuming { guard, tag, pump })
    }

    /// Deliveries of a consumer that is gone: the broker has returned them.
    fn forget_buffered(&self) {
        let mut buf = self
            .buffer
            .deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let stale = buf.len() as u64;
        buf.clear();
        LocalCounts::sub(&self.counts.buffered, stale);
    }

    fn take(&self, max: usize) -> Vec<(lapin::message::Delivery, Arc<ChannelGuard>)> {
        let mut buf = self
            .buffer
            .deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = max.min(buf.len());
        let out: Vec<_> = buf.drain(..n).collect();
        LocalCounts::sub(&self.counts.buffered, out.len() as u64);
        self.counts
            .held
            .fetch_add(out.len() as u64, Ordering::SeqCst);
        out
    }

    fn delivery(&self, d: lapin::message::Delivery, guard: Arc<ChannelGuard>) -> Delivery {
        let headers = d.properties.headers().clone().unwrap_or_default();
        let count = headers
            .inner()
            .get("x-delivery-count")
            .and_then(as_u64)
            .unwrap_or(0);
        let receive_count = u32::try_from(count.saturating_add(1)).unwrap_or(u32::MAX);
        let reason = header_text(&headers, REASON_HEADER).or_else(|| {
            (header_text(&headers, "x-first-death-reason").as_deref() == Some("delivery_limit"))
                .then(|| {
                    format!(
                        "received {} times without being handled: released or not settled \
                         within the visibility timeout each time (ARCHIVIST_MAX_RECEIVES)",
                        self.shared.config.max_receives
                    )
                })
        });
        let message_id = d
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_else(|| body_id(&d.data));
        let settled = Arc::new(AtomicBool::new(false));
        let timer = {
            let settled = Arc::clone(&settled);
            let acker = d.acker.clone();
            let counts = Arc::clone(&self.counts);
            let timeout = self.shared.config.visibility_timeout;
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                if !settled.swap(true, Ordering::SeqCst) {
                    LocalCounts::sub(&counts.held, 1);
                    let _ = acker
                        .nack(BasicNackOptions {
                            requeue: true,
                            multiple: false,
                        })
                        .await;
                }
            })
            .abort_handle()
        };
        let acker = RabbitAcker {
            shared: Arc::clone(&self.shared),
            queue: self.queue.clone(),
            counts: Arc::clone(&self.counts),
            acker: d.acker,
            settled,
            timer,
            message_id: message_id.clone(),
            body: d.data.clone(),
            _guard: guard,
        };
        Delivery::new(d.data, message_id, receive_count, reason, Box::new(acker))
    }
}

/// Moves the consumer's deliveries into the buffer as they come.
async fn pump(
    mut consumer: lapin::Consumer,
    buffer: Arc<Buffer>,
    counts: Arc<LocalCounts>,
    guard: std::sync::Weak<ChannelGuard>,
) {
    while let Some(next) = consumer.next().await {
        match next {
            Ok(d) => {
                let Some(guard) = guard.upgrade() else { break };
                counts.buffered.fetch_add(1, Ordering::SeqCst);
                buffer
                    .deliveries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_back((d, guard));
                buffer.arrived.notify_one();
            }
            Err(e) => {
                tracing::debug!(error = %e, "RabbitMQ consumer stopped");
                break;
            }
        }
    }
    buffer.broken.store(true, Ordering::SeqCst);
    buffer.arrived.notify_one();
}

fn as_u64(v: &AMQPValue) -> Option<u64> {
    match v {
        AMQPValue::ShortShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::ShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::LongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::LongUInt(n) => Some(u64::from(*n)),
        AMQPValue::LongLongInt(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

fn header_text(headers: &FieldTable, key: &str) -> Option<String> {
    match headers.inner().get(key)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

#[async_trait]
impl Receiver for RabbitReceiver {
    async fn receive(
        &self,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<Delivery>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + wait;
        let mut slot = inner.consumer.lock().await;
        loop {
            let taken = inner.take(max);
            if !taken.is_empty() {
                return Ok(taken
                    .into_iter()
                    .map(|(d, g)| inner.delivery(d, g))
                    .collect());
            }
            let broken = inner.buffer.broken.load(Ordering::SeqCst)
                || slot
                    .as_ref()
                    .is_none_or(|c| !c.guard.channel.status().connected());
            if broken {
                if let Some(old) = slot.take() {
                    old.pump.abort();
                }
                inner.forget_buffered();
                *slot = Some(inner.consume().await?);
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            let _ = tokio::time::timeout_at(deadline, inner.buffer.arrived.notified()).await;
        }
    }

    fn queue(&self) -> &str {
        &self.inner.queue
    }
}

impl Drop for RabbitReceiver {
    /// Cancels the consumer (the broker stops counting it at once) and returns what it had
    /// buffered; deliveries already handed out keep the channel open until settled.
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let task = rt.spawn(async move {
            let Some(consuming) = inner.consumer.lock().await.take() else {
                return;
            };
            let channel = consuming.guard.channel.clone();
            if channel.status().connected() {
                let _ = inner
                    .shared
                    .timed(
                        "cancelling a consumer",
                        channel.basic_cancel(consuming.tag.as_str().into(), BasicCancelOptions::default()),
                    )
                    .await;
            }
            consuming.pump.abort();
            let buffered: Vec<_> = inner
                .buffer
                .deliveries
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
                .collect();
            LocalCounts::sub(&inner.counts.buffered, buffered.len() as u64);
            for (d, _guard) in buffered {
                let _ = d
                    .acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        multiple: false,
                    })
                    .await;
            }
        });
        self.inner.shared.closing(task);
    }
}

/// Settles one delivery; the visibility timer returns it if nothing else does first.
struct RabbitAcker {
    shared: Arc<Shared>,
    queue: String,
    counts: Arc<LocalCounts>,
    acker: lapin::Acker,
    settled: Arc<AtomicBool>,
    timer: AbortHandle,
    message_id: String,
    body: Vec<u8>,
    _guard: Arc<ChannelGuard>,
}

impl RabbitAcker {
    /// Claims the delivery from its visibility timer; fails if the timer returned it first.
    fn claim(&self) -> Result<(), BusError> {
        if self.settled.swap(true, Ordering::SeqCst) {
            return Err(BusError::Rejected {
                message: format!(
                    "a delivery from {:?} was held past the visibility timeout ({:?}) and \
                     returned to the queue; it will be delivered again",
                    self.queue, self.shared.config.visibility_timeout
                ),
                source: None,
            });
        }
        self.timer.abort();
        LocalCounts::sub(&self.counts.held, 1);
        Ok(())
    }

    fn outcome(&self, what: &str, r: lapin::Result<bool>) -> Result<(), BusError> {
        match r {
            Ok(true) => Ok(()),
            Ok(false) => Err(BusError::unavailable(format!(
                "could not {what} a delivery from {:?}: the connection that received it is \
                 gone, and the broker will deliver it again",
                self.queue
            ))),
            Err(e) => Err(self.shared.error(what, e)),
        }
    }

    async fn requeue(&self) -> Result<(), BusError> {
        let r = self
            .acker
            .nack(BasicNackOptions {
                requeue: true,
                multiple: false,
            })
            .await;
        self.outcome("release", r)
    }
}

#[async_trait]
impl Acknowledger for RabbitAcker {
    async fn ack(self: Box<Self>) -> Result<(), BusError> {
        self.claim()?;
        let r = self.acker.ack(BasicAckOptions::default()).await;
        self.outcome("acknowledge", r)
    }

    async fn release(self: Box<Self>) -> Result<(), BusError> {
        self.claim()?;
        self.requeue().await
    }

    async fn dead_letter(self: Box<Self>, reason: &str) -> Result<(), BusError> {
        self.claim()?;
        if let Err(e) = self
            .shared
            .publish_dead_letter(&self.queue, &self.body, &self.message_id, reason)
            .await
        {
            // Not set aside: give it back rather than hold it until the channel closes.
            let _ = self.requeue().await;
            return Err(e);
        }
        let r = self.acker.ack(BasicAckOptions::default()).await;
        self.outcome("acknowledge", r)
    }
}
