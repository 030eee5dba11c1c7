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
//! The episodes archivist on the in-process bus and an SQLite datastore in memory: a curated
//! episode taken in (with `once`, the run ends by itself when the queue is empty); then the
//! clips archivist, long-running, stopped by its token:
//!
//! ```
//! use std::time::Duration;
//! use archivist::ingest::{self, IngestConfig};
//! use archivist::Ended;
//! use messagebus::{Bus, MemoryBus, MemoryBusConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = MemoryBus::new(MemoryBusConfig::default());
//! bus.create_queue("curated_episodes").await?;
//! bus.create_queue("curated_clips").await?;
//! let store = datastore::connect("sqlite::memory:").await?;
//! store.migrate().await?;
//!
//! let episode = r#"{"initial_date_curated": "2026-01-02T03:04:05Z",
//!     "last_date_curated": "2026-01-02T03:04:05Z", "curator_information": "tbtl.net",
//!     "date_aired": "2025-12-31T00:00:00Z", "title": "Episode 4012: The Archive",
//!     "description": "", "media_uri": "https://media.example.com/4012.mp3",
//!     "media_type": "mp3", "priority": 0}"#;
//! bus.sender("curated_episodes").await?.send(episode.into()).await?;
//!
//! let token = CancellationToken::new();
//! let once = IngestConfig {
//!     once: true,
//!     receive_wait: Duration::ZERO,
//!     ..IngestConfig::default()
//! };
//! let receiver = bus.receiver("curated_episodes").await?;
//! let episodes = ingest::start_episodes(token.clone(), receiver, store.clone(), once);
//! let report = episodes.done.await?;
//! assert!(matches!(report.ended, Ended::Finished));
//! assert_eq!((report.received, report.stored), (1, 1));
//! assert_eq!(store.status(chrono::Utc::now()).await?.episodes, 1);
//!
//! let receiver = bus.receiver("curated_clips").await?;
//! let clips = ingest::start_clips(token.clone(), receiver, store, IngestConfig::default());
//! token.cancel(); // between messages; a message in hand is finished or released first
//! assert!(matches!(clips.done.await?.ended, Ended::Cancelled));
//! # Ok(())
//! # }
//! ```
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
//! - `wake.rs`: [`Wake`], [`Pace`], [`watch_capacity`]: work assignment woken when capacity
//!   frees (one process holding all four), the timer as the fallback.

pub mod completed_research;
mod handle;
pub mod ingest;
pub mod messages;
pub mod pending_research;
mod retry;
mod runner;
mod telemetry;
pub mod wake;

pub use handle::{ArchivistError, ArchivistHandle, Ended, Report, ERROR_CHANNEL_CAPACITY};
pub use retry::{RetryError, RetryPolicy};
pub use telemetry::describe as describe_metrics;
pub use wake::{watch_capacity, Cause, Pace, Wake};
