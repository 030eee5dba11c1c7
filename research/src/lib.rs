//! The researcher runtime: the part of archivist that does the research. A researcher takes
//! work items (`PendingResearchItem`) off the pending-research queue, fetches their media
//! (downloads into a shared cache, local files where they are), runs an [`Analyser`] on each
//! and sends one result (`CompletedResearchItem`) per clip to the completed-research queue as
//! each is found, the last one ending the lease. The item is acknowledged once every result
//! is sent, released for another try when something failed, and given up (its unanswered
//! pairs sent as failed research, the item dead-lettered) when its last allowed try fails.
//! `archivist research` is this crate behind a command line; the book's chapter
//! docs/src/researchers.md says what it does for its users.
//!
//! A researcher is started as an archivist is ([`start`], like
//! `archivist::pending_research::start`): with a `CancellationToken`, a bus receiver per slot
//! and a sender for the results, its analyser, its [`Media`] and its
//! [`ResearcherSettings`]; it hands back a [`ResearcherHandle`] with a channel of non-fatal
//! [`ResearchError`]s, a done channel carrying its [`Report`], and its slots' [`Status`].
//!
//! Analysers: [`exec::ExecAnalyser`] (a child process per item), [`http::HttpAnalyser`] (a
//! POST per item), [`reference::ReferenceAnalyser`] (crate `analysis`, in this process), or
//! your own [`Analyser`]. Each speaks the analyser protocol ([`protocol`]): the item as one
//! JSON object in, one JSON line per clip out; the runtime checks every line.
//!
//! The host keeps what belongs to a process: the bus (it connects it, makes the receivers and
//! the sender, and closes it after the run), the metrics recorder (the runtime records
//! `archivist_researcher_*` through the `metrics` facade, a no-op until a recorder is
//! installed), and any server. For a status server, [`status::router`] answers
//! `/api/researcher` from the [`Status`]; the host merges it into its own router and serves
//! it (`net::server`), since where and whether to listen, and what else to show beside it
//! (the binary's `/metrics` and `/healthz`), are the host's choices.
//!
//! # Layout
//!
//! - `runtime.rs`: [`start`], [`ResearcherSettings`], [`Later`]; the slots (one receiver
//!   each, so one consumer each on the buses that count them; a slot receives only when it
//!   is free) and shutdown (stop taking items, the drain timeout for those in hand, then stop
//!   the analysers and release at once).
//! - `context.rs`: what the slots share (below both `runtime.rs` and `work.rs`): the
//!   context, the run's counts, why the items in hand were stopped, and [`Later`].
//! - `handle.rs`: [`ResearcherHandle`], [`Report`], [`Ended`].
//! - `error.rs`: [`ResearchError`] and its [`ResearchError::is_retryable`].
//! - `work.rs`: one work item from delivery to acknowledgement: media, analyser, results.
//! - `media.rs`: [`Media`] and [`MediaConfig`]: fetching, caching and hashing media, with
//!   the address policy of `net::address_policy`; `media/archived.rs`: episodes through a
//!   media archive ([`Media::with_archive`]): fetched from the show once, kept by their
//!   SHA-256, researched from the chosen version's copy.
//! - `analyser.rs`: the [`Analyser`] and [`Run`] traits every analyser implements, and
//!   [`Ending`]; `exec.rs`, `http.rs` and `reference.rs` the three analysers that come with
//!   the crate.
//! - `protocol.rs`: the analyser protocol's lines, and the item as the analyser reads it.
//! - `status.rs`: [`Status`] (each slot's work and since when) and [`status::router`]
//!   (`/api/researcher`).
//!
//! # Example
//!
//! A researcher on the in-memory bus, with an analyser written here that finds every clip at
//! the start of the episode; one work item in, its results out.
//!
//! ```
//! use std::collections::VecDeque;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use archivist::messages::{decode, CompletedResearchItem};
//! use messagebus::{Bus, MemoryBus};
//! use research::{
//!     Analyser, BoxError, Ended, Ending, Media, MediaConfig, ResearcherSettings, Run,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! /// Finds every clip at offset 0 of a one-minute episode.
//! struct AtTheStart;
//!
//! #[async_trait::async_trait]
//! impl Analyser for AtTheStart {
//!     async fn start(&self, input: Vec<u8>, _lease: &str) -> Result<Box<dyn Run>, BoxError> {
//!         let item: serde_json::Value = serde_json::from_slice(&input)?;
//!         let lines = item["clips"]
//!             .as_array()
//!             .ok_or("no clips")?
//!             .iter()
//!             .map(|clip| {
//!                 serde_json::json!({
//!                     "clip_title": clip["title"],
//!                     "clip_offsets_ns": [0],
//!                     "clip_duration_ns": 1_000_000_000u64,
//!                     "episode_duration_ns": 60_000_000_000u64,
//!                 })
//!                 .to_string()
//!             })
//!             .collect();
//!         Ok(Box::new(Lines(lines)))
//!     }
//!
//!     fn describe(&self) -> String {
//!         "at the start".into()
//!     }
//! }
//!
//! struct Lines(VecDeque<String>);
//!
//! #[async_trait::async_trait]
//! impl Run for Lines {
//!     async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
//!         Ok(self.0.pop_front())
//!     }
//!
//!     async fn finish(&mut self) -> Ending {
//!         Ending::Done
//!     }
//!
//!     async fn stop(self: Box<Self>) {}
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = MemoryBus::default();
//! bus.create_queue("pending_research").await?;
//! bus.create_queue("completed_research").await?;
//!
//! // The media: local files (the analyser above does not read them; the runtime hashes them).
//! let dir = tempfile::tempdir()?;
//! let (episode, clip) = (dir.path().join("episode.wav"), dir.path().join("clip.wav"));
//! std::fs::write(&episode, b"an episode")?;
//! std::fs::write(&clip, b"a clip")?;
//! let media = Media::new(MediaConfig {
//!     cache_dir: dir.path().join("cache"),
//!     cache_size: 1 << 30,
//!     max_size: 1 << 30,
//!     media_roots: Vec::new(),
//!     connect_timeout: Duration::from_secs(10),
//!     read_timeout: Duration::from_secs(60),
//!     attempts: 5,
//!     addresses: Default::default(),
//!     min_rate: 0,
//! })?;
//!
//! let token = CancellationToken::new();
//! let handle = research::start(
//!     token.clone(),
//!     vec![bus.receiver("pending_research").await?],
//!     bus.sender("completed_research").await?,
//!     Arc::new(AtTheStart),
//!     media,
//!     ResearcherSettings::default(),
//! );
//!
//! // One work item, as the pending-research archivist publishes it.
//! let curated = "2026-01-02T03:04:05Z";
//! let item = serde_json::json!({
//!     "lease_id": "7d0c5b7e-2f1a-4c3e-9b8a-1e2f3a4b5c6d",
//!     "lease_expires_at": (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339(),
//!     "episode": {
//!         "initial_date_curated": curated, "last_date_curated": curated,
//!         "curator_information": "example", "date_aired": "2025-12-31T00:00:00Z",
//!         "title": "Episode 1", "description": "", "media_uri": episode,
//!         "media_type": "wav", "priority": 0,
//!     },
//!     "clips": [{
//!         "initial_date_curated": curated, "last_date_curated": curated,
//!         "curator_information": "example", "title": "Theme song", "description": "",
//!         "media_uri": clip, "media_type": "wav", "priority": 0,
//!     }],
//! });
//! bus.sender("pending_research").await?.send(serde_json::to_vec(&item)?).await?;
//!
//! // Its result: the one clip found at 0, the lease ended.
//! let results = bus.receiver("completed_research").await?;
//! let delivery = loop {
//!     if let Some(d) = results.receive(1, Duration::from_secs(5)).await?.pop() {
//!         break d;
//!     }
//! };
//! let result: CompletedResearchItem = decode(delivery.body())?;
//! delivery.ack().await?;
//! assert_eq!(result.clip.title, "Theme song");
//! assert_eq!(result.clip_offsets_ns, [0]);
//! assert!(result.revoke_lease);
//! assert_eq!(result.episode_hash.len(), 64, "the SHA-256 of the episode's bytes");
//!
//! token.cancel();
//! let report = handle.done.await?;
//! assert!(matches!(report.ended, Ended::Cancelled));
//! assert_eq!((report.finished, report.results_sent), (1, 1));
//! # Ok(())
//! # }
//! ```

mod analyser;
mod context;
mod episode;
mod error;
pub mod exec;
mod handle;
pub mod http;
mod media;
pub mod printing;
pub mod protocol;
pub mod reference;
mod runtime;
pub mod status;
mod work;

pub use analyser::{Analyser, BoxError, Ending, Run};
pub use context::Later;
pub use episode::{EpisodeError, EpisodeMedia, FetchedEpisode, Ranges};
pub use error::ResearchError;
pub use handle::{Ended, Report, ResearcherHandle, ERROR_CHANNEL_CAPACITY};
pub use media::{Media, MediaConfig, RATE_GRACE};
pub use runtime::{start, ResearcherSettings};
pub use status::Status;
