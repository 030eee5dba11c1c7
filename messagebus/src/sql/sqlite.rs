//! The database bus on SQLite: [`SqliteBus`], and the statements a datastore runs inside its
//! own transactions ([`send_in`], [`ack_in`]).
//!
//! SQLite has one writer at a time, so a claim is a short write transaction
//! (`BEGIN IMMEDIATE`: pick the oldest visible rows, move those over their receive limit aside,
//! take the rest). Several processes share the file in WAL mode, waiting for each other on the
//! busy timeout. There are no notifications across processes: waiting receivers poll with a
//! back-off from 5 ms up to the poll interval. Times are the host's clock, in microseconds.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, OnceLock, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{
    Connection, Row, Sqlite, SqliteConnection, SqlitePool, Transaction, TransactionManager,
};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::{
    check_bodies, count, db_error, dead_letters, fail_point, migrate_error, millis,
    over_limit_reason, queue_row, queue_stats, Claimed, ClaimedRow, Dialect, QueueRow, SqlBus,
    SqlBusConfig,
};
use crate::{BusError, DeadLetter, QueueStats, ReceiptAction, SqlReceipt};

/// The bus's migrations; versions from 1000001 so that they never meet the datastore's.
static MIGRATOR: Migrator = Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/sqlite")
};

/// Begins a send: durable across a power cut (`synchronous = FULL`, the WAL synced at
/// commit), since the sender lets go of what it sent once this commits (a curator moves on,
/// an archivist acknowledges the message the send answers). SQLite runs both statements.
const BEGIN_DURABLE: &str = "PRAGMA synchronous = FULL; BEGIN IMMEDIATE";

/// Begins a claim, an acknowledgement, an extension or a redrive: `synchronous = NORMAL`, no
/// sync at commit. A power cut can lose the last of these commits, and each loss is one the
/// bus already allows: a message delivered again, a visibility or a redrive undone.
const BEGIN_SETTLING: &str = "PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE";

/// How long a statement waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The database bus on SQLite.
pub type SqliteBus = SqlBus<Lite>;

/// The SQLite dialect of the database bus.
#[derive(Debug, Clone)]
pub struct Lite {
    pool: SqlitePool,
    gate: WriteGate,
}

/// This process's turn at an SQLite file's write lock, taken before `BEGIN IMMEDIATE` by the
/// bus and the datastore alike (see [`write_gate`]).
pub type WriteGate = Arc<tokio::sync::Mutex<()>>;

/// The write gate of the file `pool` opens: one per file in this process, shared by every bus
/// and datastore on it; a database in memory gets one of its own. A connection that finds the
/// write lock taken waits in SQLite's busy handler, which sleeps on a schedule (1, 2, 5, 10, …
/// 100 ms) rather than waking when the lock is free, so the lock sits idle while its waiters
/// sleep. Waiters in one process queue here instead and go the moment it is free; only
/// writers in other processes meet the busy handler.
pub fn write_gate(pool: &SqlitePool) -> WriteGate {
    static GATES: OnceLock<std::sync::Mutex<HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>>> =
        OnceLock::new();
    let Ok(file) = std::fs::canonicalize(pool.connect_options().get_filename()) else {
        return WriteGate::default();
    };
    let mut gates = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    gates.retain(|_, gate| gate.strong_count() > 0);
    if let Some(gate) = gates.get(&file).and_then(Weak::upgrade) {
        return gate;
    }
    let gate = WriteGate::default();
    gates.insert(file, Arc::downgrade(&gate));
    gate
}

impl Lite {
    /// A transaction begun with `begin` (a `BEGIN IMMEDIATE`) after this process's turn at the
    /// write lock, which the returned guard holds until it drops (after the commit).
    async fn begin(
        &self,
        begin: &'static str,
        doing: &str,
    ) -> Result<(Transaction<'static, Sqlite>, OwnedMutexGuard<()>), BusError> {
        let turn = Arc::clone(&self.gate).lock_owned().await;
        let tx = self
            .pool
            .begin_with(begin)
            .await
            .map_err(|e| db_error(doing, e))?;
        Ok((tx, turn))
    }
}

