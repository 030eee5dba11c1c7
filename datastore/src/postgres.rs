//! The Postgres adapter, [`PgDataStore`]: the production datastore, safe under any number of
//! archivists sharing one database.
//!
//! Schema: `migrations/postgres/`. No row per research pair: pairs are implied by
//! `episodes × clips`; only leased and researched pairs are stored.
//!
//! What both SQL adapters do alike (row mapping, the browse pages, completions read and
//! announced, an upsert's batch checks) is `sql.rs`, over this adapter's [`Dialect`]
//! (its SQL fragments); this file holds its statements, transactions, locking and retries.
//!
//! Concurrency, in short (each statement says why its own locking is enough):
//! - Every transaction is READ COMMITTED, so each statement sees what committed before it began.
//! - `lease_next` runs under `pg_advisory_xact_lock(LEASE_LOCK_KEY)`: lease selections are
//!   serialised, so two selections never pick the same free pair.
//! - `lease_next` and `record_results` both take the episode's row lock (`FOR NO KEY UPDATE`)
//!   before they read or write that episode's pairs, so a pair cannot be leased and recorded
//!   at the same time (which would leave a researched pair leased).
//! - The primary key of `leased_pairs` is the constraint-level proof that no pair is held by
//!   two leases; the primary key of `research_results` makes recording idempotent.
//! - Row locks are taken in one order everywhere: episodes, then leased_pairs, then leases.
//!   A deadlock that slips through anyway is retried like any passing failure.
//! - A revoked lease (`leases.revoked`: its researcher's last result arrived, others may still
//!   be on their way) keeps its pairs. Revoking and recording meet on the lease's row lock:
//!   whichever comes second sees the other's write, so the one that leaves the lease revoked
//!   and empty deletes it.
//! - Cancelling deletes the lease's pairs, then the lease, in the lock order above; a renewal
//!   is one conditional UPDATE of the lease row.
//!
//! Passing failures (a restarted Postgres, a pool timeout, a deadlock) are retried here, a few
//! times with backoff, when the transaction surely did not commit or when running it twice
//! changes nothing. What still fails reaches the caller, classified by
//! [`DataStoreError::is_retryable`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use messagebus::sql::postgres as bus;
use messagebus::SqlReceipt;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgDatabaseError, PgPool, PgPoolOptions};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{ColumnIndex, FromRow, Postgres, QueryBuilder, Row, Transaction};
use uuid::Uuid;

use crate::api_access::{
    ApiAccess, HeldItem, NewToken, Presence, PresenceKind, TokenInfo, TokenScope,
};
use crate::browse::{count, Browse};
use crate::sql::{self, Curated, Dialect, StoreRow, Which};
use crate::store::{EncodeCompletion, EncodeWorkItem};
use crate::{
    redact_url, ClipInfo, CompletionId, DataStore, DataStoreError, EpisodeCompletion, EpisodeInfo,
    EpisodeKey, FailureReason, Lease, LeaseRequest, LeaseSummary, LeaseUpdate, Match, MatchFilter,
    RecordOutcome, ResearchResult, Result, Status, TransactionalBus,
};
use crate::{ClipPage, ClipSummary, EpisodePage, EpisodeSummary, ListQuery, Page};

/// The schema's migrations. The database bus keeps its own (versions from 1000001) in the same
/// `_sqlx_migrations` table; each migrator ignores the other's.
static MIGRATOR: Migrator = Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/postgres")
};

/// Serialises lease selection across every process using the database ("archivis" in ASCII).
/// Spelled out in `BEGIN_LEASE`; a test checks the two agree.
#[cfg_attr(not(test), allow(dead_code))]
const LEASE_LOCK_KEY: i64 = 0x6172_6368_6976_6973;

/// Explicit, so that a server whose default isolation is stricter does not change the
/// reasoning below (and does not add serialization failures).
const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Attempts per operation, the first included. The archivists retry further with their own
/// policy; this only absorbs blips (a deadlock, a connection that died in the pool).
const MAX_ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(25);

/// Immediate retries after a connection turned out dead: at least a full pool of them.
const DEAD_CONNECTION_RETRIES: u32 = 32;

/// A pooled connection that the server ended (restart, administrator) or that broke.
fn is_dead_connection(e: &DataStoreError) -> bool {
    match e {
        DataStoreError::Unavailable(sqlx::Error::Io(_)) => true,
        DataStoreError::Database(sqlx::Error::Database(db))
        | DataStoreError::Unavailable(sqlx::Error::Database(db)) => {
            // admin_shutdown, crash_shutdown, connection_failure, connection_does_not_exist.
            matches!(
                db.code().as_deref(),
                Some("57P01" | "57P02" | "08006" | "08003")
            )
        }
        _ => false,
    }
}

/// How often `lease_next` chooses again when the chosen episode filled up while it waited for
/// the episode's lock. Each try sees newer data; more than a couple is very unlikely.
const MAX_RESELECTS: usize = 16;

/// The Postgres adapter. Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct PgDataStore {
    pool: PgPool,
    /// The id of the database bus in this database, once seen (see [`TransactionalBus`]).
    bus_id: std::sync::Arc<tokio::sync::OnceCell<String>>,
    /// How lease selections begin: [`BEGIN_LEASE`]. [`BEGIN_LEASE_BEFORE`] only for the
    /// benchmark that measures what its settings save.
    begin_lease: &'static str,
}

/// A work item to publish in the lease's transaction: queue and encoder.
type Publish<'a> = (&'a str, &'a EncodeWorkItem);

