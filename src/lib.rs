//! The four archivists of an archivist pipeline.
//!
//! Curators put episodes and clips on the bus; the *episodes* and *clips* archivists store
//! them. Every episode is researched against every clip: the *pending-research* archivist
//! leases the most urgent unresearched pairs and publishes one work item per lease, as many as
//! there are free researchers; the *completed-research* archivist records each result,
//! renewing the lease while work goes on and ending it on the last result.
//!
//! Each archivist is started with a [`CancellationToken`](tokio_util::sync::CancellationToken),
//! its bus handles, an `Arc<dyn DataStore>` and a config, and returns an [`ArchivistHandle`]:
//! a channel of non-fatal errors and a done channel carrying the [`Report`] of the run.
//!
//! # Layout
//!
//! - `messages.rs`: the bus messages of the contract and their validation.
//! - `handle.rs`: [`ArchivistHandle`], [`Report`], [`ArchivistError`]: what a run hands back.
//! - `retry.rs`: [`RetryPolicy`], backoff for passing datastore failures.
//! - `ingest.rs`: the episodes and clips archivists (one generic ingestion loop).
//! - `pending_research.rs`: the work-assignment run.
//! - `completed_research.rs`: the result-recording run.
//! - `runner.rs`: what they share: the run task, reported retries, settling a batch.

pub mod completed_research;
mod handle;
pub mod ingest;
pub mod messages;
pub mod pending_research;
mod retry;
mod runner;
mod telemetry;

pub use handle::{ArchivistError, ArchivistHandle, Ended, Report, ERROR_CHANNEL_CAPACITY};
pub use retry::{RetryError, RetryPolicy};
pub use telemetry::describe as describe_metrics;
