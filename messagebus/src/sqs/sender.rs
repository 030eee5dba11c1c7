//! [`SqsSender`]: checks bodies before any request, packs them into `SendMessageBatch` calls
//! (ten messages and 1 MiB at most each), and retries the entries SQS failed for a passing
//! reason.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{
    MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};

use super::batcher::MAX_BATCH;
use super::client::BusInner;
use super::error::classify_code;
use super::message::{redrive_reason, sqs_allows, DEAD_LETTER_REASON_ATTRIBUTE};
use crate::{dead_letter_queue_name, BusError, DeadLetter, QueueStats, Sender, MAX_BODY_BYTES};

/// SQS's limit on the whole of one `SendMessageBatch` (bodies and attributes): 1 MiB.
pub const MAX_BATCH_BYTES: usize = MAX_BODY_BYTES;
/// Tries per message that SQS failed for a passing reason (`SenderFault: false`).
const MAX_ENTRY_ATTEMPTS: u32 = 3;
/// Pause before retrying such messages, times the attempt number.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Publishes to one SQS queue. From [`SqsBus::sender`](crate::Bus::sender).
///
/// Costs: one `SendMessageBatch` request per ten messages (fewer when bodies are large: a batch
/// holds 1 MiB), plus one more billed request per further 64 KiB of each batch.
#[derive(Debug, Clone)]
pub struct SqsSender {
    bus: Arc<BusInner>,
    queue: String,
    url: String,
}

impl SqsSender {
    pub(crate) fn new(bus: Arc<BusInner>, queue: String, url: String) -> Self {
        SqsSender { bus, queue, url }
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends one batch: every entry, retrying those failed for a passing reason.
    async fn send_one_batch(&self, bodies: &[&str], first_index: usize) -> Result<(), BusError> {
        let mut pending: Vec<usize> = (0..bodies.len()).collect();
        let mut attempt = 0;
        loop {
            let entries = pending
                .iter()
                .map(|&i| {
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
            let payload: usize = pending.iter().map(|&i| bodies[i].len()).sum();
            let out = self
                .bus
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.bus.map_err("SendMessageBatch", &self.queue, e))?;
            self.bus.counter.payload("SendMessageBatch", payload);
            let mut retry = Vec::new();
            let mut last_err = None;
            for failed in out.failed() {
                let Ok(i) = failed.id().parse::<usize>() else {
                    continue;
                };
                let err = classify_code(
                    &format!(
                        "SendMessageBatch on queue {:?}, message {}",
                        self.queue,
                        first_index + i
                    ),
                    &self.queue,
                    Some(failed.code()),
                    failed.message(),
                    None,
                    None,
                );
                if failed.sender_fault() {
                    return Err(err);
                }
                retry.push(i);
                last_err = Some(err);
            }
            // An entry in neither list has an unknown fate; sending it again risks only a
            // duplicate, which SQS standard queues allow anyway.
            let answered: Vec<usize> = out
                .successful()
                .iter()
                .filter_map(|s| s.id().parse().ok())
                .chain(out.failed().iter().filter_map(|f| f.id().parse().ok()))
                .collect();
            retry.extend(pending.iter().copied().filter(|i| !answered.contains(i)));
            if retry.is_empty() {
                return Ok(());
            }
            attempt += 1;
            if attempt >= MAX_ENTRY_ATTEMPTS {
                return Err(last_err.unwrap_or_else(|| {
                    BusError::unavailable(format!(
                        "SendMessageBatch on queue {:?}: {} messages not accepted after {attempt} tries",
                        self.queue,
                        retry.len()
                    ))
                }));
            }
            tracing::debug!(queue = %self.queue, count = retry.len(), attempt, "retrying messages of a batch");
            tokio::time::sleep(RETRY_BACKOFF * attempt).await;
            pending = retry;
        }
    }
}

#[async_trait]
impl Sender for SqsSender {
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        let texts = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| check_body(i, b))
            .collect::<Result<Vec<&str>, _>>()?;
        for (start, end) in pack(&texts) {
            self.send_one_batch(&texts[start..end], start).await?;
        }
        Ok(())
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        let [waiting, in_flight] = self.bus.counts(&self.queue, &self.url).await?;
        let dlq = dead_letter_queue_name(&self.queue);
        let dead_letters = match self.bus.queue_url(&dlq).await {
            Ok(url) => {
                let [w, f] = self.bus.counts(&dlq, &url).await?;
                w + f
            }
            Err(BusError::QueueNotFound(_)) => 0,
            Err(e) => return Err(e),
        };
        Ok(QueueStats {
            waiting,
            in_flight,
            consumers: None,
            dead_letters,
        })
    }