impl PgDataStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`)
    /// with a pool of up to 10 connections. Does not migrate.
    ///
    /// Fails with [`DataStoreError::Config`] for a malformed URL, a refused login or a missing
    /// database, and with [`DataStoreError::Unavailable`] (retryable) when the server cannot
    /// be reached. The password never appears in logs or errors.
    pub async fn connect(url: &str) -> Result<Self> {
        let (supported, dropped) = messagebus::without_unsupported_params(url);
        for key in dropped {
            tracing::warn!(key, "ignoring a connection parameter sqlx does not support");
        }
        let options = PgConnectOptions::from_str(&supported).map_err(|e| {
            DataStoreError::Config(format!(
                "invalid Postgres URL {}: {}",
                redact_url(url),
                strip_secret(&e.to_string(), url)
            ))
        })?;
        Self::connect_with(options.application_name("archivist"), Self::pool_options())
            .await
            .map_err(|e| match e {
                DataStoreError::Config(msg) => {
                    DataStoreError::Config(format!("{}: {msg}", redact_url(url)))
                }
                other => other,
            })
            .inspect(|_| tracing::debug!(url = %redact_url(url), "connected to Postgres"))
    }

    /// The pool settings [`connect`](Self::connect) uses: up to 10 connections, a 10 s acquire
    /// timeout, and no ping before each use (a round trip per operation): a connection that
    /// died while idle fails its first statement, before anything was written, and the
    /// operation is retried on another.
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
    }

    /// Connects with explicit options (pool size, timeouts). Does not migrate. Errors as
    /// [`connect`](Self::connect).
    pub async fn connect_with(options: PgConnectOptions, pool: PgPoolOptions) -> Result<Self> {
        // One plain connection first: the pool retries a refused connection quietly until
        // its acquire timeout, where this says at once what the server answered.
        let probe = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
            .await
            .map_err(classify_connect_error)?;
        let _ = sqlx::Connection::close(probe).await;
        let pool = pool
            .connect_with(options)
            .await
            .map_err(classify_connect_error)?;
        Ok(Self::from_pool(pool))
    }

    /// Wraps an existing pool.
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            bus_id: Default::default(),
            begin_lease: BEGIN_LEASE,
        }
    }

    /// This store, but each lease selection's transaction begins as it did before
    /// [`BEGIN_LEASE`]'s settings: its commit waits for the WAL's sync, and the planner may
    /// scan `leased_pairs` and `leases` sequentially. For the benchmark that measures what the
    /// settings save, in the same run; give it a pool of its own (a prepared statement's
    /// generic plan, once made, keeps the settings it was planned under). Never for a store
    /// anyone runs.
    #[cfg(feature = "test-utils")]
    #[doc(hidden)]
    pub fn with_lease_transaction_as_before(&self) -> Self {
        Self {
            begin_lease: BEGIN_LEASE_BEFORE,
            ..self.clone()
        }
    }

    /// The connection pool, for tests and tools that need raw SQL.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Errors met while connecting: a refused login or a missing database will not get better
/// by retrying; an unreachable or starting server may.
fn classify_connect_error(e: sqlx::Error) -> DataStoreError {
    match &e {
        sqlx::Error::Configuration(msg) => DataStoreError::Config(msg.to_string()),
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            // 28xxx: invalid authorization; 3D000: invalid catalog name (no such database).
            if code.starts_with("28") || code == "3D000" {
                DataStoreError::Config(db.message().to_string())
            } else {
                let err = DataStoreError::from(e);
                if err.is_retryable() {
                    match err {
                        DataStoreError::Database(inner) => DataStoreError::Unavailable(inner),
                        other => other,
                    }
                } else {
                    err
                }
            }
        }
        _ => DataStoreError::from(e),
    }
}

/// `text` without the password of `url`, should a parser have echoed it.
fn strip_secret(text: &str, url: &str) -> String {
    let redacted = redact_url(url);
    let mut out = text.replace(url, &redacted);
    if let Some(password) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?', '#']).next())
        .and_then(|auth| auth.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, pw)| pw)
        .filter(|pw| !pw.is_empty())
    {
        out = out.replace(password, "***");
    }
    out
}

// ------------------------------------------------------------------------------------ retries

/// How an attempt failed: before its COMMIT was sent (so it surely rolled back), or at COMMIT.
enum Failure {
    Before(DataStoreError),
    AtCommit(DataStoreError),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Before(e.into())
    }
}

impl From<DataStoreError> for Failure {
    fn from(e: DataStoreError) -> Self {
        Failure::Before(e)
    }
}

/// Whether an operation may be applied twice without harm, should a COMMIT whose outcome is
/// unknown (the connection broke while committing) be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replay {
    /// Upserts, renewals, migrations: a second application changes nothing.
    Harmless,
    /// A second lease would strand the first lease's pairs until it expires; a second
    /// recording would report Duplicate for what this call recorded. Not retried then.
    Unsafe,
}

async fn commit(tx: Transaction<'_, Postgres>) -> Result<(), Failure> {
    tx.commit()
        .await
        .map_err(|e| Failure::AtCommit(DataStoreError::from(e)))
}

/// Runs `attempt` (one whole transaction) until it succeeds, fails for good, or
/// [`MAX_ATTEMPTS`] are spent, with jittered exponential backoff.
async fn retrying<T, F, Fut>(op: &'static str, replay: Replay, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut tries = 0;
    let mut dead_connections = 0;
    loop {
        tries += 1;
        let (error, may_retry) = match attempt().await {
            Ok(value) => return Ok(value),
            Err(Failure::Before(e)) => {
                let r = e.is_retryable();
                (e, r)
            }
            Err(Failure::AtCommit(e)) => {
                // The server answering with an error means the transaction did not commit;
                // a broken connection leaves the outcome unknown.
                let surely_rolled_back =
                    matches!(&e, DataStoreError::Database(sqlx::Error::Database(_)));
                let r = e.is_retryable() && (surely_rolled_back || replay == Replay::Harmless);
                (e, r)
            }
        };
        // After a server restart every idle connection in the pool is dead, and each fails
        // its first statement at once (the pool does not ping before handing one out). Such a
        // failure says nothing about the server now: try again at once, on another
        // connection, without spending an attempt.
        if may_retry && is_dead_connection(&error) && dead_connections < DEAD_CONNECTION_RETRIES {
            dead_connections += 1;
            tries -= 1;
            tracing::debug!(op, error = %error, "retrying on another connection");
            continue;
        }
        if !may_retry || tries >= MAX_ATTEMPTS {
            return Err(error);
        }
        let cap = FIRST_BACKOFF.saturating_mul(1 << (tries - 1));
        // Full jitter: archivists retrying the same conflict spread out.
        let wait = cap.mul_f64(rand::random::<f64>());
        tracing::warn!(op, attempt = tries, error = %error, ?wait, "retrying a passing datastore failure");
        tokio::time::sleep(wait).await;
    }
}

// ------------------------------------------------------------------------------------ rows

impl StoreRow for PgRow {
    sql::decoded_columns!();
    /// The counters are INT4.
    fn counter<I: ColumnIndex<Self>>(&self, at: I) -> Result<i64> {
        Ok(i64::from(self.try_get::<i32, _>(at)?))
    }
    fn time<I: ColumnIndex<Self>>(&self, at: I) -> Result<DateTime<Utc>> {
        Ok(self.try_get(at)?)
    }
    fn offsets<I: ColumnIndex<Self>>(&self, at: I) -> Result<Vec<i64>> {
        Ok(self.try_get(at)?)
    }
    fn scores<I: ColumnIndex<Self>>(&self, at: I) -> Result<Option<Vec<f64>>> {
        Ok(self.try_get(at)?)
    }
}

/// `t` as a TIMESTAMPTZ keeps it: whole microseconds (sqlx drops the rest when encoding).
fn trunc_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    let extra = t.timestamp_subsec_nanos() % 1_000;
    t - chrono::Duration::nanoseconds(i64::from(extra))
}

/// The `media_uri` named in a unique violation's detail, `Key (media_uri)=(…) already exists.`
fn conflicting_uri(e: &sqlx::Error) -> Option<String> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    if db.code().as_deref() != Some("23505") {
        return None;
    }
    let detail = db.try_downcast_ref::<PgDatabaseError>()?.detail()?;
    let start = detail.find("=(")? + 2;
    let end = detail.rfind(") already exists")?;
    (start <= end).then(|| detail[start..end].to_string())
}

fn is_media_uri_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if db.code().as_deref() == Some("23505")
            && db.constraint().is_some_and(|c| c.ends_with("media_uri_key")))
}

// ------------------------------------------------------------------------------------ upserts

/// The batch with one entry per identity, the newest curation (`curated`) winning and of
/// equally new ones the later, sorted by identity so that concurrent batches lock rows in the
/// same order.
fn dedupe_newest<T: Clone, K: Ord + Clone + std::hash::Hash, C: Ord>(
    items: &[T],
    key: impl Fn(&T) -> K,
    curated: impl Fn(&T) -> C,
) -> Vec<T> {
    let mut keyed: Vec<(K, usize)> = sql::newest(items, key, curated).into_iter().collect();
    keyed.sort();
    keyed.into_iter().map(|(_, i)| items[i].clone()).collect()
}

/// What upserting episodes and clips differ in here: their statements and columns. Every
/// statement is a constant; every value is bound.
trait PgCurated: Curated + Clone {
    /// The operation's name in logs.
    const OP: &'static str;
    /// Inserts or updates the batch, bound as one array per column by
    /// [`bind_columns`](Self::bind_columns). A known item has every field updated but its
    /// identity and `initial_date_curated`.
    const UPSERT: &'static str;
    /// The title of one item not stored yet among those bound by
    /// [`bind_identities`](Self::bind_identities).
    const NEW_AMONG: &'static str;

    /// The identity, ordered: batches lock rows in this order.
    type Key: Ord + Clone + std::hash::Hash;
    fn key(&self) -> Self::Key;
    fn bind_identities<'q>(items: &[&'q Self], query: NewAmong<'q>) -> NewAmong<'q>;
    fn bind_columns<'q>(items: &'q [Self], query: PgQuery<'q>) -> PgQuery<'q>;
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;
type NewAmong<'q> = sqlx::query::QueryScalar<'q, Postgres, String, PgArguments>;

impl PgCurated for EpisodeInfo {
    const OP: &'static str = "upsert_episodes";
    /// Also keeps the lease frontier (migration 0003) true: an upserted episode with work
    /// left changes its generation, and voids it if the episode is now before it.
    const UPSERT: &'static str = "
WITH up AS (
    INSERT INTO episodes (title, date_aired, initial_date_curated, last_date_curated,
                          curator_information, description, media_uri, media_type, priority)
    SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[],
                         $5::text[], $6::text[], $7::text[], $8::text[], $9::int4[])
    ON CONFLICT (title, date_aired) DO UPDATE SET
        last_date_curated = EXCLUDED.last_date_curated,
        curator_information = EXCLUDED.curator_information,
        description = EXCLUDED.description,
        media_uri = EXCLUDED.media_uri,
        media_type = EXCLUDED.media_type,
        priority = EXCLUDED.priority
    -- Only a curation at least as new as the stored one: a release redelivered after a
    -- newer curation changes nothing (and is not returned).
    WHERE episodes.last_date_curated <= EXCLUDED.last_date_curated
    RETURNING id, priority, date_aired, initial_date_curated, researched_count
), batch AS (
    -- An aggregate: the whole upsert (and its row locks) is done before the frontier row is
    -- locked, the order lease selection takes them in.
    SELECT array_agg(priority) AS p, array_agg(date_aired) AS d,
           array_agg(initial_date_curated) AS i, array_agg(id) AS id,
           array_agg(researched_count) AS rc
    FROM up
)
UPDATE lease_frontier f
SET generation = f.generation + 1,
    clips = CASE WHEN EXISTS (
                SELECT 1 FROM unnest(b.p, b.d, b.i, b.id, b.rc) AS u(p, d, i, id, rc)
                WHERE u.rc < f.clips
                  AND (u.p, u.d, u.i, u.id)
                      >= (f.priority, f.date_aired, f.initial_date_curated, f.id))
            THEN NULL ELSE f.clips END
FROM batch b
WHERE f.clips IS NULL
   OR EXISTS (SELECT 1 FROM unnest(b.rc) AS u(rc) WHERE u.rc < f.clips)";
    const NEW_AMONG: &'static str = "
SELECT u.t FROM unnest($1::text[], $2::timestamptz[]) AS u(t, d)
WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.title = u.t AND e.date_aired = u.d)
LIMIT 1";

    type Key = (String, DateTime<Utc>);
    fn key(&self) -> Self::Key {
        (self.title.clone(), self.date_aired)
    }
    fn bind_identities<'q>(items: &[&'q Self], query: NewAmong<'q>) -> NewAmong<'q> {
        let titles: Vec<&str> = items.iter().map(|e| e.title.as_str()).collect();
        let dates: Vec<DateTime<Utc>> = items.iter().map(|e| e.date_aired).collect();
        query.bind(titles).bind(dates)
    }
    fn bind_columns<'q>(items: &'q [Self], query: PgQuery<'q>) -> PgQuery<'q> {
        let column = |f: fn(&'q Self) -> &'q str| items.iter().map(f).collect::<Vec<_>>();
        let time = |f: fn(&Self) -> DateTime<Utc>| items.iter().map(f).collect::<Vec<_>>();
        query
            .bind(column(|e| &e.title))
            .bind(time(|e| e.date_aired))
            .bind(time(|e| e.initial_date_curated))
            .bind(time(|e| e.last_date_curated))
            .bind(column(|e| &e.curator_information))
            .bind(column(|e| &e.description))
            .bind(column(|e| &e.media_uri))
            .bind(column(|e| &e.media_type))
            .bind(items.iter().map(|e| e.priority).collect::<Vec<_>>())
    }
}

impl PgCurated for ClipInfo {
    const OP: &'static str = "upsert_clips";
    const UPSERT: &'static str = "
INSERT INTO clips (title, initial_date_curated, last_date_curated, curator_information,
                   description, media_uri, media_type, priority)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[],
                     $5::text[], $6::text[], $7::text[], $8::int4[])
ON CONFLICT (title) DO UPDATE SET
    last_date_curated = EXCLUDED.last_date_curated,
    curator_information = EXCLUDED.curator_information,
    description = EXCLUDED.description,
    media_uri = EXCLUDED.media_uri,
    media_type = EXCLUDED.media_type,
    priority = EXCLUDED.priority
WHERE clips.last_date_curated <= EXCLUDED.last_date_curated";
    const NEW_AMONG: &'static str = "
SELECT u.t FROM unnest($1::text[]) AS u(t)
WHERE NOT EXISTS (SELECT 1 FROM clips c WHERE c.title = u.t)
LIMIT 1";

    type Key = String;
    fn key(&self) -> Self::Key {
        self.title.clone()
    }
    fn bind_identities<'q>(items: &[&'q Self], query: NewAmong<'q>) -> NewAmong<'q> {
        query.bind(items.iter().map(|c| c.title.as_str()).collect::<Vec<_>>())
    }
    fn bind_columns<'q>(items: &'q [Self], query: PgQuery<'q>) -> PgQuery<'q> {
        let column = |f: fn(&'q Self) -> &'q str| items.iter().map(f).collect::<Vec<_>>();
        let time = |f: fn(&Self) -> DateTime<Utc>| items.iter().map(f).collect::<Vec<_>>();
        query
            .bind(column(|c| &c.title))
            .bind(time(|c| c.initial_date_curated))
            .bind(time(|c| c.last_date_curated))
            .bind(column(|c| &c.curator_information))
            .bind(column(|c| &c.description))
            .bind(column(|c| &c.media_uri))
            .bind(column(|c| &c.media_type))
            .bind(items.iter().map(|c| c.priority).collect::<Vec<_>>())
    }
}

/// Inserts or updates `items` as [`DataStore::upsert_episodes`] describes, all or nothing.
async fn upsert<T: PgCurated>(pool: &PgPool, items: &[T], acks: &[SqlReceipt]) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let batch = dedupe_newest(items, T::key, T::last_date_curated);
    if let Some(uri) = sql::batch_uri_conflict(&batch, T::key, T::media_uri) {
        return Err(DataStoreError::Conflict(format!(
            "media_uri {uri} is given to two {} in one batch",
            T::TABLE
        )));
    }
    retrying(T::OP, Replay::Harmless, || upsert_once(pool, &batch, acks)).await
}

async fn upsert_once<T: PgCurated>(
    pool: &PgPool,
    batch: &[T],
    acks: &[SqlReceipt],
) -> Result<(), Failure> {
    // A rule only new items must keep; which are new is known only inside the transaction.
    let suspects: Vec<&T> = batch.iter().filter(|i| i.is_suspect()).collect();
    // Without suspects or acknowledgements the upsert is one statement, atomic on its own: no
    // BEGIN/COMMIT round trips. With them, they share a transaction.
    let mut tx = if suspects.is_empty() && acks.is_empty() {
        None
    } else {
        Some(pool.begin_with(BEGIN).await?)
    };
    if let Some(tx) = tx.as_mut() {
        let new: Option<String> = T::bind_identities(&suspects, sqlx::query_scalar(T::NEW_AMONG))
            .fetch_optional(&mut **tx)
            .await?;
        if let Some(title) = new {
            return Err(Failure::Before(DataStoreError::Invalid(format!(
                "new {} {title:?} was last curated before it was first curated",
                T::KIND
            ))));
        }
    }
    // One statement for the whole batch; the media_uri constraint is checked at its end.
    let upsert = T::bind_columns(batch, sqlx::query(T::UPSERT));
    let done = match tx.as_mut() {
        Some(tx) => upsert.execute(&mut **tx).await,
        None => upsert.execute(pool).await,
    };
    if let Err(e) = done {
        if is_media_uri_violation(&e) {
            let uri = conflicting_uri(&e).unwrap_or_else(|| "of the batch".into());
            return Err(Failure::Before(DataStoreError::Conflict(format!(
                "media_uri {uri} already belongs to another {}",
                T::KIND
            ))));
        }
        return Err(e.into());
    }
    match tx {
        Some(mut tx) => {
            bus::ack_in(&mut tx, acks)
                .await
                .map_err(DataStoreError::from)?;
            commit(tx).await
        }
        None => Ok(()),
    }
}

// ------------------------------------------------------------------------------------ leases

/// Opens a lease selection: READ COMMITTED, the transaction's settings below, then the
/// advisory lock that serialises lease selection across every process, so that while one
/// selection runs, the free pairs it reads cannot be leased by another. Released at
/// COMMIT/ROLLBACK. Sent with BEGIN in one round trip (a constant, not a value:
/// `lock_key_is_the_constant` checks it matches [`LEASE_LOCK_KEY`]). The settings are `SET
/// LOCAL`: they end with the transaction, and every other statement of the datastore runs with
/// the server's.
///
/// `synchronous_commit = off`: the commit does not wait for the WAL's sync. The sync was the
/// largest part of a selection on the benchmark's disk (2 to 3.5 ms per commit, 11 ms and more
/// at its p95 while other work wrote to the disk, against about 2 ms for all of the
/// selection's statements at 50% researched), and the advisory lock was held through it, so
/// every other selection waited for it too. What a server crash can then lose is a lease
/// committed in the moments before it (the WAL writer syncs within three `wal_writer_delay`s,
/// 0.6 s by default), never a result: a lease lost so frees its pairs, which are leased again;
/// its work item, if already published on another bus, is still researched, and its results
/// are recorded like any result for an unknown lease (the first for a pair counts, a second is
/// a duplicate). At worst, a work item researched twice. Published on the database bus in the
/// same transaction, the work item is lost with its lease. Any later synchronous commit (a
/// recorded batch, an upsert) syncs the lease with it.
///
/// `enable_seqscan = off`: every read of a selection is by key into a small working set, and
/// `leased_pairs` and `leases` are queues (every lease inserts rows into both, recording
/// deletes them). Between autovacuum's visits (a minute apart, `autovacuum_naptime`, which no
/// table setting shortens) they fill with a minute of churn, and vacuum gives the space back to
/// the table, not to the system: at 50% researched `leased_pairs` held 2,440 rows in 976 pages,
/// its primary key in 1,361. Seeing few rows and an index as large as the heap, the planner
/// judged a sequential scan about as cheap as the index, and FREE_CLIPS read the whole heap
/// twice per selection (2,035 buffers, against 148 by the indexes), the choice moving with
/// each autovacuum's statistics. Off is a penalty, not a prohibition: a table with no other
/// path (the one-row `lease_frontier`) is still scanned, in a plan that then costs more than
/// JIT compilation's thresholds, hence
///
/// `jit = off`: compiling READ_FRONTIER took 160 ms; no statement here runs long enough to
/// gain from it.
const BEGIN_LEASE: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; \
     SET LOCAL synchronous_commit = off; SET LOCAL enable_seqscan = off; SET LOCAL jit = off; \
     SELECT pg_advisory_xact_lock(7021784069121141107)";

