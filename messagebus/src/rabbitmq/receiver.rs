//! [`RabbitReceiver`]: a presence consumer while it lives, a consumer on the queue from its
//! first receive with that batch as its prefetch, and deliveries that carry their own
//! acknowledgement and visibility timer.

use std::any::Any;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions,
    BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};

use super::{body_id, short, LocalCounts, Shared, REASON_HEADER};
use crate::{Acknowledger, BatchSettler, BusError, Delivery, Receiver, Settlement};
use lapin::options::QueueDeclareOptions;

/// Takes messages off one queue of a [`RabbitBus`](super::RabbitBus). While it lives it
/// holds a consumer on the queue's presence queue (so the broker counts it from the start);
/// from its first `receive` on, it also consumes the queue itself, with that call's `max` as
/// the prefetch.
pub struct RabbitReceiver {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    queue: String,
    counts: Arc<LocalCounts>,
    /// The channel holding the presence consumer (dropping the consumer would cancel it);
    /// closed when the receiver is dropped.
    presence: Mutex<Option<(Channel, lapin::Consumer)>>,
    /// Deliveries pushed by the broker, not yet handed out.
    buffer: Arc<Buffer>,
    /// The consumer on the queue; one receive at a time uses it.
    consuming: tokio::sync::Mutex<Option<Consuming>>,
}

/// Filled by the pump task, emptied by `receive`.
struct Buffer {
    deliveries: Mutex<VecDeque<(lapin::message::Delivery, Arc<ChannelGuard>)>>,
    arrived: Notify,
    /// The consumer stopped (connection lost, queue deleted): start another.
    broken: AtomicBool,
    /// Consumer deliveries buffered or handed out and not yet settled: the broker pushes
    /// more only while this is below the prefetch.
    unsettled: Arc<AtomicU64>,
}

struct Consuming {
    guard: Arc<ChannelGuard>,
    tag: String,
    prefetch: u16,
    pump: JoinHandle<()>,
}

/// Closes a channel once neither the receiver nor any delivery from it needs it (closing it
/// earlier would return held deliveries to the queue).
struct ChannelGuard {
    channel: Channel,
    /// Delivery tags handed to this process on the channel whose settlement has not yet
    /// gone out: a batch may acknowledge with `multiple` up to its highest tag only when
    /// every tag up to it is its own (acknowledging someone else's twice would close the
    /// channel, and with it every delivery held on it).
    outstanding: Mutex<BTreeSet<u64>>,
}

impl ChannelGuard {
    fn outstanding(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.outstanding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
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
    pub(crate) async fn start(shared: Arc<Shared>, queue: &str) -> Result<Arc<Self>, BusError> {
        let presence = present(&shared, queue).await?;
        Ok(Arc::new(RabbitReceiver {
            inner: Arc::new(Inner {
                counts: shared.counts(queue),
                shared,
                queue: queue.to_string(),
                presence: Mutex::new(Some(presence)),
                buffer: Arc::new(Buffer {
                    deliveries: Mutex::new(VecDeque::new()),
                    arrived: Notify::new(),
                    broken: AtomicBool::new(false),
                    unsettled: Arc::new(AtomicU64::new(0)),
                }),
                consuming: tokio::sync::Mutex::new(None),
            }),
        }))
    }
}

/// A channel with a consumer on `queue`'s presence queue (declared if missing).
async fn present(shared: &Shared, queue: &str) -> Result<(Channel, lapin::Consumer), BusError> {
    let (channel, _) = shared.channel().await?;
    let name = presence_queue_name(queue);
    shared
        .timed(
            "declaring a presence queue",
            channel.queue_declare(
                short(&name)?,
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                presence_arguments(),
            ),
        )
        .await?;
    let consumer = shared
        .timed(
            "joining a presence queue",
            channel.basic_consume(
                short(&name)?,
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            ),
        )
        .await?;
    Ok((channel, consumer))
}

impl Inner {
    /// The presence consumer is back if the connection dropped it.
    async fn keep_present(&self) -> Result<(), BusError> {
        let alive = self
            .presence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|(c, _)| c.status().connected());
        if !alive {
            let channel = present(&self.shared, &self.queue).await?;
            *self.presence.lock().unwrap_or_else(PoisonError::into_inner) = Some(channel);
        }
        Ok(())
    }

