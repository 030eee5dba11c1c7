//! The database bus on Postgres: [`PgBus`], and the statements a datastore runs inside its own
//! transactions ([`send_in`], [`ack_in`]).
//!
//! Claims take `FOR UPDATE SKIP LOCKED`, so concurrent receivers never wait for each other
//! nor take the same row. Sends commit durably, then `NOTIFY archivist_bus` with the queue's
//! name in a transaction of its own (inside a datastore's transaction: at its commit);
//! receivers `LISTEN` on one connection per bus and poll as the safety net (a notification
//! can be missed while the listener reconnects, and visibility running out notifies nobody).
//! Settling commits with `synchronous_commit = off`: a settlement lost in a server crash only
//! brings the message back, which at-least-once delivery allows.

use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use super::{
    check_bodies, count, db_error, dead_letters, fail_point, migrate_error, millis,
    over_limit_reason, queue_row, queue_stats, Claimed, ClaimedRow, Dialect, QueueRow, Shared,
    SqlBus, SqlBusConfig,
};
use crate::{BusError, DeadLetter, QueueStats, ReceiptAction, SqlReceipt};

/// The bus's migrations; versions from 1000001 so that they never meet the datastore's.
static MIGRATOR: Migrator = Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations/postgres")
};

/// The channel every send notifies, with the queue's name as payload.
const CHANNEL: &str = "archivist_bus";

/// Rows per `INSERT`, and bytes: a batch of any size is sent in statements of this size, in
/// one transaction.
const SEND_CHUNK_ROWS: usize = 5_000;
const SEND_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// A pooled connection idle at least this long is pinged before it is used.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// The database bus on Postgres.
pub type PgBus = SqlBus<Pg>;

/// The Postgres dialect of the database bus.
#[derive(Debug, Clone)]
pub struct Pg {
    pool: PgPool,
}

impl SqlBus<Pg> {
    /// Connects to the Postgres database at `url` (pool of up to 10 connections, one of them
    /// listening for notifications). Creates nothing until a queue is created or the bus is
    /// migrated.
    pub async fn connect(url: &str, config: SqlBusConfig) -> Result<Self, BusError> {
        let (supported, dropped) = crate::without_unsupported_params(url);
        for key in dropped {
            tracing::warn!(key, "ignoring a connection parameter sqlx does not support");
        }
        let options = PgConnectOptions::from_str(&supported).map_err(|e| BusError::Rejected {
            message: format!("invalid Postgres URL: {e}"),
            source: None,
        })?;
        // Settling may be lost in a crash without harm; sends turn this back on.
        let options = options.options([("synchronous_commit", "off")]);
        // One plain connection first: the pool retries a refused connection quietly until
        // its acquire timeout, where this says at once what the server answered.
        let probe = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
            .await
            .map_err(|e| db_error("connecting to the bus database", e))?;
        let _ = sqlx::Connection::close(probe).await;
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings every connection before handing it out: a round trip per claim,
            // send and settlement. Only one that sat idle long enough to have died meanwhile
            // (a server restart, a dropped link) is pinged; one in steady use that dies fails
            // its statement, which is a passing failure the caller retries.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < PING_WHEN_IDLE_FOR {
                        return Ok(true);
                    }
                    // A dead connection is closed and the pool opens another.
                    Ok(sqlx::Connection::ping(conn).await.is_ok())
                })
            })
            .connect_with(options)
            .await
            .map_err(|e| db_error("connecting to the bus database", e))?;
        Ok(Self::from_pool(pool, config))
    }

    /// A bus on an existing pool.
    pub fn from_pool(pool: PgPool, config: SqlBusConfig) -> Self {
        let bus = SqlBus::from_dialect(Pg { pool: pool.clone() }, config);
        tokio::spawn(listen(pool, Arc::downgrade(bus.shared())));
        bus
    }
}