    async fn peek_dead_letters(
        &self,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        if limit == 0 {
            return Ok(Some(Vec::new()));
        }
        let dlq = dead_letter_queue_name(&self.queue);
        let url = match self.bus.queue_url(&dlq).await {
            Ok(url) => url,
            Err(BusError::QueueNotFound(_)) => return Ok(Some(Vec::new())),
            Err(e) => return Err(e),
        };
        // SQS cannot look without receiving. A visibility timeout of zero leaves every message
        // visible to other receivers at once; nothing needs releasing, and the receive count
        // it adds is never acted on (a dead-letter queue has no redrive policy of its own).
        let out = self
            .bus
            .client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(i32::try_from(limit.min(10)).unwrap_or(10))
            .wait_time_seconds(0)
            .visibility_timeout(0)
            .message_system_attribute_names(MessageSystemAttributeName::DeadLetterQueueSourceArn)
            .message_attribute_names(DEAD_LETTER_REASON_ATTRIBUTE)
            .send()
            .await
            .map_err(|e| self.bus.map_err("ReceiveMessage", &dlq, e))?;
        let mut payload = 0;
        let letters = out
            .messages()
            .iter()
            .map(|m| {
                let body = m.body().unwrap_or_default().to_owned();
                payload += body.len();
                let reason = m
                    .message_attributes()
                    .and_then(|a| a.get(DEAD_LETTER_REASON_ATTRIBUTE))
                    .and_then(|v| v.string_value())
                    .map_or_else(
                        || {
                            let source = m.attributes().and_then(|a| {
                                a.get(&MessageSystemAttributeName::DeadLetterQueueSourceArn)
                            });
                            redrive_reason(self.bus.config.max_receives, source.map(String::as_str))
                        },
                        str::to_owned,
                    );
                DeadLetter::cut(
                    m.message_id().unwrap_or_default().to_owned(),
                    body.into_bytes(),
                    max_body_bytes,
                    Some(reason),
                )
            })
            .collect();
        self.bus.counter.payload("ReceiveMessage", payload);
        Ok(Some(letters))
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}

impl BusInner {
    /// `ApproximateNumberOfMessages` and `ApproximateNumberOfMessagesNotVisible` of a queue.
    pub(crate) async fn counts(&self, queue: &str, url: &str) -> Result<[u64; 2], BusError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| self.map_err("GetQueueAttributes", queue, e))?;
        let get = |name: &QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok([
            get(&QueueAttributeName::ApproximateNumberOfMessages),
            get(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        ])
    }
}

/// Checks that SQS can carry `body` (message number `index`) and returns it as text.
pub(crate) fn check_body(index: usize, body: &[u8]) -> Result<&str, BusError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(BusError::BodyTooLarge {
            size: body.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        BusError::InvalidBody(format!(
            "message {index} is not valid UTF-8 (at byte {}); SQS carries text only",
            e.valid_up_to()
        ))
    })?;
    if text.is_empty() {
        return Err(BusError::InvalidBody(format!(
            "message {index} is empty; SQS needs at least one character"
        )));
    }
    if let Some((at, c)) = text.char_indices().find(|&(_, c)| !sqs_allows(c)) {
        return Err(BusError::InvalidBody(format!(
            "message {index} has the character U+{:04X} at byte {at}, which SQS rejects",
            u32::from(c)
        )));
    }
    Ok(text)
}

/// Splits `texts` into runs `[start, end)` of at most ten messages and 1 MiB each, in order.
pub(crate) fn pack(texts: &[&str]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, t) in texts.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH || bytes + t.len() > MAX_BATCH_BYTES) {
            runs.push((start, i));
            start = i;
            bytes = 0;
        }
        bytes += t.len();
    }
    if start < texts.len() {
        runs.push((start, texts.len()));
    }
    runs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn bodies_are_checked() {
        assert_eq!(check_body(0, b"{\"a\":1}\n").unwrap(), "{\"a\":1}\n");
        assert!(matches!(
            check_body(0, &vec![b'a'; MAX_BODY_BYTES + 1]),
            Err(BusError::BodyTooLarge { size, limit }) if size == MAX_BODY_BYTES + 1 && limit == MAX_BODY_BYTES
        ));
        assert!(check_body(0, &vec![b'a'; MAX_BODY_BYTES]).is_ok());
        assert!(
            matches!(check_body(3, &[0xff, 0xfe]), Err(BusError::InvalidBody(m)) if m.contains("message 3"))
        );
        assert!(
            matches!(check_body(0, b"a\x00b"), Err(BusError::InvalidBody(m)) if m.contains("U+0000"))
        );
        assert!(matches!(
            check_body(0, "\u{FFFF}".as_bytes()),
            Err(BusError::InvalidBody(_))
        ));
        assert!(matches!(check_body(0, b""), Err(BusError::InvalidBody(_))));
        assert!(check_body(0, "é😀\t".as_bytes()).is_ok());
    }

    #[test]
    fn packing_respects_count_and_size() {
        let small: Vec<&str> = vec!["x"; 25];
        assert_eq!(pack(&small), vec![(0, 10), (10, 20), (20, 25)]);
        let big = "y".repeat(400 * 1024);
        let mixed: Vec<&str> = vec![&big, &big, &big, "z", &big, &big];
        assert_eq!(pack(&mixed), vec![(0, 2), (2, 5), (5, 6)]);
        assert!(pack(&[]).is_empty());
    }
}
