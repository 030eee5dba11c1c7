//! The SQLite adapter, [`SqliteDataStore`]: the embedded default datastore.
//!
//! The schema is `migrations/sqlite/` (the design is shared with the Postgres adapter: research
//! pairs are implied by `episodes × clips`, only leased and researched pairs have rows). Times
//! are stored as INTEGER unix microseconds.
//!
//! What both SQL adapters do alike (row mapping, the browse pages, completions read and
//! announced, an upsert's batch checks) is `sql.rs`, over this adapter's [`Dialect`]
//! (its SQL fragments); this file holds its statements, transactions and write turns.
//!
//! Every write that reads before it writes runs in a `BEGIN IMMEDIATE` transaction: it takes
//! the file's write lock up front, so concurrent writers wait for it (in this process on a
//! mutex, across processes on the busy timeout) instead of failing to upgrade a read snapshot,
//! and `lease_next` can never hand out a pair twice. A write of one statement (renewing or
//! cancelling a lease; the cascade deletes a cancelled lease's pairs) is a transaction of its
//! own: it takes this process's turn, and no explicit transaction. Sets of ids travel into SQL
//! as one JSON array bound to `json_each(?)`, so statements stay few and their text fixed.
//!
//! A revoked lease keeps the pairs whose results are still on their way: `leases.held_pairs`
//! counts them, and whichever transaction leaves a revoked lease (or an expired one being taken
//! over) holding nothing deletes it: the revoke itself, or `release_pairs`.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use messagebus::SqlReceipt;
use sqlx::query::Query;
use sqlx::query_builder::Separated;
use sqlx::sqlite::SqliteArguments;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{ColumnIndex, QueryBuilder, Row, Sqlite, Transaction};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use crate::api_access::{
    ApiAccess, HeldItem, NewToken, Presence, PresenceKind, TokenInfo, TokenScope,
};
use crate::browse::Browse;
use crate::sql::{self, Curated, Dialect, StoreRow, Which};
use crate::store::{EncodeCompletion, EncodeWorkItem};
use crate::{
    redact_url, ClipInfo, CompletionId, DataStore, DataStoreError, EpisodeCompletion, EpisodeInfo,
    FailureReason, Lease, LeaseRequest, LeaseSummary, LeaseUpdate, Match, MatchFilter,
    RecordOutcome, ResearchResult, Result, Status, TransactionalBus,
};
use crate::{ClipPage, ClipSummary, EpisodePage, EpisodeSummary, ListQuery, Page};

/// The schema's migrations. The database bus keeps its own (versions from 1000001) in the same
/// `_sqlx_migrations` table; each migrator ignores the other's.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate::Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/sqlite")
};

/// How long a statement waits for another connection's write lock before failing (retryably).
const BUSY_TIMEOUT: StdDuration = StdDuration::from_secs(5);

/// Connections per file-backed pool. Writers are serialised by SQLite anyway; more connections
/// only help concurrent readers.
const MAX_CONNECTIONS: u32 = 8;

/// Bound values per statement: under the bundled SQLite's limit of 32,766.
const MAX_BINDS: usize = 30_000;

/// The SQLite [`DataStore`]. Cheap to clone: clones share one connection pool.
///
/// Writes are serialised: in this process by a queue (so writers wait their turn in order,
/// without SQLite's sleeping busy handler), shared with the database bus on the same file
/// (`messagebus::sql::sqlite::write_gate`), and on one connection of their own; across
/// processes by SQLite's file lock and the busy timeout. Reads (`status`, `matches`) run
/// beside them on the other connections. Measured on a two-core machine
/// at 20,000 episodes × 5,000 clips (medians): `lease_next` of 50 clips about 2 ms, a new
/// clip or episode about 0.2 ms, recording in batches of 1,000 over 50,000 results/s,
/// `status` about 4 ms; the file is 11 MB before any research.
#[derive(Debug, Clone)]
pub struct SqliteDataStore {
    /// Connections for reads.
    pool: SqlitePool,
    /// The one connection every write of this process goes through. SQLite drops a
    /// connection's whole page cache when another connection has written since its last
    /// transaction, so writers taking turns on several connections would each start cold:
    /// four archivists recording at once were slower than one. In memory, the same pool.
    writes: SqlitePool,
    /// Held for the whole of each write transaction of this store and its clones, and by the
    /// database bus on the same file for each of its own.
    writer: messagebus::sql::sqlite::WriteGate,
    /// The id of the database bus in this file, once seen (see [`TransactionalBus`]).
    bus_id: Arc<tokio::sync::OnceCell<String>>,
    /// Whether writes that settle no bus message in their transaction sync at commit
    /// (see [`BEGIN_DURABLE`]). Always, but for the benchmark that measures what it costs.
    durable: bool,
}

/// Begins a write whose commit is durable across a power cut (`synchronous = FULL`: the WAL
/// is synced at each commit). Archivists acknowledge a message on another bus (SQS, RabbitMQ,
/// a bus in another file) once its write has committed: a commit still in the operating
/// system's cache would be lost with a power cut after the message is gone. One round trip:
/// SQLite runs both statements of the string.
const BEGIN_DURABLE: &str = "PRAGMA synchronous = FULL; BEGIN IMMEDIATE";

/// Begins a write that settles messages of the database bus in this file in the same
/// transaction (`synchronous = NORMAL`: the WAL is not synced at commit; a process crash loses
/// nothing, a power cut may lose the last commits). A commit lost so loses its
/// acknowledgement or its work item with it: the message comes back, and no lease is left
/// without its item.
const BEGIN_WITH_BUS: &str = "PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE";

/// A work item to publish in the lease's transaction: bus id, queue, encoder.
type Publish<'a> = (&'a str, &'a str, &'a EncodeWorkItem);

/// A write transaction and this process's turn to write; the turn ends when it is dropped.
type WriteTx = (Transaction<'static, Sqlite>, OwnedMutexGuard<()>);

impl SqliteDataStore {
    /// Opens the SQLite database at `url` (`sqlite://path`, `sqlite:path`, or
    /// `sqlite::memory:`), creating the file if missing, in WAL mode with foreign keys on and
    /// a busy timeout. Does not migrate.
    ///
    /// An in-memory URL gets a pool of exactly one connection that is never closed, so the
    /// database lives as long as the store.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url).map_err(|e| {
            DataStoreError::Config(format!("invalid SQLite URL {:?}: {e}", redact_url(url)))
        })?;
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = options
            .create_if_missing(true)
            .journal_mode(if in_memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            // Each write sets its own (see BEGIN_DURABLE): FULL for any other statement.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let (pool, writes) = if in_memory {
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(options)
                .await?;
            (pool.clone(), pool)
        } else {
            // Connections left inside a transaction SQLite ended by itself are not reused.
            let writes = messagebus::sql::sqlite::pool_options()
                .max_connections(1)
                .connect_with(options.clone())
                .await?;
            let pool = messagebus::sql::sqlite::pool_options()
                .max_connections(MAX_CONNECTIONS)
                .connect_with(options)
                .await?;
            (pool, writes)
        };
        tracing::debug!(url = %redact_url(url), "opened SQLite datastore");
        let writer = messagebus::sql::sqlite::write_gate(&writes);
        Ok(Self {
            pool,
            writes,
            writer,
            bus_id: Arc::new(tokio::sync::OnceCell::new()),
            durable: true,
        })
    }

    /// [`connect`](Self::connect), but no write syncs at commit (`synchronous = NORMAL`, as
    /// before writes were made durable): for the benchmark that measures what durability
    /// costs, in the same run. Never for data anyone keeps.
    #[cfg(feature = "test-utils")]
    #[doc(hidden)]
    pub async fn connect_without_sync(url: &str) -> Result<Self> {
        Ok(Self {
            durable: false,
            ..Self::connect(url).await?
        })
    }

    /// A new, empty, unmigrated database in memory, private to this store (and its clones).
    pub async fn in_memory() -> Result<Self> {
        Self::connect("sqlite::memory:").await
    }

    /// Starts a transaction that holds the write lock from its first statement, durable
    /// (its commit reaches the disk) unless it settles `with_bus` messages of a database bus
    /// in this same file.
    async fn begin_immediate(&self, with_bus: bool) -> Result<WriteTx> {
        let turn = self.writer.clone().lock_owned().await;
        let begin = if with_bus || !self.durable {
            BEGIN_WITH_BUS
        } else {
            BEGIN_DURABLE
        };
        Ok((self.writes.begin_with(begin).await?, turn))
    }
}

