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
//! - `config.rs`: [`SqsConfig`].
//! - `sender.rs`: [`SqsSender`], body checks and batch packing.
//! - `receiver.rs`: [`SqsReceiver`] and the acknowledger of its deliveries.
//! - `redrive.rs`: dead letters back to their queue (receive, send, then delete).
//! - `batcher.rs`: the background batcher for acknowledgements and releases.
//! - `heartbeat.rs`: the visibility heartbeat.
//! - `counter.rs`: [`RequestCounts`] and the SDK interceptor that fills them.
//! - `error.rs`: SDK errors to [`BusError`].

mod batcher;
mod config;
mod counter;
mod error;
mod heartbeat;
mod receiver;
mod redrive;
mod sender;

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use aws_smithy_runtime_api::client::result::CreateUnhandledError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::timeout::TimeoutConfig;

pub use config::{SqsConfig, MAX_RETENTION, MAX_VISIBILITY_TIMEOUT, MAX_WAIT_TIME};
pub use counter::{OperationCount, RequestCounts, BILLING_CHUNK_BYTES};
pub use receiver::{SqsReceiver, DEAD_LETTER_REASON_ATTRIBUTE, ORIGINAL_MESSAGE_ID_ATTRIBUTE};
pub use sender::{SqsSender, MAX_BATCH_BYTES};

use crate::{dead_letter_queue_name, Bus, BusError, Receiver, Sender};
use counter::{CountingInterceptor, RequestCounter};

/// Connect timeout of every request (the SDK's own default).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);
/// SQS's longest queue name.
const MAX_QUEUE_NAME: usize = 80;

/// A bus on Amazon SQS (or any server speaking its API). Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqsBus {
    inner: Arc<BusInner>,
}

/// What the bus, its senders and receivers share.
#[derive(Debug)]
pub(crate) struct BusInner {
    pub(crate) client: Client,
    pub(crate) config: SqsConfig,
    pub(crate) counter: Arc<RequestCounter>,
    urls: Mutex<HashMap<String, String>>,
    /// Releases of deliveries dropped unsettled, under way; [`Bus::close`] waits for them.
    pub(crate) abandoned: tokio_util::task::TaskTracker,
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
            inner: Arc::new(BusInner {
                client: Client::from_conf(client_config),
                config,
                counter,
                urls: Mutex::new(HashMap::new()),
                abandoned: tokio_util::task::TaskTracker::new(),
            }),
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
    async fn queue_drift(&self, queue: &str) -> Result<Vec<String>, BusError> {
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

    async fn update_queue(&self, queue: &str) -> Result<(), BusError> {
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

    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        Ok(Arc::new(self.sqs_sender(queue).await?))
    }

    /// One batch (at most ten) per call: received from the dead-letter queue, sent to the
    /// queue, then deleted (see `redrive.rs`).
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        redrive::redrive(&self.inner, queue, max).await
    }

    /// `ApproximateNumberOfMessages` of the dead-letter queue.
    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        self.inner.queue_url(queue).await?;
        let dlq = dead_letter_queue_name(queue);
        let url = self.inner.queue_url(&dlq).await?;
        let [waiting, _] = self.inner.counts(&dlq, &url).await?;
        Ok(waiting)
    }

    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        Ok(Arc::new(self.sqs_receiver(queue).await?))
    }

    /// Creates the dead-letter queue (retention 14 days), then the queue with the configured
    /// visibility timeout, retention, long-poll wait (`ReceiveMessageWaitTimeSeconds`) and a
    /// redrive policy (`maxReceiveCount` = `max_receives`) to it. An existing queue is left as it is, except that one without a
    /// redrive policy gets this one: without it a poison message would cycle forever.
    /// Waits for the releases of deliveries dropped unsettled (see
    /// [`Acknowledger::abandoned`](crate::Acknowledger::abandoned)).
    async fn close(&self) -> Result<(), BusError> {
        let tracker = &self.inner.abandoned;
        tracker.close();
        tracker.wait().await;
        tracker.reopen();
        Ok(())
    }

    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
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

