//! The archivist datastore: episodes, clips, the research backlog, leases and completed research.
//!
//! [`DataStore`] is the one trait archivists use. Its adapters are built on sqlx:
//! `SqliteDataStore` (feature `sqlite`, the embedded default) and `PgDataStore` (feature
//! `postgres`, for production; see [Features](#features)). Both keep no row per research pair:
//! pairs are implied by `episodes × clips`, and only leased and researched pairs are stored, so
//! a new clip or episode costs one row however large the archive is (the project's
//! `shared/SCALE.md`).
//!
//! A pair that cannot be researched for a reason that will not pass is recorded as *failed*
//! ([`ResearchResult::failure`]): a result row with its reason, so that lease selection passes
//! it over like a researched pair, counted apart (`failed_count` beside each episode's
//! `researched_count`; partial indexes on the failures alone). A success replaces it; a new
//! `media_uri` for its episode or clip (a trigger in the upsert's transaction) or
//! [`DataStore::retry_failed`] forgets it, and it is leased again.
//!
//! A lease holds the pairs of its work item until they are recorded, it expires, or it is
//! cancelled; a revoked lease (its researcher sent its last result) keeps the pairs whose
//! results are still on their way.
//!
//! An episode and a clip stored (from their bus messages) in an SQLite datastore in memory,
//! and the one research pair they make leased, the episode and clip read back with it:
//!
//! ```
//! use datastore::{ClipInfo, EpisodeInfo, LeaseRequest};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = datastore::connect("sqlite::memory:").await?; // or sqlite://file, postgres://…
//! store.migrate().await?;
//!
//! let episode: EpisodeInfo = serde_json::from_str(
//!     r#"{"initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
//!         "curator_information": "tbtl.net", "date_aired": "2025-12-31T00:00:00Z",
//!         "title": "Episode 4012: The Archive", "description": "",
//!         "media_uri": "https://media.example.com/4012.mp3", "media_type": "mp3", "priority": 0}"#,
//! )?;
//! let clip: ClipInfo = serde_json::from_str(
//!     r#"{"initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
//!         "curator_information": "tbtl.net", "title": "Theme song", "description": "",
//!         "media_uri": "https://media.example.com/theme.mp3", "media_type": "mp3", "priority": 5}"#,
//! )?;
//! store.upsert_episode(&episode).await?;
//! store.upsert_clip(&clip).await?;
//!
//! let now = chrono::Utc::now();
//! let request = LeaseRequest {
//!     max_clips: 50,
//!     duration: chrono::Duration::hours(2),
//!     now,
//!     lease_id: uuid::Uuid::new_v4(),
//! };
//! let lease = store.lease_next(request).await?.expect("one pair to research");
//! assert_eq!((&lease.episode, &lease.clips[..]), (&episode, &[clip][..]));
//! let status = store.status(now).await?;
//! assert_eq!((status.research_pairs, status.leased_pairs), (1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - `model.rs`: the domain types the trait speaks ([`EpisodeInfo`], [`ClipInfo`], [`Lease`], …).
//! - `store.rs`: the [`DataStore`] trait.
//! - `api_access.rs`: the [`ApiAccess`] trait: the API gateway's tokens (hashes only) and who
//!   is there (remote researchers), for `archivist serve --api`.
//! - `browse.rs`: the [`Browse`] trait (listings, title search and pages for people), its
//!   types and opaque cursors.
//! - `error.rs`: [`DataStoreError`] and its [`DataStoreError::is_retryable`] classification.
//! - `sqlite.rs` and `migrations/sqlite/`: the SQLite adapter and its schema.
//! - `postgres.rs` and `migrations/postgres/`: the Postgres adapter and its schema.
//! - `sql.rs`: what the two adapters share (row mapping, the browse pages, completions, the
//!   upsert's batch checks), written once over a dialect each adapter implements.
//! - `connect.rs`: [`connect`], which picks the adapter from a `DATABASE_URL`.
//! - `foreign.rs`: [`foreign_migrations`], another program's migrations in a database that
//!   archivist's would be mixed into (refused before anything is written).
//! - `testing.rs` (feature `test-utils`): the conformance suite every adapter runs.
//! - `testing_pg.rs` (features `test-utils` and `postgres`): a fresh Postgres database per test.
//!
//! The adapters' tests are `tests/` (the conformance suite on each, and what is particular to
//! each); `benches/datastore.rs` measures both at the project's scale.
//!
//! # Features
//!
// Each adapter is linked only where its feature is on: rustdoc warns of a link it cannot resolve.
#![cfg_attr(feature = "sqlite", doc = "- `sqlite` (default): [`SqliteDataStore`].")]
#![cfg_attr(
    not(feature = "sqlite"),
    doc = "- `sqlite` (default): `SqliteDataStore`."
)]
#![cfg_attr(feature = "postgres", doc = "- `postgres`: [`PgDataStore`].")]
#![cfg_attr(not(feature = "postgres"), doc = "- `postgres`: `PgDataStore`.")]
//! - `test-utils`: the `testing` (and with `postgres`, `testing_pg`) modules.

mod api_access;
mod browse;
mod connect;
mod error;
mod foreign;
mod model;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
#[cfg(all(any(test, feature = "test-utils"), feature = "postgres"))]
pub mod testing_pg;

pub use api_access::{
    ApiAccess, HeldItem, NewToken, Presence, PresenceKind, TokenInfo, TokenScope,
    DEFAULT_MAX_RESEARCHERS, PRESENCE_WINDOW,
};
pub use browse::{
    search_words, Browse, ClipPage, ClipSummary, EpisodePage, EpisodeSummary, FailedPair,
    ListQuery, Occurrence, Page, TimelineEntry, FAILED_SHOWN, MAX_PAGE,
};
pub use connect::{connect, redact_url};
pub use error::DataStoreError;
pub use foreign::{foreign_migrations, ForeignMigrations};
pub use model::{
    deserialize_time, serialize_time, ClipInfo, ClipMatch, CompletionId, EpisodeCompletion,
    EpisodeInfo, EpisodeKey, FailureReason, Findability, Lease, LeaseRequest, LeaseState,
    LeaseSummary, LeaseUpdate, Match, MatchFilter, RecordOutcome, ResearchResult, Status,
};
#[cfg(feature = "postgres")]
pub use postgres::PgDataStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteDataStore;
pub use store::{DataStore, EncodeCompletion, EncodeWorkItem, TransactionalBus};

/// Shorthand for results of datastore operations.
pub type Result<T, E = DataStoreError> = std::result::Result<T, E>;