#[async_trait]
impl DataStore for SqliteDataStore {
    async fn migrate(&self) -> Result<()> {
        // sqlx's SQLite migrator takes no lock: holding the write lock for the whole run makes
        // concurrent `migrate` calls (from several processes) wait, then find nothing to do.
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        // `run_direct` sidesteps `run`'s lifetime-specific `Acquire` bound, which `#[async_trait]`'s
        // `Send` check cannot prove.
        MIGRATOR.run_direct(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    fn transactional_bus(&self) -> Option<&dyn TransactionalBus> {
        Some(self)
    }

    fn browse(&self) -> Option<&dyn Browse> {
        Some(self)
    }

    fn api_access(&self) -> Option<&dyn ApiAccess> {
        Some(self)
    }

    async fn missing_migrations(&self) -> Result<Vec<String>> {
        let has_table: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_one(&self.pool)
        .await?;
        let applied: Vec<i64> = if has_table == 0 {
            Vec::new()
        } else {
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await?
        };
        Ok(crate::store::missing(&MIGRATOR, &applied))
    }

    async fn upsert_episodes(&self, episodes: &[EpisodeInfo]) -> Result<()> {
        self.upsert(episodes, &[]).await
    }

    async fn upsert_clips(&self, clips: &[ClipInfo]) -> Result<()> {
        self.upsert(clips, &[]).await
    }

    async fn lease_next(&self, request: LeaseRequest) -> Result<Option<Lease>> {
        self.lease(request, None).await
    }

    async fn update_lease(&self, lease_id: Uuid, update: LeaseUpdate) -> Result<bool> {
        // One transaction, durable, for any of the three.
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let done = update_lease_in(&mut tx, lease_id, update).await?;
        tx.commit().await?;
        Ok(done)
    }

    async fn record_results(&self, results: &[ResearchResult]) -> Result<Vec<RecordOutcome>> {
        Ok(self.record(results, &[], &[]).await?.0)
    }

    async fn record_results_updating_leases(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)> {
        self.record(results, leases, &[]).await
    }
    async fn status(&self, now: DateTime<Utc>) -> Result<Status> {
        // One statement: one consistent snapshot.
        let row = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM episodes), \
                    (SELECT COUNT(*) FROM clips), \
                    (SELECT COALESCE(SUM(researched_count - failed_count), 0) FROM episodes), \
                    (SELECT COALESCE(SUM(matched_count), 0) FROM episodes), \
                    (SELECT COUNT(*) FROM leases \
                     WHERE expires_at > ?1 AND held_pairs > 0 AND revoked = 0), \
                    (SELECT COUNT(*) FROM leases WHERE expires_at <= ?1 AND held_pairs > 0), \
                    (SELECT COALESCE(SUM(held_pairs), 0) FROM leases WHERE expires_at > ?1), \
                    (SELECT COUNT(*) FROM leases \
                     WHERE expires_at > ?1 AND held_pairs > 0 AND revoked = 1), \
                    (SELECT COALESCE(SUM(failed_count), 0) FROM episodes)",
        )
        .bind(micros(now))
        .fetch_one(&self.pool)
        .await?;
        sql::status_from_row(&row)
    }