impl BusInner {
    /// The redrive policy of queues this bus creates: to the dead-letter queue `dlq` (at
    /// `dlq_url`) after `max_receives` receives.
    async fn redrive_policy(&self, dlq: &str, dlq_url: &str) -> Result<String, BusError> {
        let arn = self
            .client
            .get_queue_attributes()
            .queue_url(dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| self.map_err("GetQueueAttributes", dlq, e))?
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .cloned()
            .ok_or_else(|| BusError::unavailable(format!("SQS gave no ARN for queue {dlq:?}")))?;
        // ARNs hold only letters, digits and `:-_.`, so no JSON escaping is needed.
        Ok(format!(
            r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{}"}}"#,
            self.config.max_receives
        ))
    }

    /// The URL of queue `name`, from the cache or `GetQueueUrl`.
    pub(crate) async fn queue_url(&self, name: &str) -> Result<String, BusError> {
        if let Some(url) = self.cached_url(name) {
            return Ok(url);
        }
        if check_queue_name(name).is_err() {
            return Err(BusError::QueueNotFound(name.to_owned()));
        }
        let out = self
            .client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| self.map_err("GetQueueUrl", name, e))?;
        let url = out
            .queue_url()
            .ok_or_else(|| BusError::unavailable(format!("SQS gave no URL for queue {name:?}")))?
            .to_owned();
        self.cache_url(name, &url);
        Ok(url)
    }

    fn cached_url(&self, name: &str) -> Option<String> {
        self.urls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn cache_url(&self, name: &str, url: &str) {
        self.urls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), url.to_owned());
    }

    /// Creates queue `name` with `attributes`, or finds it if it exists (with any attributes).
    async fn create_or_get(
        &self,
        name: &str,
        attributes: HashMap<QueueAttributeName, String>,
    ) -> Result<String, BusError> {
        let result = self
            .client
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(attributes))
            .send()
            .await;
        match result {
            Ok(out) => {
                let url = out.queue_url().ok_or_else(|| {
                    BusError::unavailable(format!("SQS gave no URL for new queue {name:?}"))
                })?;
                self.cache_url(name, url);
                Ok(url.to_owned())
            }
            Err(e)
                if e.as_service_error()
                    .and_then(|s| s.code())
                    .is_some_and(|c| {
                        matches!(
                            c,
                            "QueueAlreadyExists"
                                | "AWS.SimpleQueueService.QueueNameExists"
                                | "QueueNameExists"
                        )
                    }) =>
            {
                tracing::info!(
                    queue = name,
                    "queue exists with other attributes; leaving them"
                );
                self.queue_url(name).await
            }
            Err(e) => Err(self.map_err("CreateQueue", name, e)),
        }
    }

    /// Maps an SDK error of a quick request.
    pub(crate) fn map_err<E>(
        &self,
        operation: &str,
        queue: &str,
        err: SdkError<E, HttpResponse>,
    ) -> BusError
    where
        E: ProvideErrorMetadata + CreateUnhandledError + StdError + Send + Sync + 'static,
    {
        self.map_err_timeout(operation, queue, self.config.request_timeout, err)
    }

    /// Maps an SDK error of a request whose attempt timeout was `timeout`.
    pub(crate) fn map_err_timeout<E>(
        &self,
        operation: &str,
        queue: &str,
        timeout: Duration,
        err: SdkError<E, HttpResponse>,
    ) -> BusError
    where
        E: ProvideErrorMetadata + CreateUnhandledError + StdError + Send + Sync + 'static,
    {
        error::map_sdk_error(operation, queue, timeout, err)
    }
}

/// Checks `name` against SQS's rules for (standard) queue names.
fn check_queue_name(name: &str) -> Result<(), BusError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_QUEUE_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(BusError::Rejected {
            message: format!(
                "{name:?} is not a valid SQS queue name (1 to {MAX_QUEUE_NAME} letters, digits, \
                 '-' or '_'; a queue's name plus \"_dead_letter\" must fit too)"
            ),
            source: None,
        })
    }
}