/// Wakes this process's receivers on every notification, until the bus is dropped.
async fn listen(pool: PgPool, shared: Weak<Shared<Pg>>) {
    let Some(stop) = shared.upgrade().map(|s| s.stop.clone()) else {
        return;
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = tokio::select! {
            _ = stop.cancelled() => return,
            l = connected => match l {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(error = %e, "bus listener could not connect; polling meanwhile");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
        };
        backoff = Duration::from_millis(100);
        loop {
            let note = tokio::select! {
                _ = stop.cancelled() => return,
                n = listener.recv() => n,
            };
            match note {
                Ok(note) => match shared.upgrade() {
                    Some(shared) => shared.wake(note.payload()),
                    None => return,
                },
                Err(e) => {
                    tracing::debug!(error = %e, "bus listener lost its connection");
                    break;
                }
            }
        }
    }
}

#[async_trait]
impl Dialect for Pg {
    const NOTIFIES: bool = true;

    async fn migrate(&self) -> Result<(), BusError> {
        // sqlx holds an advisory lock while migrating: concurrent processes wait their turn.
        MIGRATOR.run(&self.pool).await.map_err(migrate_error)
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
            "INSERT INTO bus_queues (name, dead_letter_queue, visibility_timeout_ms, max_receives)
             VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&queue.name)
        .bind(&queue.dead_letter_queue)
        .bind(millis(queue.visibility_timeout))
        .bind(i32::try_from(queue.max_receives).unwrap_or(i32::MAX))
        .execute(&self.pool)
        .await
        .map_err(|e| db_error("creating a queue", e))?;
        Ok(())
    }

    async fn update_queue(&self, queue: &QueueRow) -> Result<(), BusError> {
        sqlx::query("UPDATE bus_queues SET max_receives = $2 WHERE name = $1")
            .bind(&queue.name)
            .bind(i32::try_from(queue.max_receives).unwrap_or(i32::MAX))
            .execute(&self.pool)
            .await
            .map_err(|e| db_error("updating a queue", e))?;
        Ok(())
    }

    async fn queue(&self, name: &str) -> Result<Option<QueueRow>, BusError> {
        let row = sqlx::query(
            "SELECT dead_letter_queue, visibility_timeout_ms, max_receives
             FROM bus_queues WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("reading a queue", e))?;
        row.map(|r| {
            Ok(queue_row(
                name,
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get::<i32, _>(2)?.into(),
            ))
        })
        .transpose()
        .map_err(|e| db_error("reading a queue", e))
    }

    async fn send(&self, queue: &str, bodies: &[String]) -> Result<(), BusError> {
        if chunk_end(bodies, 0) == bodies.len() {
            // One statement outside a transaction block is its own transaction, so the rows
            // are one round trip. `set_config(…, true)` lasts until that transaction ends,
            // and its commit reads the setting before it is undone: the commit is durable.
            sqlx::query(SEND_DURABLY)
                .bind(queue)
                .bind(bodies)
                .execute(&self.pool)
                .await
                .map_err(|e| db_error("sending", e))?;
        } else {
            let mut tx = begin_durable(&self.pool, "sending").await?;
            insert(&mut tx, queue, bodies).await?;
            tx.commit().await.map_err(|e| db_error("sending", e))?;
        }
        // The notification goes after the durable commit, in a transaction of its own that
        // waits for no sync. A NOTIFY holds a lock shared by the whole cluster from its
        // commit's start to its end; inside the durable transaction that lock was held
        // through the WAL flush, so concurrent senders flushed one after another instead
        // of together (`benchmarks/bus/costs.sh`: sends of 10 rows 1.26 times faster so).
        // The rows are committed: a notification that fails now only delays a receiver
        // in another process until its next poll, so the send still succeeded.
        if let Err(e) = notify(&self.pool, queue).await {
            tracing::debug!(%queue, error = %e, "sent, but could not notify other processes; their receivers find the messages at their next poll");
        }
        Ok(())
    }

    async fn send_and_ack(
        &self,
        queue: &str,
        bodies: &[String],
        id: i64,
        receipt: i64,
    ) -> Result<bool, BusError> {
        // Settling (`synchronous_commit = off`, the bus's connections' setting), not durable:
        // the acknowledgement commits with the rows, so a crash that loses this commit loses
        // both, and the message comes back to be answered again.
        let done: i64 = if chunk_end(bodies, 0) == bodies.len() {
            // One statement: its own transaction, one round trip.
            sqlx::query_scalar(SEND_AND_ACK)
                .bind(queue)
                .bind(bodies)
                .bind(id)
                .bind(receipt)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| db_error("sending", e))?
        } else {
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(|e| db_error("sending", e))?;
            insert(&mut tx, queue, bodies).await?;
            let done = sqlx::query("DELETE FROM bus_messages WHERE id = $1 AND receipt = $2")
                .bind(id)
                .bind(receipt)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("acknowledging", e))?
                .rows_affected();
            tx.commit().await.map_err(|e| db_error("sending", e))?;
            i64::try_from(done).unwrap_or(1)
        };
        // As after a send: the rows are committed, a notification that fails only delays a
        // receiver in another process until its next poll.
        if !bodies.is_empty() {
            if let Err(e) = notify(&self.pool, queue).await {
                tracing::debug!(%queue, error = %e, "sent, but could not notify other processes; their receivers find the messages at their next poll");
            }
        }
        Ok(done > 0)
    }

    async fn claim(&self, queue: &QueueRow, max: usize) -> Result<Claimed, BusError> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let max_receives = i32::try_from(queue.max_receives).unwrap_or(i32::MAX);
        let rows = sqlx::query(CLAIM)
            .bind(&queue.name)
            .bind(limit)
            .bind(millis(queue.visibility_timeout) as f64)
            .bind(max_receives)
            .bind(queue.dead_letter_queue.as_deref().unwrap_or(""))
            .bind(over_limit_reason(queue.max_receives))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error("receiving", e))?;
        let mut claimed = Claimed::default();
        for r in rows {
            let read = || -> Result<Option<ClaimedRow>, sqlx::Error> {
                if r.try_get::<bool, _>("dead")? {
                    return Ok(None);
                }
                Ok(Some(ClaimedRow {
                    id: r.try_get("id")?,
                    receipt: r.try_get("receipt")?,
                    body: r.try_get::<String, _>("body")?.into_bytes(),
                    receive_count: u32::try_from(r.try_get::<i32, _>("receive_count")?)
                        .unwrap_or(0),
                    dead_letter_reason: r.try_get("dead_letter_reason")?,
                }))
            };
            match read().map_err(|e| db_error("receiving", e))? {
                Some(row) => claimed.rows.push(row),
                None => claimed.dead_lettered += 1,
            }
        }
        claimed.rows.sort_by_key(|r| r.id);
        Ok(claimed)
    }

    async fn ack(&self, deliveries: &[(i64, i64)]) -> Result<Vec<bool>, BusError> {
        let (ids, receipts): (Vec<i64>, Vec<i64>) = deliveries.iter().copied().unzip();
        let done: Vec<(i64, i64)> = sqlx::query_as(
            "DELETE FROM bus_messages m USING unnest($1::int8[], $2::int8[]) AS d (id, receipt)
             WHERE m.id = d.id AND m.receipt = d.receipt
             RETURNING m.id, m.receipt",
        )
        .bind(ids)
        .bind(receipts)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("acknowledging", e))?;
        Ok(super::which_done(deliveries, &done))
    }

    async fn release_batch(&self, deliveries: &[(i64, i64)]) -> Result<Vec<bool>, BusError> {
        let (ids, receipts): (Vec<i64>, Vec<i64>) = deliveries.iter().copied().unzip();
        // A new (no) receipt: a heartbeat already under way for the old one extends nothing.
        let done: Vec<(i64, i64)> = sqlx::query_as(
            "UPDATE bus_messages m SET visible_at = now(), receipt = 0
             FROM unnest($1::int8[], $2::int8[]) AS d (id, receipt)
             WHERE m.id = d.id AND m.receipt = d.receipt
             RETURNING m.id, d.receipt",
        )
        .bind(ids)
        .bind(receipts)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("releasing", e))?;
        Ok(super::which_done(deliveries, &done))
    }

    async fn release(&self, id: i64, receipt: i64) -> Result<bool, BusError> {
        let done = sqlx::query(
            "UPDATE bus_messages SET visible_at = now(), receipt = 0 WHERE id = $1 AND receipt = $2",
        )
        .bind(id)
        .bind(receipt)
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
             SET queue = $3, dead_letter_reason = $4, visible_at = now(), receive_count = 0,
                 receipt = 0
             WHERE id = $1 AND receipt = $2",
        )
        .bind(id)
        .bind(receipt)
        .bind(dead_letter_queue)
        .bind(reason)
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
        // Told "moved" means moved: a server crash must not bring the dead letters back.
        let mut tx = begin_durable(&self.pool, "redriving").await?;
        let moved = sqlx::query(
            "UPDATE bus_messages m
             SET queue = $1, visible_at = now(), receive_count = 0, receipt = 0,
                 dead_letter_reason = NULL
             FROM (SELECT id FROM bus_messages
                   WHERE queue = $2 AND visible_at <= now()
                   ORDER BY visible_at, id LIMIT $3
                   FOR UPDATE SKIP LOCKED) AS d
             WHERE m.id = d.id",
        )
        .bind(queue)
        .bind(dead_letter_queue)
        .bind(i64::try_from(max).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("redriving", e))?
        .rows_affected();
        // Moved inside the transaction, not committed.
        fail_point("bus-redrive-in-transaction").await;
        notify(&mut *tx, queue)
            .await
            .map_err(|e| db_error("redriving", e))?;
        tx.commit().await.map_err(|e| db_error("redriving", e))?;
        Ok(moved)
    }

    async fn redrivable(&self, dead_letter_queue: &str) -> Result<u64, BusError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM bus_messages WHERE queue = $1 AND visible_at <= now()",
        )
        .bind(dead_letter_queue)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| db_error("counting dead letters", e))?;
        Ok(count(n))
    }

    async fn extend(&self, held: &[(i64, i64, Duration)]) -> Result<u64, BusError> {
        let ids: Vec<i64> = held.iter().map(|h| h.0).collect();
        let receipts: Vec<i64> = held.iter().map(|h| h.1).collect();
        let ms: Vec<f64> = held.iter().map(|h| millis(h.2) as f64).collect();
        let done = sqlx::query(
            "UPDATE bus_messages m
             SET visible_at = clock_timestamp() + h.ms * interval '1 millisecond'
             FROM unnest($1::int8[], $2::int8[], $3::float8[]) AS h (id, receipt, ms)
             WHERE m.id = h.id AND m.receipt = h.receipt",
        )
        .bind(ids)
        .bind(receipts)
        .bind(ms)
        .execute(&self.pool)
        .await
        .map_err(|e| db_error("extending visibility", e))?;
        Ok(done.rows_affected())
    }

    async fn settle_in_queue(
        &self,
        queue: &str,
        id: i64,
        receipt: i64,
        action: ReceiptAction,
    ) -> Result<bool, BusError> {
        let query = match action {
            ReceiptAction::Extend(visibility) => sqlx::query(
                "UPDATE bus_messages
                 SET visible_at = clock_timestamp() + $4 * interval '1 millisecond'
                 WHERE id = $1 AND receipt = $2 AND queue = $3",
            )
            .bind(id)
            .bind(receipt)
            .bind(queue)
            .bind(millis(visibility) as f64),
            ReceiptAction::Ack => sqlx::query(
                "DELETE FROM bus_messages WHERE id = $1 AND receipt = $2 AND queue = $3",
            )
            .bind(id)
            .bind(receipt)
            .bind(queue),
            // A new (no) receipt: a heartbeat already under way for the old one extends
            // nothing.
            ReceiptAction::Release => sqlx::query(
                "UPDATE bus_messages SET visible_at = now(), receipt = 0
                 WHERE id = $1 AND receipt = $2 AND queue = $3",
            )
            .bind(id)
            .bind(receipt)
            .bind(queue),
        };
        let doing = match action {
            ReceiptAction::Extend(_) => "extending visibility",
            ReceiptAction::Ack => "acknowledging",
            ReceiptAction::Release => "releasing",
        };
        let done = query
            .execute(&self.pool)
            .await
            .map_err(|e| db_error(doing, e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn waiting_up_to(&self, queue: &str, limit: u64) -> Result<u64, BusError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT FROM bus_messages
                                   WHERE queue = $1 AND visible_at <= now() LIMIT $2) AS w",
        )
        .bind(queue)
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
        let row = sqlx::query(
            "SELECT
               (SELECT count(*) FROM bus_messages WHERE queue = $1 AND visible_at <= now()),
               (SELECT count(*) FROM bus_messages WHERE queue = $1 AND visible_at > now()),
               (SELECT count(*) FROM bus_messages WHERE queue = $2),
               (SELECT count(*) FROM bus_consumers
                WHERE queue = $1 AND last_seen > now() - $3 * interval '1 millisecond')",
        )
        .bind(&queue.name)
        .bind(queue.dead_letter_queue.as_deref().unwrap_or(""))
        .bind(millis(consumer_ttl) as f64)
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
        let rows: Vec<(i64, Vec<u8>, i32, Option<String>)> = sqlx::query_as(
            "SELECT id, substring(convert_to(body, 'UTF8') FROM 1 FOR $3), octet_length(body),
                    dead_letter_reason
             FROM bus_messages WHERE queue = $1 ORDER BY id LIMIT $2",
        )
        .bind(dead_letter_queue)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(i32::try_from(max_body_bytes).unwrap_or(i32::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("reading dead letters", e))?;
        Ok(dead_letters(rows.into_iter().map(
            |(id, body, bytes, reason)| (id, body, i64::from(bytes), reason),
        )))
    }

    async fn consumers(&self, alive: &[(Uuid, String)], gone: &[Uuid]) -> Result<(), BusError> {
        let ids: Vec<Uuid> = alive.iter().map(|a| a.0).collect();
        let queues: Vec<&str> = alive.iter().map(|a| a.1.as_str()).collect();
        sqlx::query(
            "WITH gone AS (
                 DELETE FROM bus_consumers
                 WHERE id = ANY($3) OR last_seen < now() - interval '1 day'
             )
             INSERT INTO bus_consumers (id, queue, last_seen)
             SELECT c.id, c.queue, now() FROM unnest($1::uuid[], $2::text[]) AS c (id, queue)
             ON CONFLICT (id) DO UPDATE SET last_seen = now()",
        )
        .bind(ids)
        .bind(queues)
        .bind(gone)
        .execute(&self.pool)
        .await
        .map_err(|e| db_error("refreshing consumers", e))?;
        Ok(())
    }
}