    async fn retry_failed(
        &self,
        episode_title: Option<&str>,
        clip_title: Option<&str>,
    ) -> Result<u64> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        // Walks the failed pairs only (research_results_failed_*, 0004).
        let episodes: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM research_results \
             WHERE failure IS NOT NULL \
               AND (?1 IS NULL OR episode_id IN (SELECT id FROM episodes WHERE title = ?1)) \
               AND (?2 IS NULL OR clip_id IN (SELECT id FROM clips WHERE title = ?2)) \
             RETURNING episode_id",
        )
        .bind(episode_title)
        .bind(clip_title)
        .fetch_all(&mut *tx)
        .await?;
        let mut per_episode: HashMap<i64, i64> = HashMap::new();
        for id in &episodes {
            *per_episode.entry(*id).or_default() += 1;
        }
        let counts: Vec<[i64; 2]> = per_episode.into_iter().map(|(id, n)| [id, n]).collect();
        if !counts.is_empty() {
            sqlx::query(
                "UPDATE episodes \
                 SET researched_count = researched_count - (j.value ->> 1), \
                     failed_count = failed_count - (j.value ->> 1) \
                 FROM json_each(?1) j WHERE episodes.id = j.value ->> 0",
            )
            .bind(json_string(&counts)?)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(u64::try_from(episodes.len()).unwrap_or(u64::MAX))
    }

    async fn forget_episode_results(
        &self,
        title: &str,
        date_aired: DateTime<Utc>,
    ) -> Result<Option<u64>> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let id: Option<i64> =
            sqlx::query_scalar("SELECT id FROM episodes WHERE title = ?1 AND date_aired = ?2")
                .bind(title)
                .bind(micros(date_aired))
                .fetch_optional(&mut *tx)
                .await?;
        let Some(id) = id else {
            return Ok(None);
        };
        // The primary key's prefix: the episode's results only.
        let gone = sqlx::query("DELETE FROM research_results WHERE episode_id = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        // Every result of the episode is gone, so are all it counted.
        sqlx::query(
            "UPDATE episodes SET researched_count = 0, matched_count = 0, failed_count = 0 \
             WHERE id = ?1",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM episode_completions WHERE episode_id = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(gone))
    }

    async fn failure_reasons(&self, limit: u32) -> Result<Vec<FailureReason>> {
        // Walks research_results_failed_reason (0004): failed pairs only.
        let rows = sqlx::query(
            "SELECT failure, COUNT(*) AS n FROM research_results \
             WHERE failure IS NOT NULL \
             GROUP BY failure ORDER BY n DESC, failure LIMIT ?1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(sql::failure_reason_from_row).collect()
    }

    async fn matches(&self, filter: &MatchFilter) -> Result<Vec<Match>> {
        let mut query = QueryBuilder::<Sqlite>::new(
            "SELECT e.title, e.date_aired, c.title, r.clip_offsets_ns, r.research_date, \
             r.clip_match_scores, r.episode_hash \
             FROM research_results r \
             JOIN episodes e ON e.id = r.episode_id \
             JOIN clips c ON c.id = r.clip_id \
             WHERE r.matched = 1",
        );
        if let Some(title) = &filter.clip_title {
            query.push(" AND c.title = ").push_bind(title);
        }
        if let Some(title) = &filter.episode_title {
            query.push(" AND e.title = ").push_bind(title);
        }
        if let Some(since) = filter.since {
            query
                .push(" AND r.research_date >= ")
                .push_bind(micros(since));
        }
        query.push(" ORDER BY e.date_aired DESC, e.title, c.title");
        if let Some(limit) = filter.limit {
            query
                .push(" LIMIT ")
                .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(sql::match_from_row).collect()
    }

    async fn recent_matches(&self, limit: u32) -> Result<Vec<Match>> {
        // Walks research_results_matched_recent (0003) from its newest end.
        let rows = sqlx::query(
            "SELECT e.title, e.date_aired, c.title, r.clip_offsets_ns, r.research_date, \
             r.clip_match_scores, r.episode_hash \
             FROM research_results r \
             JOIN episodes e ON e.id = r.episode_id \
             JOIN clips c ON c.id = r.clip_id \
             WHERE r.matched = 1 \
             ORDER BY r.research_date DESC, e.title, c.title \
             LIMIT ?1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(sql::match_from_row).collect()
    }

    async fn completions(&self, limit: u32) -> Result<Vec<EpisodeCompletion>> {
        let mut conn = self.pool.acquire().await?;
        sql::read_completions::<Self>(&mut conn, Which::All(limit)).await
    }

    async fn completions_announced(&self, ids: &[CompletionId]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let done = Self::completions_announced_in(&mut tx, ids).await?;
        tx.commit().await?;
        Ok(done)
    }

    async fn claim_completions(
        &self,
        limit: u32,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<EpisodeCompletion>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The write lock first: no other claimer reads the same completions meanwhile.
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let claimed: Vec<i64> = sqlx::query_scalar(
            "UPDATE episode_completions SET claimed_until = ?3 \
             WHERE episode_id IN \
                   (SELECT episode_id FROM episode_completions \
                    WHERE claimed_until IS NULL OR claimed_until <= ?2 \
                    ORDER BY completed_at, episode_id \
                    LIMIT ?1) \
             RETURNING episode_id",
        )
        .bind(i64::from(limit))
        .bind(micros(now))
        .bind(micros(until))
        .fetch_all(&mut *tx)
        .await?;
        let found = if claimed.is_empty() {
            Vec::new()
        } else {
            sql::read_completions::<Self>(&mut tx, Which::Claimed(&claimed)).await?
        };
        tx.commit().await?;
        Ok(found)
    }

    async fn release_completions(&self, ids: &[CompletionId]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let pairs: Vec<[i64; 2]> = ids.iter().map(|c| [c.episode_id, c.completions]).collect();
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let done = sqlx::query(
            "UPDATE episode_completions SET claimed_until = NULL \
             WHERE (episode_id, completions) IN \
                   (SELECT value ->> 0, value ->> 1 FROM json_each(?1))",
        )
        .bind(json_string(&pairs)?)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn leases(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<LeaseSummary>> {
        let rows = sqlx::query(
            "SELECT l.id, e.title, e.date_aired, l.created_at, l.expires_at, l.held_pairs, \
                    l.revoked \
             FROM leases l JOIN episodes e ON e.id = l.episode_id \
             WHERE l.held_pairs > 0 \
             ORDER BY l.expires_at <= ?1 DESC, l.created_at, l.id \
             LIMIT ?2",
        )
        .bind(micros(now))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| sql::lease_summary_from_row(row, now))
            .collect()
    }
}

/// Removes `owners` (one entry per pair a lease lost) from their leases' `held_pairs`, then
/// deletes those of them left holding nothing that are revoked (all their results are in) or,
/// with `expired_at`, that expired by then (they were taken over entirely). An unrevoked lease
/// emptied by recording stays until it expires: its researcher may still renew or revoke it.
/// [`DataStore::update_lease`] inside the caller's write transaction.
async fn update_lease_in(
    tx: &mut Transaction<'static, Sqlite>,
    lease_id: Uuid,
    update: LeaseUpdate,
) -> Result<bool> {
    match update {
        LeaseUpdate::Renew { now } => {
            // A revoked lease is not extended: its remaining pairs come back when it expires.
            // The lease keeps the length it was created with.
            let renewed = sqlx::query(
                "UPDATE leases SET expires_at = ?2 + duration_us \
                 WHERE id = ?1 AND expires_at > ?2 AND revoked = 0",
            )
            .bind(lease_id)
            .bind(micros(now))
            .execute(&mut **tx)
            .await?
            .rows_affected();
            Ok(renewed > 0)
        }
        LeaseUpdate::Revoke => {
            // Reads what the mark left (held_pairs) before deciding to delete: one write
            // transaction, so no recording can come between.
            let held: Option<i64> = sqlx::query_scalar(
                "UPDATE leases SET revoked = 1 WHERE id = ?1 AND revoked = 0 \
                 RETURNING held_pairs",
            )
            .bind(lease_id)
            .fetch_optional(&mut **tx)
            .await?;
            if held == Some(0) {
                // Every result is in: nothing is left to wait for.
                sqlx::query("DELETE FROM leases WHERE id = ?1")
                    .bind(lease_id)
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(held.is_some())
        }
        LeaseUpdate::Cancel => {
            // One statement; its leased_pairs rows go with it (ON DELETE CASCADE).
            let cancelled = sqlx::query("DELETE FROM leases WHERE id = ?1")
                .bind(lease_id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            Ok(cancelled > 0)
        }
    }
}

async fn release_pairs(
    tx: &mut Transaction<'static, Sqlite>,
    owners: &[Uuid],
    expired_at: Option<i64>,
) -> Result<()> {
    let mut lost: HashMap<Uuid, i64> = HashMap::new();
    for id in owners {
        *lost.entry(*id).or_default() += 1;
    }
    for (lease_id, n) in lost {
        let left: Option<(i64, bool, i64)> = sqlx::query_as(
            "UPDATE leases SET held_pairs = held_pairs - ?2 WHERE id = ?1 \
             RETURNING held_pairs, revoked, expires_at",
        )
        .bind(lease_id)
        .bind(n)
        .fetch_optional(&mut **tx)
        .await?;
        let ended = matches!(left, Some((0, revoked, expires_at))
            if revoked || expired_at.is_some_and(|now| expires_at <= now));
        if ended {
            sqlx::query("DELETE FROM leases WHERE id = ?1")
                .bind(lease_id)
                .execute(&mut **tx)
                .await?;
        }
    }
    Ok(())
}

/// The lease `id` as it stands, if it exists: its episode and the clips it still holds (most
/// urgent first). `reclaimed_pairs` is 0: what the lease took over is not kept.
async fn existing_lease(tx: &mut Transaction<'static, Sqlite>, id: Uuid) -> Result<Option<Lease>> {
    let Some(row) = sqlx::query(
        "SELECT l.expires_at, e.title, e.date_aired, e.initial_date_curated, \
                e.last_date_curated, e.curator_information, e.description, e.media_uri, \
                e.media_type, e.priority \
         FROM leases l JOIN episodes e ON e.id = l.episode_id WHERE l.id = ?1",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(None);
    };
    let clips = sqlx::query(
        "SELECT c.title, c.initial_date_curated, c.last_date_curated, c.curator_information, \
                c.description, c.media_uri, c.media_type, c.priority \
         FROM leased_pairs p JOIN clips c ON c.id = p.clip_id WHERE p.lease_id = ?1 \
         ORDER BY c.priority DESC, c.initial_date_curated DESC, c.id DESC",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?
    .iter()
    .map(sql::clip_from_row)
    .collect::<Result<Vec<_>>>()?;
    Ok(Some(Lease {
        id,
        expires_at: row.time("expires_at")?,
        episode: sql::episode_from_row(&row)?,
        clips,
        reclaimed_pairs: 0,
    }))
}

/// Runs `sql`, which maps `json_each(?1)` keys (array indexes) to ids, and returns the id of
/// each of the `len` array elements, `None` where there is no row.
async fn resolve(
    tx: &mut Transaction<'static, Sqlite>,
    sql: &'static str,
    json: String,
    len: usize,
) -> Result<Vec<Option<i64>>> {
    let mut ids = vec![None; len];
    let rows = sqlx::query(sql).bind(json).fetch_all(&mut **tx).await?;
    for row in rows {
        let key: i64 = row.try_get(0)?;
        let id: i64 = row.try_get(1)?;
        if let Some(slot) = usize::try_from(key).ok().and_then(|k| ids.get_mut(k)) {
            *slot = Some(id);
        }
    }
    Ok(ids)
}

/// What upserting episodes and clips differ in here: their table, identity and columns.
/// Every statement is a constant; every value is bound.
trait SqliteCurated: Curated {
    /// `INSERT INTO table (columns) `, before one `VALUES` row per item.
    const INSERT: &'static str;
    /// The values [`push_row`](Self::push_row) binds per item.
    const COLUMNS: usize;
    /// ` ON CONFLICT (identity)`, before [`UPDATE_ON_CONFLICT`].
    const ON_CONFLICT: &'static str;
    /// A row of the stored item whose identity is bound from `?1` on.
    const FIND: &'static str;
    /// The title of a stored item other than the one whose identity is bound from `?2` on
    /// that has the `media_uri` bound as `?1`.
    const URI_OWNER: &'static str;

    fn identity(&self) -> Identity<'_>;
    /// The item in messages, as `episode "Title" aired 2026-01-01 00:00:00 UTC`.
    fn describe(&self) -> String;
    /// Binds the item's [`COLUMNS`](Self::COLUMNS) values, in [`INSERT`](Self::INSERT)'s order.
    fn push_row<'args>(&'args self, row: Separated<'_, 'args, Sqlite, &'static str>);
}

/// An item's identity as stored: its title, and for an episode when it aired (microseconds).
type Identity<'a> = (&'a str, Option<i64>);

/// What a known item has updated: every field but its identity and `initial_date_curated`,
/// and only by a curation at least as new as the stored one (unqualified columns are the
/// stored row's): a release redelivered after a newer curation changes nothing.
const UPDATE_ON_CONFLICT: &str = " DO UPDATE SET \
     last_date_curated = excluded.last_date_curated, \
     curator_information = excluded.curator_information, \
     description = excluded.description, \
     media_uri = excluded.media_uri, \
     media_type = excluded.media_type, \
     priority = excluded.priority \
     WHERE excluded.last_date_curated >= last_date_curated";

impl SqliteCurated for EpisodeInfo {
    const INSERT: &'static str = "INSERT INTO episodes (title, date_aired, initial_date_curated, \
         last_date_curated, curator_information, description, media_uri, media_type, priority) ";
    const COLUMNS: usize = 9;
    const ON_CONFLICT: &'static str = " ON CONFLICT (title, date_aired)";
    const FIND: &'static str = "SELECT id FROM episodes WHERE title = ?1 AND date_aired = ?2";
    const URI_OWNER: &'static str = "SELECT title FROM episodes \
         WHERE media_uri = ?1 AND NOT (title = ?2 AND date_aired = ?3)";

    fn identity(&self) -> Identity<'_> {
        (&self.title, Some(micros(self.date_aired)))
    }
    fn describe(&self) -> String {
        format!("episode {:?} aired {}", self.title, self.date_aired)
    }
    fn push_row<'args>(&'args self, mut row: Separated<'_, 'args, Sqlite, &'static str>) {
        row.push_bind(&self.title)
            .push_bind(micros(self.date_aired))
            .push_bind(micros(self.initial_date_curated))
            .push_bind(micros(self.last_date_curated))
            .push_bind(&self.curator_information)
            .push_bind(&self.description)
            .push_bind(&self.media_uri)
            .push_bind(&self.media_type)
            .push_bind(self.priority);
    }
}

impl SqliteCurated for ClipInfo {
    const INSERT: &'static str = "INSERT INTO clips (title, initial_date_curated, \
         last_date_curated, curator_information, description, media_uri, media_type, priority) ";
    const COLUMNS: usize = 8;
    const ON_CONFLICT: &'static str = " ON CONFLICT (title)";
    const FIND: &'static str = "SELECT id FROM clips WHERE title = ?1";
    const URI_OWNER: &'static str = "SELECT title FROM clips WHERE media_uri = ?1 AND title <> ?2";

    fn identity(&self) -> Identity<'_> {
        (&self.title, None)
    }
    fn describe(&self) -> String {
        format!("clip {:?}", self.title)
    }
    fn push_row<'args>(&'args self, mut row: Separated<'_, 'args, Sqlite, &'static str>) {
        row.push_bind(&self.title)
            .push_bind(micros(self.initial_date_curated))
            .push_bind(micros(self.last_date_curated))
            .push_bind(&self.curator_information)
            .push_bind(&self.description)
            .push_bind(&self.media_uri)
            .push_bind(&self.media_type)
            .push_bind(self.priority);
    }
}

/// `query` with `identity` bound next: the title, then an episode's air time.
fn bind_identity<'q>(
    query: Query<'q, Sqlite, SqliteArguments<'q>>,
    (title, aired): Identity<'q>,
) -> Query<'q, Sqlite, SqliteArguments<'q>> {
    let query = query.bind(title);
    match aired {
        Some(aired) => query.bind(aired),
        None => query,
    }
}