/// [`BEGIN_LEASE`] without its settings: see [`PgDataStore::with_lease_transaction_as_before`].
#[cfg_attr(not(feature = "test-utils"), allow(dead_code))]
const BEGIN_LEASE_BEFORE: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock(7021784069121141107)";

/// The most urgent episode with a free pair (fewer researched pairs plus pairs under unexpired
/// leases than there are clips, `$2`), locked against concurrent recording of its pairs
/// (record_results takes the same row lock first). The candidate is found by walking the
/// urgency index; the cheap test comes first so the leases are summed only for episodes with
/// work left.
/// If a recording batch holds the episode, this waits for it; FREE_CLIPS then tells whether
/// any pair is still free.
///
/// The walk starts at the lease frontier (`$3..$6`, the key of the first episode not fully
/// researched when it was set; migration 0003), so it does not grow with research done. The
/// statement also returns where the frontier is now (the `frontier_*` columns: the first
/// episode from there with a pair not researched), for the caller to move it, and how many
/// pairs of the episode are free, so that FREE_CLIPS stops when it has found them all rather
/// than walking every clip (a mostly researched episode has few, often a new clip's one).
const CHOOSE_EPISODE: &str = "
WITH candidate AS (
    SELECT e.id FROM episodes e
    WHERE (e.priority, e.date_aired, e.initial_date_curated, e.id) <= ($3, $4, $5, $6)
      AND e.researched_count < $2
      AND e.researched_count + COALESCE((SELECT sum(l.held_pairs) FROM leases l
                                         WHERE l.episode_id = e.id AND l.expires_at > $1), 0)
          < $2
    ORDER BY e.priority DESC, e.date_aired DESC, e.initial_date_curated DESC, e.id DESC
    LIMIT 1
), frontier AS (
    SELECT e.priority, e.date_aired, e.initial_date_curated, e.id FROM episodes e
    WHERE (e.priority, e.date_aired, e.initial_date_curated, e.id) <= ($3, $4, $5, $6)
      AND e.researched_count < $2
    ORDER BY e.priority DESC, e.date_aired DESC, e.initial_date_curated DESC, e.id DESC
    LIMIT 1
)
SELECT e.id, e.title, e.date_aired, e.initial_date_curated, e.last_date_curated,
       e.curator_information, e.description, e.media_uri, e.media_type, e.priority,
       f.priority AS frontier_priority, f.date_aired AS frontier_date_aired,
       f.initial_date_curated AS frontier_initial_date_curated, f.id AS frontier_id,
       $2 - e.researched_count - COALESCE((SELECT sum(l.held_pairs) FROM leases l
                                           WHERE l.episode_id = e.id AND l.expires_at > $1), 0)
           AS free_pairs
FROM episodes e JOIN candidate ON e.id = candidate.id LEFT JOIN frontier f ON true
FOR NO KEY UPDATE OF e";

/// The frontier and the clip count it is compared with (kept by triggers: migration 0011), in
/// one round trip.
const READ_FRONTIER: &str = "
SELECT (SELECT n FROM clip_count), f.generation, f.clips,
       f.priority, f.date_aired, f.initial_date_curated, f.id,
       EXISTS (SELECT 1 FROM leases WHERE id = $1) AS made_already
FROM lease_frontier f";

/// The lease `$1` as it stands: its expiry, episode and the clips it holds, most urgent first
/// (for a lease call made again after its first try's commit was lost with the connection).
const EXISTING_LEASE: &str = "
SELECT l.expires_at AS lease_expires_at, c.id, c.title, c.initial_date_curated,
       c.last_date_curated, c.curator_information, c.description, c.media_uri, c.media_type,
       c.priority
FROM leases l JOIN leased_pairs lp ON lp.lease_id = l.id JOIN clips c ON c.id = lp.clip_id
WHERE l.id = $1
ORDER BY c.priority DESC, c.initial_date_curated DESC, c.id DESC";

/// The episode of the lease `$1`.
const EXISTING_LEASE_EPISODE: &str = "
SELECT e.title, e.date_aired, e.initial_date_curated, e.last_date_curated,
       e.curator_information, e.description, e.media_uri, e.media_type, e.priority
FROM leases l JOIN episodes e ON e.id = l.episode_id
WHERE l.id = $1";

/// Moves the frontier, unless an upsert changed it since it was read (then the next selection
/// sets it). An upsert holding the row waits for us, then sees where we put it.
const MOVE_FRONTIER: &str = "
UPDATE lease_frontier
SET clips = $2, priority = $3, date_aired = $4, initial_date_curated = $5, id = $6
WHERE generation = $1";

/// The urgency key (priority, date_aired, initial_date_curated, id) in index order.
type UrgencyKey = (i32, DateTime<Utc>, DateTime<Utc>, i64);

/// Before every episode: a walk from here starts at the top of the urgency index.
fn top_of_urgency() -> UrgencyKey {
    (
        i32::MAX,
        DateTime::<Utc>::MAX_UTC,
        DateTime::<Utc>::MAX_UTC,
        i64::MAX,
    )
}

/// The episode's most urgent free clips, and whether an expired lease still holds each. The
/// excluded set (this episode's researched pairs and pairs under unexpired leases) is hashed
/// once; the urgency index is then walked until enough clips pass. The episode's unexpired
/// leases are found by their index, not by joining every lease (a hash join the generic plan
/// chose, which read the whole leases table, dead rows and all, at every selection). A new statement, so a new
/// snapshot: it sees every result recorded before we got the episode's lock, and none can be
/// recorded for this episode until we commit.
const FREE_CLIPS: &str = "
SELECT c.id,
       EXISTS (SELECT 1 FROM leased_pairs lp WHERE lp.episode_id = $1 AND lp.clip_id = c.id)
FROM clips c
WHERE c.id NOT IN (
    SELECT r.clip_id FROM research_results r WHERE r.episode_id = $1
    UNION ALL
    SELECT lp.clip_id FROM leased_pairs lp
    WHERE lp.episode_id = $1
      AND lp.lease_id = ANY (ARRAY(SELECT l.id FROM leases l
                                   WHERE l.episode_id = $1 AND l.expires_at > $2)))
ORDER BY c.priority DESC, c.initial_date_curated DESC, c.id DESC
LIMIT $3";

/// Takes the chosen pairs from expired leases. The expiry is tested again here, with this
/// statement's snapshot: a lease renewed meanwhile keeps its pairs (and the insert below then
/// skips them).
const TAKE_OVER: &str = "
DELETE FROM leased_pairs lp USING leases l
WHERE lp.lease_id = l.id AND lp.episode_id = $1 AND lp.clip_id = ANY($2) AND l.expires_at <= $3
RETURNING lp.lease_id";

const DECREMENT_HELD: &str = "
UPDATE leases l SET held_pairs = l.held_pairs - d.n
FROM unnest($1::uuid[], $2::int4[]) AS d(id, n)
WHERE l.id = d.id";

/// Expired leases that lost their last pair are gone for good. Re-checked per row after any
/// concurrent renewal (READ COMMITTED re-evaluates the WHERE on the newest row version).
const DROP_EMPTY_EXPIRED: &str = "
DELETE FROM leases WHERE id = ANY($1) AND held_pairs = 0 AND expires_at <= $2";

/// The lease and its pairs in one statement. `ON CONFLICT DO NOTHING` skips a pair whose
/// expired lease was renewed since FREE_CLIPS ran; `held_pairs` counts what was inserted.
/// (No foreign key checks the pairs' lease, migration 0004: this statement is why none is
/// needed.) `c.id = ANY($5)` lets the clips be read by primary key rather than scanned.
const INSERT_LEASE: &str = "
WITH p AS (
    INSERT INTO leased_pairs (episode_id, clip_id, lease_id)
    SELECT $2, c, $1 FROM unnest($5::int8[]) AS c
    ON CONFLICT DO NOTHING
    RETURNING clip_id
), l AS (
    INSERT INTO leases (id, episode_id, created_at, expires_at, held_pairs, duration)
    SELECT $1, $2, $3, $4, count(*), $4 - $3 FROM p
    RETURNING expires_at
)
SELECT l.expires_at AS lease_expires_at, c.id, c.title, c.initial_date_curated,
       c.last_date_curated, c.curator_information, c.description, c.media_uri, c.media_type,
       c.priority
FROM clips c JOIN p ON p.clip_id = c.id CROSS JOIN l
WHERE c.id = ANY($5)";

/// What CHOOSE_EPISODE says besides the episode's columns.
#[derive(sqlx::FromRow)]
struct ChosenRow {
    id: i64,
    frontier_priority: Option<i32>,
    frontier_date_aired: Option<DateTime<Utc>>,
    frontier_initial_date_curated: Option<DateTime<Utc>>,
    frontier_id: Option<i64>,
    free_pairs: i64,
}

impl ChosenRow {
    fn frontier(&self) -> Option<UrgencyKey> {
        Some((
            self.frontier_priority?,
            self.frontier_date_aired?,
            self.frontier_initial_date_curated?,
            self.frontier_id?,
        ))
    }
}

type FrontierRow = (
    i64,
    i64,
    Option<i64>,
    Option<i32>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<i64>,
    bool,
);

/// What one lease selection came to.
enum Selection {
    Leased(Box<Lease>),
    NoWork,
    /// The chosen episode had no free pair left once locked (results recorded meanwhile), or
    /// every chosen pair's expired lease was renewed meanwhile. Rolled back; choose again.
    Again,
}

