//! Batch calls' answers and `ChangeMessageVisibilityBatch`, shared by the receiver (releases,
//! acknowledgements), the heartbeat (extensions) and the redrive (giving dead letters back).

use aws_sdk_sqs::types::{BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry};

use super::batcher::EntryOutcome;
use super::client::BusInner;
use super::error::classify_code;
use crate::BusError;

/// Sets the visibility of up to ten messages of `queue` to `secs` from now.
pub(crate) async fn change_visibility(
    bus: &BusInner,
    queue: &str,
    url: &str,
    receipts: &[&str],
    secs: i32,
) -> Result<Vec<EntryOutcome>, BusError> {
    let entries = receipts
        .iter()
        .enumerate()
        .map(|(i, r)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(*r)
                .visibility_timeout(secs)
                .build()
                .map_err(build_error)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = bus
        .client
        .change_message_visibility_batch()
        .queue_url(url)
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(|e| bus.map_err("ChangeMessageVisibilityBatch", queue, e))?;
    let done: Vec<&str> = out.successful().iter().map(|s| s.id()).collect();
    Ok(outcomes(
        receipts.len(),
        &done,
        out.failed(),
        "ChangeMessageVisibilityBatch",
        queue,
    ))
}

/// The outcome of each of `n` entries (ids `"0"`…) from a batch call's answer.
pub(crate) fn outcomes(
    n: usize,
    successful: &[&str],
    failed: &[BatchResultErrorEntry],
    operation: &str,
    queue: &str,
) -> Vec<EntryOutcome> {
    (0..n)
        .map(|i| {
            let id = i.to_string();
            if successful.contains(&id.as_str()) {
                return EntryOutcome::Done;
            }
            match failed.iter().find(|f| f.id() == id) {
                Some(f) => {
                    let err = classify_code(
                        &format!("{operation} on queue {queue:?}"),
                        queue,
                        Some(f.code()),
                        f.message(),
                        None,
                        None,
                    );
                    if f.sender_fault() && !err.is_retryable() {
                        EntryOutcome::Failed(err)
                    } else {
                        EntryOutcome::Retry(err)
                    }
                }
                None => EntryOutcome::Retry(BusError::unavailable(format!(
                    "{operation} on queue {queue:?}: no result for an entry"
                ))),
            }
        })
        .collect()
}

/// A batch entry the SDK could not build, as a [`BusError`].
pub(crate) fn build_error(e: aws_smithy_types::error::operation::BuildError) -> BusError {
    BusError::Rejected {
        message: format!("could not build a batch entry: {e}"),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn batch_answers_map_per_entry() {
        let failed = vec![
            BatchResultErrorEntry::builder()
                .id("1")
                .sender_fault(true)
                .code("ReceiptHandleIsInvalid")
                .build()
                .unwrap(),
            BatchResultErrorEntry::builder()
                .id("2")
                .sender_fault(false)
                .code("InternalError")
                .build()
                .unwrap(),
        ];
        let out = outcomes(4, &["0"], &failed, "DeleteMessageBatch", "q");
        assert!(matches!(out[0], EntryOutcome::Done));
        assert!(matches!(out[1], EntryOutcome::Failed(_)));
        assert!(matches!(out[2], EntryOutcome::Retry(_)));
        assert!(matches!(out[3], EntryOutcome::Retry(_)));
    }
}