impl SqliteDataStore {
    /// Inserts or updates `items` as [`DataStore::upsert_episodes`] describes, all or
    /// nothing, acknowledging the deliveries `acks` in the same transaction.
    async fn upsert<T: SqliteCurated>(&self, items: &[T], acks: &[SqlReceipt]) -> Result<()> {
        if let Some(first) = acks.first() {
            crate::store::check_bus(self, &first.bus_id).await?;
        }
        let batch = dedupe_newest(items);
        if batch.is_empty() {
            return Ok(());
        }
        check_unique_media_uris(&batch)?;
        let (mut tx, _turn) = self.begin_immediate(!acks.is_empty()).await?;
        // Only a new item must not be last curated before it was first curated, and such
        // items are rare: look up just those.
        for item in batch.iter().filter(|i| i.is_suspect()) {
            let known = bind_identity(sqlx::query(T::FIND), item.identity())
                .fetch_optional(&mut *tx)
                .await?;
            if known.is_none() {
                return Err(DataStoreError::Invalid(format!(
                    "new {} was last curated ({}) before it was first curated ({})",
                    item.describe(),
                    item.last_date_curated(),
                    item.initial_date_curated()
                )));
            }
        }
        for chunk in batch.chunks(MAX_BINDS / T::COLUMNS) {
            let mut query = QueryBuilder::<Sqlite>::new(T::INSERT);
            query.push_values(chunk, |row, item| item.push_row(row));
            query.push(T::ON_CONFLICT).push(UPDATE_ON_CONFLICT);
            if let Err(e) = query.build().execute(&mut *tx).await {
                if !is_unique_violation(&e) {
                    return Err(e.into());
                }
                return Err(uri_conflict(&mut tx, chunk, &e).await);
            }
        }
        messagebus::sql::sqlite::ack_in(&mut tx, acks).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`DataStore::lease_next`], publishing the work item in the same transaction if asked.
    async fn lease(
        &self,
        request: LeaseRequest,
        publish: Option<Publish<'_>>,
    ) -> Result<Option<Lease>> {
        if let Some((bus_id, _, _)) = publish {
            crate::store::check_bus(self, bus_id).await?;
        }
        let now = micros(request.now);
        let expires_at = request
            .now
            .checked_add_signed(request.duration)
            .ok_or_else(|| {
                DataStoreError::Invalid(format!(
                    "lease duration {} from {} is out of range",
                    request.duration, request.now
                ))
            })?;
        let max_clips = i64::from(request.max_clips.max(1));
        let (mut tx, _turn) = self.begin_immediate(publish.is_some()).await?;
        if let Some(lease) = existing_lease(&mut tx, request.lease_id).await? {
            // A call made again: the first one committed (and published, if asked).
            tx.commit().await?;
            return Ok(Some(lease));
        }

        // Kept by triggers (0008): COUNT(*) reads every clip.
        let clip_count: i64 = sqlx::query_scalar("SELECT n FROM clip_count")
            .fetch_one(&mut *tx)
            .await?;
        if clip_count == 0 {
            tx.commit().await?;
            return Ok(None);
        }

        // Walks episodes_urgency and stops at the first episode with a free pair. Fully
        // researched episodes are skipped on a column compare, before the lease lookup.
        let episode_row = sqlx::query(
            "SELECT e.id, e.title, e.date_aired, e.initial_date_curated, e.last_date_curated, \
                    e.curator_information, e.description, e.media_uri, e.media_type, e.priority \
             FROM episodes e \
             WHERE e.researched_count < ?2 \
               AND e.researched_count + COALESCE( \
                     (SELECT SUM(l.held_pairs) FROM leases l \
                      WHERE l.episode_id = e.id AND l.expires_at > ?1), 0) < ?2 \
             ORDER BY e.priority DESC, e.date_aired DESC, e.initial_date_curated DESC, \
                      e.id DESC \
             LIMIT 1",
        )
        .bind(now)
        .bind(clip_count)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(episode_row) = episode_row else {
            tx.commit().await?;
            return Ok(None);
        };
        let episode_id: i64 = episode_row.try_get("id")?;
        let episode = sql::episode_from_row(&episode_row)?;

        // Walks clips_urgency; `held` marks pairs still held by an expired lease.
        let clip_rows = sqlx::query(
            "SELECT c.id, c.title, c.initial_date_curated, c.last_date_curated, \
                    c.curator_information, c.description, c.media_uri, c.media_type, \
                    c.priority, \
                    EXISTS (SELECT 1 FROM leased_pairs p \
                            WHERE p.episode_id = ?1 AND p.clip_id = c.id) AS held \
             FROM clips c \
             WHERE NOT EXISTS (SELECT 1 FROM research_results r \
                               WHERE r.episode_id = ?1 AND r.clip_id = c.id) \
               AND NOT EXISTS (SELECT 1 FROM leased_pairs p JOIN leases l ON l.id = p.lease_id \
                               WHERE p.episode_id = ?1 AND p.clip_id = c.id \
                                 AND l.expires_at > ?2) \
             ORDER BY c.priority DESC, c.initial_date_curated DESC, c.id DESC \
             LIMIT ?3",
        )
        .bind(episode_id)
        .bind(now)
        .bind(max_clips)
        .fetch_all(&mut *tx)
        .await?;
        if clip_rows.is_empty() {
            // Cannot happen while researched_count and held_pairs are exact; say so loudly
            // rather than hand out an empty work item.
            tracing::warn!(
                episode_id,
                "episode counted as having free pairs but none were found"
            );
            tx.commit().await?;
            return Ok(None);
        }
        let mut clip_ids = Vec::with_capacity(clip_rows.len());
        let mut held_ids = Vec::new();
        let mut clips = Vec::with_capacity(clip_rows.len());
        for row in &clip_rows {
            let id: i64 = row.try_get("id")?;
            clip_ids.push(id);
            if row.try_get::<bool, _>("held")? {
                held_ids.push(id);
            }
            clips.push(sql::clip_from_row(row)?);
        }

        // Take over the pairs of expired leases.
        let reclaimed_pairs = held_ids.len();
        if !held_ids.is_empty() {
            let owners: Vec<Uuid> = sqlx::query_scalar(
                "DELETE FROM leased_pairs \
                 WHERE episode_id = ?1 AND clip_id IN (SELECT value FROM json_each(?2)) \
                 RETURNING lease_id",
            )
            .bind(episode_id)
            .bind(json_ids(&held_ids))
            .fetch_all(&mut *tx)
            .await?;
            release_pairs(&mut tx, &owners, Some(now)).await?;
        }

        let lease_id = request.lease_id;
        sqlx::query(
            "INSERT INTO leases (id, episode_id, created_at, expires_at, held_pairs, duration_us) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?4 - ?3)",
        )
        .bind(lease_id)
        .bind(episode_id)
        .bind(now)
        .bind(micros(expires_at))
        .bind(len_i64(clip_ids.len()))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO leased_pairs (episode_id, clip_id, lease_id) \
             SELECT ?1, value, ?2 FROM json_each(?3)",
        )
        .bind(episode_id)
        .bind(lease_id)
        .bind(json_ids(&clip_ids))
        .execute(&mut *tx)
        .await?;
        let lease = Lease {
            id: lease_id,
            expires_at: time(micros(expires_at))?,
            episode,
            clips,
            reclaimed_pairs: u32::try_from(reclaimed_pairs).unwrap_or(u32::MAX),
        };
        if let Some((_, queue, encode)) = publish {
            messagebus::sql::sqlite::send_in(&mut tx, queue, vec![encode(&lease)]).await?;
        }
        tx.commit().await?;
        if let Some((bus_id, queue, _)) = publish {
            // No notification on SQLite: this process's researchers look at once.
            messagebus::sql::sent_in(bus_id, queue);
        }
        tracing::debug!(
            %lease_id,
            episode = %lease.episode.title,
            clips = lease.clips.len(),
            reclaimed_pairs,
            "leased"
        );
        Ok(Some(lease))
    }

    /// [`DataStore::record_results_updating_leases`], acknowledging in the same transaction
    /// the delivery (`acks[i]`, if any) of each result not for an unknown pair.
    async fn record(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
        acks: &[SqlReceipt],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)> {
        if let Some(first) = acks.first() {
            crate::store::check_bus(self, &first.bus_id).await?;
        }
        if results.is_empty() && leases.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let (mut tx, _turn) = self.begin_immediate(!acks.is_empty()).await?;
        let outcomes = record_in(&mut tx, results).await?;
        let mut updated = Vec::with_capacity(leases.len());
        for &(lease_id, update) in leases {
            updated.push(update_lease_in(&mut tx, lease_id, update).await?);
        }
        ack_recorded(&mut tx, acks, &outcomes).await?;
        tx.commit().await?;
        Ok((outcomes, updated))
    }
}