impl SqlBus<Lite> {
    /// Opens the SQLite database at `url` (`sqlite://path`), creating the file if missing, in
    /// WAL mode with a busy timeout. Creates no table until a queue is created or the bus is
    /// migrated.
    pub async fn connect(url: &str, config: SqlBusConfig) -> Result<Self, BusError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| BusError::Rejected {
                message: format!("invalid SQLite URL: {e}"),
                source: None,
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // In WAL mode NORMAL survives a process crash and costs no fsync per commit; each
            // transaction sets its own (BEGIN_DURABLE, BEGIN_SETTLING).
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = pool_options()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|e| db_error("opening the bus database", e))?;
        Ok(Self::from_pool(pool, config))
    }

    /// A bus on an existing pool (WAL mode and a busy timeout are the caller's to set).
    pub fn from_pool(pool: SqlitePool, config: SqlBusConfig) -> Self {
        let gate = write_gate(&pool);
        SqlBus::from_dialect(Lite { pool, gate }, config)
    }
}

/// Pool settings for SQLite files (the bus's, and the datastore's, which uses them too): a
/// connection goes back into the pool only if no transaction is left open on it. SQLite ends
/// a transaction by itself on some errors (a full disk: `SQLITE_FULL`); sqlx's rollback then
/// fails and it goes on counting the transaction as open (launchbadge/sqlx#4031), so every
/// later `BEGIN IMMEDIATE` on that connection would fail for good. Such a connection is
/// closed instead, and the next one starts clean.
pub fn pool_options() -> SqlitePoolOptions {
    SqlitePoolOptions::new().after_release(|conn, _| {
        Box::pin(async move {
            if transaction_depth(conn) == 0 {
                return Ok(true);
            }
            // A dropped transaction's rollback is queued ahead of this ping: wait for it.
            conn.ping().await?;
            Ok(transaction_depth(conn) == 0)
        })
    })
}

fn transaction_depth(conn: &SqliteConnection) -> usize {
    <<Sqlite as sqlx::Database>::TransactionManager as TransactionManager>::get_transaction_depth(
        conn,
    )
}

