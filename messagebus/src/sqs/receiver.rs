//! [`SqsReceiver`] (long-polling `ReceiveMessage`, ten per call) and the acknowledger its
//! deliveries carry: ack through the `DeleteMessageBatch` batcher, release through the
//! `ChangeMessageVisibilityBatch` batcher (visibility 0), dead-letter by sending the body to
//! `<queue>_dead_letter` with the reason as a message attribute, then deleting. A delivery's
//! durable receipt is its receipt handle, settled by any receiver of the queue (the API
//! gateway after a restart) with single `ChangeMessageVisibility` / `DeleteMessage` calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
};
use aws_smithy_types::timeout::TimeoutConfig;
use tokio::time::Instant;

use super::batcher::{BatchCall, Batcher, EntryOutcome};
use super::client::{BusInner, CONNECT_TIMEOUT};
use super::config::secs_ceil;
use super::heartbeat::{self, Heartbeat};
use super::message::{
    attribute_size, redrive_reason, sqs_allows, DEAD_LETTER_REASON_ATTRIBUTE,
    ORIGINAL_MESSAGE_ID_ATTRIBUTE,
};
use super::visibility::{build_error, change_visibility, outcomes};
use crate::{
    dead_letter_queue_name, Acknowledger, BusError, Delivery, ReceiptAction, Receiver,
    MAX_BODY_BYTES,
};

/// Codes meaning a message is visible already: a release of it has nothing left to do.
const NOT_IN_FLIGHT_CODES: &[&str] = &[
    "AWS.SimpleQueueService.MessageNotInflight",
    "MessageNotInflight",
];

/// Codes meaning a receipt handle holds no message of the queue now: made up, of another
/// queue, of a message deleted since, or expired (SQS refuses a visibility change by a
/// receipt whose visibility ran out: `InvalidParameterValue`, "not available for visibility
/// timeout change").
const NOT_HELD_CODES: &[&str] = &[
    "ReceiptHandleIsInvalid",
    "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
    "InvalidParameterValue",
    "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
];

/// The longest receipt handle sent to SQS by [`Receiver::settle_receipt`]: SQS's are a few
/// hundred characters; anything longer is not one, and is refused without a request.
const MAX_RECEIPT_HANDLE: usize = 4096;

/// The longest visibility SQS accepts (12 hours).
const MAX_VISIBILITY_SECS: i32 = 43_200;

/// Takes messages off one SQS queue. From [`SqsBus::receiver`](crate::Bus::receiver).
///
/// Costs: one `ReceiveMessage` per call (up to ten messages; an idle long poll of 20 s makes 3
/// requests a minute), one `DeleteMessageBatch` per ten acknowledgements settled together,
/// one `ChangeMessageVisibilityBatch` per ten releases, and, for messages held longer than
/// about a third of the visibility timeout, one `ChangeMessageVisibilityBatch` per ten held
/// messages per heartbeat interval.
///
/// Deliveries settled at the same time share a request: acknowledge a received batch
/// concurrently (`futures::future::join_all`) rather than one `ack().await` after another,
/// which waits out the linger for each.
#[derive(Debug, Clone)]
pub struct SqsReceiver {
    shared: Arc<ReceiverShared>,
}

/// What a receiver and its deliveries share.
#[derive(Debug)]
pub(crate) struct ReceiverShared {
    pub(crate) bus: Arc<BusInner>,
    pub(crate) queue: String,
    pub(crate) url: String,
    /// The messages its deliveries hold, kept invisible to others.
    heartbeat: Arc<Heartbeat>,
    /// Deliveries handed out and not yet settled or dropped.
    unsettled: Arc<AtomicUsize>,
    deleter: Batcher,
    releaser: Batcher,
}