/// [`DataStore::record_results`] inside the caller's write transaction.
async fn record_in(
    tx: &mut Transaction<'static, Sqlite>,
    results: &[ResearchResult],
) -> Result<Vec<RecordOutcome>> {
    let mut outcomes = vec![RecordOutcome::UnknownEpisode; results.len()];
    if results.is_empty() {
        return Ok(outcomes);
    }
    // Resolve identities to ids, each distinct one once, in one statement per kind.
    let mut episode_keys: Vec<(&str, i64)> = Vec::new();
    let mut episode_index: HashMap<(&str, i64), usize> = HashMap::new();
    let mut clip_titles: Vec<&str> = Vec::new();
    let mut clip_index: HashMap<&str, usize> = HashMap::new();
    for r in results {
        let key = (r.episode.title.as_str(), micros(r.episode.date_aired));
        episode_index.entry(key).or_insert_with(|| {
            episode_keys.push(key);
            episode_keys.len() - 1
        });
        clip_index.entry(r.clip_title.as_str()).or_insert_with(|| {
            clip_titles.push(r.clip_title.as_str());
            clip_titles.len() - 1
        });
    }
    let episode_ids = resolve(
        tx,
        "SELECT j.key, e.id FROM json_each(?1) j \
         JOIN episodes e ON e.title = j.value ->> 0 AND e.date_aired = j.value ->> 1",
        json_string(&episode_keys)?,
        episode_keys.len(),
    )
    .await?;
    let clip_ids = resolve(
        tx,
        "SELECT j.key, c.id FROM json_each(?1) j JOIN clips c ON c.title = j.value",
        json_string(&clip_titles)?,
        clip_titles.len(),
    )
    .await?;

    // Known pairs, first occurrence in the batch only; later ones are duplicates.
    struct Candidate<'a> {
        index: usize,
        episode_id: i64,
        clip_id: i64,
        result: &'a ResearchResult,
        offsets: String,
        scores: Option<String>,
    }
    let mut seen = HashSet::new();
    let mut candidates = Vec::new();
    for (index, r) in results.iter().enumerate() {
        let e = episode_index
            .get(&(r.episode.title.as_str(), micros(r.episode.date_aired)))
            .and_then(|&i| episode_ids[i]);
        let c = clip_index
            .get(r.clip_title.as_str())
            .and_then(|&i| clip_ids[i]);
        let (Some(episode_id), Some(clip_id)) = (e, c) else {
            outcomes[index] = if e.is_none() {
                RecordOutcome::UnknownEpisode
            } else {
                RecordOutcome::UnknownClip
            };
            continue;
        };
        if !seen.insert((episode_id, clip_id)) {
            outcomes[index] = RecordOutcome::Duplicate;
            continue;
        }
        candidates.push(Candidate {
            index,
            episode_id,
            clip_id,
            result: r,
            offsets: json_string(&r.clip_offsets_ns)?,
            scores: match &r.clip_match_scores {
                Some(s) if s.len() == r.clip_offsets_ns.len() => Some(json_string(s)?),
                Some(_) => {
                    return Err(DataStoreError::Invalid(
                        "clip_match_scores: not one per offset".to_string(),
                    ))
                }
                None => None,
            },
        });
    }

    // A success replaces a recorded failure: the failed row goes first (found through the
    // partial index of failures, so a batch without any costs one empty index probe per
    // episode), and the success is then inserted as new.
    let mut replaced: HashMap<i64, i64> = HashMap::new();
    let successes: Vec<[i64; 2]> = candidates
        .iter()
        .filter(|c| c.result.failure.is_none())
        .map(|c| [c.episode_id, c.clip_id])
        .collect();
    if !successes.is_empty() {
        let episodes: Vec<i64> = successes
            .iter()
            .map(|p| p[0])
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let gone: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM research_results \
             WHERE failure IS NOT NULL \
               AND episode_id IN (SELECT value FROM json_each(?1)) \
               AND (episode_id, clip_id) IN \
                   (SELECT value ->> 0, value ->> 1 FROM json_each(?2)) \
             RETURNING episode_id",
        )
        .bind(json_ids(&episodes))
        .bind(json_string(&successes)?)
        .fetch_all(&mut **tx)
        .await?;
        for id in gone {
            *replaced.entry(id).or_default() += 1;
        }
    }

    // Insert; RETURNING names the pairs that were new.
    let mut inserted: HashSet<(i64, i64)> = HashSet::new();
    for chunk in candidates.chunks(MAX_BINDS / 12) {
        let mut query = QueryBuilder::<Sqlite>::new(
            "INSERT INTO research_results (episode_id, clip_id, lease_id, research_date, \
             episode_duration_ns, episode_hash, clip_duration_ns, clip_hash, \
             clip_offsets_ns, matched, failure, clip_match_scores) ",
        );
        query.push_values(chunk, |mut row, c| {
            row.push_bind(c.episode_id)
                .push_bind(c.clip_id)
                .push_bind(c.result.lease_id)
                .push_bind(micros(c.result.research_date))
                .push_bind(c.result.episode_duration_ns)
                .push_bind(&c.result.episode_hash)
                .push_bind(c.result.clip_duration_ns)
                .push_bind(&c.result.clip_hash)
                .push_bind(&c.offsets)
                .push_bind(c.result.failure.is_none() && !c.result.clip_offsets_ns.is_empty())
                .push_bind(c.result.failure.as_deref())
                .push_bind(c.scores.as_deref());
        });
        query.push(" ON CONFLICT (episode_id, clip_id) DO NOTHING RETURNING episode_id, clip_id");
        let rows = query.build().fetch_all(&mut **tx).await?;
        for row in rows {
            inserted.insert((row.try_get(0)?, row.try_get(1)?));
        }
    }

    keep_findability(tx, candidates.iter().map(|c| (c.clip_id, c.result))).await?;

    // Count the new results per episode and free their pairs from whatever lease holds them.
    // (researched, matched, failed) per episode; a replaced failure is one pair less
    // recorded and one less failed.
    let mut per_episode: HashMap<i64, (i64, i64, i64)> =
        replaced.iter().map(|(id, n)| (*id, (-n, 0, -n))).collect();
    let mut recorded_pairs = Vec::new();
    for c in &candidates {
        if inserted.contains(&(c.episode_id, c.clip_id)) {
            outcomes[c.index] = RecordOutcome::Recorded;
            let entry = per_episode.entry(c.episode_id).or_default();
            let failed = c.result.failure.is_some();
            entry.0 += 1;
            entry.1 += i64::from(!failed && !c.result.clip_offsets_ns.is_empty());
            entry.2 += i64::from(failed);
            recorded_pairs.push([c.episode_id, c.clip_id]);
        } else {
            outcomes[c.index] = RecordOutcome::Duplicate;
        }
    }
    if recorded_pairs.is_empty() {
        return Ok(outcomes);
    }
    let counts: Vec<[i64; 4]> = per_episode
        .iter()
        .map(|(id, (researched, matched, failed))| [*id, *researched, *matched, *failed])
        .collect();
    let now_counted: Vec<(i64, i64)> = sqlx::query_as(
        "UPDATE episodes \
         SET researched_count = researched_count + (j.value ->> 1), \
             matched_count = matched_count + (j.value ->> 2), \
             failed_count = failed_count + (j.value ->> 3) \
         FROM json_each(?1) j WHERE episodes.id = j.value ->> 0 \
         RETURNING id, researched_count",
    )
    .bind(json_string(&counts)?)
    .fetch_all(&mut **tx)
    .await?;
    // Per episode, the latest research among the batch's new results: when it completed,
    // if it did.
    let mut latest: HashMap<i64, i64> = HashMap::new();
    for c in candidates
        .iter()
        .filter(|c| inserted.contains(&(c.episode_id, c.clip_id)))
    {
        let at = latest.entry(c.episode_id).or_insert(i64::MIN);
        *at = (*at).max(micros(c.result.research_date));
    }
    keep_completions(tx, &now_counted, &per_episode, &latest).await?;
    let owners: Vec<Uuid> = sqlx::query_scalar(
        "DELETE FROM leased_pairs \
         WHERE (episode_id, clip_id) IN \
               (SELECT value ->> 0, value ->> 1 FROM json_each(?1)) \
         RETURNING lease_id",
    )
    .bind(json_string(&recorded_pairs)?)
    .fetch_all(&mut **tx)
    .await?;
    // A revoked lease that lost its last pair here has all its results in: it ends.
    release_pairs(tx, &owners, None).await?;
    tracing::debug!(
        results = results.len(),
        recorded = recorded_pairs.len(),
        freed_from_leases = owners.len(),
        "recorded results"
    );
    Ok(outcomes)
}