async fn lease_next_once(
    pool: &PgPool,
    begin: &'static str,
    request: LeaseRequest,
    publish: Option<Publish<'_>>,
) -> Result<Selection, Failure> {
    let now = request.now;
    let expires_at = now.checked_add_signed(request.duration).ok_or_else(|| {
        DataStoreError::Invalid(format!("lease duration {} is too long", request.duration))
    })?;
    let max_clips = i64::from(request.max_clips.max(1));

    let mut tx = pool.begin_with(begin).await?;
    // The clip count is bound as a value, so the walk in CHOOSE_EPISODE compares with a
    // constant.
    let (clip_count, generation, frontier_clips, p, d, i, id, made_already): FrontierRow =
        sqlx::query_as(READ_FRONTIER)
            .bind(request.lease_id)
            .fetch_one(&mut *tx)
            .await?;
    if made_already {
        // A call made again whose earlier try committed, its outcome lost with the
        // connection: that lease (and its work item, published in its transaction) is the
        // answer. Leasing again would strand the first lease's pairs or exceed the capacity.
        let lease = existing_lease(&mut tx, request.lease_id).await?;
        commit(tx).await?;
        return Ok(match lease {
            Some(lease) => Selection::Leased(Box::new(lease)),
            // Made, then ended by its results before this call came back.
            None => Selection::NoWork,
        });
    }
    let start = match (frontier_clips, p, d, i, id) {
        (Some(clips), Some(p), Some(d), Some(i), Some(id)) if clips == clip_count => (p, d, i, id),
        _ => top_of_urgency(),
    };
    let chosen: Option<PgRow> = sqlx::query(CHOOSE_EPISODE)
        .bind(now)
        .bind(clip_count)
        .bind(start.0)
        .bind(start.1)
        .bind(start.2)
        .bind(start.3)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(chosen) = chosen else {
        commit(tx).await?;
        return Ok(Selection::NoWork);
    };
    let episode = sql::episode_from_row(&chosen)?;
    let chosen = ChosenRow::from_row(&chosen)?;
    if let Some(moved) = chosen.frontier().filter(|&f| f != start) {
        sqlx::query(MOVE_FRONTIER)
            .bind(generation)
            .bind(clip_count)
            .bind(moved.0)
            .bind(moved.1)
            .bind(moved.2)
            .bind(moved.3)
            .execute(&mut *tx)
            .await?;
    }
    let ChosenRow {
        id: episode_id,
        free_pairs,
        ..
    } = chosen;
    // At least one: counts that moved since (a lease cancelled meanwhile) only make it a
    // lower bound, and FREE_CLIPS finding nothing is handled below.
    let wanted = max_clips.min(free_pairs.max(1));
    let free: Vec<(i64, bool)> = sqlx::query_as(FREE_CLIPS)
        .bind(episode_id)
        .bind(now)
        .bind(wanted)
        .fetch_all(&mut *tx)
        .await?;
    if free.is_empty() {
        // Ending the transaction releases the episode's lock before another is taken, so a
        // recording batch waiting for this episode never waits on us in a cycle.
        tx.rollback().await?;
        return Ok(Selection::Again);
    }
    let clip_ids: Vec<i64> = free.iter().map(|(id, _)| *id).collect();

    let mut reclaimed = 0;
    if free.iter().any(|(_, held)| *held) {
        let taken: Vec<Uuid> = sqlx::query_scalar(TAKE_OVER)
            .bind(episode_id)
            .bind(&clip_ids)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        reclaimed = u32::try_from(taken.len()).unwrap_or(u32::MAX);
        if !taken.is_empty() {
            let mut per_lease: HashMap<Uuid, i32> = HashMap::new();
            for id in &taken {
                *per_lease.entry(*id).or_default() += 1;
            }
            let mut per_lease: Vec<(Uuid, i32)> = per_lease.into_iter().collect();
            // Sorted: concurrent writers to the same leases lock them in the same order.
            per_lease.sort();
            let (ids, ns): (Vec<Uuid>, Vec<i32>) = per_lease.into_iter().unzip();
            sqlx::query(DECREMENT_HELD)
                .bind(&ids)
                .bind(&ns)
                .execute(&mut *tx)
                .await?;
            sqlx::query(DROP_EMPTY_EXPIRED)
                .bind(&ids)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
    }

    let lease_id = request.lease_id;
    let rows: Vec<PgRow> = sqlx::query(INSERT_LEASE)
        .bind(lease_id)
        .bind(episode_id)
        .bind(now)
        .bind(expires_at)
        .bind(&clip_ids)
        .fetch_all(&mut *tx)
        .await?;
    // The stored value: truncated to the microsecond, as every later read sees it.
    let Some(expires_at) = rows
        .first()
        .map(|r| r.time("lease_expires_at"))
        .transpose()?
    else {
        tx.rollback().await?;
        return Ok(Selection::Again);
    };
    let mut by_id = rows
        .iter()
        .map(|r| Ok((r.int("id")?, r)))
        .collect::<Result<HashMap<i64, &PgRow>>>()?;
    let clips = clip_ids
        .iter()
        .filter_map(|id| by_id.remove(id))
        .map(sql::clip_from_row)
        .collect::<Result<Vec<ClipInfo>>>()?;
    let lease = Lease {
        id: lease_id,
        expires_at,
        episode,
        clips,
        reclaimed_pairs: reclaimed,
    };
    if let Some((queue, encode)) = publish {
        bus::send_in(&mut tx, queue, vec![encode(&lease)])
            .await
            .map_err(DataStoreError::from)?;
    }
    commit(tx).await?;
    Ok(Selection::Leased(Box::new(lease)))
}

/// The lease `id` as it stands, if it still holds pairs. `reclaimed_pairs` is 0: what it took
/// over is not kept.
async fn existing_lease(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
) -> Result<Option<Lease>, Failure> {
    let Some(episode) = sqlx::query(EXISTING_LEASE_EPISODE)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
    else {
        return Ok(None);
    };
    let rows: Vec<PgRow> = sqlx::query(EXISTING_LEASE)
        .bind(id)
        .fetch_all(&mut **tx)
        .await?;
    let Some(expires_at) = rows
        .first()
        .map(|r| r.time("lease_expires_at"))
        .transpose()?
    else {
        return Ok(None);
    };
    Ok(Some(Lease {
        id,
        expires_at,
        episode: sql::episode_from_row(&episode)?,
        clips: rows
            .iter()
            .map(sql::clip_from_row)
            .collect::<Result<Vec<_>>>()?,
        reclaimed_pairs: 0,
    }))
}

/// Renews lease $1 as of $2 (see [`update_lease_once`]).
const RENEW: &str = "UPDATE leases SET expires_at = $2 + duration
                     WHERE id = $1 AND expires_at > $2 AND NOT revoked";
/// Marks lease $1 revoked; RETURNING what it still holds.
const REVOKE: &str = "UPDATE leases SET revoked = true WHERE id = $1 AND NOT revoked
                      RETURNING held_pairs";
const DELETE_LEASE: &str = "DELETE FROM leases WHERE id = $1";
/// Frees the pairs of lease $1, in key order.
const CANCEL_PAIRS: &str = "DELETE FROM leased_pairs WHERE (episode_id, clip_id) IN (
                                SELECT episode_id, clip_id FROM leased_pairs WHERE lease_id = $1
                                ORDER BY episode_id, clip_id FOR UPDATE)";

/// [`DataStore::update_lease`] inside the caller's transaction, after whatever it did to
/// pairs (the lock order: episodes, pairs, leases).
async fn update_lease_in(
    conn: &mut sqlx::PgConnection,
    lease_id: Uuid,
    update: LeaseUpdate,
) -> Result<bool, Failure> {
    Ok(match update {
        LeaseUpdate::Renew { now } => {
            sqlx::query(RENEW)
                .bind(lease_id)
                .bind(now)
                .execute(&mut *conn)
                .await?
                .rows_affected()
                > 0
        }
        LeaseUpdate::Revoke => {
            let held: Option<i32> = sqlx::query_scalar(REVOKE)
                .bind(lease_id)
                .fetch_optional(&mut *conn)
                .await?;
            if held == Some(0) {
                sqlx::query(DELETE_LEASE)
                    .bind(lease_id)
                    .execute(&mut *conn)
                    .await?;
            }
            held.is_some()
        }
        LeaseUpdate::Cancel => {
            sqlx::query(CANCEL_PAIRS)
                .bind(lease_id)
                .execute(&mut *conn)
                .await?;
            sqlx::query(DELETE_LEASE)
                .bind(lease_id)
                .execute(&mut *conn)
                .await?
                .rows_affected()
                > 0
        }
    })
}

async fn update_lease_once(
    pool: &PgPool,
    lease_id: Uuid,
    update: LeaseUpdate,
) -> Result<bool, Failure> {
    match update {
        LeaseUpdate::Renew { now } => {
            // One statement, so its own transaction. Conditional: an expired lease stays
            // expired (its pairs may already be another lease's), and a revoked one is not
            // extended (what it still holds comes back when it expires). The row lock makes it
            // atomic with a concurrent takeover's decrement of held_pairs and with a revoke.
            // The lease keeps the length it was created with.
            let renewed = sqlx::query(RENEW)
                .bind(lease_id)
                .bind(now)
                .execute(pool)
                .await?
                .rows_affected()
                > 0;
            Ok(renewed)
        }
        LeaseUpdate::Revoke => {
            let mut tx = pool.begin_with(BEGIN).await?;
            // Only the lease row is locked (no pairs are touched while it holds any), so the
            // lock order holds. If recording is removing this lease's pairs meanwhile, it holds
            // the row lock until it commits; READ COMMITTED then re-reads the row and RETURNING
            // gives the held_pairs it left. Recording that comes after sees `revoked` (it waits
            // for this row lock) and deletes the lease with its last pair itself.
            let held: Option<i32> = sqlx::query_scalar(REVOKE)
                .bind(lease_id)
                .fetch_optional(&mut *tx)
                .await?;
            if held == Some(0) {
                // Every result is in, and no pair is left to delete with it.
                sqlx::query(DELETE_LEASE)
                    .bind(lease_id)
                    .execute(&mut *tx)
                    .await?;
            }
            commit(tx).await?;
            Ok(held.is_some())
        }
        LeaseUpdate::Cancel => {
            let mut tx = pool.begin_with(BEGIN).await?;
            // Pairs first, in key order, then the lease: the order recording and takeover
            // lock them in, so cancelling does not deadlock with them.
            sqlx::query(CANCEL_PAIRS)
                .bind(lease_id)
                .execute(&mut *tx)
                .await?;
            let cancelled = sqlx::query(DELETE_LEASE)
                .bind(lease_id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
            commit(tx).await?;
            Ok(cancelled)
        }
    }
}

// ------------------------------------------------------------------------------------ results

/// Locks the batch's episodes, in id order (so concurrent batches do not deadlock), before
/// anything of theirs is read: lease_next holds the same lock while it chooses and leases an
/// episode's pairs, so a pair is never leased and recorded at once. Also resolves the clips.
/// Rows: (is_episode, id, title, date_aired).
const LOCK_AND_RESOLVE: &str = "
WITH locked AS (
    SELECT e.id, e.title, e.date_aired FROM episodes e
    JOIN unnest($1::text[], $2::timestamptz[]) AS u(t, d)
      ON e.title = u.t AND e.date_aired = u.d
    ORDER BY e.id
    FOR NO KEY UPDATE OF e
)
SELECT true, id, title, date_aired FROM locked
UNION ALL
SELECT false, id, title, NULL::timestamptz FROM clips WHERE title = ANY($3)";

/// Recording's statements look rows up by key from arrays: their plans do not depend on the
/// values, and planning each call anew would cost a fifth of a small batch.
const BEGIN_RECORD: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_generic_plan";

/// Records the batch in one statement. `ON CONFLICT` makes a pair recorded once (the primary
/// key decides, also against concurrent batches): a recorded pair is left alone, except that a
/// success replaces a recorded failure (`$12`, NULL for a success). Only the rows it wrote free
/// their leased pair and count in the episode's counters (`xmax = 0` tells an inserted row from
/// a replaced one). Offsets come flattened: a result's offsets are `$11[start+1 : start+len]`.
const RECORD: &str = "
WITH input AS (
    SELECT * FROM unnest($1::int8[], $2::int8[], $3::uuid[], $4::timestamptz[], $5::int8[],
                         $6::text[], $7::int8[], $8::text[], $9::int4[], $10::int4[],
                         $12::text[], $13::bool[])
        AS u(episode_id, clip_id, lease_id, research_date, episode_duration_ns, episode_hash,
             clip_duration_ns, clip_hash, off_start, off_len, failure, scored)
), ins AS (
    INSERT INTO research_results AS r (episode_id, clip_id, lease_id, research_date,
        episode_duration_ns, episode_hash, clip_duration_ns, clip_hash, clip_offsets_ns, matched,
        failure, clip_match_scores)
    SELECT episode_id, clip_id, lease_id, research_date, episode_duration_ns, episode_hash,
           clip_duration_ns, clip_hash,
           COALESCE(($11::int8[])[off_start + 1 : off_start + off_len], '{}'),
           off_len > 0 AND failure IS NULL, failure,
           CASE WHEN scored
                THEN COALESCE(($14::float8[])[off_start + 1 : off_start + off_len], '{}') END
    FROM input
    ON CONFLICT (episode_id, clip_id) DO UPDATE SET
        lease_id = EXCLUDED.lease_id, research_date = EXCLUDED.research_date,
        episode_duration_ns = EXCLUDED.episode_duration_ns,
        episode_hash = EXCLUDED.episode_hash, clip_duration_ns = EXCLUDED.clip_duration_ns,
        clip_hash = EXCLUDED.clip_hash, clip_offsets_ns = EXCLUDED.clip_offsets_ns,
        clip_match_scores = EXCLUDED.clip_match_scores, matched = EXCLUDED.matched, failure = NULL
    WHERE r.failure IS NOT NULL AND EXCLUDED.failure IS NULL
    RETURNING r.episode_id, r.clip_id, r.matched, r.failure IS NOT NULL AS failed,
              r.xmax = 0 AS fresh, r.research_date
), freed AS (
    DELETE FROM leased_pairs lp USING ins
    WHERE lp.episode_id = ins.episode_id AND lp.clip_id = ins.clip_id
    RETURNING lp.lease_id
), leases_done AS (
    UPDATE leases l SET held_pairs = l.held_pairs - f.n
    FROM (SELECT lease_id, count(*)::int4 AS n FROM freed GROUP BY lease_id) AS f
    WHERE l.id = f.lease_id
    RETURNING l.id, l.held_pairs, l.revoked
), episodes_done AS (
    UPDATE episodes e
    SET researched_count = e.researched_count + s.n, matched_count = e.matched_count + s.m,
        failed_count = e.failed_count + s.f
    FROM (SELECT episode_id, (count(*) FILTER (WHERE fresh))::int4 AS n,
                 (count(*) FILTER (WHERE matched))::int4 AS m,
                 (count(*) FILTER (WHERE fresh AND failed))::int4
                     - (count(*) FILTER (WHERE NOT fresh))::int4 AS f,
                 max(research_date) AS at
          FROM ins GROUP BY episode_id) AS s
    WHERE e.id = s.episode_id
    RETURNING e.id, e.researched_count, s.n, s.at
), completed AS (
    -- This batch recorded the episode's last pair: its research is complete (0008). The clip
    -- count (kept by triggers, 0011) is read once, and only when some episode's count changed.
    INSERT INTO episode_completions AS c (episode_id, completed_at)
    SELECT id, at FROM episodes_done
    WHERE n > 0
      AND (SELECT cc.n FROM clip_count cc) BETWEEN researched_count - n + 1 AND researched_count
    ON CONFLICT (episode_id) DO UPDATE
        SET completions = c.completions + 1, completed_at = EXCLUDED.completed_at,
            claimed_until = NULL
)
SELECT episode_id, clip_id, NULL::uuid FROM ins
UNION ALL
SELECT NULL, NULL, id FROM leases_done WHERE revoked AND held_pairs = 0";

/// Revoked leases whose last held pair the batch recorded: all their results are in, so they
/// end. RECORD's UPDATE still holds their row locks (and RETURNING gave the row as it left
/// it: a revoke that committed first is seen, a revoke that comes after waits for this
/// transaction and then deletes the emptied lease itself), so nothing changed them since; a
/// statement of its own because one statement cannot update and delete the same row. They
/// hold no pairs.
const DROP_ENDED: &str = "DELETE FROM leases WHERE id = ANY($1) AND revoked AND held_pairs = 0";

/// Keeps on each clip the findability its results carry (0016), the batch's last for a clip.
/// First in the recording transaction, in title order: clip rows are locked before anything
/// else, as a clip's upsert locks its row before its results; a clip whose stored value is
/// the same is neither written nor locked. No statement when no result carries one.
const KEEP_FINDABILITY: &str = "
UPDATE clips c SET findable_from_db = u.f
FROM unnest($1::text[], $2::int4[]) AS u(t, f)
WHERE c.title = u.t AND c.findable_from_db IS DISTINCT FROM u.f";

async fn keep_findability(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    results: &[ResearchResult],
) -> Result<(), Failure> {
    let per_clip: std::collections::BTreeMap<&str, i32> = results
        .iter()
        .filter_map(|r| Some((r.clip_title.as_str(), r.clip_findability?.stored())))
        .collect();
    if per_clip.is_empty() {
        return Ok(());
    }
    let (titles, values): (Vec<&str>, Vec<i32>) = per_clip.into_iter().unzip();
    sqlx::query(KEEP_FINDABILITY)
        .bind(&titles)
        .bind(&values)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What record_results needs of a batch, prepared once (outside any retry).
struct PreparedBatch<'a> {
    /// Index into the batch of each distinct pair's first result.
    firsts: Vec<usize>,
    /// For every result, the index into `firsts` of its pair's first result.
    first_of: Vec<usize>,
    results: &'a [ResearchResult],
}

fn prepare_batch(results: &[ResearchResult]) -> PreparedBatch<'_> {
    let mut seen: HashMap<(&EpisodeKey, &str), usize> = HashMap::with_capacity(results.len());
    let mut firsts = Vec::with_capacity(results.len());
    let mut first_of = Vec::with_capacity(results.len());
    for (i, r) in results.iter().enumerate() {
        let slot = *seen
            .entry((&r.episode, r.clip_title.as_str()))
            .or_insert_with(|| {
                firsts.push(i);
                firsts.len() - 1
            });
        first_of.push(slot);
    }
    PreparedBatch {
        firsts,
        first_of,
        results,
    }
}

