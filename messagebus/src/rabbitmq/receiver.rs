//! [`RabbitReceiver`]: a consumer per receive with the batch as its prefetch, a presence
//! consumer while it lives, and deliveries that carry their own acknowledgement and
//! visibility timer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;
use tokio::task::AbortHandle;

use super::{body_id, short, LocalCounts, Shared, REASON_HEADER};
use crate::{Acknowledger, BusError, Delivery, Receiver};
use lapin::options::QueueDeclareOptions;

/// Takes messages off one queue of a [`RabbitBus`](super::RabbitBus). While it lives it
/// holds a consumer on the queue's presence queue (so the broker counts it); each `receive`
/// is a consumer on the queue itself, with the call's `max` as its prefetch.
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
    /// One receive at a time: a receiver is one consumer.
    receiving: tokio::sync::Mutex<()>,
}

/// Closes a receive's channel once no delivery from it needs it (closing it earlier would
/// return held deliveries to the queue).
struct ChannelGuard {
    channel: Channel,
}

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        let channel = self.channel.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if channel.status().connected() {
                    let _ = channel.close(200, "receive done".into()).await;
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
                receiving: tokio::sync::Mutex::new(()),
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

    fn delivery(&self, d: lapin::message::Delivery, guard: Arc<ChannelGuard>) -> Delivery {
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
                drop(guard);
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

#[async_trait]
impl Receiver for RabbitReceiver {
    /// A consumer on the queue with prefetch `max`, for this call only: it waits up to
    /// `wait` for the first delivery, then cancels, taking what the broker pushed before the
    /// cancel was done (never more than `max`).
    async fn receive(
        &self,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<Delivery>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        let _one = inner.receiving.lock().await;
        inner.keep_present().await?;
        let s = &inner.shared;
        let prefetch = u16::try_from(max).unwrap_or(u16::MAX);
        let (channel, _) = s.channel().await?;
        s.timed(
            "setting the prefetch",
            channel.basic_qos(prefetch, BasicQosOptions::default()),
        )
        .await?;
        let mut consumer = s
            .timed(
                "starting a consumer",
                channel.basic_consume(
                    short(&inner.queue)?,
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                ),
            )
            .await?;
        let guard = Arc::new(ChannelGuard {
            channel: channel.clone(),
        });
        let mut got = Vec::new();
        let mut failed = None;
        match tokio::time::timeout(wait, consumer.next()).await {
            Ok(Some(Ok(d))) => got.push(d),
            Ok(Some(Err(e))) => failed = Some(s.error("receiving", e)),
            Ok(None) | Err(_) => {}
        }
        if failed.is_none() {
            // Cancel, then take everything pushed before the cancel: the stream ends at
            // the broker's cancel-ok.
            let cancelled = s
                .timed(
                    "cancelling a consumer",
                    channel.basic_cancel(consumer.tag(), BasicCancelOptions::default()),
                )
                .await;
            match cancelled {
                Ok(()) => {
                    while let Ok(Some(Ok(d))) =
                        tokio::time::timeout(s.config.request_timeout, consumer.next()).await
                    {
                        got.push(d);
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            if got.is_empty() {
                return Err(e);
            }
            tracing::debug!(error = %e, "RabbitMQ receive ended early");
        }
        Ok(got
            .into_iter()
            .map(|d| inner.delivery(d, Arc::clone(&guard)))
            .collect())
    }

    fn queue(&self) -> &str {
        &self.inner.queue
    }
}

impl Drop for RabbitReceiver {
    /// Leaves the presence queue: the broker stops counting this receiver.
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some((channel, consumer)) = self
            .inner
            .presence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let shared = Arc::clone(&self.inner.shared);
        let task = rt.spawn(async move {
            if channel.status().connected() {
                let _ = shared
                    .timed(
                        "leaving a presence queue",
                        channel.close(200, "receiver dropped".into()),
                    )
                    .await;
            }
            drop(consumer);
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