/// Keeps on each clip the findability its results carry (0013), the batch's last for a clip;
/// a clip whose stored value is the same is not written. No statement when none carries one.
async fn keep_findability(
    tx: &mut Transaction<'static, Sqlite>,
    results: impl Iterator<Item = (i64, &ResearchResult)>,
) -> Result<()> {
    let per_clip: std::collections::BTreeMap<i64, i32> = results
        .filter_map(|(clip, r)| Some((clip, r.clip_findability?.stored())))
        .collect();
    if per_clip.is_empty() {
        return Ok(());
    }
    let rows: Vec<[i64; 2]> = per_clip
        .into_iter()
        .map(|(clip, v)| [clip, i64::from(v)])
        .collect();
    sqlx::query(
        "UPDATE clips SET findable_from_db = j.value ->> 1 \
         FROM json_each(?1) j \
         WHERE clips.id = j.value ->> 0 AND clips.findable_from_db IS NOT j.value ->> 1",
    )
    .bind(json_string(&rows)?)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Keeps the completion of each episode whose last pair this batch recorded (0005): its count
/// of recorded pairs (`now_counted`, after the batch) reached the clip count, and was below it
/// before the batch's new results (`per_episode`). The clip count is read only when some
/// episode may have completed.
async fn keep_completions(
    tx: &mut Transaction<'static, Sqlite>,
    now_counted: &[(i64, i64)],
    per_episode: &HashMap<i64, (i64, i64, i64)>,
    latest: &HashMap<i64, i64>,
) -> Result<()> {
    let grew: Vec<(i64, i64, i64)> = now_counted
        .iter()
        .filter_map(|&(id, count)| {
            let added = per_episode.get(&id).map_or(0, |c| c.0);
            (added > 0).then_some((id, count, added))
        })
        .collect();
    if grew.is_empty() {
        return Ok(());
    }
    let clips: i64 = sqlx::query_scalar("SELECT n FROM clip_count")
        .fetch_one(&mut **tx)
        .await?;
    for (id, count, added) in grew {
        if count < clips || count - added >= clips {
            continue;
        }
        let at = latest.get(&id).copied().unwrap_or_default();
        sqlx::query(
            "INSERT INTO episode_completions (episode_id, completed_at) VALUES (?1, ?2) \
             ON CONFLICT (episode_id) DO UPDATE \
             SET completions = completions + 1, completed_at = excluded.completed_at, \
                 claimed_until = NULL",
        )
        .bind(id)
        .bind(at)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Acknowledges, in the recording transaction, the delivery of each result that is not for an
/// unknown pair (those stay in hand to be dead-lettered).
async fn ack_recorded(
    tx: &mut Transaction<'static, Sqlite>,
    acks: &[SqlReceipt],
    outcomes: &[RecordOutcome],
) -> Result<()> {
    if acks.is_empty() {
        return Ok(());
    }
    let settle: Vec<SqlReceipt> = acks
        .iter()
        .zip(outcomes)
        .filter(|(_, o)| !o.is_unknown())
        .map(|(a, _)| a.clone())
        .collect();
    messagebus::sql::sqlite::ack_in(tx, &settle).await?;
    Ok(())
}

/// The items of `batch` with distinct identities, in batch order; of several with one identity
/// the newest curation (`last_date_curated`) wins, and of equally new ones the later.
fn dedupe_newest<T: SqliteCurated>(batch: &[T]) -> Vec<&T> {
    let mut kept: Vec<usize> = sql::newest(batch, |i| i.identity(), |i| i.last_date_curated())
        .into_values()
        .collect();
    kept.sort_unstable();
    kept.into_iter().map(|i| &batch[i]).collect()
}

/// Two distinct items of one batch with the same `media_uri` are a conflict.
fn check_unique_media_uris<T: SqliteCurated>(batch: &[&T]) -> Result<()> {
    match sql::batch_uri_conflict(batch, |i| i.identity(), |i| i.media_uri()) {
        Some(uri) => Err(DataStoreError::Conflict(format!(
            "media_uri {uri:?} is given to two {} in one batch",
            T::TABLE
        ))),
        None => Ok(()),
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Names the item of `chunk` whose `media_uri` belongs to another stored item.
async fn uri_conflict<T: SqliteCurated>(
    tx: &mut Transaction<'static, Sqlite>,
    chunk: &[&T],
    cause: &sqlx::Error,
) -> DataStoreError {
    for item in chunk {
        let owner = bind_identity(
            sqlx::query(T::URI_OWNER).bind(item.media_uri()),
            item.identity(),
        )
        .fetch_optional(&mut **tx)
        .await;
        if let Ok(Some(owner)) = owner {
            if let Ok(title) = owner.try_get::<String, _>(0) {
                return DataStoreError::Conflict(format!(
                    "media_uri {:?} of {} belongs to {} {title:?}",
                    item.media_uri(),
                    item.describe(),
                    T::KIND
                ));
            }
        }
    }
    DataStoreError::Conflict(format!("{}: {cause}", T::TABLE))
}

impl StoreRow for SqliteRow {
    sql::decoded_columns!();
    fn counter<I: ColumnIndex<Self>>(&self, at: I) -> Result<i64> {
        Ok(self.try_get(at)?)
    }
    /// Times are INTEGER unix microseconds.
    fn time<I: ColumnIndex<Self>>(&self, at: I) -> Result<DateTime<Utc>> {
        time(self.try_get(at)?)
    }
    /// Offsets are a JSON array.
    fn offsets<I: ColumnIndex<Self>>(&self, at: I) -> Result<Vec<i64>> {
        let text: String = self.try_get(at)?;
        serde_json::from_str(&text).map_err(|e| corrupt(format!("clip_offsets_ns {text:?}: {e}")))
    }
    fn scores<I: ColumnIndex<Self>>(&self, at: I) -> Result<Option<Vec<f64>>> {
        let text: Option<String> = self.try_get(at)?;
        text.map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| corrupt(format!("clip_match_scores {text:?}: {e}")))
        })
        .transpose()
    }
}

/// A time as stored: unix microseconds (finer precision is dropped).
fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// A stored time.
fn time(us: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| corrupt(format!("time {us}µs out of range")))
}

/// Stored data this adapter cannot have written.
fn corrupt(what: String) -> DataStoreError {
    DataStoreError::Database(sqlx::Error::Decode(what.into()))
}

fn json_ids(ids: &[i64]) -> String {
    // Integers always serialise; the fallback is never used.
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".into())
}

fn json_string<T: serde::Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| DataStoreError::Invalid(e.to_string()))
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl TransactionalBus for SqliteDataStore {
    async fn holds_bus(&self, bus_id: &str) -> Result<bool> {
        if let Some(id) = self.bus_id.get() {
            return Ok(id == bus_id);
        }
        let mut conn = self.pool.acquire().await?;
        let found = messagebus::sql::sqlite::bus_id_in(&mut conn).await?;
        Ok(crate::store::remember_bus(&self.bus_id, found, bus_id))
    }

    async fn upsert_episodes_and_ack(
        &self,
        episodes: &[EpisodeInfo],
        acks: &[SqlReceipt],
    ) -> Result<()> {
        self.upsert(episodes, acks).await
    }

    async fn upsert_clips_and_ack(&self, clips: &[ClipInfo], acks: &[SqlReceipt]) -> Result<()> {
        self.upsert(clips, acks).await
    }

    async fn record_results_and_ack(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
        acks: &[SqlReceipt],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)> {
        self.record(results, leases, acks).await
    }

    async fn lease_next_and_publish(
        &self,
        request: LeaseRequest,
        bus_id: &str,
        queue: &str,
        encode: &EncodeWorkItem,
    ) -> Result<Option<Lease>> {
        self.lease(request, Some((bus_id, queue, encode))).await
    }

    async fn announce_completions(
        &self,
        limit: u32,
        bus_id: &str,
        queue: &str,
        encode: &EncodeCompletion,
    ) -> Result<u64> {
        crate::store::check_bus(self, bus_id).await?;
        // The write lock first: no other announcer reads the same completions meanwhile.
        let (mut tx, _turn) = self.begin_immediate(true).await?;
        let announced = sql::announce_in::<Self>(&mut tx, limit, queue, encode).await?;
        if announced > 0 {
            tx.commit().await?;
        }
        Ok(announced)
    }
}