impl SqsReceiver {
    /// Starts the receiver's batcher and heartbeat tasks on `runtime`.
    pub(crate) fn new(
        runtime: &tokio::runtime::Handle,
        bus: Arc<BusInner>,
        queue: String,
        url: String,
    ) -> SqsReceiver {
        let unsettled = Arc::new(AtomicUsize::new(0));
        let linger = bus.config.ack_linger;
        let interval = bus.config.heartbeat_interval();
        let deleter = Batcher::spawn(
            runtime,
            DeleteCall {
                bus: bus.clone(),
                queue: queue.clone(),
                url: url.clone(),
            },
            linger,
            unsettled.clone(),
        );
        let releaser = Batcher::spawn(
            runtime,
            ReleaseCall {
                bus: bus.clone(),
                queue: queue.clone(),
                url: url.clone(),
            },
            linger,
            unsettled.clone(),
        );
        let heartbeat = Arc::new(Heartbeat::new(bus.clone(), queue.clone(), url.clone()));
        runtime.spawn(heartbeat::run(Arc::downgrade(&heartbeat), interval));
        let shared = Arc::new(ReceiverShared {
            bus,
            queue,
            url,
            heartbeat,
            unsettled,
            deleter,
            releaser,
        });
        SqsReceiver { shared }
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// How many deliveries of this receiver are held (handed out, not yet settled or dropped).
    pub fn held(&self) -> usize {
        self.shared.heartbeat.held.len()
    }

    /// The reason given to messages the redrive policy moved to this (dead-letter) queue.
    fn redrive_reason(&self, source_arn: Option<&str>) -> String {
        redrive_reason(self.shared.bus.config.max_receives, source_arn)
    }
}

#[async_trait]
impl Receiver for SqsReceiver {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let shared = &self.shared;
        let config = &shared.bus.config;
        let wait = wait.min(config.wait_time);
        // The long poll must fit inside every SDK timeout, or it would be cut short and retried
        // (the client's defaults are set for quick requests, and the SDK has none for reads).
        let attempt = wait + config.request_timeout;
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(attempt)
            .operation_attempt_timeout(attempt)
            .operation_timeout(attempt * 3 + Duration::from_secs(5))
            .build();
        let max = i32::try_from(max.min(10)).unwrap_or(10);
        let out = shared
            .bus
            .client
            .receive_message()
            .queue_url(&shared.url)
            .max_number_of_messages(max)
            .wait_time_seconds(secs_ceil(wait))
            .visibility_timeout(config.visibility_secs())
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::DeadLetterQueueSourceArn)
            .message_attribute_names(DEAD_LETTER_REASON_ATTRIBUTE)
            .customize()
            .config_override(aws_sdk_sqs::config::Builder::default().timeout_config(timeouts))
            .send()
            .await
            .map_err(|e| {
                shared
                    .bus
                    .map_err_timeout("ReceiveMessage", &shared.queue, attempt, e)
            })?;
        // From here on nothing awaits: a receive dropped by its caller either got nothing or
        // hands out every message it took (cancel safety).
        // The message became invisible at most a round trip ago; counting from a little
        // earlier makes the heartbeat err on the early side.
        let margin = (config.visibility_timeout / 10).min(Duration::from_secs(1));
        let visible_until = Instant::now() + config.visibility_timeout - margin;
        let is_dead_letter_queue = shared.queue.ends_with("_dead_letter");
        let mut payload = 0;
        let mut deliveries = Vec::with_capacity(out.messages().len());
        for m in out.messages() {
            let Some(receipt) = m.receipt_handle() else {
                tracing::warn!(queue = %shared.queue, "SQS returned a message without a receipt handle; skipping it");
                continue;
            };
            let body = m.body().unwrap_or_default().to_owned();
            let system = m.attributes();
            let receive_count = system
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let reason_attr = m
                .message_attributes()
                .and_then(|a| a.get(DEAD_LETTER_REASON_ATTRIBUTE))
                .and_then(|v| v.string_value())
                .map(str::to_owned);
            payload += body.len()
                + reason_attr
                    .as_ref()
                    .map_or(0, |r| attribute_size(DEAD_LETTER_REASON_ATTRIBUTE, r));
            let reason = reason_attr.or_else(|| {
                is_dead_letter_queue.then(|| {
                    self.redrive_reason(system.and_then(|a| {
                        a.get(&MessageSystemAttributeName::DeadLetterQueueSourceArn)
                            .map(String::as_str)
                    }))
                })
            });
            let message_id = m.message_id().unwrap_or_default().to_owned();
            shared.unsettled.fetch_add(1, Ordering::AcqRel);
            let id = shared
                .heartbeat
                .held
                .insert(receipt.to_owned(), visible_until);
            let acker = SqsAcker {
                guard: HeldGuard {
                    shared: shared.clone(),
                    id,
                },
                receipt: receipt.to_owned(),
                body: body.clone(),
                message_id: message_id.clone(),
            };
            deliveries.push(Delivery::new(
                body.into_bytes(),
                message_id,
                receive_count,
                reason,
                Box::new(acker),
            ));
        }
        shared.bus.counter.payload("ReceiveMessage", payload);
        Ok(deliveries)
    }

    fn queue(&self) -> &str {
        &self.shared.queue
    }

    /// By the receipt handle itself (the durable receipt of an SQS delivery), on this
    /// receiver's queue only: a handle of another queue, made up, or no longer holding its
    /// message answers `Ok(false)`. Every action first changes the message's visibility by
    /// the handle (extend: to the asked visibility; acknowledge: to the queue's, so that the
    /// message cannot go to another receiver before the delete lands; release: to 0), which
    /// SQS refuses for a handle that no longer holds its message — the check that a delete,
    /// which SQS accepts with any handle the message ever had, lacks. Two requests for an
    /// acknowledgement, one otherwise.
    async fn settle_receipt(&self, receipt: &str, action: ReceiptAction) -> Result<bool, BusError> {
        if !plausible_handle(receipt) {
            return Ok(false);
        }
        let shared = &self.shared;
        let secs = match action {
            ReceiptAction::Extend(visibility) => secs_ceil(visibility).min(MAX_VISIBILITY_SECS),
            ReceiptAction::Ack => shared.bus.config.visibility_secs().max(1),
            ReceiptAction::Release => 0,
        };
        let changed = shared
            .bus
            .client
            .change_message_visibility()
            .queue_url(&shared.url)
            .receipt_handle(receipt)
            .visibility_timeout(secs)
            .send()
            .await;
        if let Err(e) = changed {
            if not_held(&e) {
                return Ok(false);
            }
            return Err(shared
                .bus
                .map_err("ChangeMessageVisibility", &shared.queue, e));
        }
        if action != ReceiptAction::Ack {
            return Ok(true);
        }
        let deleted = shared
            .bus
            .client
            .delete_message()
            .queue_url(&shared.url)
            .receipt_handle(receipt)
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(true),
            Err(e) if not_held(&e) => Ok(false),
            Err(e) => Err(shared.bus.map_err("DeleteMessage", &shared.queue, e)),
        }
    }
}