/// Claims the oldest visible rows: those under the receive limit become in flight with a new
/// receipt, those at it move to the dead-letter queue (`dead` = true, no body returned).
/// $1 queue, $2 limit, $3 visibility ms, $4 receive limit (0: none), $5 dead-letter queue,
/// $6 reason. The visibility counts from `clock_timestamp()`, when the row is claimed: `now()`
/// is when the statement started, before any wait for a lock on the table.
const CLAIM: &str = "
WITH next AS (
    SELECT id, receive_count FROM bus_messages
    WHERE queue = $1 AND visible_at <= now()
    ORDER BY visible_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), over AS (
    UPDATE bus_messages m
    SET queue = $5, dead_letter_reason = $6, visible_at = now(), receive_count = 0, receipt = 0
    FROM next
    WHERE m.id = next.id AND $4 > 0 AND next.receive_count >= $4
    RETURNING m.id
), taken AS (
    UPDATE bus_messages m
    SET visible_at = clock_timestamp() + $3 * interval '1 millisecond',
        receive_count = m.receive_count + 1,
        receipt = nextval('bus_receipts')
    FROM next
    WHERE m.id = next.id AND NOT ($4 > 0 AND next.receive_count >= $4)
    RETURNING m.id, m.receipt, m.body, m.receive_count, m.dead_letter_reason
)
SELECT false AS dead, id, receipt, body, receive_count, dead_letter_reason FROM taken
UNION ALL
SELECT true, id, 0, NULL, 0, NULL FROM over";