fn now_micros() -> i64 {
    Utc::now().timestamp_micros()
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// `ids` as a JSON array, for `json_each` (one bind for any number of ids).
fn json_ids(ids: impl IntoIterator<Item = i64>) -> String {
    let list: Vec<String> = ids.into_iter().map(|i| i.to_string()).collect();
    format!("[{}]", list.join(","))
}

/// Deliveries (id, receipt) as a JSON array of pairs, for `json_each` (`value ->> 0`, `->> 1`).
fn json_pairs(deliveries: impl IntoIterator<Item = (i64, i64)>) -> Result<String, BusError> {
    let pairs: Vec<[i64; 2]> = deliveries.into_iter().map(|(i, r)| [i, r]).collect();
    serde_json::to_string(&pairs).map_err(|e| BusError::unavailable(e.to_string()))
}

#[async_trait]
impl Dialect for Lite {
    const NOTIFIES: bool = false;

    async fn migrate(&self) -> Result<(), BusError> {
        // sqlx's SQLite migrator takes no lock: holding the write lock for the whole run makes
        // concurrent migrations wait, then find nothing to do.
        let (mut tx, _turn) = self
            .begin("BEGIN IMMEDIATE", "creating the bus tables")
            .await?;
        MIGRATOR.run_direct(&mut *tx).await.map_err(migrate_error)?;
        tx.commit()
            .await
            .map_err(|e| db_error("creating the bus tables", e))
    }

    async fn bus_id(&self) -> Result<Option<String>, BusError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| db_error("reading the bus id", e))?;
        bus_id_in(&mut conn).await
    }

    async fn create_queue(&self, queue: &QueueRow) -> Result<(), BusError> {
        sqlx::query(
            "INSERT INTO bus_queues
                 (name, dead_letter_queue, visibility_timeout_ms, max_receives, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&queue.name)
        .bind(&queue.dead_letter_queue)
        .bind(millis(queue.visibility_timeout))
        .bind(i64::from(queue.max_receives))
        .bind(now_micros())
        .execute(&self.pool)
        .await
        .map_err(|e| db_error("creating a queue", e))?;
        Ok(())
    }

    async fn update_queue(&self, queue: &QueueRow) -> Result<(), BusError> {
        sqlx::query("UPDATE bus_queues SET max_receives = ?2 WHERE name = ?1")
            .bind(&queue.name)
            .bind(i64::from(queue.max_receives))
            .execute(&self.pool)
            .await
            .map_err(|e| db_error("updating a queue", e))?;
        Ok(())
    }

    async fn queue(&self, name: &str) -> Result<Option<QueueRow>, BusError> {
        let row = sqlx::query(
            "SELECT dead_letter_queue, visibility_timeout_ms, max_receives
             FROM bus_queues WHERE name = ?1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("reading a queue", e))?;
        row.map(|r| Ok(queue_row(name, r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .transpose()
            .map_err(|e| db_error("reading a queue", e))
    }

    async fn send(&self, queue: &str, bodies: &[String]) -> Result<(), BusError> {
        let (mut tx, _turn) = self.begin(BEGIN_DURABLE, "sending").await?;
        insert(&mut tx, queue, bodies).await?;
        tx.commit().await.map_err(|e| db_error("sending", e))
    }

    async fn send_and_ack(
        &self,
        queue: &str,
        bodies: &[String],
        id: i64,
        receipt: i64,
    ) -> Result<bool, BusError> {
        // Settling, not durable: the acknowledgement commits with the rows, so a power cut
        // that loses this commit loses both (WAL commits are lost from the last one back),
        // and the message comes back to be answered again.
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, "sending").await?;
        insert(&mut tx, queue, bodies).await?;
        let done = sqlx::query("DELETE FROM bus_messages WHERE id = ?1 AND receipt = ?2")
            .bind(id)
            .bind(receipt)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("acknowledging", e))?
            .rows_affected();
        tx.commit().await.map_err(|e| db_error("sending", e))?;
        Ok(done > 0)
    }

    async fn claim(&self, queue: &QueueRow, max: usize) -> Result<Claimed, BusError> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, "receiving").await?;
        // Read once the write lock is held: BEGIN IMMEDIATE may have waited up to the busy
        // timeout for it, and a visibility counted from before would be cut by that wait.
        let now = now_micros();
        let next: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT id, receive_count FROM bus_messages
             WHERE queue = ?1 AND visible_at <= ?2
             ORDER BY visible_at, id LIMIT ?3",
        )
        .bind(&queue.name)
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("receiving", e))?;
        if next.is_empty() {
            return Ok(Claimed::default());
        }
        let limit_reached =
            |count: i64| queue.max_receives > 0 && count >= i64::from(queue.max_receives);
        let over: Vec<i64> = next
            .iter()
            .filter(|(_, count)| limit_reached(*count))
            .map(|(id, _)| *id)
            .collect();
        let mut claimed = Claimed {
            rows: Vec::new(),
            dead_lettered: over.len(),
        };
        if !over.is_empty() {
            sqlx::query(
                "UPDATE bus_messages
                 SET queue = ?1, dead_letter_reason = ?2, visible_at = ?3, receive_count = 0,
                     receipt = 0
                 WHERE id IN (SELECT value FROM json_each(?4))",
            )
            .bind(queue.dead_letter_queue.as_deref().unwrap_or(""))
            .bind(over_limit_reason(queue.max_receives))
            .bind(now)
            .bind(json_ids(over))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("receiving", e))?;
        }
        let take = json_ids(
            next.iter()
                .filter(|(_, count)| !limit_reached(*count))
                .map(|(id, _)| *id),
        );
        let rows = sqlx::query(
            "UPDATE bus_messages
             SET visible_at = ?1, receive_count = receive_count + 1, receipt = random()
             WHERE id IN (SELECT value FROM json_each(?2))
             RETURNING id, receipt, CAST(body AS BLOB), receive_count, dead_letter_reason",
        )
        .bind(now.saturating_add(micros(queue.visibility_timeout)))
        .bind(take)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("receiving", e))?;
        tx.commit().await.map_err(|e| db_error("receiving", e))?;
        for r in rows {
            let row = (|| {
                Ok::<_, sqlx::Error>(ClaimedRow {
                    id: r.try_get(0)?,
                    receipt: r.try_get(1)?,
                    // As bytes: SQLite keeps whatever another program inserted (text that
                    // is not UTF-8, a blob, a number), and a body that cannot be read as text
                    // must reach the archivist as poison, not fail every receive of the queue.
                    body: r.try_get(2)?,
                    receive_count: u32::try_from(r.try_get::<i64, _>(3)?).unwrap_or(0),
                    dead_letter_reason: r.try_get(4)?,
                })
            })()
            .map_err(|e| db_error("receiving", e))?;
            claimed.rows.push(row);
        }
        claimed.rows.sort_by_key(|r| r.id);
        Ok(claimed)
    }

    async fn ack(&self, deliveries: &[(i64, i64)]) -> Result<Vec<bool>, BusError> {
        let json = json_pairs(deliveries.iter().copied())?;
        // In a transaction only to set its durability: a connection last used for a send
        // would sync at every acknowledgement.
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, "acknowledging").await?;
        let done: Vec<(i64, i64)> = sqlx::query_as(
            "DELETE FROM bus_messages
             WHERE (id, receipt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1))
             RETURNING id, receipt",
        )
        .bind(json)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("acknowledging", e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("acknowledging", e))?;
        Ok(super::which_done(deliveries, &done))
    }

    async fn release_batch(&self, deliveries: &[(i64, i64)]) -> Result<Vec<bool>, BusError> {
        let json = json_pairs(deliveries.iter().copied())?;
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, "releasing").await?;
        // The receipts that match, read first: the update clears them (a new, empty receipt,
        // so a heartbeat already under way for the old one extends nothing), and RETURNING
        // shows only new values. One writer holds the file, so nothing changes between.
        let done: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT id, receipt FROM bus_messages
             WHERE (id, receipt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1))",
        )
        .bind(&json)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("releasing", e))?;
        sqlx::query(
            "UPDATE bus_messages SET visible_at = ?2, receipt = 0
             WHERE (id, receipt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1))",
        )
        .bind(&json)
        .bind(now_micros())
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("releasing", e))?;
        tx.commit().await.map_err(|e| db_error("releasing", e))?;
        Ok(super::which_done(deliveries, &done))
    }

    async fn release(&self, id: i64, receipt: i64) -> Result<bool, BusError> {
        let done =
            // A new (no) receipt: a heartbeat already under way for the old one extends nothing.
            sqlx::query(
                "UPDATE bus_messages SET visible_at = ?3, receipt = 0 \
                 WHERE id = ?1 AND receipt = ?2",
            )
            .bind(id)
            .bind(receipt)
            .bind(now_micros())
            .execute(&self.pool)
            .await
            .map_err(|e| db_error("releasing", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn dead_letter(
        &self,
        id: i64,
        receipt: i64,
        dead_letter_queue: &str,
        reason: &str,
    ) -> Result<bool, BusError> {
        let done = sqlx::query(
            "UPDATE bus_messages
             SET queue = ?3, dead_letter_reason = ?4, visible_at = ?5, receive_count = 0,
                 receipt = 0
             WHERE id = ?1 AND receipt = ?2",
        )
        .bind(id)
        .bind(receipt)
        .bind(dead_letter_queue)
        .bind(reason)
        .bind(now_micros())
        .execute(&self.pool)
        .await
        .map_err(|e| db_error("dead-lettering", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn redrive(
        &self,
        queue: &str,
        dead_letter_queue: &str,
        max: u64,
    ) -> Result<u64, BusError> {
        let now = now_micros();
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, "redriving").await?;
        let moved = sqlx::query(
            "UPDATE bus_messages
             SET queue = ?1, visible_at = ?4, receive_count = 0, receipt = 0,
                 dead_letter_reason = NULL
             WHERE id IN (SELECT id FROM bus_messages
                          WHERE queue = ?2 AND visible_at <= ?4
                          ORDER BY visible_at, id LIMIT ?3)",
        )
        .bind(queue)
        .bind(dead_letter_queue)
        .bind(i64::try_from(max).unwrap_or(i64::MAX))
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("redriving", e))?
        .rows_affected();
        // Moved inside the transaction, not committed.
        fail_point("bus-redrive-in-transaction").await;
        tx.commit().await.map_err(|e| db_error("redriving", e))?;
        Ok(moved)
    }

    async fn redrivable(&self, dead_letter_queue: &str) -> Result<u64, BusError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM bus_messages WHERE queue = ?1 AND visible_at <= ?2",
        )
        .bind(dead_letter_queue)
        .bind(now_micros())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| db_error("counting dead letters", e))?;
        Ok(count(n))
    }

    async fn extend(&self, held: &[(i64, i64, Duration)]) -> Result<u64, BusError> {
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, "extending visibility").await?;
        // Once the lock is held, as in a claim.
        let now = now_micros();
        let mut found = 0;
        for &(id, receipt, visibility) in held {
            found += sqlx::query(
                "UPDATE bus_messages SET visible_at = ?3 WHERE id = ?1 AND receipt = ?2",
            )
            .bind(id)
            .bind(receipt)
            .bind(now.saturating_add(micros(visibility)))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("extending visibility", e))?
            .rows_affected();
        }
        tx.commit()
            .await
            .map_err(|e| db_error("extending visibility", e))?;
        Ok(found)
    }

    async fn settle_in_queue(
        &self,
        queue: &str,
        id: i64,
        receipt: i64,
        action: ReceiptAction,
    ) -> Result<bool, BusError> {
        let (doing, statement, at) = match action {
            ReceiptAction::Extend(visibility) => (
                "extending visibility",
                "UPDATE bus_messages SET visible_at = ?4
                 WHERE id = ?1 AND receipt = ?2 AND queue = ?3",
                now_micros().saturating_add(micros(visibility)),
            ),
            ReceiptAction::Ack => (
                "acknowledging",
                "DELETE FROM bus_messages WHERE id = ?1 AND receipt = ?2 AND queue = ?3",
                0,
            ),
            // A new (no) receipt: a heartbeat already under way for the old one extends
            // nothing.
            ReceiptAction::Release => (
                "releasing",
                "UPDATE bus_messages SET visible_at = ?4, receipt = 0
                 WHERE id = ?1 AND receipt = ?2 AND queue = ?3",
                now_micros(),
            ),
        };
        let (mut tx, _turn) = self.begin(BEGIN_SETTLING, doing).await?;
        // `?4` is unused by the delete; SQLite binds it all the same.
        let done = sqlx::query(statement)
            .bind(id)
            .bind(receipt)
            .bind(queue)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(doing, e))?
            .rows_affected();
        tx.commit().await.map_err(|e| db_error(doing, e))?;
        Ok(done > 0)
    }

    async fn waiting_up_to(&self, queue: &str, limit: u64) -> Result<u64, BusError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT 1 FROM bus_messages
                                   WHERE queue = ?1 AND visible_at <= ?2 LIMIT ?3)",
        )
        .bind(queue)
        .bind(now_micros())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_one(&self.pool)
        .await
        .map_err(|e| db_error("counting waiting messages", e))?;
        Ok(count(n))
    }

    async fn inspect(
        &self,
        queue: &QueueRow,
        consumer_ttl: Duration,
    ) -> Result<QueueStats, BusError> {
        let now = now_micros();
        let row = sqlx::query(
            "SELECT
               (SELECT count(*) FROM bus_messages WHERE queue = ?1 AND visible_at <= ?3),
               (SELECT count(*) FROM bus_messages WHERE queue = ?1 AND visible_at > ?3),
               (SELECT count(*) FROM bus_messages WHERE queue = ?2),
               (SELECT count(*) FROM bus_consumers WHERE queue = ?1 AND last_seen > ?4)",
        )
        .bind(&queue.name)
        .bind(queue.dead_letter_queue.as_deref().unwrap_or(""))
        .bind(now)
        .bind(now.saturating_sub(micros(consumer_ttl)))
        .fetch_one(&self.pool)
        .await
        .map_err(|e| db_error("inspecting a queue", e))?;
        queue_stats(&row)
    }

    async fn peek(
        &self,
        dead_letter_queue: &str,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Vec<DeadLetter>, BusError> {
        // As bytes: a TEXT column can hold bytes that are not UTF-8 (a poison body), which
        // would fail the whole read as a String.
        let rows: Vec<(i64, Vec<u8>, i64, Option<String>)> = sqlx::query_as(PEEK)
            .bind(dead_letter_queue)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(i64::try_from(max_body_bytes).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error("reading dead letters", e))?;
        Ok(dead_letters(rows))
    }

    async fn consumers(&self, alive: &[(Uuid, String)], gone: &[Uuid]) -> Result<(), BusError> {
        let now = now_micros();
        let (mut tx, _turn) = self
            .begin("BEGIN IMMEDIATE", "refreshing consumers")
            .await?;
        for id in gone {
            sqlx::query("DELETE FROM bus_consumers WHERE id = ?1")
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("refreshing consumers", e))?;
        }
        sqlx::query("DELETE FROM bus_consumers WHERE last_seen < ?1")
            .bind(now.saturating_sub(micros(Duration::from_secs(86_400))))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("refreshing consumers", e))?;
        for (id, queue) in alive {
            sqlx::query(
                "INSERT INTO bus_consumers (id, queue, last_seen) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen",
            )
            .bind(id.to_string())
            .bind(queue)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("refreshing consumers", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| db_error("refreshing consumers", e))
    }
}