async fn record_results_once(
    pool: &PgPool,
    batch: &PreparedBatch<'_>,
    leases: &[(Uuid, LeaseUpdate)],
    acks: &[SqlReceipt],
) -> Result<(Vec<RecordOutcome>, Vec<bool>), Failure> {
    let results = batch.results;
    let mut tx = pool.begin_with(BEGIN_RECORD).await?;
    keep_findability(&mut tx, results).await?;

    let mut keys: Vec<&EpisodeKey> = batch.firsts.iter().map(|&i| &results[i].episode).collect();
    keys.sort_by(|a, b| (&a.title, a.date_aired).cmp(&(&b.title, b.date_aired)));
    keys.dedup();
    let titles: Vec<&str> = keys.iter().map(|k| k.title.as_str()).collect();
    let dates: Vec<DateTime<Utc>> = keys.iter().map(|k| k.date_aired).collect();
    let mut clip_titles: Vec<&str> = batch
        .firsts
        .iter()
        .map(|&i| results[i].clip_title.as_str())
        .collect();
    clip_titles.sort_unstable();
    clip_titles.dedup();
    let found: Vec<(bool, i64, String, Option<DateTime<Utc>>)> = sqlx::query_as(LOCK_AND_RESOLVE)
        .bind(&titles)
        .bind(&dates)
        .bind(&clip_titles)
        .fetch_all(&mut *tx)
        .await?;
    let mut episode_ids: HashMap<(String, DateTime<Utc>), i64> = HashMap::new();
    let mut clip_ids: HashMap<String, i64> = HashMap::new();
    for (is_episode, id, title, aired) in found {
        match (is_episode, aired) {
            (true, Some(aired)) => {
                episode_ids.insert((title, aired), id);
            }
            _ => {
                clip_ids.insert(title, id);
            }
        }
    }

    // Per first result: its pair's ids if both are known, else which is unknown.
    let pair_of: Vec<Result<(i64, i64), RecordOutcome>> = batch
        .firsts
        .iter()
        .map(|&i| {
            let r = &results[i];
            // Postgres keeps microseconds: compare as it stored the key.
            let aired = trunc_micros(r.episode.date_aired);
            let e = episode_ids
                .get(&(r.episode.title.clone(), aired))
                .ok_or(RecordOutcome::UnknownEpisode)?;
            let c = clip_ids
                .get(&r.clip_title)
                .ok_or(RecordOutcome::UnknownClip)?;
            Ok((*e, *c))
        })
        .collect();
    let mut rows: Vec<(i64, i64, usize)> = pair_of
        .iter()
        .zip(&batch.firsts)
        .filter_map(|(p, &i)| p.ok().map(|(e, c)| (e, c, i)))
        .collect();
    // Key order, so that the rows are inserted and their leased pairs locked in one order.
    rows.sort_unstable();

    let mut inserted: HashSet<(i64, i64)> = HashSet::new();
    if !rows.is_empty() {
        let n = rows.len();
        let mut c = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::new(),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::new(),
        );
        for &(e, cl, i) in &rows {
            let r = &results[i];
            c.0.push(e);
            c.1.push(cl);
            c.2.push(r.lease_id);
            c.3.push(r.research_date);
            c.4.push(r.episode_duration_ns);
            c.5.push(r.episode_hash.as_str());
            c.6.push(r.clip_duration_ns);
            c.7.push(r.clip_hash.as_str());
            let start = i32::try_from(c.10.len()).map_err(|_| {
                DataStoreError::Invalid("too many offsets in one batch".to_string())
            })?;
            let len = i32::try_from(r.clip_offsets_ns.len()).map_err(|_| {
                DataStoreError::Invalid("too many offsets in one result".to_string())
            })?;
            c.8.push(start);
            c.9.push(len);
            c.10.extend_from_slice(&r.clip_offsets_ns);
            c.11.push(r.failure.as_deref());
            // Scores line up with the offsets (`$14` sliced as `$11`): a result without them
            // takes zeros there and is marked unscored (`$13`), stored as NULL.
            match &r.clip_match_scores {
                Some(s) if s.len() == r.clip_offsets_ns.len() => {
                    c.12.push(true);
                    c.13.extend_from_slice(s);
                }
                Some(_) => {
                    return Err(DataStoreError::Invalid(
                        "clip_match_scores: not one per offset".to_string(),
                    )
                    .into())
                }
                None => {
                    c.12.push(false);
                    c.13.resize(c.10.len(), 0.0);
                }
            }
        }
        let recorded: Vec<(Option<i64>, Option<i64>, Option<Uuid>)> = sqlx::query_as(RECORD)
            .bind(&c.0)
            .bind(&c.1)
            .bind(&c.2)
            .bind(&c.3)
            .bind(&c.4)
            .bind(&c.5)
            .bind(&c.6)
            .bind(&c.7)
            .bind(&c.8)
            .bind(&c.9)
            .bind(&c.10)
            .bind(&c.11)
            .bind(&c.12)
            .bind(&c.13)
            .fetch_all(&mut *tx)
            .await?;
        let mut ended = Vec::new();
        for row in recorded {
            match row {
                (Some(e), Some(c), _) => {
                    inserted.insert((e, c));
                }
                (_, _, Some(lease)) => ended.push(lease),
                _ => {}
            }
        }
        if !ended.is_empty() {
            sqlx::query(DROP_ENDED)
                .bind(&ended)
                .execute(&mut *tx)
                .await?;
        }
    }
    // The leases after the pairs and the leases recording touched: the lock order.
    let mut updated = Vec::with_capacity(leases.len());
    for &(lease_id, update) in leases {
        updated.push(update_lease_in(&mut tx, lease_id, update).await?);
    }
    if !acks.is_empty() {
        // Each result's delivery, unless its pair is unknown (that one is dead-lettered).
        let settle: Vec<SqlReceipt> = batch
            .first_of
            .iter()
            .zip(acks)
            .filter(|(&slot, _)| pair_of[slot].is_ok())
            .map(|(_, a)| a.clone())
            .collect();
        bus::ack_in(&mut tx, &settle)
            .await
            .map_err(DataStoreError::from)?;
    }
    commit(tx).await?;

    let first_outcomes: Vec<RecordOutcome> = pair_of
        .iter()
        .map(|p| match p {
            Err(unknown) => *unknown,
            Ok(pair) if inserted.contains(pair) => RecordOutcome::Recorded,
            Ok(_) => RecordOutcome::Duplicate,
        })
        .collect();
    let outcomes = batch
        .first_of
        .iter()
        .enumerate()
        .map(|(i, &slot)| {
            let first = first_outcomes[slot];
            if batch.firsts[slot] == i || first.is_unknown() {
                first
            } else {
                // A later copy of a pair in the same batch: the first one took it.
                RecordOutcome::Duplicate
            }
        })
        .collect();
    Ok((outcomes, updated))
}

// ------------------------------------------------------------------------------------ reading

const STATUS: &str = "
SELECT
    (SELECT count(*) FROM episodes),
    (SELECT count(*) FROM clips),
    e.researched, e.matched,
    l.active, l.expired, l.held, l.late, e.failed
FROM (SELECT COALESCE(sum(researched_count - failed_count), 0)::int8 AS researched,
             COALESCE(sum(matched_count), 0)::int8 AS matched,
             COALESCE(sum(failed_count), 0)::int8 AS failed FROM episodes) AS e,
     (SELECT count(*) FILTER (WHERE expires_at > $1 AND held_pairs > 0 AND NOT revoked)
                 AS active,
             count(*) FILTER (WHERE expires_at > $1 AND held_pairs > 0 AND revoked) AS late,
             count(*) FILTER (WHERE expires_at <= $1 AND held_pairs > 0) AS expired,
             COALESCE(sum(held_pairs) FILTER (WHERE expires_at > $1), 0)::int8 AS held
      FROM leases) AS l";

const MATCHES: &str = "
SELECT e.title, e.date_aired, c.title, r.clip_offsets_ns, r.research_date, r.clip_match_scores,
       r.episode_hash
FROM research_results r
JOIN episodes e ON e.id = r.episode_id
JOIN clips c ON c.id = r.clip_id
WHERE r.matched
  AND ($1::text IS NULL OR c.title = $1)
  AND ($2::text IS NULL OR e.title = $2)
  AND ($4::timestamptz IS NULL OR r.research_date >= $4)
ORDER BY e.date_aired DESC, e.title, c.title
LIMIT $3";

// Walks research_results_matched_recent (0006) from its newest end.
const RECENT_MATCHES: &str = "
SELECT e.title, e.date_aired, c.title, r.clip_offsets_ns, r.research_date, r.clip_match_scores,
       r.episode_hash
FROM research_results r
JOIN episodes e ON e.id = r.episode_id
JOIN clips c ON c.id = r.clip_id
WHERE r.matched
ORDER BY r.research_date DESC, e.title, c.title
LIMIT $1";

const LEASES: &str = "
SELECT l.id, e.title, e.date_aired, l.created_at, l.expires_at, l.held_pairs::int8, l.revoked
FROM leases l JOIN episodes e ON e.id = l.episode_id
WHERE l.held_pairs > 0
ORDER BY l.expires_at <= $1 DESC, l.created_at, l.id
LIMIT $2";

