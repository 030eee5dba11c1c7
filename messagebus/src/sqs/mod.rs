//! The Amazon SQS adapter (feature `sqs`), on `aws-sdk-sqs`.
//!
//! [`SqsBus`] is configured the way the AWS SDK is everywhere: region, credentials and
//! `AWS_ENDPOINT_URL` from the SDK's default chain ([`SqsBus::from_env`]), or from an
//! [`aws_config::SdkConfig`] you built ([`SqsBus::from_sdk_config`]); the adapter's own
//! settings are an [`SqsConfig`]. Queue names are resolved to URLs once and cached.
//!
//! What it does against SQS's usual traps:
//! - long polls (20 s by default) so empty receives are rare, with SDK timeouts set above the
//!   poll so a receive never hangs and is never cut short;
//! - ten messages per `ReceiveMessage`, `SendMessageBatch` and `DeleteMessageBatch`, the
//!   acknowledgements coalesced by a background batcher, failed entries of a batch handled one
//!   by one;
//! - a visibility heartbeat for messages held longer than their visibility timeout;
//! - a dead-letter queue with a redrive policy on every queue [`Bus::create_queue`] makes,
//!   and [`Delivery::dead_letter`](crate::Delivery::dead_letter) with the reason attached;
//! - bodies checked (size, UTF-8, characters SQS rejects) before any request;
//! - a request counter ([`SqsBus::request_counts`]) that bills as SQS does.
//!
//! # Layout
//!
//! Each file uses only those below it in this list (`mod.rs` all of them):
//!
//! - `redrive.rs`: dead letters back to their queue (receive, send, then delete).
//! - `receiver.rs`: [`SqsReceiver`] and the acknowledger of its deliveries.
//! - `heartbeat.rs`: the visibility heartbeat, one per receiver.
//! - `sender.rs`: [`SqsSender`], body checks and batch packing.
//! - `visibility.rs`: `ChangeMessageVisibilityBatch` and batch calls' answers, for the
//!   receiver, the heartbeat and the redrive.
//! - `batcher.rs`: the background batcher for acknowledgements and releases.
//! - `message.rs`: what a message carries (the dead-letter reason and original id
//!   attributes, the characters SQS accepts).
//! - `client.rs`: what the bus, its senders and receivers share: the SDK client, the
//!   settings, the queue URLs.
//! - `config.rs`: [`SqsConfig`].
//! - `counter.rs`: [`RequestCounts`] and the SDK interceptor that fills them.
//! - `error.rs`: SDK errors to [`BusError`].
//!
//! Every call returns within [`SqsConfig::call_deadline`] (a receive: its wait plus it), on
//! top of the SDK's own timeouts (see [`crate::DEFAULT_CALL_DEADLINE`]).

mod batcher;
mod client;
mod config;
mod counter;
mod error;
mod heartbeat;
mod message;
mod receiver;
mod redrive;
mod sender;
mod visibility;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use aws_smithy_types::timeout::TimeoutConfig;

pub use config::{SqsConfig, MAX_RETENTION, MAX_VISIBILITY_TIMEOUT, MAX_WAIT_TIME};
pub use counter::{OperationCount, RequestCounts, BILLING_CHUNK_BYTES};
pub use message::{DEAD_LETTER_REASON_ATTRIBUTE, ORIGINAL_MESSAGE_ID_ATTRIBUTE};
pub use receiver::SqsReceiver;
pub use sender::{SqsSender, MAX_BATCH_BYTES};

use crate::deadline::{within, DeadlineReceiver, DeadlineSender};
use crate::{dead_letter_queue_name, Bus, BusError, Receiver, Sender};
use client::{check_queue_name, BusInner, CONNECT_TIMEOUT};
use counter::{CountingInterceptor, RequestCounter};

/// A bus on Amazon SQS (or any server speaking its API). Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqsBus {
    inner: Arc<BusInner>,
}

impl SqsBus {
    /// A bus configured from the environment as every AWS SDK is: `AWS_REGION`, the
    /// credentials chain (environment, profile, SSO, container and instance roles),
    /// `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_SQS` for an SQS-compatible server.
    pub async fn from_env(config: SqsConfig) -> Result<SqsBus, BusError> {
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        SqsBus::from_sdk_config(&sdk, config)
    }