/// The rows of a whole send in one statement and a durable commit (the notification follows
/// in a statement of its own).
const SEND_DURABLY: &str = "\
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT $1, b FROM unnest($2::text[]) AS b
)
SELECT set_config('synchronous_commit', 'on', true)";

/// The rows of a send and the acknowledgement of the message they answer, in one statement
/// (its own transaction, committed as the bus's settlements are); how many rows it deleted.
const SEND_AND_ACK: &str = "\
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT $1, b FROM unnest($2::text[]) AS b
), done AS (
    DELETE FROM bus_messages WHERE id = $3 AND receipt = $4 RETURNING 1
)
SELECT count(*) FROM done";

/// Where the statement that starts at `start` ends: at most [`SEND_CHUNK_ROWS`] rows and
/// about [`SEND_CHUNK_BYTES`] (always at least one row).
fn chunk_end(bodies: &[String], start: usize) -> usize {
    let mut end = start;
    let mut bytes = 0;
    while end < bodies.len() && end - start < SEND_CHUNK_ROWS {
        bytes += bodies[end].len();
        if bytes > SEND_CHUNK_BYTES && end > start {
            break;
        }
        end += 1;
    }
    end
}

/// Inserts `bodies` on `queue` in the caller's transaction, one statement a chunk.
async fn insert(conn: &mut PgConnection, queue: &str, bodies: &[String]) -> Result<(), BusError> {
    let mut start = 0;
    while start < bodies.len() {
        let end = chunk_end(bodies, start);
        sqlx::query(
            "INSERT INTO bus_messages (queue, body) SELECT $1, b FROM unnest($2::text[]) AS b",
        )
        .bind(queue)
        .bind(&bodies[start..end])
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error("sending", e))?;
        start = end;
    }
    Ok(())
}

