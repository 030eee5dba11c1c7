use async_trait::async_trait;
use chrono::{DateTime, Utc};
use messagebus::SqlReceipt;
use uuid::Uuid;

use crate::{
    ClipInfo, CompletionId, EpisodeCompletion, EpisodeInfo, FailureReason, Lease, LeaseRequest,
    LeaseSummary, LeaseUpdate, Match, MatchFilter, RecordOutcome, ResearchResult, Result, Status,
};

/// Everything archivists store and ask. Object-safe: archivists hold an `Arc<dyn DataStore>`.
///
/// Every method is one transaction. Times are passed in (never read from the database clock)
/// so that callers, and tests, decide what "now" is.
#[async_trait]
pub trait DataStore: Send + Sync {
    /// Creates or upgrades the schema. Harmless when it is current; safe when several
    /// processes run it at once.
    async fn migrate(&self) -> Result<()>;

    /// The schema's migrations not applied to this database yet, as `"0002 lease duration"`:
    /// all of them where there is no schema at all, none where it is current. Reads only, so
    /// that read-only commands can tell a missing or old schema without changing it.
    async fn missing_migrations(&self) -> Result<Vec<String>>;

    /// Inserts or updates episodes, identified by (`title`, `date_aired`): a known episode has
    /// every field updated but `initial_date_curated`. All or nothing: fails with
    /// [`DataStoreError::Invalid`](crate::DataStoreError::Invalid) if a new episode was last
    /// curated before it was first curated, and with
    /// [`DataStoreError::Conflict`](crate::DataStoreError::Conflict) if a `media_uri` belongs to
    /// another episode. Only a curation at least as new as the stored one (by
    /// `last_date_curated`) updates a known episode: an older one arriving late (a released
    /// message redelivered) changes nothing. Of one episode twice in the batch, the newer
    /// curation wins, and of equally new ones the later in the batch.
    async fn upsert_episodes(&self, episodes: &[EpisodeInfo]) -> Result<()>;

    /// Inserts or updates clips, identified by `title`; otherwise as
    /// [`upsert_episodes`](Self::upsert_episodes). A new clip makes one research pair per
    /// episode, at the cost of one row.
    async fn upsert_clips(&self, clips: &[ClipInfo]) -> Result<()>;

    /// Atomically selects and leases the next work item (see the contract's work-assignment
    /// rules): the most urgent episode with pairs neither researched nor under an unexpired
    /// lease, with its most urgent such clips, at most `request.max_clips`. `None` when there
    /// is no free pair. Any number of concurrent callers never lease the same pair twice.
    async fn lease_next(&self, request: LeaseRequest) -> Result<Option<Lease>>;

    /// Renews, revokes or cancels a lease (see [`LeaseUpdate`]). Returns `false`, changing
    /// nothing, when the lease is unknown or ended, when a renewal finds it expired at the
    /// time given or revoked, or when a revocation finds it revoked already.
    ///
    /// - [`LeaseUpdate::Renew`]: extends an unexpired, unrevoked lease.
    /// - [`LeaseUpdate::Revoke`]: deletes the lease if it holds no pairs any more; else marks
    ///   it revoked and it keeps its pairs: [`record_results`](Self::record_results) deletes it
    ///   with its last held pair, or its pairs come back when it expires.
    /// - [`LeaseUpdate::Cancel`]: deletes the lease and frees all its pairs at once, revoked
    ///   or not.
    async fn update_lease(&self, lease_id: Uuid, update: LeaseUpdate) -> Result<bool>;

    /// Records results, idempotently: one outcome per result, in order. A pair already
    /// recorded is a [`RecordOutcome::Duplicate`] and changes nothing, except that a
    /// successful result replaces a recorded failure (see [`ResearchResult::failure`]) and is
    /// then [`RecordOutcome::Recorded`]. A failed pair counts as done for lease selection. A recorded pair is no
    /// longer held by any lease; a revoked lease that so loses its last pair is deleted in the
    /// same transaction.
    async fn record_results(&self, results: &[ResearchResult]) -> Result<Vec<RecordOutcome>>;

    /// [`record_results`](Self::record_results) and each of `leases` updated as
    /// [`update_lease`](Self::update_lease) would, in the order given, in one transaction
    /// where the datastore can (the SQL adapters: the leases after the results, all or
    /// nothing). Returns the results' outcomes and, per lease update, what
    /// [`update_lease`](Self::update_lease) would have answered. A lease updated after its
    /// batch's results ends as it would before them (a revoked lease whose pairs are all
    /// recorded is deleted either way). The default makes the calls one after another, the
    /// leases first.
    async fn record_results_updating_leases(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)> {
        let mut updated = Vec::with_capacity(leases.len());
        for &(lease_id, update) in leases {
            updated.push(self.update_lease(lease_id, update).await?);
        }
        Ok((self.record_results(results).await?, updated))
    }