    /// A bus on an SDK configuration you loaded yourself. Its timeouts are replaced by ones
    /// derived from `config` (see [`SqsConfig::request_timeout`]).
    pub fn from_sdk_config(sdk: &SdkConfig, config: SqsConfig) -> Result<SqsBus, BusError> {
        config.validate()?;
        if sdk.region().is_none() {
            return Err(BusError::Rejected {
                message: "no AWS region configured for SQS: set AWS_REGION (or a profile's region)"
                    .to_owned(),
                source: None,
            });
        }
        let counter = Arc::new(RequestCounter::default());
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(config.request_timeout)
            .operation_attempt_timeout(config.request_timeout)
            .operation_timeout(config.request_timeout * 3 + Duration::from_secs(5))
            .build();
        let client_config = aws_sdk_sqs::config::Builder::from(sdk)
            .timeout_config(timeouts)
            .interceptor(CountingInterceptor {
                counter: counter.clone(),
            })
            .build();
        Ok(SqsBus {
            inner: Arc::new(BusInner::new(
                Client::from_conf(client_config),
                config,
                counter,
            )),
        })
    }

    /// The adapter's settings.
    pub fn config(&self) -> &SqsConfig {
        &self.inner.config
    }

    /// Requests this bus has made so far, by operation, as SQS bills them.
    pub fn request_counts(&self) -> RequestCounts {
        self.inner.counter.snapshot()
    }

    /// A sender for `queue`, as its concrete type.
    pub async fn sqs_sender(&self, queue: &str) -> Result<SqsSender, BusError> {
        let url = self.inner.queue_url(queue).await?;
        Ok(SqsSender::new(self.inner.clone(), queue.to_owned(), url))
    }

    /// A receiver for `queue`, as its concrete type. Starts its background tasks (batchers and
    /// heartbeat) on the current Tokio runtime; they end when it and its deliveries are gone.
    pub async fn sqs_receiver(&self, queue: &str) -> Result<SqsReceiver, BusError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BusError::Rejected {
            message: "an SQS receiver runs background tasks and needs a Tokio runtime".to_owned(),
            source: None,
        })?;
        let url = self.inner.queue_url(queue).await?;
        Ok(SqsReceiver::new(
            &runtime,
            self.inner.clone(),
            queue.to_owned(),
            url,
        ))
    }
}

#[async_trait]
impl Bus for SqsBus {
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        within(self.inner.config.call_deadline, self.sender_now(queue)).await
    }

    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        within(self.inner.config.call_deadline, self.receiver_now(queue)).await
    }

    /// Creates the dead-letter queue (retention 14 days), then the queue with the configured
    /// visibility timeout, retention, long-poll wait (`ReceiveMessageWaitTimeSeconds`) and a
    /// redrive policy (`maxReceiveCount` = `max_receives`) to it. An existing queue is left
    /// as it is, except that one without a redrive policy gets this one: without it a poison
    /// message would cycle forever.
    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
        within(
            self.inner.config.call_deadline,
            self.create_queue_now(queue),
        )
        .await
    }

    async fn queue_drift(&self, queue: &str) -> Result<Vec<String>, BusError> {
        within(self.inner.config.call_deadline, self.queue_drift_now(queue)).await
    }

    async fn update_queue(&self, queue: &str) -> Result<(), BusError> {
        within(
            self.inner.config.call_deadline,
            self.update_queue_now(queue),
        )
        .await
    }

    /// One batch (at most ten) per call: received from the dead-letter queue, sent to the
    /// queue, then deleted (see `redrive.rs`).
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        within(
            self.inner.config.call_deadline,
            self.redrive_now(queue, max),
        )
        .await
    }

    /// `ApproximateNumberOfMessages` of the dead-letter queue.
    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        within(self.inner.config.call_deadline, self.redrivable_now(queue)).await
    }

    /// Waits for the releases of deliveries dropped unsettled (see
    /// [`Acknowledger::abandoned`](crate::Acknowledger::abandoned)).
    async fn close(&self) -> Result<(), BusError> {
        within(self.inner.config.call_deadline, self.close_now()).await
    }
}

