//! Mapping of AWS SDK errors and per-entry batch failures to [`BusError`].
//!
//! The SDK has already retried what its retry classifier calls transient (throttling, 5xx,
//! timeouts, connection errors) by the time an error reaches us; what is left is sorted by the
//! same classes: passing trouble becomes [`BusError::Unavailable`] / [`BusError::Timeout`]
//! (retryable), lasting refusals [`BusError::Rejected`]. Messages carry the error code and the
//! service's message, never request headers, so credentials cannot leak into them.

use std::error::Error as StdError;
use std::time::Duration;

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::result::CreateUnhandledError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::error::display::DisplayErrorContext;

use crate::BusError;

/// Codes SQS (and AWS generally) answers for passing trouble. Mirrors the SDK's
/// `AwsErrorCodeClassifier` lists, which are not public API.
const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "KmsThrottled",
    "KMS.ThrottlingException",
    "AWS.SimpleQueueService.ServiceUnavailable",
    // Too many messages in flight (120,000 on a standard queue): passes as they are settled.
    "OverLimit",
    "AWS.SimpleQueueService.OverLimit",
    // A queue of that name was deleted under 60 s ago.
    "QueueDeletedRecently",
    "AWS.SimpleQueueService.QueueDeletedRecently",
];

/// Codes meaning the queue is not there.
const MISSING_QUEUE_CODES: &[&str] = &[
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
];

/// Codes meaning the message content was refused.
const INVALID_BODY_CODES: &[&str] = &["InvalidMessageContents", "MessageTooLong"];

/// Maps an SDK error of `operation` on `queue` to a [`BusError`].
pub(crate) fn map_sdk_error<E>(
    operation: &str,
    queue: &str,
    timeout: Duration,
    err: SdkError<E, HttpResponse>,
) -> BusError
where
    E: ProvideErrorMetadata + CreateUnhandledError + StdError + Send + Sync + 'static,
{
    let context = format!("{operation} on queue {queue:?}");
    match err {
        SdkError::TimeoutError(_) => BusError::Timeout(timeout),
        SdkError::DispatchFailure(ref failure) if failure.is_user() => BusError::Rejected {
            message: format!("{context}: {}", DisplayErrorContext(&err)),
            source: Some(Box::new(err)),
        },
        SdkError::DispatchFailure(ref failure) if failure.is_timeout() => {
            BusError::Timeout(timeout)
        }
        SdkError::DispatchFailure(_) if credentials_missing(&err) => BusError::Rejected {
            message: format!(
                "{context}: no usable AWS credentials (set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run with a role): {}",
                DisplayErrorContext(&err)
            ),
            source: Some(Box::new(err)),
        },
        SdkError::ConstructionFailure(_) => BusError::Rejected {
            message: format!(
                "{context}: could not build the request: {}",
                DisplayErrorContext(&err)
            ),
            source: Some(Box::new(err)),
        },
        SdkError::ServiceError(_) => {
            let status = err.raw_response().map(|r| r.status().as_u16());
            let service = err.into_service_error();
            let code = service.code().map(str::to_owned);
            let message = service.message().map(str::to_owned);
            classify_code(
                &context,
                queue,
                code.as_deref(),
                message.as_deref(),
                status,
                Some(Box::new(service)),
            )
        }
        // Dispatch (connection, I/O) and response (unreadable answer) failures, and any
        // kind the SDK adds later: passing.
        _ => BusError::Unavailable {
            message: format!("{context}: {}", DisplayErrorContext(&err)),
            source: Some(Box::new(err)),
        },
    }
}

/// Whether the credentials chain found nothing or is misconfigured: lasting, unlike a
/// credentials provider timing out or failing for a passing reason, which stays retryable.
fn credentials_missing(err: &(dyn StdError + 'static)) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(c) = e.downcast_ref::<CredentialsError>() {
            return matches!(
                c,
                CredentialsError::CredentialsNotLoaded(_)
                    | CredentialsError::InvalidConfiguration(_)
            );
        }
        current = e.source();
    }
    false
}

/// Sorts a service error (or a failed batch entry) by its code and HTTP status.
pub(crate) fn classify_code(
    context: &str,
    queue: &str,
    code: Option<&str>,
    message: Option<&str>,
    status: Option<u16>,
    source: Option<Box<dyn StdError + Send + Sync>>,
) -> BusError {
    let code_text = code.unwrap_or("unknown error");
    let message = format!(
        "{context}: {code_text}{}{}",
        if message.is_some() { ": " } else { "" },
        message.unwrap_or("")
    );
    match code {
        Some(c) if MISSING_QUEUE_CODES.contains(&c) => BusError::QueueNotFound(queue.to_owned()),
        Some(c) if INVALID_BODY_CODES.contains(&c) => BusError::InvalidBody(message),
        Some(c) if TRANSIENT_CODES.contains(&c) => BusError::Unavailable { message, source },
        _ => match status {
            Some(s) if s >= 500 || s == 429 => BusError::Unavailable { message, source },
            _ => BusError::Rejected { message, source },
        },
    }
}

/// A copy of `err` for each of several waiters on one failed batch call (the source, which
/// cannot be cloned, is summarised in the message).
pub(crate) fn duplicate(err: &BusError) -> BusError {
    match err {
        BusError::QueueNotFound(q) => BusError::QueueNotFound(q.clone()),
        BusError::BodyTooLarge { size, limit } => BusError::BodyTooLarge {
            size: *size,
            limit: *limit,
        },
        BusError::InvalidBody(m) => BusError::InvalidBody(m.clone()),
        BusError::Unavailable { message, .. } => BusError::Unavailable {
            message: message.clone(),
            source: None,
        },
        BusError::Rejected { message, .. } => BusError::Rejected {
            message: message.clone(),
            source: None,
        },
        BusError::Unauthorized { scope, message } => BusError::Unauthorized {
            scope: scope.clone(),
            message: message.clone(),
        },
        BusError::Unsupported(m) => BusError::Unsupported(m.clone()),
        BusError::Timeout(d) => BusError::Timeout(*d),
        BusError::Closed => BusError::Closed,
        BusError::Stale { message_id } => BusError::Stale {
            message_id: message_id.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn codes_sort_into_retryable_and_not() {
        let c = |code: &str, status| classify_code("op", "q", Some(code), None, Some(status), None);
        assert!(matches!(
            c("AWS.SimpleQueueService.NonExistentQueue", 400),
            BusError::QueueNotFound(q) if q == "q"
        ));
        assert!(c("ThrottlingException", 400).is_retryable());
        assert!(c("RequestThrottled", 403).is_retryable());
        assert!(c("SomethingNew", 503).is_retryable());
        assert!(!c("AccessDenied", 403).is_retryable());
        assert!(!c("InvalidClientTokenId", 403).is_retryable());
        assert!(matches!(
            c("InvalidMessageContents", 400),
            BusError::InvalidBody(_)
        ));
    }
}