// ------------------------------------------------------------------------------------ browsing

/// The FTS5 query for `words` (see [`crate::browse::search_words`]): each word a prefix, all of them
/// required. The words are letters and digits only, quoted, so no input is FTS5 syntax.
fn fts_query(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{w}\"*"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[async_trait]
impl Dialect for SqliteDataStore {
    type DB = Sqlite;
    type Row = SqliteRow;

    const MATCHED: &'static str = "r.matched = 1";
    const OCCURRENCES: &'static str = "SUM(json_array_length(r.clip_offsets_ns))";
    /// Through the FTS5 index of clip titles (0007).
    const CLIP_SEARCH: &'static str = " WHERE c.id IN (SELECT rowid FROM clips_title_words \
         WHERE clips_title_words MATCH ";
    /// Through the FTS5 index of episode titles (0007).
    const EPISODE_SEARCH: &'static str = " AND e.id IN (SELECT rowid FROM episodes_title_words \
         WHERE episodes_title_words MATCH ";

    fn search_query(words: &[String]) -> String {
        fts_query(words)
    }
    fn push_int(q: &mut QueryBuilder<'_, Sqlite>, value: i64) {
        q.push_bind(value);
    }
    fn push_text(q: &mut QueryBuilder<'_, Sqlite>, value: String) {
        q.push_bind(value);
    }
    fn push_time(q: &mut QueryBuilder<'_, Sqlite>, value: DateTime<Utc>) {
        q.push_bind(micros(value));
    }
    fn push_cursor_time(q: &mut QueryBuilder<'_, Sqlite>, micros: i64) -> Result<()> {
        q.push_bind(micros);
        Ok(())
    }

    async fn fetch_all(
        conn: &mut SqliteConnection,
        q: &mut QueryBuilder<'_, Sqlite>,
    ) -> Result<Vec<SqliteRow>> {
        Ok(q.build().fetch_all(conn).await?)
    }
    async fn fetch_optional(
        conn: &mut SqliteConnection,
        q: &mut QueryBuilder<'_, Sqlite>,
    ) -> Result<Option<SqliteRow>> {
        Ok(q.build().fetch_optional(conn).await?)
    }

    async fn completion_rows(
        conn: &mut SqliteConnection,
        which: Which<'_>,
    ) -> Result<Vec<SqliteRow>> {
        macro_rules! completions {
            ($rest:literal) => {
                concat!(
                    "SELECT u.episode_id, u.completions, u.completed_at, \
                            e.title, e.date_aired, e.initial_date_curated, e.last_date_curated, \
                            e.curator_information, e.description, e.media_uri, e.media_type, \
                            e.priority, e.researched_count - e.failed_count AS researched, \
                            e.matched_count AS matched, e.failed_count AS failed \
                     FROM episode_completions u JOIN episodes e ON e.id = u.episode_id ",
                    $rest
                )
            };
        }
        let query = match which {
            Which::All(limit) => sqlx::query(completions!(
                "ORDER BY u.completed_at, u.episode_id LIMIT ?1"
            ))
            .bind(i64::from(limit)),
            // The caller holds the write lock: no other announcer reads them meanwhile.
            Which::ToAnnounce(limit, now) => sqlx::query(completions!(
                "WHERE u.claimed_until IS NULL OR u.claimed_until <= ?2 \
                 ORDER BY u.completed_at, u.episode_id LIMIT ?1"
            ))
            .bind(i64::from(limit))
            .bind(micros(now)),
            Which::Claimed(ids) => sqlx::query(completions!(
                "WHERE u.episode_id IN (SELECT value FROM json_each(?1)) \
                 ORDER BY u.completed_at, u.episode_id"
            ))
            .bind(json_ids(ids)),
        };
        Ok(query.fetch_all(conn).await?)
    }
    async fn completion_matches(
        conn: &mut SqliteConnection,
        ids: &[i64],
    ) -> Result<Vec<SqliteRow>> {
        Ok(sqlx::query(
            "SELECT r.episode_id, r.clip_offsets_ns, c.title, c.initial_date_curated, \
                    c.last_date_curated, c.curator_information, c.description, c.media_uri, \
                    c.media_type, c.priority \
             FROM research_results r JOIN clips c ON c.id = r.clip_id \
             WHERE r.episode_id IN (SELECT value FROM json_each(?1)) AND r.matched = 1",
        )
        .bind(json_ids(ids))
        .fetch_all(conn)
        .await?)
    }
    async fn completions_announced_in(
        conn: &mut SqliteConnection,
        ids: &[CompletionId],
    ) -> Result<u64> {
        let pairs: Vec<[i64; 2]> = ids.iter().map(|c| [c.episode_id, c.completions]).collect();
        let done = sqlx::query(
            "DELETE FROM episode_completions \
             WHERE (episode_id, completions) IN \
                   (SELECT value ->> 0, value ->> 1 FROM json_each(?1))",
        )
        .bind(json_string(&pairs)?)
        .execute(conn)
        .await?;
        Ok(done.rows_affected())
    }
    async fn send_in(conn: &mut SqliteConnection, queue: &str, bodies: Vec<Vec<u8>>) -> Result<()> {
        Ok(messagebus::sql::sqlite::send_in(conn, queue, bodies).await?)
    }
}

#[async_trait]
impl Browse for SqliteDataStore {
    async fn list_clips(&self, query: &ListQuery) -> Result<Page<ClipSummary>> {
        let mut conn = self.pool.acquire().await?;
        sql::list_clips::<Self>(&mut conn, query).await
    }

    async fn list_episodes(&self, query: &ListQuery) -> Result<Page<EpisodeSummary>> {
        let mut conn = self.pool.acquire().await?;
        sql::list_episodes::<Self>(&mut conn, query).await
    }

    async fn clip_page(&self, id: i64, page: &ListQuery) -> Result<Option<ClipPage>> {
        // One read transaction: the counts and the page agree.
        let mut tx = self.pool.begin().await?;
        let found = sql::clip_page::<Self>(&mut tx, id, page).await?;
        if found.is_some() {
            tx.commit().await?;
        }
        Ok(found)
    }

    async fn episode_page(&self, id: i64, now: DateTime<Utc>) -> Result<Option<EpisodePage>> {
        let mut tx = self.pool.begin().await?;
        let found = sql::episode_page::<Self>(&mut tx, id, now).await?;
        if found.is_some() {
            tx.commit().await?;
        }
        Ok(found)
    }
}

#[cfg(all(test, feature = "test-utils"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use messagebus::Bus;

    use super::*;
    use crate::testing::{clip, episode, t0};

    /// `PRAGMA synchronous` as the last write left the writer connection: 2 FULL, 1 NORMAL.
    async fn synchronous(store: &SqliteDataStore) -> i64 {
        sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&store.writes)
            .await
            .unwrap()
    }

    /// Every write commits durably (FULL: a power cut after an archivist acknowledged the
    /// message on another bus must not lose it), except those that settle messages of the
    /// database bus in this same file in the same transaction (NORMAL: a lost commit loses its
    /// acknowledgement or its work item with it).
    #[tokio::test]
    async fn writes_are_durable_unless_they_settle_the_bus_in_the_same_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("archivist.sqlite").display());
        let store = SqliteDataStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        assert_eq!(synchronous(&store).await, 2);
        store.upsert_episodes(&[episode(1)]).await.unwrap();
        assert_eq!(synchronous(&store).await, 2, "upsert");
        store.upsert_clips(&[clip(1), clip(2)]).await.unwrap();
        let request = |id| LeaseRequest {
            max_clips: 1,
            duration: chrono::Duration::hours(1),
            now: t0(),
            lease_id: id,
        };

        let bus = messagebus::sql::SqliteBus::connect(&url, Default::default())
            .await
            .unwrap();
        bus.create_queue("pending_research").await.unwrap();
        let bus_id = bus.migrate().await.unwrap();
        let encode: &EncodeWorkItem = &|lease: &Lease| lease.id.to_string().into_bytes();
        let lease = store
            .lease_next_and_publish(request(Uuid::new_v4()), &bus_id, "pending_research", encode)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            synchronous(&store).await,
            1,
            "lease and publish in one transaction"
        );
        store
            .update_lease(lease.id, LeaseUpdate::Renew { now: t0() })
            .await
            .unwrap();
        assert_eq!(synchronous(&store).await, 2, "renew");
        store
            .lease_next(request(Uuid::new_v4()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(synchronous(&store).await, 2, "lease without the bus");

        // Upserts and recordings that acknowledge their messages in the same transaction.
        let receipt = |queue: &'static str, body: &'static str| {
            let bus = &bus;
            async move {
                bus.create_queue(queue).await.unwrap();
                bus.sender(queue)
                    .await
                    .unwrap()
                    .send(body.as_bytes().to_vec())
                    .await
                    .unwrap();
                let delivery = bus
                    .receiver(queue)
                    .await
                    .unwrap()
                    .receive(1, std::time::Duration::from_secs(1))
                    .await
                    .unwrap()
                    .pop()
                    .unwrap();
                let receipt = delivery.sql_receipt().unwrap();
                delivery.settled_elsewhere();
                receipt
            }
        };
        let ack = receipt("curated_episodes", "episode").await;
        store
            .upsert_episodes_and_ack(&[episode(2)], &[ack])
            .await
            .unwrap();
        assert_eq!(synchronous(&store).await, 1, "upsert and acknowledge");
        store.upsert_episodes(&[episode(3)]).await.unwrap();
        assert_eq!(synchronous(&store).await, 2, "upsert alone");
        let ack = receipt("completed_research", "result").await;
        let result = crate::testing::result(lease.id, &episode(1), &clip(1), &[]);
        store
            .record_results_and_ack(&[result], &[], &[ack])
            .await
            .unwrap();
        assert_eq!(synchronous(&store).await, 1, "record and acknowledge");
    }
}