/// Locks, in id order (the order recording takes them in), the episodes of the failed pairs
/// [`RETRY_FAILED`] is about to forget. Reads failed pairs only (0007's partial indexes).
const LOCK_FAILED: &str = "
SELECT 1 FROM episodes
WHERE id IN (SELECT r.episode_id FROM research_results r
             WHERE r.failure IS NOT NULL
               AND ($1::text IS NULL OR r.episode_id IN (SELECT id FROM episodes WHERE title = $1))
               AND ($2::text IS NULL OR r.clip_id IN (SELECT id FROM clips WHERE title = $2)))
ORDER BY id
FOR NO KEY UPDATE";

/// Forgets failed pairs (of episodes titled `$1`, of the clip `$2`, each if given) and takes
/// them off their episodes' counters; returns how many.
const RETRY_FAILED: &str = "
WITH gone AS (
    DELETE FROM research_results r
    WHERE r.failure IS NOT NULL
      AND ($1::text IS NULL OR r.episode_id IN (SELECT id FROM episodes WHERE title = $1))
      AND ($2::text IS NULL OR r.clip_id IN (SELECT id FROM clips WHERE title = $2))
    RETURNING r.episode_id
), counted AS (
    UPDATE episodes e
    SET researched_count = e.researched_count - s.n, failed_count = e.failed_count - s.n
    FROM (SELECT episode_id, count(*)::int4 AS n FROM gone GROUP BY episode_id) AS s
    WHERE e.id = s.episode_id
)
SELECT count(*) FROM gone";

/// The most common failure reasons; walks research_results_failed_reason (0007).
const FAILURE_REASONS: &str = "
SELECT failure, count(*) AS n FROM research_results
WHERE failure IS NOT NULL
GROUP BY failure
ORDER BY n DESC, failure
LIMIT $1";

#[async_trait]
impl DataStore for PgDataStore {
    async fn migrate(&self) -> Result<()> {
        // sqlx's Postgres migrator holds an advisory lock while it runs, so concurrent
        // migrations wait for each other, and applied migrations are skipped: harmless twice.
        retrying("migrate", Replay::Harmless, || async {
            MIGRATOR.run(&self.pool).await.map_err(|e| match e {
                // A broken connection or a busy server is a passing failure, not a bad schema.
                MigrateError::Execute(inner) => match DataStoreError::from(inner) {
                    passing if passing.is_retryable() => Failure::Before(passing),
                    DataStoreError::Database(e) | DataStoreError::Unavailable(e) => {
                        Failure::Before(DataStoreError::Migration(MigrateError::Execute(e)))
                    }
                    other => Failure::Before(other),
                },
                other => Failure::Before(DataStoreError::Migration(other)),
            })
        })
        .await
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
        retrying("missing_migrations", Replay::Harmless, || async {
            let has_table: bool =
                sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                    .fetch_one(&self.pool)
                    .await?;
            let applied: Vec<i64> = if has_table {
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(&self.pool)
                    .await?
            } else {
                Vec::new()
            };
            Ok(crate::store::missing(&MIGRATOR, &applied))
        })
        .await
    }

    async fn upsert_episodes(&self, episodes: &[EpisodeInfo]) -> Result<()> {
        upsert(&self.pool, episodes, &[]).await
    }

    async fn upsert_clips(&self, clips: &[ClipInfo]) -> Result<()> {
        upsert(&self.pool, clips, &[]).await
    }

    async fn lease_next(&self, request: LeaseRequest) -> Result<Option<Lease>> {
        self.lease(request, None).await
    }

    async fn update_lease(&self, lease_id: Uuid, update: LeaseUpdate) -> Result<bool> {
        let replay = match update {
            LeaseUpdate::Renew { .. } => Replay::Harmless,
            // A replayed revoke or cancel would answer false for a lease this call did end.
            LeaseUpdate::Revoke | LeaseUpdate::Cancel => Replay::Unsafe,
        };
        retrying("update_lease", replay, || {
            update_lease_once(&self.pool, lease_id, update)
        })
        .await
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
        retrying("status", Replay::Harmless, || async {
            // One statement: one snapshot, so the counts agree with each other.
            let row = sqlx::query(STATUS).bind(now).fetch_one(&self.pool).await?;
            Ok(sql::status_from_row(&row)?)
        })
        .await
    }

    async fn retry_failed(
        &self,
        episode_title: Option<&str>,
        clip_title: Option<&str>,
    ) -> Result<u64> {
        // A replay after an unknown commit would find nothing left and answer 0.
        retrying("retry_failed", Replay::Unsafe, || async {
            let mut tx = self.pool.begin_with(BEGIN).await?;
            sqlx::query(LOCK_FAILED)
                .bind(episode_title)
                .bind(clip_title)
                .execute(&mut *tx)
                .await?;
            let freed: i64 = sqlx::query_scalar(RETRY_FAILED)
                .bind(episode_title)
                .bind(clip_title)
                .fetch_one(&mut *tx)
                .await?;
            if freed > 0 {
                // Episodes before the lease frontier may have work again (0003).
                sqlx::query("UPDATE lease_frontier SET clips = NULL, generation = generation + 1")
                    .execute(&mut *tx)
                    .await?;
            }
            commit(tx).await?;
            Ok(count(freed))
        })
        .await
    }

    async fn forget_episode_results(
        &self,
        title: &str,
        date_aired: DateTime<Utc>,
    ) -> Result<Option<u64>> {
        // A replay after an unknown commit would find nothing left and answer 0.
        retrying("forget_episode_results", Replay::Unsafe, || async {
            let mut tx = self.pool.begin_with(BEGIN).await?;
            // The episode's row first, as recording locks it: its counters are rewritten.
            let id: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM episodes WHERE title = $1 AND date_aired = $2 \
                 FOR NO KEY UPDATE",
            )
            .bind(title)
            .bind(date_aired)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(id) = id else {
                return Ok(None);
            };
            let gone = sqlx::query("DELETE FROM research_results WHERE episode_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query(
                "UPDATE episodes SET researched_count = 0, matched_count = 0, failed_count = 0 \
                 WHERE id = $1",
            )
            .bind(id)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM episode_completions WHERE episode_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            if gone > 0 {
                // The episode may lie before the lease frontier: it has work again (0003).
                sqlx::query("UPDATE lease_frontier SET clips = NULL, generation = generation + 1")
                    .execute(&mut *tx)
                    .await?;
            }
            commit(tx).await?;
            Ok(Some(gone))
        })
        .await
    }

    async fn failure_reasons(&self, limit: u32) -> Result<Vec<FailureReason>> {
        self.read_rows(
            "failure_reasons",
            || sqlx::query(FAILURE_REASONS).bind(i64::from(limit)),
            sql::failure_reason_from_row,
        )
        .await
    }

    async fn matches(&self, filter: &MatchFilter) -> Result<Vec<Match>> {
        let limit: Option<i64> = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let query = || {
            sqlx::query(MATCHES)
                .bind(filter.clip_title.as_deref())
                .bind(filter.episode_title.as_deref())
                .bind(limit)
                .bind(filter.since)
        };
        self.read_rows("matches", query, sql::match_from_row).await
    }

    async fn recent_matches(&self, limit: u32) -> Result<Vec<Match>> {
        self.read_rows(
            "recent_matches",
            || sqlx::query(RECENT_MATCHES).bind(i64::from(limit)),
            sql::match_from_row,
        )
        .await
    }

    async fn completions(&self, limit: u32) -> Result<Vec<EpisodeCompletion>> {
        retrying("completions", Replay::Harmless, || async {
            let mut conn = self.pool.acquire().await?;
            Ok(sql::read_completions::<Self>(&mut conn, Which::All(limit)).await?)
        })
        .await
    }

    async fn completions_announced(&self, ids: &[CompletionId]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        retrying("completions_announced", Replay::Harmless, || async {
            let mut conn = self.pool.acquire().await?;
            Ok(Self::completions_announced_in(&mut conn, ids).await?)
        })
        .await
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
        // Unsafe to try again blindly: a commit whose answer was lost claimed completions that
        // nobody would send until the claim runs out. They are sent late, not lost.
        retrying("claim_completions", Replay::Unsafe, || async {
            let mut tx = self.pool.begin_with(BEGIN).await?;
            let claimed: Vec<i64> = sqlx::query_scalar(CLAIM_COMPLETIONS)
                .bind(i64::from(limit))
                .bind(now)
                .bind(until)
                .fetch_all(&mut *tx)
                .await?;
            let found = if claimed.is_empty() {
                Vec::new()
            } else {
                sql::read_completions::<Self>(&mut tx, Which::Claimed(&claimed)).await?
            };
            commit(tx).await?;
            Ok(found)
        })
        .await
    }

    async fn release_completions(&self, ids: &[CompletionId]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let episodes: Vec<i64> = ids.iter().map(|c| c.episode_id).collect();
        let completions: Vec<i64> = ids.iter().map(|c| c.completions).collect();
        retrying("release_completions", Replay::Harmless, || async {
            let done = sqlx::query(RELEASE_COMPLETIONS)
                .bind(&episodes)
                .bind(&completions)
                .execute(&self.pool)
                .await?;
            Ok(done.rows_affected())
        })
        .await
    }

    async fn leases(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<LeaseSummary>> {
        self.read_rows(
            "leases",
            || sqlx::query(LEASES).bind(now).bind(i64::from(limit)),
            |row| sql::lease_summary_from_row(row, now),
        )
        .await
    }
}

/// The columns of an unannounced completion: its episode and counts.
macro_rules! completion_columns {
    () => {
        "SELECT u.episode_id, u.completions, u.completed_at,
       e.title, e.date_aired, e.initial_date_curated, e.last_date_curated,
       e.curator_information, e.description, e.media_uri, e.media_type, e.priority,
       (e.researched_count - e.failed_count)::int8 AS researched,
       e.matched_count::int8 AS matched, e.failed_count::int8 AS failed
FROM episode_completions u JOIN episodes e ON e.id = u.episode_id"
    };
}

/// Unannounced completions, oldest first, with their episodes and counts.
const COMPLETIONS: &str = concat!(
    completion_columns!(),
    "
ORDER BY u.completed_at, u.episode_id
LIMIT $1"
);

/// [`COMPLETIONS`] for announcing: the rows locked, those another announcer holds (locked, or
/// claimed until after `$2`) skipped.
const COMPLETIONS_TO_ANNOUNCE: &str = concat!(
    completion_columns!(),
    "
WHERE u.claimed_until IS NULL OR u.claimed_until <= $2
ORDER BY u.completed_at, u.episode_id
LIMIT $1
FOR UPDATE OF u SKIP LOCKED"
);

/// [`COMPLETIONS`] of the episodes `$1` (just claimed).
const COMPLETIONS_OF: &str = concat!(
    completion_columns!(),
    "
WHERE u.episode_id = ANY($1)
ORDER BY u.completed_at, u.episode_id"
);

/// Claims up to `$1` completions nobody holds (no claim, or one that ran out by `$2`), oldest
/// first, until `$3`: rows another claimer has locked are skipped, and one it committed is
/// read again as claimed, so no two claimers get the same completion.
const CLAIM_COMPLETIONS: &str = "
UPDATE episode_completions u SET claimed_until = $3
WHERE u.episode_id IN (
    SELECT c.episode_id FROM episode_completions c
    WHERE c.claimed_until IS NULL OR c.claimed_until <= $2
    ORDER BY c.completed_at, c.episode_id
    LIMIT $1
    FOR UPDATE SKIP LOCKED)
  AND (u.claimed_until IS NULL OR u.claimed_until <= $2)
RETURNING u.episode_id";

/// Gives back claims on completions not announced, unless their episode completed again since.
const RELEASE_COMPLETIONS: &str = "
UPDATE episode_completions u SET claimed_until = NULL
FROM unnest($1::int8[], $2::int8[]) AS a (id, n)
WHERE u.episode_id = a.id AND u.completions = a.n";

/// The matched results of the episodes `$1`, through the partial index of matches.
const COMPLETION_MATCHES: &str = "
SELECT r.episode_id, c.id, c.title, c.initial_date_curated, c.last_date_curated,
       c.curator_information, c.description, c.media_uri, c.media_type, c.priority,
       r.clip_offsets_ns
FROM research_results r JOIN clips c ON c.id = r.clip_id
WHERE r.episode_id = ANY($1) AND r.matched";

/// Lets go of announced completions, unless their episode completed again since.
const COMPLETIONS_ANNOUNCED: &str = "
DELETE FROM episode_completions u USING unnest($1::int8[], $2::int8[]) AS a (id, n)
WHERE u.episode_id = a.id AND u.completions = a.n";

#[async_trait]
impl Dialect for PgDataStore {
    type DB = Postgres;
    type Row = PgRow;

