//! Counting of SQS requests per operation, as SQS bills them.
//!
//! An SDK interceptor counts every attempt the client puts on the wire (retries included:
//! each is a billed request). The adapter adds the payload of calls that carry messages, since
//! SQS bills each 64 KiB chunk of payload as one request: a 100 KiB `SendMessageBatch` is 2.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// SQS bills each 64 KiB chunk of a request's payload as one request.
pub const BILLING_CHUNK_BYTES: u64 = 64 * 1024;

/// Requests made for one SQS operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperationCount {
    /// Requests sent (each attempt of a retried call counts).
    pub requests: u64,
    /// Requests as billed: every request, plus one for each further 64 KiB of its payload.
    pub billed: u64,
}

/// Requests an [`SqsBus`](super::SqsBus) has made, by operation name (`ReceiveMessage`,
/// `DeleteMessageBatch`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Counts by operation name.
    pub operations: BTreeMap<String, OperationCount>,
}

impl RequestCounts {
    /// Requests sent for `operation`.
    pub fn requests(&self, operation: &str) -> u64 {
        self.operations.get(operation).map_or(0, |c| c.requests)
    }

    /// Requests sent, all operations.
    pub fn total_requests(&self) -> u64 {
        self.operations.values().map(|c| c.requests).sum()
    }

    /// Requests as billed, all operations.
    pub fn total_billed(&self) -> u64 {
        self.operations.values().map(|c| c.billed).sum()
    }

    /// What happened after `earlier` (a snapshot of the same counter).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        let operations = self
            .operations
            .iter()
            .map(|(op, c)| {
                let before = earlier.operations.get(op).copied().unwrap_or_default();
                let diff = OperationCount {
                    requests: c.requests.saturating_sub(before.requests),
                    billed: c.billed.saturating_sub(before.billed),
                };
                (op.clone(), diff)
            })
            .filter(|(_, c)| c.requests > 0 || c.billed > 0)
            .collect();
        RequestCounts { operations }
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (op, c) in &self.operations {
            writeln!(
                f,
                "{op:<36} {:>8} requests {:>8} billed",
                c.requests, c.billed
            )?;
        }
        write!(
            f,
            "{:<36} {:>8} requests {:>8} billed",
            "total",
            self.total_requests(),
            self.total_billed()
        )
    }
}

/// The shared counter behind an [`SqsBus`](super::SqsBus) and its interceptor.
#[derive(Debug, Default)]
pub(crate) struct RequestCounter {
    counts: Mutex<RequestCounts>,
}

impl RequestCounter {
    /// A snapshot of the counts.
    pub(crate) fn snapshot(&self) -> RequestCounts {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn request(&self, operation: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let c = counts.operations.entry(operation.to_owned()).or_default();
        c.requests += 1;
        c.billed += 1;
    }

    /// Adds the billing chunks beyond the first for one successful call carrying `payload`
    /// bytes of messages (bodies and attributes).
    pub(crate) fn payload(&self, operation: &str, payload: usize) {
        let chunks = (payload as u64).div_ceil(BILLING_CHUNK_BYTES).max(1);
        if chunks > 1 {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            counts
                .operations
                .entry(operation.to_owned())
                .or_default()
                .billed += chunks - 1;
        }
    }
}

/// The SDK interceptor that counts attempts into a [`RequestCounter`].
#[derive(Debug)]
pub(crate) struct CountingInterceptor {
    pub(crate) counter: Arc<RequestCounter>,
}

impl Intercept for CountingInterceptor {
    fn name(&self) -> &'static str {
        "archivist-request-counter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = cfg
            .load::<Metadata>()
            .map_or("unknown", |m| m.name())
            .to_owned();
        self.counter.request(&operation);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn payload_chunks_bill_as_requests() {
        let counter = RequestCounter::default();
        counter.request("SendMessageBatch");
        counter.payload("SendMessageBatch", 100 * 1024);
        counter.request("SendMessageBatch");
        counter.payload("SendMessageBatch", 64 * 1024);
        let counts = counter.snapshot();
        assert_eq!(counts.requests("SendMessageBatch"), 2);
        assert_eq!(counts.total_billed(), 3);
        let later = {
            counter.request("ReceiveMessage");
            counter.snapshot()
        };
        let diff = later.since(&counts);
        assert_eq!(diff.total_requests(), 1);
        assert_eq!(diff.requests("ReceiveMessage"), 1);
    }
}
