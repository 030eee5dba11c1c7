//! [`BusInner`]: what an [`SqsBus`](super::SqsBus), its senders, receivers and their tasks
//! share: the SDK client, the settings, the request counter and the cache of queue URLs;
//! SDK errors mapped for the queue they concern.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use aws_smithy_runtime_api::client::result::CreateUnhandledError;
use aws_smithy_runtime_api::http::Response as HttpResponse;

use super::config::SqsConfig;
use super::counter::RequestCounter;
use super::error;
use crate::BusError;

/// Connect timeout of every request (the SDK's own default).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);
/// SQS's longest queue name.
const MAX_QUEUE_NAME: usize = 80;

/// What the bus, its senders and receivers share.
#[derive(Debug)]
pub(crate) struct BusInner {
    pub(crate) client: Client,
    pub(crate) config: SqsConfig,
    pub(crate) counter: Arc<RequestCounter>,
    urls: Mutex<HashMap<String, String>>,
    /// Releases of deliveries dropped unsettled, under way; [`Bus::close`](crate::Bus::close) waits for them.
    pub(crate) abandoned: tokio_util::task::TaskTracker,
}

impl BusInner {
    /// What a new bus shares, with no queue URL known yet.
    pub(crate) fn new(client: Client, config: SqsConfig, counter: Arc<RequestCounter>) -> Self {
        BusInner {
            client,
            config,
            counter,
            urls: Mutex::new(HashMap::new()),
            abandoned: tokio_util::task::TaskTracker::new(),
        }
    }

    /// The redrive policy of queues this bus creates: to the dead-letter queue `dlq` (at
    /// `dlq_url`) after `max_receives` receives.
    pub(crate) async fn redrive_policy(
        &self,
        dlq: &str,
        dlq_url: &str,
    ) -> Result<String, BusError> {
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
    pub(crate) async fn create_or_get(
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
pub(crate) fn check_queue_name(name: &str) -> Result<(), BusError> {
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
