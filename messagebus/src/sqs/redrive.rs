//! Redrive on SQS: one batch of dead letters received from `<queue>_dead_letter`, sent to the
//! queue as new messages (`SendMessageBatch`), then deleted from the dead-letter queue.
//!
//! Why not `StartMessageMoveTask`, SQS's own redrive: it moves a whole dead-letter queue with
//! no count limit (`--max` could not be kept), runs asynchronously (the count moved is known
//! only later, approximately), moves a message the archivist set aside itself (sent there,
//! not moved by the redrive policy) only with an explicit destination, and the SQS emulator
//! the tests run against (moto 5) does not implement it.
//!
//! Sending before deleting means a crash between the two leaves that batch (at most ten) in
//! both queues: delivered at least once, never lost. A sent message is new to SQS: a new
//! message id, `ApproximateReceiveCount` from zero, none of the dead letter's attributes (so
//! no reason).

use std::time::Duration;

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use aws_smithy_types::timeout::TimeoutConfig;

use super::client::{BusInner, CONNECT_TIMEOUT};
use super::sender::pack;
use super::visibility::change_visibility;
use crate::{dead_letter_queue_name, BusError};

/// SQS's most messages per receive and per batch.
const BATCH: u64 = 10;
/// The long poll of the receive from the dead-letter queue: long enough that SQS looks on
/// every server (a short poll may answer empty while messages wait), short enough that an
/// empty dead-letter queue answers quickly.
const WAIT: Duration = Duration::from_secs(1);

/// Moves up to `min(max, 10)` waiting dead letters of `queue` back onto it.
pub(crate) async fn redrive(bus: &BusInner, queue: &str, max: u64) -> Result<u64, BusError> {
    if max == 0 {
        return Ok(0);
    }
    let url = bus.queue_url(queue).await?;
    let dlq = dead_letter_queue_name(queue);
    let dlq_url = bus.queue_url(&dlq).await?;
    let attempt = WAIT + bus.config.request_timeout;
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(attempt)
        .operation_attempt_timeout(attempt)
        .operation_timeout(attempt * 3 + Duration::from_secs(5))
        .build();
    let out = bus
        .client
        .receive_message()
        .queue_url(&dlq_url)
        .max_number_of_messages(i32::try_from(max.min(BATCH)).unwrap_or(10))
        .wait_time_seconds(1)
        .visibility_timeout(bus.config.visibility_secs())
        .customize()
        .config_override(aws_sdk_sqs::config::Builder::default().timeout_config(timeouts))
        .send()
        .await
        .map_err(|e| bus.map_err_timeout("ReceiveMessage", &dlq, attempt, e))?;
    let taken: Vec<(&str, &str)> = out
        .messages()
        .iter()
        .filter_map(|m| Some((m.receipt_handle()?, m.body().unwrap_or_default())))
        .collect();
    if taken.is_empty() {
        return Ok(0);
    }
    bus.counter.payload(
        "ReceiveMessage",
        taken.iter().map(|(_, body)| body.len()).sum(),
    );
    let bodies: Vec<&str> = taken.iter().map(|(_, body)| *body).collect();
    let mut sent = Vec::new();
    let mut unsent = Vec::new();
    let mut first_error = None;
    for (start, end) in pack(&bodies) {
        let entries = (start..end)
            .map(|i| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(bodies[i])
                    .build()
                    .map_err(|e| BusError::Rejected {
                        message: format!("could not build a SendMessageBatch entry: {e}"),
                        source: None,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        match bus
            .client
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(answer) => {
                bus.counter.payload(
                    "SendMessageBatch",
                    bodies[start..end].iter().map(|b| b.len()).sum(),
                );
                let done: Vec<usize> = answer
                    .successful()
                    .iter()
                    .filter_map(|s| s.id().parse().ok())
                    .collect();
                for i in start..end {
                    if done.contains(&i) {
                        sent.push(i);
                    } else {
                        unsent.push(i);
                    }
                }
                if let Some(f) = answer.failed().first() {
                    first_error.get_or_insert_with(|| {
                        BusError::unavailable(format!(
                            "SendMessageBatch on queue {queue:?}: {} ({})",
                            f.code(),
                            f.message().unwrap_or_default()
                        ))
                    });
                }
            }
            Err(e) => {
                unsent.extend(start..end);
                first_error.get_or_insert_with(|| bus.map_err("SendMessageBatch", queue, e));
            }
        }
    }
    // Once these are deleted, the messages are only on the queue.
    if !sent.is_empty() {
        delete(
            bus,
            &dlq,
            &dlq_url,
            &sent.iter().map(|&i| taken[i].0).collect::<Vec<_>>(),
        )
        .await;
    }
    // Back to the dead-letter queue at once rather than when their visibility runs out.
    if !unsent.is_empty() {
        let receipts: Vec<&str> = unsent.iter().map(|&i| taken[i].0).collect();
        if let Err(e) = change_visibility(bus, &dlq, &dlq_url, &receipts, 0).await {
            tracing::debug!(queue = %dlq, error = %e, "could not release dead letters that were not sent; they come back when their visibility runs out");
        }
    }
    match first_error {
        Some(e) if sent.is_empty() => Err(e),
        _ => Ok(sent.len() as u64),
    }
}

/// Deletes sent dead letters. One that cannot be deleted comes back to the dead-letter queue
/// when its visibility runs out, while its copy is on the queue: said in a warning, since
/// that is the one way a redrive on SQS duplicates a message.
async fn delete(bus: &BusInner, dlq: &str, dlq_url: &str, receipts: &[&str]) {
    let entries = receipts
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(*r)
                .build()
                .ok()
        })
        .collect::<Vec<_>>();
    let failed = match bus
        .client
        .delete_message_batch()
        .queue_url(dlq_url)
        .set_entries(Some(entries))
        .send()
        .await
    {
        Ok(answer) => answer.failed().len(),
        Err(e) => {
            tracing::debug!(queue = %dlq, error = %e, "DeleteMessageBatch failed");
            receipts.len()
        }
    };
    if failed > 0 {
        tracing::warn!(
            queue = %dlq,
            count = failed,
            "dead letters sent back to their queue could not be deleted from the dead-letter \
             queue: they will be there again as well (duplicates; handling them twice is harmless)"
        );
    }
}