/// The [`Bus`] calls, without the deadline [`Bus`]'s methods put on them.
impl SqsBus {
    async fn queue_drift_now(&self, queue: &str) -> Result<Vec<String>, BusError> {
        let inner = &self.inner;
        let url = inner.queue_url(queue).await?;
        let out = inner
            .client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .attribute_names(QueueAttributeName::MessageRetentionPeriod)
            .send()
            .await
            .map_err(|e| inner.map_err("GetQueueAttributes", queue, e))?;
        let attributes = out.attributes();
        let mut drift = Vec::new();
        let want = inner.config.max_receives;
        let have = attributes
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
            .and_then(|p| match &p["maxReceiveCount"] {
                serde_json::Value::Number(n) => n.as_u64(),
                serde_json::Value::String(s) => s.parse().ok(),
                _ => None,
            });
        match have {
            Some(n) if n == u64::from(want) => {}
            Some(n) => drift.push(format!(
                "its maxReceiveCount is {n}, ARCHIVIST_MAX_RECEIVES is {want}"
            )),
            None => drift.push("it has no redrive policy".to_string()),
        }
        let retention = inner.config.message_retention.as_secs();
        if let Some(r) = attributes
            .and_then(|a| a.get(&QueueAttributeName::MessageRetentionPeriod))
            .and_then(|r| r.parse::<u64>().ok())
            .filter(|r| *r != retention)
        {
            drift.push(format!(
                "it keeps messages {} days, not {}",
                r / 86_400,
                retention / 86_400
            ));
        }
        Ok(drift)
    }

    async fn update_queue_now(&self, queue: &str) -> Result<(), BusError> {
        let inner = &self.inner;
        let url = inner.queue_url(queue).await?;
        let dlq = dead_letter_queue_name(queue);
        let dlq_url = inner.queue_url(&dlq).await?;
        let redrive = inner.redrive_policy(&dlq, &dlq_url).await?;
        inner
            .client
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(QueueAttributeName::RedrivePolicy, redrive)
            .attributes(
                QueueAttributeName::MessageRetentionPeriod,
                inner.config.message_retention.as_secs().to_string(),
            )
            .send()
            .await
            .map_err(|e| inner.map_err("SetQueueAttributes", queue, e))?;
        Ok(())
    }

    async fn sender_now(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        let sender = Arc::new(self.sqs_sender(queue).await?);
        Ok(DeadlineSender::wrap(
            sender,
            self.inner.config.call_deadline,
        ))
    }

    async fn redrive_now(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        redrive::redrive(&self.inner, queue, max).await
    }

    async fn redrivable_now(&self, queue: &str) -> Result<u64, BusError> {
        self.inner.queue_url(queue).await?;
        let dlq = dead_letter_queue_name(queue);
        let url = self.inner.queue_url(&dlq).await?;
        let [waiting, _] = self.inner.counts(&dlq, &url).await?;
        Ok(waiting)
    }

    async fn receiver_now(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        let receiver = Arc::new(self.sqs_receiver(queue).await?);
        Ok(DeadlineReceiver::wrap(
            receiver,
            self.inner.config.call_deadline,
        ))
    }

    async fn close_now(&self) -> Result<(), BusError> {
        let tracker = &self.inner.abandoned;
        tracker.close();
        tracker.wait().await;
        tracker.reopen();
        Ok(())
    }

    async fn create_queue_now(&self, queue: &str) -> Result<(), BusError> {
        let inner = &self.inner;
        let dlq = dead_letter_queue_name(queue);
        check_queue_name(&dlq)?;
        let retention = |d: Duration| d.as_secs().to_string();
        let dlq_url = inner
            .create_or_get(
                &dlq,
                HashMap::from([(
                    QueueAttributeName::MessageRetentionPeriod,
                    retention(MAX_RETENTION),
                )]),
            )
            .await?;
        let redrive = inner.redrive_policy(&dlq, &dlq_url).await?;
        let url = inner
            .create_or_get(
                queue,
                HashMap::from([
                    (
                        QueueAttributeName::VisibilityTimeout,
                        inner.config.visibility_secs().to_string(),
                    ),
                    (
                        QueueAttributeName::MessageRetentionPeriod,
                        retention(inner.config.message_retention),
                    ),
                    (QueueAttributeName::RedrivePolicy, redrive.clone()),
                    // Other clients of the queue (researchers) long-poll by default too.
                    (
                        QueueAttributeName::ReceiveMessageWaitTimeSeconds,
                        config::secs_ceil(inner.config.wait_time).to_string(),
                    ),
                ]),
            )
            .await?;
        let has_redrive = inner
            .client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .map_err(|e| inner.map_err("GetQueueAttributes", queue, e))?
            .attributes()
            .is_some_and(|a| a.contains_key(&QueueAttributeName::RedrivePolicy));
        if !has_redrive {
            tracing::info!(
                queue,
                "queue had no redrive policy; adding one to its dead-letter queue"
            );
            inner
                .client
                .set_queue_attributes()
                .queue_url(&url)
                .attributes(QueueAttributeName::RedrivePolicy, redrive)
                .send()
                .await
                .map_err(|e| inner.map_err("SetQueueAttributes", queue, e))?;
        }
        Ok(())
    }
}