    const MATCHED: &'static str = "r.matched";
    const OCCURRENCES: &'static str = "sum(cardinality(r.clip_offsets_ns))::int8";
    /// The words of a clip's title, exactly as the index clips_title_words (0009) has them
    /// (else the planner cannot use it): punctuation made space, then the 'simple' parser.
    const CLIP_SEARCH: &'static str = " WHERE \
         to_tsvector('simple', regexp_replace(c.title, '[[:punct:]]+', ' ', 'g')) \
         @@ to_tsquery('simple', ";
    /// As [`CLIP_SEARCH`](Self::CLIP_SEARCH), by episodes_title_words (0009).
    const EPISODE_SEARCH: &'static str = " AND \
         to_tsvector('simple', regexp_replace(e.title, '[[:punct:]]+', ' ', 'g')) \
         @@ to_tsquery('simple', ";

    fn search_query(words: &[String]) -> String {
        tsquery(words)
    }
    fn push_int(q: &mut QueryBuilder<'_, Postgres>, value: i64) {
        q.push_bind(value);
    }
    fn push_text(q: &mut QueryBuilder<'_, Postgres>, value: String) {
        q.push_bind(value);
    }
    fn push_time(q: &mut QueryBuilder<'_, Postgres>, value: DateTime<Utc>) {
        q.push_bind(value);
    }
    fn push_cursor_time(q: &mut QueryBuilder<'_, Postgres>, micros: i64) -> Result<()> {
        q.push_bind(cursor_time(micros)?);
        Ok(())
    }

    async fn fetch_all(
        conn: &mut PgConnection,
        q: &mut QueryBuilder<'_, Postgres>,
    ) -> Result<Vec<PgRow>> {
        Ok(q.build().fetch_all(conn).await?)
    }
    async fn fetch_optional(
        conn: &mut PgConnection,
        q: &mut QueryBuilder<'_, Postgres>,
    ) -> Result<Option<PgRow>> {
        Ok(q.build().fetch_optional(conn).await?)
    }

    async fn completion_rows(conn: &mut PgConnection, which: Which<'_>) -> Result<Vec<PgRow>> {
        let query = match which {
            Which::All(limit) => sqlx::query(COMPLETIONS).bind(i64::from(limit)),
            Which::ToAnnounce(limit, now) => sqlx::query(COMPLETIONS_TO_ANNOUNCE)
                .bind(i64::from(limit))
                .bind(now),
            Which::Claimed(ids) => sqlx::query(COMPLETIONS_OF).bind(ids),
        };
        Ok(query.fetch_all(conn).await?)
    }
    async fn completion_matches(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<PgRow>> {
        Ok(sqlx::query(COMPLETION_MATCHES)
            .bind(ids)
            .fetch_all(conn)
            .await?)
    }
    async fn completions_announced_in(
        conn: &mut PgConnection,
        ids: &[CompletionId],
    ) -> Result<u64> {
        let episodes: Vec<i64> = ids.iter().map(|c| c.episode_id).collect();
        let completions: Vec<i64> = ids.iter().map(|c| c.completions).collect();
        let done = sqlx::query(COMPLETIONS_ANNOUNCED)
            .bind(&episodes)
            .bind(&completions)
            .execute(conn)
            .await?;
        Ok(done.rows_affected())
    }
    async fn send_in(conn: &mut PgConnection, queue: &str, bodies: Vec<Vec<u8>>) -> Result<()> {
        Ok(bus::send_in(conn, queue, bodies).await?)
    }
}

impl PgDataStore {
    /// The rows of one statement on the pool (`query` makes it anew for each try), each as
    /// `map` reads it, retried as [`retrying`] allows (reading twice is harmless).
    async fn read_rows<'q, T>(
        &self,
        op: &'static str,
        query: impl Fn() -> PgQuery<'q>,
        map: impl Fn(&PgRow) -> Result<T>,
    ) -> Result<Vec<T>> {
        retrying(op, Replay::Harmless, || async {
            let rows = query().fetch_all(&self.pool).await?;
            Ok(rows.iter().map(&map).collect::<Result<Vec<T>>>()?)
        })
        .await
    }

    /// [`DataStore::lease_next`], publishing the work item in the same transaction if asked.
    async fn lease(
        &self,
        request: LeaseRequest,
        publish: Option<Publish<'_>>,
    ) -> Result<Option<Lease>> {
        for _ in 0..MAX_RESELECTS {
            // Harmless: a try made again after a commit whose outcome was lost finds the
            // lease it made by its id (READ_FRONTIER) and answers with it.
            match retrying("lease_next", Replay::Harmless, || {
                lease_next_once(&self.pool, self.begin_lease, request, publish)
            })
            .await?
            {
                Selection::Leased(lease) => return Ok(Some(*lease)),
                Selection::NoWork => return Ok(None),
                Selection::Again => continue,
            }
        }
        tracing::warn!(
            "lease_next chose {MAX_RESELECTS} times without finding free pairs; giving up"
        );
        Ok(None)
    }

    /// [`DataStore::record_results_updating_leases`], acknowledging in the same transaction
    /// the delivery (`acks[i]`, if any) of each result not for an unknown pair.
    async fn record(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
        acks: &[SqlReceipt],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)> {
        if results.is_empty() && leases.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let batch = prepare_batch(results);
        retrying("record_results", Replay::Unsafe, || {
            record_results_once(&self.pool, &batch, leases, acks)
        })
        .await
    }
}

#[async_trait]
impl TransactionalBus for PgDataStore {
    async fn holds_bus(&self, bus_id: &str) -> Result<bool> {
        if let Some(id) = self.bus_id.get() {
            return Ok(id == bus_id);
        }
        let mut conn = self.pool.acquire().await?;
        let found = bus::bus_id_in(&mut conn).await?;
        Ok(crate::store::remember_bus(&self.bus_id, found, bus_id))
    }

    async fn upsert_episodes_and_ack(
        &self,
        episodes: &[EpisodeInfo],
        acks: &[SqlReceipt],
    ) -> Result<()> {
        if let Some(first) = acks.first() {
            crate::store::check_bus(self, &first.bus_id).await?;
        }
        upsert(&self.pool, episodes, acks).await
    }

    async fn upsert_clips_and_ack(&self, clips: &[ClipInfo], acks: &[SqlReceipt]) -> Result<()> {
        if let Some(first) = acks.first() {
            crate::store::check_bus(self, &first.bus_id).await?;
        }
        upsert(&self.pool, clips, acks).await
    }

    async fn record_results_and_ack(
        &self,
        results: &[ResearchResult],
        leases: &[(Uuid, LeaseUpdate)],
        acks: &[SqlReceipt],
    ) -> Result<(Vec<RecordOutcome>, Vec<bool>)> {
        if let Some(first) = acks.first() {
            crate::store::check_bus(self, &first.bus_id).await?;
        }
        self.record(results, leases, acks).await
    }

    async fn lease_next_and_publish(
        &self,
        request: LeaseRequest,
        bus_id: &str,
        queue: &str,
        encode: &EncodeWorkItem,
    ) -> Result<Option<Lease>> {
        crate::store::check_bus(self, bus_id).await?;
        self.lease(request, Some((queue, encode))).await
    }

    async fn announce_completions(
        &self,
        limit: u32,
        bus_id: &str,
        queue: &str,
        encode: &EncodeCompletion,
    ) -> Result<u64> {
        crate::store::check_bus(self, bus_id).await?;
        // Harmless to try again: after a commit whose answer was lost, the completions that
        // try published are gone, so the next one publishes only the rest.
        retrying("announce_completions", Replay::Harmless, || async {
            let mut tx = self.pool.begin_with(BEGIN).await?;
            let announced = sql::announce_in::<Self>(&mut tx, limit, queue, encode).await?;
            if announced > 0 {
                commit(tx).await?;
            }
            Ok(announced)
        })
        .await
    }
}

// ------------------------------------------------------------------------------------ browsing

/// The tsquery for `words` (see [`crate::browse::search_words`]): each word a prefix, all of them
/// required. The words are letters and digits only, quoted, so no input is tsquery syntax.
fn tsquery(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{w}':*"))
        .collect::<Vec<_>>()
        .join(" & ")
}

/// A cursor's time: stored as unix microseconds.
fn cursor_time(us: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us)
        .ok_or_else(|| DataStoreError::Invalid("not a cursor of this listing".to_string()))
}

/// A read-only snapshot: a page's counts and rows agree.
const BEGIN_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

#[async_trait]
impl Browse for PgDataStore {
    async fn list_clips(&self, query: &ListQuery) -> Result<Page<ClipSummary>> {
        retrying("list_clips", Replay::Harmless, || async {
            let mut conn = self.pool.acquire().await?;
            Ok(sql::list_clips::<Self>(&mut conn, query).await?)
        })
        .await
    }

    async fn list_episodes(&self, query: &ListQuery) -> Result<Page<EpisodeSummary>> {
        retrying("list_episodes", Replay::Harmless, || async {
            let mut conn = self.pool.acquire().await?;
            Ok(sql::list_episodes::<Self>(&mut conn, query).await?)
        })
        .await
    }

    async fn clip_page(&self, id: i64, page: &ListQuery) -> Result<Option<ClipPage>> {
        retrying("clip_page", Replay::Harmless, || async {
            let mut tx = self.pool.begin_with(BEGIN_READ).await?;
            let found = sql::clip_page::<Self>(&mut tx, id, page).await?;
            if found.is_some() {
                commit(tx).await?;
            }
            Ok(found)
        })
        .await
    }

    async fn episode_page(&self, id: i64, now: DateTime<Utc>) -> Result<Option<EpisodePage>> {
        retrying("episode_page", Replay::Harmless, || async {
            let mut tx = self.pool.begin_with(BEGIN_READ).await?;
            let found = sql::episode_page::<Self>(&mut tx, id, now).await?;
            if found.is_some() {
                commit(tx).await?;
            }
            Ok(found)
        })
        .await
    }
}

/// A token row: name, scope, created, last used, most researchers.
fn token_info(row: &PgRow) -> Result<TokenInfo> {
    let scope: String = row.try_get(1)?;
    let max_researchers: i32 = row.try_get(4)?;
    Ok(TokenInfo {
        name: row.try_get(0)?,
        scope: scope.parse::<TokenScope>().map_err(|e| {
            DataStoreError::Database(sqlx::Error::Decode(format!("api_tokens.scope: {e}").into()))
        })?,
        created: row.try_get(2)?,
        last_used: row.try_get(3)?,
        max_researchers: u32::try_from(max_researchers).map_err(|e| {
            DataStoreError::Database(sqlx::Error::Decode(
                format!("api_tokens.max_researchers: {e}").into(),
            ))
        })?,
    })
}

/// A held item's row: receipt hash, token, bus receipt, item, taken.
fn held_item(row: &PgRow) -> Result<HeldItem> {
    Ok(HeldItem {
        receipt_hash: row.try_get(0)?,
        token: row.try_get(1)?,
        bus_receipt: row.try_get(2)?,
        item: row.try_get(3)?,
        seen_at: row.try_get(4)?,
    })
}