/// A token row: name, scope, created, last used, most researchers.
fn token_info(row: &SqliteRow) -> Result<TokenInfo> {
    let scope: String = row.try_get(1)?;
    let last_used: Option<i64> = row.try_get(3)?;
    let max_researchers: i64 = row.try_get(4)?;
    Ok(TokenInfo {
        name: row.try_get(0)?,
        scope: scope
            .parse::<TokenScope>()
            .map_err(|e| corrupt(format!("api_tokens.scope: {e}")))?,
        created: time(row.try_get(2)?)?,
        last_used: last_used.map(time).transpose()?,
        max_researchers: u32::try_from(max_researchers)
            .map_err(|e| corrupt(format!("api_tokens.max_researchers: {e}")))?,
    })
}

/// A held item's row: receipt hash, token, bus receipt, item, taken.
fn held_item(row: &SqliteRow) -> Result<HeldItem> {
    Ok(HeldItem {
        receipt_hash: row.try_get(0)?,
        token: row.try_get(1)?,
        bus_receipt: row.try_get(2)?,
        item: row.try_get(3)?,
        seen_at: time(row.try_get(4)?)?,
    })
}

#[async_trait]
impl ApiAccess for SqliteDataStore {
    async fn create_token(&self, token: &NewToken) -> Result<()> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        // A revoked token's name may be taken again: the revoked row goes.
        sqlx::query("DELETE FROM api_tokens WHERE name = ? AND revoked_at IS NOT NULL")
            .bind(&token.name)
            .execute(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO api_tokens (name, scope, token_hash, created_at, max_researchers) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&token.name)
        .bind(token.scope.as_str())
        .bind(&token.hash)
        .bind(micros(token.created))
        .bind(i64::from(token.max_researchers))
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                return Err(DataStoreError::Conflict(format!(
                    "a token named {:?} exists already",
                    token.name
                )))
            }
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        Ok(())
    }

    async fn tokens(&self) -> Result<Vec<TokenInfo>> {
        let rows = sqlx::query(
            "SELECT name, scope, created_at, last_used_at, max_researchers \
             FROM api_tokens \
             WHERE revoked_at IS NULL \
             ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(token_info).collect()
    }

    async fn revoke_token(&self, name: &str) -> Result<bool> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let gone = sqlx::query(
            "UPDATE api_tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
        )
        .bind(micros(Utc::now()))
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(gone > 0)
    }

    async fn revoked_token(&self, hash: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT name FROM api_tokens WHERE token_hash = ? AND revoked_at IS NOT NULL",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn use_token(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<TokenInfo>> {
        let row = sqlx::query(
            "SELECT name, scope, created_at, last_used_at, max_researchers \
             FROM api_tokens \
             WHERE token_hash = ? AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let info = token_info(&row)?;
        let stale = info
            .last_used
            .is_none_or(|t| now - t >= chrono::Duration::minutes(1));
        if stale {
            let (mut tx, _turn) = self.begin_immediate(false).await?;
            sqlx::query("UPDATE api_tokens SET last_used_at = ? WHERE token_hash = ?")
                .bind(micros(now))
                .bind(hash)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok(Some(info))
    }

    async fn touch_presence(
        &self,
        id: &str,
        kind: PresenceKind,
        count: u64,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        sqlx::query(
            "INSERT INTO api_presence (id, kind, count, seen_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, count = excluded.count, \
             seen_at = max(api_presence.seen_at, excluded.seen_at)",
        )
        .bind(id)
        .bind(kind.as_str())
        .bind(i64::try_from(count).unwrap_or(i64::MAX))
        .bind(micros(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn leave_presence(&self, id: &str) -> Result<()> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        sqlx::query("DELETE FROM api_presence WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn presence(&self, since: DateTime<Utc>) -> Result<Presence> {
        let row = sqlx::query(
            "SELECT coalesce(sum(CASE WHEN kind = 'researcher' THEN count ELSE 0 END), 0), \
                    coalesce(sum(CASE WHEN kind = 'gateway' THEN count ELSE 0 END), 0) \
             FROM api_presence WHERE seen_at >= ?",
        )
        .bind(micros(since))
        .fetch_one(&self.pool)
        .await?;
        let (researchers, gateway): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        Ok(Presence {
            researchers: u64::try_from(researchers).unwrap_or(0),
            gateway_receivers: u64::try_from(gateway).unwrap_or(0),
        })
    }

    async fn forget_presence(&self, before: DateTime<Utc>) -> Result<u64> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let gone = sqlx::query("DELETE FROM api_presence WHERE seen_at < ?")
            .bind(micros(before))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone)
    }

    async fn hold_item(&self, held: &HeldItem) -> Result<()> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        sqlx::query(
            "INSERT OR REPLACE INTO api_held_items (receipt_hash, token_name, bus_receipt, item, seen_at) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&held.receipt_hash)
        .bind(&held.token)
        .bind(&held.bus_receipt)
        .bind(&held.item)
        .bind(micros(held.seen_at))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn held_item(&self, receipt_hash: &str) -> Result<Option<HeldItem>> {
        let row = sqlx::query(
            "SELECT receipt_hash, token_name, bus_receipt, item, seen_at \
             FROM api_held_items \
             WHERE receipt_hash = ?",
        )
        .bind(receipt_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(held_item).transpose()
    }

    async fn drop_held(&self, receipt_hash: &str) -> Result<bool> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let gone = sqlx::query("DELETE FROM api_held_items WHERE receipt_hash = ?")
            .bind(receipt_hash)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone > 0)
    }

    async fn held_by(&self, token: &str) -> Result<Vec<HeldItem>> {
        let rows = sqlx::query("SELECT receipt_hash, token_name, bus_receipt, item, seen_at FROM api_held_items WHERE token_name = ? \
             ORDER BY seen_at, receipt_hash")
        .bind(token)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(held_item).collect()
    }

    async fn forget_held(&self, before: DateTime<Utc>) -> Result<u64> {
        let (mut tx, _turn) = self.begin_immediate(false).await?;
        let gone = sqlx::query("DELETE FROM api_held_items WHERE seen_at < ?")
            .bind(micros(before))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone)
    }
}