    /// A new channel with a consumer on the queue, and its pump.
    async fn consume(&self, prefetch: u16) -> Result<Consuming, BusError> {
        let (channel, _) = self.shared.channel().await?;
        let s = &self.shared;
        s.timed(
            "setting the prefetch",
            channel.basic_qos(prefetch, BasicQosOptions::default()),
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
        let guard = Arc::new(ChannelGuard {
            channel,
            outstanding: Mutex::new(BTreeSet::new()),
        });
        self.buffer.broken.store(false, Ordering::SeqCst);
        self.buffer.unsettled.store(0, Ordering::SeqCst);
        let pump = tokio::spawn(pump(
            consumer,
            Arc::clone(&self.buffer),
            Arc::clone(&self.counts),
            Arc::downgrade(&guard),
        ));
        Ok(Consuming {
            guard,
            tag,
            prefetch,
            pump,
        })
    }

    /// Empties the buffer: the deliveries of a consumer that is gone (the broker returned
    /// them), or of one being stopped.
    fn drain_buffer(&self) -> Vec<(lapin::message::Delivery, Arc<ChannelGuard>)> {
        let mut buf = self
            .buffer
            .deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let out: Vec<_> = buf.drain(..).collect();
        LocalCounts::sub(&self.counts.buffered, out.len() as u64);
        out
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
        out
    }

    /// Whether the consumer holds a whole prefetch, all of it handed out: only then may
    /// `basic.get` take more. A delivery still in the buffer means the next `take` has it
    /// (taking another by `basic.get` would strand the buffered one, unready, with no
    /// visibility clock, until the next receive).
    fn credit_spent(&self, prefetch: u16) -> bool {
        let buf = self
            .buffer
            .deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        buf.is_empty() && self.buffer.unsettled.load(Ordering::SeqCst) >= u64::from(prefetch)
    }

    /// Up to `max` messages by `basic.get`, for a receiver whose consumer has no credit left
    /// (it holds a whole prefetch of deliveries and asks for more).
    async fn get(
        &self,
        channel: &Channel,
        guard: &Arc<ChannelGuard>,
        max: usize,
    ) -> Result<Vec<Delivery>, BusError> {
        let mut out = Vec::new();
        while out.len() < max {
            let got = self
                .shared
                .timed(
                    "getting a message",
                    channel.basic_get(short(&self.queue)?, BasicGetOptions::default()),
                )
                .await?;
            match got {
                Some(m) => {
                    guard.outstanding().insert(m.delivery.delivery_tag);
                    out.push(self.delivery(m.delivery, Arc::clone(guard), None));
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// Hands out `d`. `unsettled` is the consumer's credit count, for consumer deliveries.
    fn delivery(
        &self,
        d: lapin::message::Delivery,
        guard: Arc<ChannelGuard>,
        unsettled: Option<Arc<AtomicU64>>,
    ) -> Delivery {
        self.counts.held.fetch_add(1, Ordering::SeqCst);
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
            let guard = Arc::clone(&guard);
            let unsettled = unsettled.clone();
            let tag = d.delivery_tag;
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                if !settled.swap(true, Ordering::SeqCst) {
                    LocalCounts::sub(&counts.held, 1);
                    if let Some(u) = &unsettled {
                        LocalCounts::sub(u, 1);
                    }
                    let _ = acker
                        .nack(BasicNackOptions {
                            requeue: true,
                            multiple: false,
                        })
                        .await;
                    guard.outstanding().remove(&tag);
                }
                drop(guard);
            })
            .abort_handle()
        };
        let acker = RabbitAcker {
            tag: d.delivery_tag,
            shared: Arc::clone(&self.shared),
            queue: self.queue.clone(),
            counts: Arc::clone(&self.counts),
            acker: d.acker,
            settled,
            timer,
            message_id: message_id.clone(),
            body: d.data.clone(),
            unsettled,
            guard,
        };
        Delivery::new(d.data, message_id, receive_count, reason, Box::new(acker))
    }
}

/// The name of the queue whose consumers are `queue`'s idle receivers.
pub fn presence_queue_name(queue: &str) -> String {
    format!("{queue}_consumers")
}

/// A presence queue never holds a message: nothing is sent to it, and anything that is, is
/// dropped. It is declared with the queue, so that counting its consumers never asks about
/// a missing queue.
pub(crate) fn presence_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(0));
    args
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
                guard.outstanding().insert(d.delivery_tag);
                counts.buffered.fetch_add(1, Ordering::SeqCst);
                // Counted under the buffer's lock, with the push: `credit_spent` must never
                // see the credit taken and the delivery not yet buffered.
                let mut buf = buffer
                    .deliveries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                buffer.unsettled.fetch_add(1, Ordering::SeqCst);
                buf.push_back((d, guard));
                drop(buf);
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

/// How often a receiver whose consumer has no credit asks again with `basic.get`.
const GET_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

#[async_trait]
impl Receiver for RabbitReceiver {
    /// Hands out what the consumer has buffered, waiting up to `wait` for the first
    /// delivery. The first call starts the consumer with `max` as its prefetch.
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
        let mut slot = inner.consuming.lock().await;
        inner.keep_present().await?;
        loop {
            let taken = inner.take(max);
            if !taken.is_empty() {
                let unsettled = Arc::clone(&inner.buffer.unsettled);
                return Ok(taken
                    .into_iter()
                    .map(|(d, g)| inner.delivery(d, g, Some(Arc::clone(&unsettled))))
                    .collect());
            }
            let broken = inner.buffer.broken.load(Ordering::SeqCst)
                || slot
                    .as_ref()
                    .is_some_and(|c| !c.guard.channel.status().connected());
            if broken || slot.is_none() {
                if let Some(old) = slot.take() {
                    old.pump.abort();
                    // Its deliveries went back to the queue with its channel.
                    drop(inner.drain_buffer());
                }
                let prefetch = u16::try_from(max).unwrap_or(u16::MAX);
                *slot = Some(inner.consume(prefetch).await?);
                continue;
            }
            let Some(consuming) = slot.as_ref() else {
                continue;
            };
            let no_credit = inner.credit_spent(consuming.prefetch);
            if no_credit {
                let got = inner
                    .get(&consuming.guard.channel, &consuming.guard, max)
                    .await?;
                if !got.is_empty() {
                    return Ok(got);
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let until = if no_credit {
                deadline.min(now + GET_INTERVAL)
            } else {
                deadline
            };
            let _ = tokio::time::timeout_at(until, inner.buffer.arrived.notified()).await;
        }
    }

    fn queue(&self) -> &str {
        &self.inner.queue
    }
}

impl Drop for RabbitReceiver {
    /// Leaves the presence queue (the broker stops counting this receiver), cancels the
    /// consumer and gives back what it had buffered; deliveries already handed out keep
    /// their channel open until settled.
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let presence = self
            .inner
            .presence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let inner = Arc::clone(&self.inner);
        let task = rt.spawn(async move {
            let s = &inner.shared;
            if let Some((channel, consumer)) = presence {
                if channel.status().connected() {
                    let _ = s
                        .timed(
                            "leaving a presence queue",
                            channel.close(200, "receiver dropped".into()),
                        )
                        .await;
                }
                drop(consumer);
            }
            let Some(consuming) = inner.consuming.lock().await.take() else {
                return;
            };
            let channel = consuming.guard.channel.clone();
            if channel.status().connected() {
                let _ = s
                    .timed(
                        "cancelling a consumer",
                        channel.basic_cancel(
                            consuming.tag.as_str().into(),
                            BasicCancelOptions::default(),
                        ),
                    )
                    .await;
            }
            consuming.pump.abort();
            for (d, _guard) in inner.drain_buffer() {
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
    /// The delivery tag on its channel.
    tag: u64,
    shared: Arc<Shared>,
    queue: String,
    counts: Arc<LocalCounts>,
    acker: lapin::Acker,
    settled: Arc<AtomicBool>,
    timer: AbortHandle,
    message_id: String,
    body: Vec<u8>,
    /// The consumer's count of unsettled deliveries, for deliveries it pushed.
    unsettled: Option<Arc<AtomicU64>>,
    guard: Arc<ChannelGuard>,
}

impl RabbitAcker {
    /// Claims the delivery from its visibility timer; fails if the timer returned it first.
    fn claim(&self) -> Result<(), BusError> {
        if self.settled.swap(true, Ordering::SeqCst) {
            // Held past the visibility timeout: the timer returned it to the queue, and it
            // will be (or was) delivered again.
            return Err(BusError::Stale {
                message_id: self.message_id.clone(),
            });
        }
        self.timer.abort();
        LocalCounts::sub(&self.counts.held, 1);
        if let Some(u) = &self.unsettled {
            LocalCounts::sub(u, 1);
        }
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

    /// Its settlement has gone out: a batch may now cover its tag with `multiple`.
    fn gone_out(&self) {
        self.guard.outstanding().remove(&self.tag);
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
        self.gone_out();
        self.outcome("acknowledge", r)
    }

    async fn release(self: Box<Self>) -> Result<(), BusError> {
        self.claim()?;
        let out = self.requeue().await;
        self.gone_out();
        out
    }

    fn batch(&self) -> Option<Arc<dyn BatchSettler>> {
        Some(Arc::clone(&self.guard) as Arc<dyn BatchSettler>)
    }

    fn into_any(self: Box<Self>) -> Option<Box<dyn Any + Send>> {
        Some(self)
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
            self.gone_out();
            return Err(e);
        }
        let r = self.acker.ack(BasicAckOptions::default()).await;
        self.gone_out();
        self.outcome("acknowledge", r)
    }
}

/// Deliveries of one channel settled together: one `basic.ack` (or `basic.nack`) with
/// `multiple` at the batch's highest tag when every tag up to it that this process holds
/// is in the batch; otherwise each delivery's own, all at once.
#[async_trait]
impl BatchSettler for ChannelGuard {
    async fn settle(
        &self,
        how: Settlement,
        ackers: Vec<Box<dyn Any + Send>>,
    ) -> Vec<Result<(), BusError>> {
        let n = ackers.len();
        let mut out: Vec<Option<Result<(), BusError>>> = (0..n).map(|_| None).collect();
        let mut claimed: Vec<(usize, Box<RabbitAcker>)> = Vec::new();
        for (i, a) in ackers.into_iter().enumerate() {
            match a.downcast::<RabbitAcker>() {
                Ok(a) => match a.claim() {
                    Ok(()) => claimed.push((i, a)),
                    Err(e) => out[i] = Some(Err(e)),
                },
                Err(_) => {
                    out[i] = Some(Err(BusError::Unsupported(
                        "not a delivery of this RabbitMQ channel".into(),
                    )))
                }
            }
        }
        let ours: BTreeSet<u64> = claimed.iter().map(|(_, a)| a.tag).collect();
        let top = ours.last().copied();
        let multiple = claimed.len() > 1
            && top.is_some_and(|top| self.outstanding().range(..=top).all(|t| ours.contains(t)));
        let top_acker = claimed
            .iter()
            .find(|(_, a)| Some(a.tag) == top)
            .map(|(_, a)| a);
        match (multiple, top_acker) {
            (true, Some(top)) => {
                let (what, r) = match how {
                    Settlement::Ack => (
                        "acknowledge",
                        top.acker.ack(BasicAckOptions { multiple: true }).await,
                    ),
                    Settlement::Release => (
                        "release",
                        top.acker
                            .nack(BasicNackOptions {
                                requeue: true,
                                multiple: true,
                            })
                            .await,
                    ),
                };
                let r = top.outcome(what, r);
                {
                    let mut outstanding = self.outstanding();
                    for t in &ours {
                        outstanding.remove(t);
                    }
                }
                for (i, _) in &claimed {
                    out[*i] = Some(match &r {
                        Ok(()) => Ok(()),
                        Err(e) if e.is_retryable() => Err(BusError::unavailable(e.to_string())),
                        Err(e) => Err(BusError::Rejected {
                            message: e.to_string(),
                            source: None,
                        }),
                    });
                }
            }
            _ => {
                let each =
                    futures::future::join_all(claimed.into_iter().map(|(i, a)| async move {
                        let r = match how {
                            Settlement::Ack => {
                                let r = a.acker.ack(BasicAckOptions::default()).await;
                                a.outcome("acknowledge", r)
                            }
                            Settlement::Release => a.requeue().await,
                        };
                        a.gone_out();
                        (i, r)
                    }))
                    .await;
                for (i, r) in each {
                    out[i] = Some(r);
                }
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or(Err(BusError::Closed)))
            .collect()
    }
}