/// Whether `receipt` could be an SQS receipt handle: not empty, not over
/// [`MAX_RECEIPT_HANDLE`], printable ASCII. Anything else settles nothing, without a request.
fn plausible_handle(receipt: &str) -> bool {
    !receipt.is_empty()
        && receipt.len() <= MAX_RECEIPT_HANDLE
        && receipt.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether SQS answered that the receipt handle holds no message (see [`NOT_HELD_CODES`]).
fn not_held<E: aws_sdk_sqs::error::ProvideErrorMetadata>(
    e: &aws_sdk_sqs::error::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> bool {
    e.as_service_error()
        .and_then(|s| s.code())
        .is_some_and(|c| NOT_HELD_CODES.contains(&c))
}

/// `DeleteMessageBatch` for the acknowledgement batcher.
struct DeleteCall {
    bus: Arc<BusInner>,
    queue: String,
    url: String,
}

#[async_trait]
impl BatchCall for DeleteCall {
    async fn call(&self, receipts: &[&str]) -> Result<Vec<EntryOutcome>, BusError> {
        // The batcher holds these acknowledgements and has not sent them yet.
        crate::fail_point("sqs-delete-batch").await;
        let entries = receipts
            .iter()
            .enumerate()
            .map(|(i, r)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*r)
                    .build()
                    .map_err(build_error)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .bus
            .client
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| self.bus.map_err("DeleteMessageBatch", &self.queue, e))?;
        let done: Vec<&str> = out.successful().iter().map(|s| s.id()).collect();
        Ok(outcomes(
            receipts.len(),
            &done,
            out.failed(),
            "DeleteMessageBatch",
            &self.queue,
        ))
    }
}

/// `ChangeMessageVisibilityBatch` to 0 for the release batcher.
struct ReleaseCall {
    bus: Arc<BusInner>,
    queue: String,
    url: String,
}

#[async_trait]
impl BatchCall for ReleaseCall {
    async fn call(&self, receipts: &[&str]) -> Result<Vec<EntryOutcome>, BusError> {
        let mut outcomes =
            change_visibility(&self.bus, &self.queue, &self.url, receipts, 0).await?;
        // Answers per entry again to see which failures mean "visible already".
        for o in &mut outcomes {
            if let EntryOutcome::Failed(BusError::Rejected { message, .. }) = o {
                if NOT_IN_FLIGHT_CODES.iter().any(|c| message.contains(c)) {
                    *o = EntryOutcome::Done;
                }
            }
        }
        Ok(outcomes)
    }
}

/// Makes a message visible again through the release batcher.
async fn release(shared: &ReceiverShared, receipt: String) -> Result<(), BusError> {
    // An extension already on its way must land before the release, not after it.
    drop(shared.heartbeat.gate.lock().await);
    shared.releaser.submit(receipt).await
}

/// Stops holding a delivery when it is settled or dropped.
#[derive(Debug)]
struct HeldGuard {
    shared: Arc<ReceiverShared>,
    id: u64,
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.shared.heartbeat.held.remove(self.id);
        self.shared.unsettled.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The acknowledger of one SQS delivery.
struct SqsAcker {
    guard: HeldGuard,
    receipt: String,
    /// Kept for [`Acknowledger::dead_letter`], which must send the body on.
    body: String,
    message_id: String,
}

impl SqsAcker {
    /// Lets go of the delivery for a batch settlement: its receipt, unless its visibility
    /// ran out by this process's clock (the heartbeat did not keep it), in which case SQS
    /// may have handed it to another receiver: a stale receipt that SQS would still accept
    /// for a delete, so it is not sent.
    fn for_batch(self) -> Result<(Arc<ReceiverShared>, String), BusError> {
        let SqsAcker {
            guard,
            receipt,
            message_id,
            ..
        } = self;
        let shared = guard.shared.clone();
        let lapsed = shared
            .heartbeat
            .held
            .visible_until(guard.id)
            .is_some_and(|until| until <= Instant::now());
        drop(guard);
        if lapsed {
            return Err(BusError::Stale { message_id });
        }
        Ok((shared, receipt))
    }
}

/// `DeleteMessageBatch` and `ChangeMessageVisibilityBatch` of ten: every entry is queued on
/// the receiver's batcher at once, which sends them ten a request without lingering (no
/// delivery of the receiver is left unsettled to wait for).
#[async_trait]
impl crate::BatchSettler for ReceiverShared {
    async fn settle(
        &self,
        how: crate::Settlement,
        ackers: Vec<Box<dyn std::any::Any + Send>>,
    ) -> Vec<Result<(), BusError>> {
        futures::future::join_all(ackers.into_iter().map(|a| async move {
            let acker = a
                .downcast::<SqsAcker>()
                .map_err(|_| BusError::Unsupported("not a delivery of this SQS receiver".into()))?;
            let (shared, receipt) = acker.for_batch()?;
            match how {
                crate::Settlement::Ack => shared.deleter.submit(receipt).await,
                crate::Settlement::Release => release(&shared, receipt).await,
            }
        }))
        .await
    }
}

#[async_trait]
impl Acknowledger for SqsAcker {
    fn batch(&self) -> Option<Arc<dyn crate::BatchSettler>> {
        Some(self.guard.shared.clone() as Arc<dyn crate::BatchSettler>)
    }

    fn into_any(self: Box<Self>) -> Option<Box<dyn std::any::Any + Send>> {
        Some(self)
    }

    fn stop_heartbeat(&mut self) {
        self.guard.shared.heartbeat.held.freeze(self.guard.id);
    }

    /// The receipt handle: SQS's own, good in any process until the message is settled or
    /// its visibility runs out (see [`SqsReceiver`]'s `settle_receipt`).
    fn durable_receipt(&self) -> Option<String> {
        Some(self.receipt.clone())
    }

    async fn ack(self: Box<Self>) -> Result<(), BusError> {
        let SqsAcker { guard, receipt, .. } = *self;
        let shared = guard.shared.clone();
        drop(guard);
        shared.deleter.submit(receipt).await
    }

    async fn release(self: Box<Self>) -> Result<(), BusError> {
        let SqsAcker { guard, receipt, .. } = *self;
        let shared = guard.shared.clone();
        drop(guard);
        release(&shared, receipt).await
    }

    fn abandoned(self: Box<Self>) {
        let SqsAcker { guard, receipt, .. } = *self;
        let shared = guard.shared.clone();
        drop(guard);
        // Outside a runtime nothing can be sent: the visibility timeout brings it back.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tracker = shared.bus.abandoned.clone();
        runtime.spawn(tracker.track_future(async move {
            if let Err(e) = release(&shared, receipt).await {
                tracing::debug!(queue = %shared.queue, error = %e, "could not release a dropped delivery; it comes back when its visibility runs out");
            }
        }));
    }

    async fn dead_letter(self: Box<Self>, reason: &str) -> Result<(), BusError> {
        let SqsAcker {
            guard,
            receipt,
            body,
            message_id,
        } = *self;
        let shared = guard.shared.clone();
        let dlq = dead_letter_queue_name(&shared.queue);
        let dlq_url = shared.bus.queue_url(&dlq).await?;
        // The message stays held (the heartbeat keeps it) until it is safely in the DLQ.
        let mut attributes = HashMap::new();
        let room = MAX_BODY_BYTES
            .saturating_sub(body.len())
            .saturating_sub(attribute_size(ORIGINAL_MESSAGE_ID_ATTRIBUTE, &message_id))
            .saturating_sub(attribute_size(DEAD_LETTER_REASON_ATTRIBUTE, ""));
        let reason = fit_reason(reason, room);
        let mut payload = body.len();
        if !reason.is_empty() {
            payload += attribute_size(DEAD_LETTER_REASON_ATTRIBUTE, &reason);
            attributes.insert(
                DEAD_LETTER_REASON_ATTRIBUTE.to_owned(),
                string_attribute(reason)?,
            );
        }
        if !message_id.is_empty()
            && payload + attribute_size(ORIGINAL_MESSAGE_ID_ATTRIBUTE, &message_id)
                <= MAX_BODY_BYTES
        {
            payload += attribute_size(ORIGINAL_MESSAGE_ID_ATTRIBUTE, &message_id);
            attributes.insert(
                ORIGINAL_MESSAGE_ID_ATTRIBUTE.to_owned(),
                string_attribute(message_id)?,
            );
        }
        shared
            .bus
            .client
            .send_message()
            .queue_url(&dlq_url)
            .message_body(body)
            .set_message_attributes(Some(attributes))
            .send()
            .await
            .map_err(|e| shared.bus.map_err("SendMessage", &dlq, e))?;
        shared.bus.counter.payload("SendMessage", payload);
        drop(guard);
        // If this delete fails the message comes back and is dead-lettered again: a duplicate
        // in the DLQ, never a loss.
        shared.deleter.submit(receipt).await
    }
}

fn string_attribute(value: String) -> Result<MessageAttributeValue, BusError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(build_error)
}

/// `reason` with characters SQS rejects replaced, cut to at most `room` bytes.
fn fit_reason(reason: &str, room: usize) -> String {
    let mut out = String::with_capacity(reason.len().min(room));
    for c in reason.chars() {
        let c = if sqs_allows(c) {
            c
        } else {
            char::REPLACEMENT_CHARACTER
        };
        if out.len() + c.len_utf8() > room {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn reasons_are_cleaned_and_cut() {
        assert_eq!(fit_reason("bad\u{0}json", 100), "bad\u{FFFD}json");
        assert_eq!(fit_reason("ééé", 5), "éé");
        assert_eq!(fit_reason("x", 0), "");
    }
}