/// A transaction whose commit waits for the WAL flush, which the bus's connections otherwise
/// do not (they settle with `synchronous_commit = off`).
async fn begin_durable(
    pool: &PgPool,
    doing: &str,
) -> Result<Transaction<'static, Postgres>, BusError> {
    let mut tx = pool.begin().await.map_err(|e| db_error(doing, e))?;
    sqlx::query("SET LOCAL synchronous_commit TO on")
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error(doing, e))?;
    Ok(tx)
}

/// Wakes `queue`'s receivers in every process, when the transaction this runs in commits.
async fn notify<'e>(conn: impl PgExecutor<'e>, queue: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(queue)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Sends `bodies` on `queue` inside the caller's transaction: they exist once it commits.
/// The queue must exist (take its name from a [`Sender`](crate::Sender) of this bus).
pub async fn send_in(
    conn: &mut PgConnection,
    queue: &str,
    bodies: Vec<Vec<u8>>,
) -> Result<(), BusError> {
    let bodies = check_bodies(bodies)?;
    insert(conn, queue, &bodies).await?;
    // Inside the caller's transaction, so that the notification goes only if it commits.
    notify(&mut *conn, queue)
        .await
        .map_err(|e| db_error("sending", e))?;
    fail_point("bus-send-in-transaction").await;
    Ok(())
}