#[async_trait]
impl ApiAccess for PgDataStore {
    async fn create_token(&self, token: &NewToken) -> Result<()> {
        retrying("create_token", Replay::Unsafe, || async {
            let mut tx = self.pool.begin().await?;
            // A revoked token's name may be taken again: the revoked row goes.
            sqlx::query("DELETE FROM api_tokens WHERE name = $1 AND revoked_at IS NOT NULL")
                .bind(&token.name)
                .execute(&mut *tx)
                .await?;
            let inserted = sqlx::query(
                "INSERT INTO api_tokens (name, scope, token_hash, created_at, max_researchers) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&token.name)
            .bind(token.scope.as_str())
            .bind(&token.hash)
            .bind(token.created)
            .bind(i32::try_from(token.max_researchers).unwrap_or(i32::MAX))
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {}
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    return Err(Failure::Before(DataStoreError::Conflict(format!(
                        "a token named {:?} exists already",
                        token.name
                    ))))
                }
                Err(e) => return Err(e.into()),
            }
            commit(tx).await?;
            Ok(())
        })
        .await
    }

    async fn tokens(&self) -> Result<Vec<TokenInfo>> {
        retrying("tokens", Replay::Harmless, || async {
            let rows = sqlx::query(
                "SELECT name, scope, created_at, last_used_at, max_researchers \
                 FROM api_tokens \
                 WHERE revoked_at IS NULL \
                 ORDER BY name",
            )
            .fetch_all(&self.pool)
            .await?;
            rows.iter()
                .map(token_info)
                .collect::<Result<Vec<_>>>()
                .map_err(Failure::Before)
        })
        .await
    }

    async fn revoke_token(&self, name: &str) -> Result<bool> {
        retrying("revoke_token", Replay::Harmless, || async {
            let gone = sqlx::query(
                "UPDATE api_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL",
            )
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected();
            Ok(gone > 0)
        })
        .await
    }

    async fn revoked_token(&self, hash: &str) -> Result<Option<String>> {
        retrying("revoked_token", Replay::Harmless, || async {
            Ok(sqlx::query_scalar(
                "SELECT name FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NOT NULL",
            )
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?)
        })
        .await
    }

    async fn use_token(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<TokenInfo>> {
        retrying("use_token", Replay::Harmless, || async {
            let row = sqlx::query(
                "SELECT name, scope, created_at, last_used_at, max_researchers FROM api_tokens \
                 WHERE token_hash = $1 AND revoked_at IS NULL",
            )
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
            let Some(row) = row else { return Ok(None) };
            let info = token_info(&row).map_err(Failure::Before)?;
            let stale = info
                .last_used
                .is_none_or(|t| now - t >= chrono::Duration::minutes(1));
            if stale {
                sqlx::query(
                    "UPDATE api_tokens SET last_used_at = greatest(last_used_at, $1) \
                     WHERE token_hash = $2",
                )
                .bind(now)
                .bind(hash)
                .execute(&self.pool)
                .await?;
            }
            Ok(Some(info))
        })
        .await
    }

    async fn touch_presence(
        &self,
        id: &str,
        kind: PresenceKind,
        count: u64,
        now: DateTime<Utc>,
    ) -> Result<()> {
        retrying("touch_presence", Replay::Harmless, || async {
            sqlx::query(
                "INSERT INTO api_presence (id, kind, count, seen_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, count = excluded.count, \
                 seen_at = greatest(api_presence.seen_at, excluded.seen_at)",
            )
            .bind(id)
            .bind(kind.as_str())
            .bind(i64::try_from(count).unwrap_or(i64::MAX))
            .bind(now)
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    async fn leave_presence(&self, id: &str) -> Result<()> {
        retrying("leave_presence", Replay::Harmless, || async {
            sqlx::query("DELETE FROM api_presence WHERE id = $1")
                .bind(id)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
        .await
    }

    async fn presence(&self, since: DateTime<Utc>) -> Result<Presence> {
        retrying("presence", Replay::Harmless, || async {
            let row = sqlx::query(
                "SELECT coalesce(sum(count) FILTER (WHERE kind = 'researcher'), 0)::int8, \
                        coalesce(sum(count) FILTER (WHERE kind = 'gateway'), 0)::int8 \
                 FROM api_presence WHERE seen_at >= $1",
            )
            .bind(since)
            .fetch_one(&self.pool)
            .await?;
            let (researchers, gateway): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
            Ok(Presence {
                researchers: u64::try_from(researchers).unwrap_or(0),
                gateway_receivers: u64::try_from(gateway).unwrap_or(0),
            })
        })
        .await
    }

    async fn forget_presence(&self, before: DateTime<Utc>) -> Result<u64> {
        retrying("forget_presence", Replay::Harmless, || async {
            Ok(sqlx::query("DELETE FROM api_presence WHERE seen_at < $1")
                .bind(before)
                .execute(&self.pool)
                .await?
                .rows_affected())
        })
        .await
    }

    async fn hold_item(&self, held: &HeldItem) -> Result<()> {
        retrying("hold_item", Replay::Harmless, || async {
            sqlx::query("INSERT INTO api_held_items (receipt_hash, token_name, bus_receipt, item, seen_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (receipt_hash) DO UPDATE SET token_name = excluded.token_name, \
                 bus_receipt = excluded.bus_receipt, item = excluded.item, \
                 seen_at = excluded.seen_at")
            .bind(&held.receipt_hash)
            .bind(&held.token)
            .bind(&held.bus_receipt)
            .bind(&held.item)
            .bind(held.seen_at)
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    async fn held_item(&self, receipt_hash: &str) -> Result<Option<HeldItem>> {
        retrying("held_item", Replay::Harmless, || async {
            let row = sqlx::query(
                "SELECT receipt_hash, token_name, bus_receipt, item, seen_at \
                 FROM api_held_items \
                 WHERE receipt_hash = $1",
            )
            .bind(receipt_hash)
            .fetch_optional(&self.pool)
            .await?;
            row.as_ref()
                .map(held_item)
                .transpose()
                .map_err(Failure::Before)
        })
        .await
    }

    async fn drop_held(&self, receipt_hash: &str) -> Result<bool> {
        retrying("drop_held", Replay::Harmless, || async {
            let gone = sqlx::query("DELETE FROM api_held_items WHERE receipt_hash = $1")
                .bind(receipt_hash)
                .execute(&self.pool)
                .await?
                .rows_affected();
            Ok(gone > 0)
        })
        .await
    }

    async fn held_by(&self, token: &str) -> Result<Vec<HeldItem>> {
        retrying("held_by", Replay::Harmless, || async {
            let rows = sqlx::query("SELECT receipt_hash, token_name, bus_receipt, item, seen_at FROM api_held_items WHERE token_name = $1 \
                 ORDER BY seen_at, receipt_hash")
            .bind(token)
            .fetch_all(&self.pool)
            .await?;
            rows.iter()
                .map(held_item)
                .collect::<Result<Vec<_>>>()
                .map_err(Failure::Before)
        })
        .await
    }

    async fn forget_held(&self, before: DateTime<Utc>) -> Result<u64> {
        retrying("forget_held", Replay::Harmless, || async {
            Ok(sqlx::query("DELETE FROM api_held_items WHERE seen_at < $1")
                .bind(before)
                .execute(&self.pool)
                .await?
                .rows_affected())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn lock_key_is_the_constant() {
        for begin in [BEGIN_LEASE, BEGIN_LEASE_BEFORE] {
            assert!(begin.ends_with(&format!("pg_advisory_xact_lock({LEASE_LOCK_KEY})")));
        }
    }

    /// Only the lease selection's own transaction has its settings (`SET LOCAL`, inside
    /// BEGIN); `lease_transaction_settings_stay_in_it` checks the pool's connections.
    #[test]
    fn lease_settings_are_local_to_the_lease_transaction() {
        assert!(BEGIN_LEASE.starts_with(
            "BEGIN ISOLATION LEVEL READ COMMITTED; \
             SET LOCAL synchronous_commit = off; SET LOCAL enable_seqscan = off; \
             SET LOCAL jit = off;"
        ));
        assert!(!BEGIN_LEASE_BEFORE.contains("SET"));
        assert!(!BEGIN.contains("SET") && !BEGIN_RECORD.contains("synchronous_commit"));
    }

    /// `leased_pairs` and `leases` as autovacuum leaves them between its visits: a minute of
    /// churn (here 100,000 pairs and 20,000 leases inserted and deleted), vacuumed, a few live
    /// rows in a large heap with large indexes, the statistics saying so. A lease selection's
    /// statements still read them by index: none of their plans scans either sequentially, and
    /// none is compiled.
    /// (Begun as before, the same statements do: the trap the setting avoids.)
    #[tokio::test]
    async fn lease_selection_reads_churned_queues_by_index() {
        let (store, _db) = crate::testing_pg::fresh_pg_store().await;
        let pool = store.pool();
        for sql in [
            "INSERT INTO episodes (title, date_aired, initial_date_curated, last_date_curated,
                 curator_information, description, media_uri, media_type, priority)
             SELECT 'e' || i, timestamptz '2020-01-01' + i * interval '1 day', now(), now(),
                    'c', 'd', 'u' || i, 'mp3', 0
             FROM generate_series(1, 200) AS i",
            "INSERT INTO clips (title, initial_date_curated, last_date_curated,
                 curator_information, description, media_uri, media_type, priority)
             SELECT 'c' || i, now(), now(), 'c', 'd', 'u' || i, 'mp3', 0
             FROM generate_series(1, 1000) AS i",
            // The churn: 20,000 leases come and go, and pairs of every episode; the 50 open
            // leases and their 2,500 pairs, written last, keep vacuum from cutting the heap
            // short (as live rows anywhere in it do).
            "INSERT INTO leases (id, episode_id, created_at, expires_at, held_pairs, duration)
             SELECT gen_random_uuid(), 1 + i % 50, now(), now() + interval '1 hour', 0,
                    interval '1 hour'
             FROM generate_series(1, 20000) AS i",
            "INSERT INTO leases (id, episode_id, created_at, expires_at, held_pairs, duration)
             SELECT md5(i::text)::uuid, 1 + i / 10, now(), now() + interval '1 hour', 50,
                    interval '1 hour'
             FROM generate_series(0, 49) AS i",
            "INSERT INTO leased_pairs (episode_id, clip_id, lease_id)
             SELECT e, c, gen_random_uuid() FROM generate_series(1, 200) AS e,
                    generate_series(501, 1000) AS c",
            "INSERT INTO leased_pairs (episode_id, clip_id, lease_id)
             SELECT 1 + i / 10, 1 + (i % 10) * 50 + c, md5(i::text)::uuid
             FROM generate_series(0, 49) AS i, generate_series(0, 49) AS c",
            "DELETE FROM leased_pairs WHERE clip_id > 500",
            "DELETE FROM leases WHERE held_pairs = 0",
            "VACUUM ANALYZE leased_pairs",
            "ANALYZE leases",
        ] {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
        let pages: i32 =
            sqlx::query_scalar("SELECT relpages FROM pg_class WHERE relname = 'leased_pairs'")
                .fetch_one(pool)
                .await
                .unwrap();
        assert!(pages > 500, "the churn left {pages} pages");

        async fn plans(pool: &PgPool, begin: &'static str) -> Vec<String> {
            let now = Utc::now();
            let top = top_of_urgency();
            let mut tx = pool.begin_with(begin).await.unwrap();
            let mut plans = Vec::new();
            let explain = |sql: &str| format!("EXPLAIN {sql}");
            let rows: Vec<String> = sqlx::query_scalar(&explain(CHOOSE_EPISODE))
                .bind(now)
                .bind(1000_i64)
                .bind(top.0)
                .bind(top.1)
                .bind(top.2)
                .bind(top.3)
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            plans.push(rows.join("\n"));
            let rows: Vec<String> = sqlx::query_scalar(&explain(FREE_CLIPS))
                .bind(3_i64)
                .bind(now)
                .bind(50_i64)
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            plans.push(rows.join("\n"));
            let rows: Vec<String> = sqlx::query_scalar(&explain(TAKE_OVER))
                .bind(3_i64)
                .bind((1..=50).collect::<Vec<i64>>())
                .bind(now)
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            plans.push(rows.join("\n"));
            let rows: Vec<String> = sqlx::query_scalar(&explain(READ_FRONTIER))
                .bind(Uuid::new_v4())
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            plans.push(rows.join("\n"));
            let rows: Vec<String> = sqlx::query_scalar(&explain(MOVE_FRONTIER))
                .bind(0_i64)
                .bind(1000_i64)
                .bind(top.0)
                .bind(top.1)
                .bind(top.2)
                .bind(top.3)
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            plans.push(rows.join("\n"));
            let rows: Vec<String> = sqlx::query_scalar(&explain(INSERT_LEASE))
                .bind(Uuid::new_v4())
                .bind(3_i64)
                .bind(now)
                .bind(now)
                .bind((1..=50).collect::<Vec<i64>>())
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            plans.push(rows.join("\n"));
            tx.rollback().await.unwrap();
            plans
        }
        let scans = |plans: &[String]| {
            plans
                .iter()
                .filter(|p| {
                    p.contains("Seq Scan on leased_pairs") || p.contains("Seq Scan on leases")
                })
                .cloned()
                .collect::<Vec<_>>()
        };
        let shipped = plans(pool, BEGIN_LEASE).await;
        assert!(scans(&shipped).is_empty(), "{:#?}", scans(&shipped));
        // Nor is any compiled (JIT, which the penalty would otherwise bring on).
        let compiled: Vec<_> = shipped.iter().filter(|p| p.contains("JIT:")).collect();
        assert!(compiled.is_empty(), "{compiled:#?}");
        let before = plans(pool, BEGIN_LEASE_BEFORE).await;
        assert!(
            !scans(&before).is_empty(),
            "no sequential scan to avoid: {before:#?}"
        );
    }

    #[test]
    fn strips_passwords_from_parser_messages() {
        let url = "postgres://u:s3cret@h/db";
        assert_eq!(
            strip_secret("bad url postgres://u:s3cret@h/db (s3cret)", url),
            "bad url postgres://u:***@h/db (***)"
        );
    }

    #[test]
    fn newest_duplicates_win_and_batches_are_sorted() {
        // (identity, curated, position)
        let items = [
            ("b", 1, 0),
            ("a", 2, 1),
            ("b", 3, 2),
            ("a", 1, 3),
            ("c", 5, 4),
            ("c", 5, 5),
        ];
        let out = dedupe_newest(&items, |i| i.0, |i| i.1);
        assert_eq!(out, vec![("a", 2, 1), ("b", 3, 2), ("c", 5, 5)]);
    }
}
