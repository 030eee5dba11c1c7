//! Redrive on RabbitMQ: a batch of dead letters taken from `<queue>_dead_letter` with
//! `basic.get` (unacknowledged), published to the queue on a channel in confirm mode, and
//! acknowledged in the dead-letter queue (one acknowledgement for the batch) only once the
//! broker confirmed every copy.
//!
//! Why not a shovel: the shovel plugin is not enabled on every broker (nor on the one the
//! tests start), and it is managed over the HTTP API, not AMQP. Over AMQP alone the move
//! cannot be one transaction (RabbitMQ's AMQP transactions are atomic only within one
//! queue), so a crash between a confirm and the acknowledgement leaves that message in both
//! queues: at least once, never lost. What a step took and did not move it gives back
//! (`basic.nack` with requeue), or, when the step failed, closes its channel, which returns it.
//!
//! A republished message is new to the queue: no `x-delivery-count` (its receive count starts
//! again), none of the dead letter's headers (no reason, no `x-death`); it keeps its message
//! id, so the same message has the same id before and after.

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::Channel;

use super::{body_id, sender, short, Shared};
use crate::{dead_letter_queue_name, BusError, REDRIVE_BATCH};

/// Moves up to `min(max, REDRIVE_BATCH)` waiting dead letters of `queue` back onto it.
pub(crate) async fn redrive(shared: &Shared, queue: &str, max: u64) -> Result<u64, BusError> {
    shared.check_exists(queue).await?;
    let dlq = dead_letter_queue_name(queue);
    shared.check_exists(&dlq).await?;
    if max == 0 {
        return Ok(0);
    }
    // One channel for every step, kept open: RabbitMQ may ignore acknowledgements sent to a
    // quorum queue just before their channel closes (rabbitmq/rabbitmq-server#10327), and a
    // dead letter whose acknowledgement was ignored returns to the dead-letter queue after
    // its copy was published: moved twice. Closing a channel per step did that to about one
    // message in ten here.
    let mut slot = shared.redrive_channel.lock().await;
    let channel = match slot.as_ref().filter(|c| c.status().connected()) {
        Some(c) => c.clone(),
        None => {
            let (channel, _) = shared.channel().await?;
            shared
                .timed(
                    "enabling publisher confirms",
                    channel.confirm_select(ConfirmSelectOptions::default()),
                )
                .await?;
            *slot = Some(channel.clone());
            channel
        }
    };
    let moved = move_batch(shared, &channel, queue, &dlq, max.min(REDRIVE_BATCH)).await;
    if moved.is_err() && channel.status().connected() {
        // Whatever the failed step still holds goes back to the dead-letter queue.
        *slot = None;
        let _ = shared
            .timed(
                "closing a channel",
                channel.close(200, "redrive failed".into()),
            )
            .await;
    }
    moved
}

/// How many dead letters `queue` has waiting: the dead-letter queue's ready messages.
pub(crate) async fn redrivable(shared: &Shared, queue: &str) -> Result<u64, BusError> {
    shared.check_exists(queue).await?;
    let dlq = shared.check_exists(&dead_letter_queue_name(queue)).await?;
    Ok(u64::from(dlq.message_count()))
}

async fn move_batch(
    shared: &Shared,
    channel: &Channel,
    queue: &str,
    dlq: &str,
    max: u64,
) -> Result<u64, BusError> {
    let mut taken = Vec::new();
    while (taken.len() as u64) < max {
        let got = shared
            .timed(
                "getting a dead letter",
                channel.basic_get(short(dlq)?, BasicGetOptions::default()),
            )
            .await?;
        match got {
            Some(m) => taken.push(m.delivery),
            None => break,
        }
    }
    let mut first_error = None;
    let mut confirms = Vec::with_capacity(taken.len());
    for d in &taken {
        let id = d
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_else(|| body_id(&d.data));
        let published = shared
            .timed(
                "publishing a redriven message",
                channel.basic_publish(
                    "".into(),
                    short(queue)?,
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &d.data,
                    sender::properties(&id),
                ),
            )
            .await;
        match published {
            Ok(confirm) => confirms.push(confirm),
            Err(e) => {
                first_error = Some(e);
                break;
            }
        }
    }
    let requeue = BasicNackOptions {
        requeue: true,
        multiple: false,
    };
    // Taken but not published (a publish failed): back to the dead-letter queue.
    for d in &taken[confirms.len()..] {
        let _ = d.acker.nack(requeue).await;
    }
    let mut moved = 0u64;
    let mut last_moved = None;
    for (d, confirm) in taken.iter().zip(confirms) {
        if let Err(e) = sender::confirmed(shared, confirm, queue).await {
            first_error.get_or_insert(e);
            let _ = d.acker.nack(requeue).await;
            continue;
        }
        moved += 1;
        last_moved = Some(d);
    }
    // One acknowledgement for every moved dead letter (`multiple`: each delivery up to the
    // last moved one; those given back were nacked first, so it covers only moved ones). One
    // per message would be one queue command each, and a quorum queue's client in the broker
    // holds back every command past 32 unapplied ones until earlier ones are applied, and
    // drops what it holds back when the channel closes: under load, a redrive of 100 that
    // exited at once left 65 of them dead letters as well (moved twice). One command is never
    // held back.
    if let Some(last) = last_moved {
        let acked = last.acker.ack(BasicAckOptions { multiple: true }).await;
        match acked {
            Ok(true) => {}
            outcome => tracing::warn!(
                queue = %dlq,
                moved,
                error = ?outcome.err(),
                "dead letters sent back to their queue could not be removed from the \
                 dead-letter queue: they will be there again as well (duplicates; handling them \
                 twice is harmless)"
            ),
        }
    }
    if moved > 0 {
        // A synchronous call on the same channel after the acknowledgement: the broker
        // handles a channel's frames in order, so its answer means the channel has passed it
        // on to the queue. Without it, a process that stops right after a step (SIGINT between
        // steps) closes the connection with an acknowledgement the broker has not handled yet,
        // and it may drop it (rabbitmq-server#10327): the moved messages would stay dead
        // letters as well. (The queue applies it a moment later: a count read at once may
        // still include them.)
        let synced = shared
            .timed(
                "waiting for the broker to take the acknowledgements",
                channel.queue_declare(
                    short(dlq)?,
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                ),
            )
            .await;
        if let Err(e) = synced {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) if moved == 0 => Err(e),
        Some(e) => {
            tracing::debug!(queue, error = %e, moved, "redrive stopped part-way");
            Ok(moved)
        }
        None => Ok(moved),
    }
}
