//! [`RabbitSender`]: publishes with publisher confirms, a batch at a time.

use std::sync::Arc;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel};
use lapin::{Confirmation, PublisherConfirm};

use super::{inspect, short, Shared};
use crate::{BusError, DeadLetter, QueueStats, Sender, MAX_BODY_BYTES};

/// Publishes to one queue of a [`RabbitBus`](super::RabbitBus) through the default exchange,
/// on its own channel in confirm mode. `send_batch` publishes every body, then waits for all
/// their confirms: it returns once the broker has every message.
pub struct RabbitSender {
    shared: Arc<Shared>,
    queue: String,
    channel: tokio::sync::Mutex<Option<Channel>>,
}

impl RabbitSender {
    pub(crate) fn new(shared: Arc<Shared>, queue: &str) -> Self {
        RabbitSender {
            shared,
            queue: queue.to_string(),
            channel: tokio::sync::Mutex::new(None),
        }
    }
}

/// Properties of a message the archivist publishes: persistent, with a message id that
/// stays the same on redelivery and in the dead-letter queue.
pub(crate) fn properties(message_id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(message_id.into())
}

/// Waits for one publisher confirm; a returned (unroutable) message means the queue is gone.
pub(crate) async fn confirmed(
    shared: &Shared,
    confirm: PublisherConfirm,
    queue: &str,
) -> Result<(), BusError> {
    match shared
        .timed("waiting for a publisher confirm", confirm)
        .await?
    {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) => Err(BusError::QueueNotFound(queue.to_string())),
        Confirmation::Nack(_) => Err(BusError::unavailable(format!(
            "RabbitMQ refused to store a message for {queue:?} (negative publisher confirm)"
        ))),
        Confirmation::NotRequested => Err(BusError::unavailable(
            "publisher confirms are off on this channel",
        )),
    }
}

#[async_trait]
impl Sender for RabbitSender {
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        if let Some(big) = bodies.iter().find(|b| b.len() > MAX_BODY_BYTES) {
            return Err(BusError::BodyTooLarge {
                size: big.len(),
                limit: MAX_BODY_BYTES,
            });
        }
        if bodies.is_empty() {
            return Ok(());
        }
        let routing_key = short(&self.queue)?;
        let confirms = {
            let mut slot = self.channel.lock().await;
            let ch = match slot.as_ref().filter(|c| c.status().connected()) {
                Some(c) => c.clone(),
                None => {
                    let (ch, _) = self.shared.channel().await?;
                    self.shared
                        .timed(
                            "enabling publisher confirms",
                            ch.confirm_select(ConfirmSelectOptions::default()),
                        )
                        .await?;
                    *slot = Some(ch.clone());
                    ch
                }
            };
            let mut confirms = Vec::with_capacity(bodies.len());
            for body in &bodies {
                let id = uuid::Uuid::new_v4().to_string();
                let confirm = self
                    .shared
                    .timed(
                        "publishing",
                        ch.basic_publish(
                            "".into(),
                            routing_key.clone(),
                            BasicPublishOptions {
                                mandatory: true,
                                ..Default::default()
                            },
                            body,
                            properties(&id),
                        ),
                    )
                    .await?;
                confirms.push(confirm);
            }
            confirms
        };
        // Every publish is on the wire; the confirms come back together.
        for outcome in futures::future::join_all(
            confirms
                .into_iter()
                .map(|c| confirmed(&self.shared, c, &self.queue)),
        )
        .await
        {
            outcome?;
        }
        Ok(())
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        inspect(&self.shared, &self.queue).await
    }

    async fn peek_dead_letters(
        &self,
        _: usize,
        _: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        // AMQP 0-9-1 cannot look without taking: a `basic.get` and a requeue would count as a
        // delivery in the quorum dead-letter queue, whose default delivery limit (RabbitMQ 4:
        // 20) then drops the message. Only the count (`inspect`) is safe.
        Ok(None)
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}
