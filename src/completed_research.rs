//! The completed-research archivist: drain `completed_research`, record results, renew or
//! revoke leases, exit when the queue is empty.
//! TODO(archivists helper): implement.

use std::sync::Arc;
use std::time::Duration;

use datastore::DataStore;
use messagebus::Receiver;
use tokio_util::sync::CancellationToken;

use crate::{ArchivistHandle, RetryPolicy};

/// Settings of a result-recording run.
#[derive(Debug, Clone)]
pub struct CompletedResearchConfig {
    /// How long a renewed lease lasts from the time of renewal.
    pub lease_duration: chrono::Duration,
    /// Messages received and recorded together.
    pub batch_size: usize,
    /// How long one receive waits; an empty receive ends the run.
    pub receive_wait: Duration,
    /// Backoff for passing datastore failures.
    pub retry: RetryPolicy,
}

impl Default for CompletedResearchConfig {
    fn default() -> Self {
        CompletedResearchConfig {
            lease_duration: chrono::Duration::hours(2),
            batch_size: 10,
            receive_wait: Duration::from_secs(1),
            retry: RetryPolicy::default(),
        }
    }
}

/// Starts one run draining `receiver` (the `completed_research` queue).
pub fn start(
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: CompletedResearchConfig,
) -> ArchivistHandle {
    let _ = (token, receiver, store, config);
    todo!()
}