/// Rows per `INSERT` of a send. Bodies are bound as they are (a JSON array of them for
/// `json_each` would escape every body, and SQLite parse and unescape it again: about as much
/// work as the rest of a send); statements of [`SEND_CHUNK`] rows, then of the powers of two
/// below it for the rest, keep the statement cache to a handful of shapes.
const SEND_CHUNK: usize = 256;

/// Inserts `bodies` on `queue`, in order (ids ascending), in as few statements as the chunk
/// sizes allow.
async fn insert(
    conn: &mut SqliteConnection,
    queue: &str,
    bodies: &[String],
) -> Result<(), BusError> {
    let now = now_micros();
    let mut rest = bodies;
    while !rest.is_empty() {
        let rows = if rest.len() >= SEND_CHUNK {
            SEND_CHUNK
        } else {
            // The largest power of two that fits.
            1 << (usize::BITS - 1 - rest.len().leading_zeros())
        };
        let (chunk, after) = rest.split_at(rows);
        let mut query = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO bus_messages (queue, body, sent_at, visible_at) ",
        );
        query.push_values(chunk, |mut row, body| {
            row.push_bind(queue)
                .push_bind(body.as_str())
                .push_bind(now)
                .push_bind(now);
        });
        query
            .build()
            .execute(&mut *conn)
            .await
            .map_err(|e| db_error("sending", e))?;
        rest = after;
    }
    Ok(())
}