/// Acknowledges deliveries inside the caller's transaction: they are gone once it commits.
/// Returns how many were still held by these receipts (a stale receipt deletes nothing).
pub async fn ack_in(conn: &mut PgConnection, receipts: &[SqlReceipt]) -> Result<u64, BusError> {
    if receipts.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = receipts.iter().map(|r| r.message_id).collect();
    let tokens: Vec<i64> = receipts.iter().map(|r| r.receipt).collect();
    let done = sqlx::query(
        "DELETE FROM bus_messages m USING unnest($1::int8[], $2::int8[]) AS r (id, receipt)
         WHERE m.id = r.id AND m.receipt = r.receipt",
    )
    .bind(ids)
    .bind(tokens)
    .execute(&mut *conn)
    .await
    .map_err(|e| db_error("acknowledging", e))?;
    fail_point("bus-ack-in-transaction").await;
    Ok(done.rows_affected())
}

/// The id of the bus whose tables are in this database, or `None` when there are none.
pub async fn bus_id_in(conn: &mut PgConnection) -> Result<Option<String>, BusError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('bus_instance') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| db_error("looking for the bus", e))?;
    if !exists {
        return Ok(None);
    }
    let stored: Option<String> = sqlx::query_scalar("SELECT id FROM bus_instance LIMIT 1")
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| db_error("looking for the bus", e))?;
    let Some(stored) = stored else {
        return Ok(None);
    };
    // Which database this is, beyond the stored id (which a copy carries: CREATE DATABASE …
    // TEMPLATE, a restored dump): its oid and name, the bus table's oid (which schema), and the
    // cluster's system identifier. A
    // role without access to pg_control_system() goes without it (a plain query outside any
    // transaction: its failure aborts nothing); two processes that then compute different
    // ids only lose the one-transaction path, never correctness.
    // The table's oid too: two schemas of one database (a `search_path` each) are two buses.
    let (oid, name, table): (i64, String, i64) = sqlx::query_as(
        "SELECT oid::int8, datname::text, to_regclass('bus_instance')::oid::int8 \
         FROM pg_database WHERE datname = current_database()",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| db_error("looking for the bus", e))?;
    let system: String =
        match sqlx::query_scalar("SELECT system_identifier::text FROM pg_control_system()")
            .fetch_one(&mut *conn)
            .await
        {
            Ok(system) => system,
            Err(e) => {
                // Said once: the id is read again at every connection of the datastore.
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        error = %e,
                        "the bus id leaves out the cluster's system identifier: this role \
                         cannot read pg_control_system(); processes whose roles can will \
                         count it another bus and acknowledge after the commit instead of \
                         in it"
                    );
                });
                String::new()
            }
        };
    Ok(Some(format!("{stored}@{system}/{oid}/{name}/{table}")))
}