    /// The counts behind `archivist status`, with leases judged at `now`.
    async fn status(&self, now: DateTime<Utc>) -> Result<Status>;

    /// Recorded matches (results with at least one offset).
    async fn matches(&self, filter: &MatchFilter) -> Result<Vec<Match>>;

    /// The `limit` most recently researched matches, latest `research_date` first (ties:
    /// episode title, clip title). Reads one index entry per match returned.
    async fn recent_matches(&self, limit: u32) -> Result<Vec<Match>>;

    /// Leases that hold pairs (those [`status`](Self::status) counts as active, awaiting late
    /// results or expired), judged at `now`, with their episode: expired ones first, then the
    /// oldest; at most `limit`. Reads only.
    async fn leases(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<LeaseSummary>>;

    /// Makes failed pairs researchable again: those of episodes titled `episode_title` (any
    /// air date) and of the clip titled `clip_title`, each filter only if given (neither: every
    /// failed pair). Returns how many pairs it freed. Reads only the failed pairs (a partial
    /// index), never the results at large.
    ///
    /// Upserting an episode or clip with another `media_uri` does the same for its pairs, in
    /// the upsert's transaction.
    async fn retry_failed(
        &self,
        episode_title: Option<&str>,
        clip_title: Option<&str>,
    ) -> Result<u64>;

    /// Forgets every recorded result of the episode (`title`, `date_aired`): matched, unmatched
    /// and failed alike, with its counters and its completion not yet announced, so that each
    /// of its pairs is leased again by the next work-assignment runs (a media archive's operator
    /// chose another version of its media). Pairs a lease holds now are left to it: their
    /// results are recorded when they come. `None` when there is no such episode, else how
    /// many results it forgot.
    async fn forget_episode_results(
        &self,
        title: &str,
        date_aired: DateTime<Utc>,
    ) -> Result<Option<u64>>;

    /// The `limit` most common failure reasons among failed pairs, most pairs first (ties: the
    /// reason). Reads the failed pairs only.
    async fn failure_reasons(&self, limit: u32) -> Result<Vec<FailureReason>>;

    /// Episodes whose research completed and whose completion is not announced yet, oldest
    /// completion first, at most `limit`, each with its counts and matches. Recording an
    /// episode's last pair (every clip known then researched or failed) keeps its completion,
    /// in the recording transaction; a clip curated later reopens the episode, and recording
    /// its pair completes it again. Completions are kept whether or not anyone announces them
    /// (at most one per episode), so that switching announcing on misses none. Reads the
    /// completions and the matched results of their episodes only.
    async fn completions(&self, limit: u32) -> Result<Vec<EpisodeCompletion>>;

    /// Lets go of completions that were announced. One that completed again since it was read
    /// stays (its episode is announced again). Returns how many were let go.
    async fn completions_announced(&self, ids: &[CompletionId]) -> Result<u64>;

    /// Claims up to `limit` kept completions for announcing on a bus outside this database
    /// (the database bus in it has [`TransactionalBus::announce_completions`]), oldest first,
    /// each as [`completions`](Self::completions) reads it: those nobody holds, or whose claim
    /// ran out by `now`, each held until `until`. Callers at once never claim the same
    /// completion, so each is announced by one of them. A claim ends when the completion is
    /// let go ([`completions_announced`](Self::completions_announced)), given back
    /// ([`release_completions`](Self::release_completions): its send failed), completed again
    /// (the newer completion is anyone's), or at `until` (its claimer stopped: the next caller
    /// announces it).
    async fn claim_completions(
        &self,
        limit: u32,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<EpisodeCompletion>>;

    /// Gives back claimed completions ([`claim_completions`](Self::claim_completions)) that
    /// were not announced, for the next caller to claim at once. Returns how many.
    async fn release_completions(&self, ids: &[CompletionId]) -> Result<u64>;

    /// Inserts or updates one episode.
    async fn upsert_episode(&self, episode: &EpisodeInfo) -> Result<()> {
        self.upsert_episodes(std::slice::from_ref(episode)).await
    }

    /// Inserts or updates one clip.
    async fn upsert_clip(&self, clip: &ClipInfo) -> Result<()> {
        self.upsert_clips(std::slice::from_ref(clip)).await
    }

    /// Records one result.
    async fn record_result(&self, result: &ResearchResult) -> Result<RecordOutcome> {
        let outcomes = self.record_results(std::slice::from_ref(result)).await?;
        Ok(outcomes
            .into_iter()
            .next()
            .unwrap_or(RecordOutcome::UnknownEpisode))
    }

    /// The writes that also do their bus work in the same transaction, where this datastore
    /// can host the database bus (the SQL adapters). `None`: archivists settle messages after
    /// the datastore commits.
    fn transactional_bus(&self) -> Option<&dyn TransactionalBus> {
        None
    }

    /// Listings and pages of the archive for people (the status page's `/clips` and
    /// `/episodes`), where this datastore offers them (the SQL adapters). `None`: it does not.
    fn browse(&self) -> Option<&dyn crate::Browse> {
        None
    }

    /// The API gateway's tokens and presence (`archivist serve --api`), where this datastore
    /// keeps them (the SQL adapters). `None`: it does not, and there is no API over it.
    fn api_access(&self) -> Option<&dyn crate::ApiAccess> {
        None
    }
}

/// Turns a lease into the body of its work item (for
/// [`TransactionalBus::lease_next_and_publish`]). An alias, so that `#[async_trait]` leaves the
/// closure's argument lifetime alone.
pub type EncodeWorkItem = dyn Fn(&Lease) -> Vec<u8> + Send + Sync;

/// Turns an episode's completion into the body of its announcement (for
/// [`TransactionalBus::announce_completions`]).
pub type EncodeCompletion = dyn Fn(&EpisodeCompletion) -> Vec<u8> + Send + Sync;

/// Writes that acknowledge or publish bus messages in their own transaction, for a datastore
/// whose database also holds the database bus's queues (`messagebus::sql`). With these, no
/// crash can leave a lease without its work item, or a stored message still on its queue.
///
/// Every method first checks that the receipts' bus lives in this database
/// ([`holds_bus`](Self::holds_bus)); otherwise it fails with
/// [`DataStoreError::Config`](crate::DataStoreError::Config) and changes nothing.
#[async_trait]
pub trait TransactionalBus: Send + Sync {
    /// Whether the database bus with instance id `bus_id` (a [`SqlReceipt::bus_id`]) keeps its
    /// queues in this datastore's database.
    async fn holds_bus(&self, bus_id: &str) -> Result<bool>;

    /// [`DataStore::upsert_episodes`], acknowledging every delivery of `acks` in the same
    /// transaction.
    async fn upsert_episodes_and_ack(
        &self,
        episodes: &[EpisodeInfo],
        acks: &[SqlReceipt],
    ) -> Result<()>;

    /// [`DataStore::upsert_clips`], acknowledging every delivery of `acks` in the same
    /// transaction.
    async fn upsert_clips_and_ack(&self, clips: &[ClipInfo], acks: &[SqlReceipt]) -> Result<()>;

    /// [`DataStore::record_results_updating_leases`], acknowledging in the same transaction
    /// the delivery of each result that was recorded or a duplicate (`acks[i]` carries
    /// `results[i]`). The deliveries of results for unknown pairs stay in hand, for the caller
    /// to dead-letter.
    async fn record_results_and_ack(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
        acks: &[SqlReceipt],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)>;

    /// [`DataStore::lease_next`], publishing `encode(lease)` on the bus queue `queue` (of
    /// the bus `bus_id`) in the same transaction: the lease exists if and only if its work
    /// item does. A body the bus refuses fails the call with
    /// [`DataStoreError::Bus`](crate::DataStoreError::Bus) and leases nothing.
    async fn lease_next_and_publish(
        &self,
        request: LeaseRequest,
        bus_id: &str,
        queue: &str,
        encode: &EncodeWorkItem,
    ) -> Result<Option<Lease>>;

    /// Publishes up to `limit` unannounced completions ([`DataStore::completions`]), each as
    /// `encode(completion)` on the bus queue `queue` (of the bus `bus_id`), and lets go of them,
    /// in one transaction: each completion is announced exactly once. Completions another
    /// caller is announcing at the same moment, or has claimed
    /// ([`DataStore::claim_completions`]), are skipped, not waited for. Returns how many
    /// were published.
    async fn announce_completions(
        &self,
        limit: u32,
        bus_id: &str,
        queue: &str,
        encode: &EncodeCompletion,
    ) -> Result<u64>;
}

/// Remembers the database bus `found` in the datastore's database (only one that exists: it
/// may be created later) and tells whether it is `bus_id`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn remember_bus(
    cell: &tokio::sync::OnceCell<String>,
    found: Option<String>,
    bus_id: &str,
) -> bool {
    match found {
        Some(id) => {
            let holds = id == bus_id;
            let _ = cell.set(id);
            holds
        }
        None => false,
    }
}

/// Fails, changing nothing, unless the database bus `bus_id` lives in `store`'s database.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) async fn check_bus(store: &dyn TransactionalBus, bus_id: &str) -> Result<()> {
    if store.holds_bus(bus_id).await? {
        Ok(())
    } else {
        Err(crate::DataStoreError::Config(format!(
            "the database bus {bus_id} keeps its queues in another database than this \
             datastore: its messages cannot be settled in the datastore's transactions"
        )))
    }
}

/// The migrations of `migrator` whose versions are not among `applied`, as `"0002 name"`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn missing(migrator: &sqlx::migrate::Migrator, applied: &[i64]) -> Vec<String> {
    migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
        .map(|m| format!("{:04} {}", m.version, m.description))
        .collect()
}