/// Sends `bodies` on `queue` inside the caller's transaction: they exist once it commits.
/// The queue must exist (take its name from a [`Sender`](crate::Sender) of this bus).
pub async fn send_in(
    conn: &mut SqliteConnection,
    queue: &str,
    bodies: Vec<Vec<u8>>,
) -> Result<(), BusError> {
    let bodies = check_bodies(bodies)?;
    insert(conn, queue, &bodies).await?;
    fail_point("bus-send-in-transaction").await;
    Ok(())
}

/// Acknowledges deliveries inside the caller's transaction: they are gone once it commits.
/// Returns how many were still held by these receipts (a stale receipt deletes nothing).
pub async fn ack_in(conn: &mut SqliteConnection, receipts: &[SqlReceipt]) -> Result<u64, BusError> {
    if receipts.is_empty() {
        return Ok(0);
    }
    let json = json_pairs(receipts.iter().map(|r| (r.message_id, r.receipt)))?;
    let deleted = sqlx::query(
        "DELETE FROM bus_messages
         WHERE (id, receipt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1))",
    )
    .bind(json)
    .execute(&mut *conn)
    .await
    .map_err(|e| db_error("acknowledging", e))?
    .rows_affected();
    fail_point("bus-ack-in-transaction").await;
    Ok(deleted)
}

/// The id of the bus whose tables are in this database, or `None` when there are none: the
/// id its migration stored, and the database file's absolute path (`PRAGMA database_list`).
///
/// The stored id alone travels with a copy of the file (`cp archivist.sqlite bus.sqlite`); a
/// datastore comparing only that would settle a copy's messages in its own file. A copy is
/// another path, so its id differs. The same file opened by two paths (a hard link) also
/// differs: that only costs the one-transaction path, never correctness.
pub async fn bus_id_in(conn: &mut SqliteConnection) -> Result<Option<String>, BusError> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'bus_instance'",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| db_error("looking for the bus", e))?;
    if exists == 0 {
        return Ok(None);
    }
    let stored: Option<String> = sqlx::query_scalar("SELECT id FROM bus_instance LIMIT 1")
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| db_error("looking for the bus", e))?;
    let file: Option<String> =
        sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| db_error("looking for the bus", e))?;
    Ok(stored.map(|id| match file.as_deref() {
        // In memory: private to its connection, no other store can hold it.
        None | Some("") => format!("{id}@memory:{}", Uuid::new_v4()),
        Some(path) => format!("{id}@{path}"),
    }))
}

/// A look at a dead-letter queue: ?1 the queue, ?2 how many, ?3 the bytes of each body shown.
/// The body leaves SQLite only cut by `substr`, so a look at a large dead letter copies no
/// more than it shows into this process.
const PEEK: &str = "SELECT id, substr(CAST(body AS BLOB), 1, ?3), length(CAST(body AS BLOB)), \
                    dead_letter_reason FROM bus_messages WHERE queue = ?1 ORDER BY id LIMIT ?2";

#[cfg(test)]
mod tests {
    /// The body is read only through `substr` (cut to ?3 bytes) and `length`: never whole.
    #[test]
    fn peeking_cuts_bodies_in_the_statement() {
        let peek = super::PEEK;
        let wrapped = |at: usize| {
            ["substr(CAST(", "length(CAST("]
                .iter()
                .any(|f| peek[..at].ends_with(f))
        };
        assert!(
            peek.match_indices("body").all(|(at, _)| wrapped(at)),
            "{peek}"
        );
        assert!(super::PEEK.contains("substr(CAST(body AS BLOB), 1, ?3)"));
    }
}
