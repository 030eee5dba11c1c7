//! Each queue implementation behind [`BenchQueue`]: open on a fresh database, send a batch,
//! receive and acknowledge with several receivers.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::pg::Server;
use crate::{BenchQueue, Kind, Settings};

/// The longest any one receive-and-ack measurement may take before it errs.
const DEADLINE: Duration = Duration::from_secs(600);

/// Seconds after which a receive-and-ack measurement stops and reports the rate so far
/// (`--max-seconds`): slow queues at large backlogs would otherwise take hours.
pub static CAP_SECS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(30);

fn cap() -> Duration {
    Duration::from_secs(CAP_SECS.load(Ordering::Relaxed))
}
const QUEUE: &str = "bench";

/// A queue opened on its own fresh database.
pub struct Opened<'a> {
    pub queue: Arc<dyn BenchQueue>,
    server: &'a Server,
    db: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Opened<'_> {
    /// Closes the queue and drops its database.
    pub async fn finish(self) {
        self.queue.close().await;
        drop(self.queue);
        if let Some(db) = self.db {
            if let Err(e) = self.server.drop_db(&db).await {
                eprintln!("    could not drop bus_bench_{db}: {e:#}");
            }
        }
    }
}

pub async fn open<'a>(kind: Kind, server: &'a Server, s: &Settings) -> Result<Opened<'a>> {
    if kind.is_rabbitmq() {
        return Ok(Opened {
            queue: open_rabbitmq(s).await?,
            server,
            db: None,
            _dir: None,
        });
    }
    if kind.is_sqlite() {
        let dir = tempfile::tempdir()?;
        let queue = open_sqlite(&dir, s).await?;
        return Ok(Opened {
            queue,
            server,
            db: None,
            _dir: Some(dir),
        });
    }
    let url = server.fresh_db(kind.id()).await?;
    // Connections opened up front, so that no measurement pays for connecting.
    let pool = PgPoolOptions::new()
        .max_connections((s.receivers + s.senders + 4) as u32)
        .min_connections((s.receivers + s.senders) as u32)
        .connect(&url)
        .await?;
    let queue: Arc<dyn BenchQueue> = match kind {
        Kind::Baseline => Arc::new(Baseline::open(pool).await?),
        Kind::Pgmq => Arc::new(Pgmq::open(pool).await?),
        Kind::Sqlxmq => Arc::new(Sqlxmq::open(pool).await?),
        Kind::Underway => Arc::new(Underway::open(pool).await?),
        Kind::Apalis => {
            pool.close().await;
            Arc::new(Apalis::open(&url, s).await?)
        }
        Kind::Ours => {
            pool.close().await;
            open_ours_pg(&url, s, false).await?
        }
        Kind::OursAckIn => {
            pool.close().await;
            open_ours_pg(&url, s, true).await?
        }
        Kind::OursSqlite | Kind::OursRabbit => unreachable!(),
    };
    Ok(Opened {
        queue,
        server,
        db: Some(kind.id().to_string()),
        _dir: None,
    })
}

/// Runs one loop per receiver until `n` messages are acknowledged in all; each call of a
/// receiver's closure receives and acknowledges one batch and says how many. Returns the count
/// and the time taken.
pub async fn pull<F, Fut>(n: usize, receivers: Vec<F>) -> Result<(usize, Duration)>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<usize>> + Send,
{
    let done = Arc::new(AtomicUsize::new(0));
    let (finished_tx, mut finished_rx) = tokio::sync::mpsc::unbounded_channel::<Result<()>>();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for f in receivers {
        let (done, finished_tx) = (done.clone(), finished_tx.clone());
        tasks.push(tokio::spawn(async move {
            let r = async {
                loop {
                    let so_far = done.load(Ordering::Relaxed);
                    if so_far >= n {
                        return Ok(());
                    }
                    if start.elapsed() > cap() {
                        return Ok(());
                    }
                    let k = f(n - so_far).await?;
                    if k == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    if done.fetch_add(k, Ordering::Relaxed) + k >= n {
                        return Ok(());
                    }
                }
            }
            .await;
            let _ = finished_tx.send(r);
        }));
    }
    drop(finished_tx);
    // The clock stops when the n-th message is acknowledged (or a receiver fails); receivers
    // still waiting on an empty queue then are stopped, not waited for.
    let first = finished_rx.recv().await.context("no receiver")?;
    let elapsed = start.elapsed();
    for t in &tasks {
        t.abort();
    }
    first?;
    Ok((done.load(Ordering::Relaxed), elapsed))
}

async fn analyze(pool: &PgPool) -> Result<()> {
    sqlx::query("ANALYZE").execute(pool).await?;
    Ok(())
}

fn json_values(bodies: &[String]) -> Result<Vec<Value>> {
    bodies
        .iter()
        .map(|b| serde_json::from_str(b).context("body is not JSON"))
        .collect()
}

// ------------------------------------------------------------------ plain-SQL baseline

/// One table, `INSERT … SELECT unnest(…)` to send, and one statement to receive and acknowledge:
/// `DELETE … WHERE id IN (SELECT … ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING`.
/// No visibility timeout, no redelivery: the ceiling, not a usable queue.
struct Baseline {
    pool: PgPool,
}

impl Baseline {
    async fn open(pool: PgPool) -> Result<Self> {
        sqlx::raw_sql(
            "CREATE TABLE bench_queue (id bigserial PRIMARY KEY, body jsonb NOT NULL, \
             enqueued_at timestamptz NOT NULL DEFAULT now())",
        )
        .execute(&pool)
        .await?;
        Ok(Baseline { pool })
    }
}

#[async_trait]
impl BenchQueue for Baseline {
    async fn send_batch(&self, bodies: &[String]) -> Result<()> {
        sqlx::query("INSERT INTO bench_queue (body) SELECT b::jsonb FROM unnest($1::text[]) AS b")
            .bind(bodies)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn receive_ack(
        &self,
        n: usize,
        batch: usize,
        receivers: usize,
    ) -> Result<(usize, Duration)> {
        let loops = (0..receivers)
            .map(|_| {
                let pool = self.pool.clone();
                move |_left: usize| {
                    let pool = pool.clone();
                    async move {
                        let rows: Vec<(i64, Value)> = sqlx::query_as(
                            "DELETE FROM bench_queue WHERE id IN (SELECT id FROM bench_queue \
                             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, body",
                        )
                        .bind(batch as i64)
                        .fetch_all(&pool)
                        .await?;
                        Ok(rows.len())
                    }
                }
            })
            .collect();
        pull(n, loops).await
    }

    async fn after_load(&self) -> Result<()> {
        analyze(&self.pool).await
    }
}

// ------------------------------------------------------------------ pgmq

/// pgmq installed as plain SQL from the crate's embedded scripts (no server extension), used
/// through `PGMQueueExt`: `send_batch`, `read_batch` (visibility 30 s), `delete_batch`.
struct Pgmq {
    q: pgmq::PGMQueueExt,
}

impl Pgmq {
    async fn open(pool: PgPool) -> Result<Self> {
        let q = pgmq::PGMQueueExt::new_with_pool(pool).await;
        q.install_sql_from_embedded()
            .await
            .context("pgmq install_sql_from_embedded")?;
        q.create(QUEUE).await.context("pgmq create")?;
        Ok(Pgmq { q })
    }
}

#[async_trait]
impl BenchQueue for Pgmq {
    async fn send_batch(&self, bodies: &[String]) -> Result<()> {
        let values = json_values(bodies)?;
        self.q.send_batch(QUEUE, &values).await?;
        Ok(())
    }

    async fn receive_ack(
        &self,
        n: usize,
        batch: usize,
        receivers: usize,
    ) -> Result<(usize, Duration)> {
        let loops = (0..receivers)
            .map(|_| {
                let q = self.q.clone();
                move |_left: usize| {
                    let q = q.clone();
                    async move {
                        let msgs: Vec<pgmq::Message<Value>> =
                            q.read_batch(QUEUE, 30i32, batch as i32).await?;
                        if msgs.is_empty() {
                            return Ok(0);
                        }
                        let ids: Vec<i64> = msgs.iter().map(|m| m.msg_id).collect();
                        q.delete_batch(QUEUE, &ids).await?;
                        Ok(msgs.len())
                    }
                }
            })
            .collect();
        pull(n, loops).await
    }

    async fn after_load(&self) -> Result<()> {
        analyze(&self.q.connection).await
    }
}

// ------------------------------------------------------------------ sqlxmq

const SQLXMQ_MIGRATIONS: [&str; 5] = [
    include_str!("../sql/sqlxmq/20210316025847_setup.up.sql"),
    include_str!("../sql/sqlxmq/20210921115907_clear.up.sql"),
    include_str!("../sql/sqlxmq/20211013151757_fix_mq_latest_message.up.sql"),
    include_str!("../sql/sqlxmq/20220208120856_fix_concurrent_poll.up.sql"),
    include_str!("../sql/sqlxmq/20220713122907_fix-clear_all-keep-nil-message.up.sql"),
];

/// sqlxmq: its migrations (copied from the crate), `JobBuilder::spawn` for each message inside one
/// transaction per batch (the crate has no batch spawn), and `JobRunnerOptions` runners (one per
/// receiver) whose handler calls `CurrentJob::complete`. `set_concurrency(1, batch)`: a runner
/// polls for up to `batch` jobs once the previous ones are complete.
struct Sqlxmq {
    pool: PgPool,
}

impl Sqlxmq {
    async fn open(pool: PgPool) -> Result<Self> {
        for m in SQLXMQ_MIGRATIONS {
            sqlx::raw_sql(m)
                .execute(&pool)
                .await
                .context("sqlxmq migration")?;
        }
        Ok(Sqlxmq { pool })
    }
}

#[async_trait]
impl BenchQueue for Sqlxmq {
    async fn send_batch(&self, bodies: &[String]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for b in bodies {
            sqlxmq::JobBuilder::new(QUEUE)
                .set_channel_name(QUEUE)
                .set_raw_json(b)
                .spawn(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn receive_ack(
        &self,
        n: usize,
        batch: usize,
        receivers: usize,
    ) -> Result<(usize, Duration)> {
        let done = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(tokio::sync::Notify::new());
        let start = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..receivers {
            let (done, failed, finished) = (done.clone(), failed.clone(), finished.clone());
            let handle = sqlxmq::JobRunnerOptions::new(&self.pool, move |mut job| {
                let (done, failed, finished) = (done.clone(), failed.clone(), finished.clone());
                tokio::spawn(async move {
                    match job.complete().await {
                        Ok(()) => {
                            if done.fetch_add(1, Ordering::Relaxed) + 1 >= n {
                                finished.notify_one();
                            }
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            })
            .set_concurrency(1, batch)
            .set_channel_names(&[QUEUE])
            .run()
            .await?;
            handles.push(handle);
        }
        let wait = async {
            while done.load(Ordering::Relaxed) < n && start.elapsed() < cap() {
                let _ = tokio::time::timeout(Duration::from_millis(20), finished.notified()).await;
            }
        };
        let r = tokio::time::timeout(DEADLINE, wait).await;
        let elapsed = start.elapsed();
        for mut h in handles {
            h.stop().await;
        }
        if r.is_err() {
            bail!(
                "sqlxmq timed out after {} of {n}",
                done.load(Ordering::Relaxed)
            );
        }
        let f = failed.load(Ordering::Relaxed);
        if f > 0 {
            bail!("sqlxmq: {f} completions failed");
        }
        Ok((done.load(Ordering::Relaxed), elapsed))
    }

    async fn after_load(&self) -> Result<()> {
        analyze(&self.pool).await
    }
}

// ------------------------------------------------------------------ underway

#[derive(Clone)]
struct Noop;

impl underway::Task for Noop {
    type Input = Value;
    type Output = ();

    async fn execute(
        &self,
        _tx: sqlx::Transaction<'_, sqlx::Postgres>,
        _input: Value,
    ) -> underway::task::Result<()> {
        Ok(())
    }
}

/// underway: `run_migrations`, a `Queue` of a no-op `Task`, `Queue::enqueue_multi` to send, and
/// `Worker::process_next_task` in one loop per receiver (what `Worker::run` does inside). It
/// dequeues one task at a time; a done task is marked succeeded, not deleted.
struct Underway {
    pool: PgPool,
    queue: Arc<underway::Queue<Noop>>,
}

impl Underway {
    async fn open(pool: PgPool) -> Result<Self> {
        underway::run_migrations(&pool).await?;
        let queue = underway::Queue::builder()
            .name(QUEUE)
            .pool(pool.clone())
            .build()
            .await?;
        Ok(Underway {
            pool,
            queue: Arc::new(queue),
        })
    }
}

#[async_trait]
impl BenchQueue for Underway {
    async fn send_batch(&self, bodies: &[String]) -> Result<()> {
        let values = json_values(bodies)?;
        self.queue.enqueue_multi(&self.pool, &Noop, &values).await?;
        Ok(())
    }

    async fn receive_ack(
        &self,
        n: usize,
        _batch: usize,
        receivers: usize,
    ) -> Result<(usize, Duration)> {
        let worker = Arc::new(underway::Worker::new(self.queue.clone(), Noop));
        let loops = (0..receivers)
            .map(|_| {
                let worker = worker.clone();
                move |_left: usize| {
                    let worker = worker.clone();
                    async move {
                        Ok(match worker.process_next_task().await? {
                            Some(_) => 1,
                            None => 0,
                        })
                    }
                }
            })
            .collect();
        pull(n, loops).await
    }

    async fn after_load(&self) -> Result<()> {
        analyze(&self.pool).await
    }
}

// ------------------------------------------------------------------ apalis-postgres

static APALIS_HANDLED: AtomicUsize = AtomicUsize::new(0);

async fn apalis_handle(_item: Value) -> Result<(), apalis::prelude::BoxDynError> {
    APALIS_HANDLED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// apalis-postgres: `PostgresStorage::setup`, `queries::push_tasks` to send a batch, and one
/// apalis `Worker` per receiver on a `PostgresStorage` with `Config::batch_size(batch)`; a task is
/// acknowledged by apalis when the (no-op) handler returns. Timed until the database shows the
/// tasks `Done`.
struct Apalis {
    pool: sqlx09::PgPool,
}

impl Apalis {
    async fn open(url: &str, s: &Settings) -> Result<Self> {
        let pool = sqlx09::postgres::PgPoolOptions::new()
            .max_connections((s.receivers + s.senders + 4) as u32)
            .min_connections((s.receivers + s.senders) as u32)
            .connect(url)
            .await?;
        apalis_postgres::PostgresStorage::setup(&pool)
            .await
            .context("apalis setup")?;
        Ok(Apalis { pool })
    }

    async fn done_count(&self) -> Result<i64> {
        Ok(sqlx09::query_scalar(
            "SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status = 'Done'",
        )
        .bind(QUEUE)
        .fetch_one(&self.pool)
        .await?)
    }
}

#[async_trait]
impl BenchQueue for Apalis {
    async fn send_batch(&self, bodies: &[String]) -> Result<()> {
        let tasks: Vec<apalis_postgres::PgTask> = bodies
            .iter()
            .map(|b| apalis::prelude::TaskBuilder::new(b.as_bytes().to_vec()).build())
            .collect();
        let mut conn = self.pool.acquire().await?;
        apalis_postgres::queries::push_tasks(&mut *conn, QUEUE, tasks).await?;
        Ok(())
    }

    async fn receive_ack(
        &self,
        n: usize,
        batch: usize,
        receivers: usize,
    ) -> Result<(usize, Duration)> {
        use apalis::prelude::*;
        let before = self.done_count().await? as usize;
        APALIS_HANDLED.store(0, Ordering::Relaxed);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..receivers {
            let config = apalis_postgres::Config::default()
                .queue(QUEUE)
                .batch_size(batch);
            let backend =
                apalis_postgres::PostgresStorage::<Value>::new(&self.pool).with_config(config);
            let worker = WorkerBuilder::new(format!("bench-{i}-{}", std::process::id()))
                .backend(backend)
                .build(apalis_handle);
            tasks.push(tokio::spawn(worker.run()));
        }
        let result = async {
            while APALIS_HANDLED.load(Ordering::Relaxed) < n && start.elapsed() < cap() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let target = n.min(APALIS_HANDLED.load(Ordering::Relaxed));
            // Handled is not yet acknowledged: wait until the rows say so.
            loop {
                let done = self.done_count().await? as usize - before;
                if done >= target {
                    return Ok(done);
                }
                if start.elapsed() > DEADLINE {
                    bail!("apalis timed out after {done} done");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        .await;
        let elapsed = start.elapsed();
        for t in tasks {
            t.abort();
        }
        Ok((result?, elapsed))
    }

    async fn after_load(&self) -> Result<()> {
        sqlx09::query("ANALYZE").execute(&self.pool).await?;
        Ok(())
    }
}

// ------------------------------------------------------------------ ours

#[cfg(feature = "ours")]
async fn open_ours_pg(url: &str, s: &Settings, ack_in: bool) -> Result<Arc<dyn BenchQueue>> {
    Ok(Arc::new(
        ours::Ours::open_pg(url, s.receivers + s.senders, ack_in).await?,
    ))
}

#[cfg(not(feature = "ours"))]
async fn open_ours_pg(_url: &str, _s: &Settings, _ack_in: bool) -> Result<Arc<dyn BenchQueue>> {
    bail!("built without feature `ours` (messagebus::sql)")
}

#[cfg(feature = "ours")]
async fn open_sqlite(dir: &tempfile::TempDir, s: &Settings) -> Result<Arc<dyn BenchQueue>> {
    Ok(Arc::new(
        ours::OursSqlite::open(&dir.path().join("bus.sqlite"), s.sqlite_processes).await?,
    ))
}

#[cfg(not(feature = "ours"))]
async fn open_sqlite(_dir: &tempfile::TempDir, _s: &Settings) -> Result<Arc<dyn BenchQueue>> {
    bail!("built without feature `ours` (messagebus::sql)")
}

#[cfg(feature = "ours")]
async fn open_rabbitmq(s: &Settings) -> Result<Arc<dyn BenchQueue>> {
    Ok(Arc::new(ours::OursRabbit::open(&s.amqp_url).await?))
}

#[cfg(not(feature = "ours"))]
async fn open_rabbitmq(_s: &Settings) -> Result<Arc<dyn BenchQueue>> {
    bail!("built without feature `ours` (messagebus::rabbitmq)")
}

#[cfg(feature = "ours")]
pub fn sqlite_worker_main() -> Result<()> {
    ours::sqlite_worker_main()
}

#[cfg(not(feature = "ours"))]
pub fn sqlite_worker_main() -> Result<()> {
    bail!("built without feature `ours`")
}

#[cfg(feature = "ours")]
mod ours {
    use std::io::{BufRead, Write};
    use std::path::Path;
    use std::process::Stdio;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};
    use async_trait::async_trait;
    use messagebus::sql::{PgBus, SqlBusConfig, SqliteBus};
    use messagebus::{Bus, Receiver, Sender};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    use super::{pull, QUEUE};
    use crate::BenchQueue;

    /// Receives one batch and acknowledges it as the archivists do: `messagebus::ack_all`,
    /// one statement for the batch, each receipt checked.
    async fn receive_ack_once(rx: &dyn Receiver, max: usize) -> Result<usize> {
        let ds = rx.receive(max, Duration::from_secs(1)).await?;
        let k = ds.len();
        for r in messagebus::ack_all(ds).await {
            r?;
        }
        Ok(k)
    }

    /// Receives one batch and acknowledges all of it in one statement with
    /// `messagebus::sql::postgres::ack_in` on a connection of our own (`synchronous_commit =
    /// off`, as the bus settles): what a batching acknowledger would do. A diagnostic.
    async fn receive_ack_in_once(
        rx: &dyn Receiver,
        pool: &sqlx::PgPool,
        max: usize,
    ) -> Result<usize> {
        let ds = rx.receive(max, Duration::from_secs(1)).await?;
        if ds.is_empty() {
            return Ok(0);
        }
        let receipts: Vec<_> = ds.iter().filter_map(|d| d.sql_receipt()).collect();
        let mut conn = pool.acquire().await?;
        let n = messagebus::sql::postgres::ack_in(&mut conn, &receipts).await?;
        let k = ds.len();
        for d in ds {
            d.settled_elsewhere();
        }
        if n as usize != k {
            bail!("ack_in settled {n} of {k}");
        }
        Ok(k)
    }

    /// Our bus on Postgres: `Sender::send_batch`, and one `Receiver` per receiver.
    pub(super) struct Ours {
        bus: Arc<dyn Bus>,
        tx: Arc<dyn Sender>,
        pool: sqlx::PgPool,
        ack_in: bool,
    }

    impl Ours {
        /// The bus on a pool set up as `PgBus::connect` sets up its own, but with `clients`
        /// connections (and the listener's) opened up front, as the peers' pools are: a
        /// measurement of a fraction of a second must not pay for TLS handshakes.
        pub(super) async fn open_pg(url: &str, clients: usize, ack_in: bool) -> Result<Self> {
            let options: sqlx::postgres::PgConnectOptions = url.parse()?;
            let options = options.options([("synchronous_commit", "off")]);
            let bus_pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(10.max(clients as u32 + 1))
                .min_connections(clients as u32 + 1)
                .test_before_acquire(false)
                .connect_with(options.clone())
                .await?;
            let bus = PgBus::from_pool(bus_pool, SqlBusConfig::default());
            bus.create_queue(QUEUE).await?;
            let tx = bus.sender(QUEUE).await?;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(8)
                .min_connections(4)
                .connect_with(options)
                .await?;
            Ok(Ours {
                bus: Arc::new(bus),
                tx,
                pool,
                ack_in,
            })
        }
    }

    #[async_trait]
    impl BenchQueue for Ours {
        async fn send_batch(&self, bodies: &[String]) -> Result<()> {
            self.tx
                .send_batch(bodies.iter().map(|b| b.as_bytes().to_vec()).collect())
                .await?;
            Ok(())
        }

        async fn receive_ack(
            &self,
            n: usize,
            batch: usize,
            receivers: usize,
        ) -> Result<(usize, Duration)> {
            let mut loops = Vec::new();
            for _ in 0..receivers {
                let rx = self.bus.receiver(QUEUE).await?;
                let (pool, ack_in) = (self.pool.clone(), self.ack_in);
                loops.push(move |_left: usize| {
                    let (rx, pool) = (rx.clone(), pool.clone());
                    async move {
                        if ack_in {
                            receive_ack_in_once(rx.as_ref(), &pool, batch).await
                        } else {
                            receive_ack_once(rx.as_ref(), batch).await
                        }
                    }
                });
            }
            pull(n, loops).await
        }

        async fn after_load(&self) -> Result<()> {
            super::analyze(&self.pool).await
        }
    }

    /// Our bus on RabbitMQ: a fresh quorum queue per measurement (deleted afterwards),
    /// sends with publisher confirms, receivers in this process.
    pub(super) struct OursRabbit {
        bus: messagebus::rabbitmq::RabbitBus,
        queue: String,
        tx: Arc<dyn Sender>,
    }

    impl OursRabbit {
        pub(super) async fn open(url: &str) -> Result<Self> {
            let bus = messagebus::rabbitmq::RabbitBus::connect(
                url,
                messagebus::rabbitmq::RabbitBusConfig::default(),
            )
            .await?;
            let queue = format!("bus_bench_{:08x}", rand_suffix());
            bus.create_queue(&queue).await?;
            let tx = bus.sender(&queue).await?;
            Ok(OursRabbit { bus, queue, tx })
        }
    }

    fn rand_suffix() -> u32 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32))
    }

    #[async_trait]
    impl BenchQueue for OursRabbit {
        async fn send_batch(&self, bodies: &[String]) -> Result<()> {
            self.tx
                .send_batch(bodies.iter().map(|b| b.as_bytes().to_vec()).collect())
                .await?;
            Ok(())
        }

        async fn receive_ack(
            &self,
            n: usize,
            batch: usize,
            receivers: usize,
        ) -> Result<(usize, Duration)> {
            let mut loops = Vec::new();
            for _ in 0..receivers {
                let rx = self.bus.receiver(&self.queue).await?;
                loops.push(move |_left: usize| {
                    let rx = rx.clone();
                    async move { receive_ack_once(rx.as_ref(), batch).await }
                });
            }
            pull(n, loops).await
        }

        async fn close(&self) {
            if let Err(e) = self.bus.delete_queue(&self.queue).await {
                eprintln!("    could not delete {}: {e:#}", self.queue);
            }
        }
    }

    /// Our bus on one SQLite file: sends from this process; receives and acks in several
    /// processes (this binary's `sqlite-worker`), one receiver each.
    pub(super) struct OursSqlite {
        url: String,
        tx: Arc<dyn Sender>,
        _bus: SqliteBus,
        processes: usize,
    }

    impl OursSqlite {
        pub(super) async fn open(path: &Path, processes: usize) -> Result<Self> {
            let url = format!("sqlite://{}", path.display());
            let bus = SqliteBus::connect(&url, SqlBusConfig::default()).await?;
            bus.create_queue(QUEUE).await?;
            let tx = bus.sender(QUEUE).await?;
            Ok(OursSqlite {
                url,
                tx,
                _bus: bus,
                processes: processes.max(1),
            })
        }
    }

    #[async_trait]
    impl BenchQueue for OursSqlite {
        async fn send_batch(&self, bodies: &[String]) -> Result<()> {
            self.tx
                .send_batch(bodies.iter().map(|b| b.as_bytes().to_vec()).collect())
                .await?;
            Ok(())
        }

        async fn receive_ack(
            &self,
            n: usize,
            batch: usize,
            _receivers: usize,
        ) -> Result<(usize, Duration)> {
            let exe = std::env::current_exe()?;
            let mut children = Vec::new();
            for i in 0..self.processes {
                let quota = n / self.processes + usize::from(i < n % self.processes);
                let mut child = tokio::process::Command::new(&exe)
                    .args([
                        "sqlite-worker",
                        &self.url,
                        &quota.to_string(),
                        &batch.to_string(),
                    ])
                    .env(
                        "BUS_BENCH_CAP_SECS",
                        super::CAP_SECS
                            .load(std::sync::atomic::Ordering::Relaxed)
                            .to_string(),
                    )
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()?;
                let mut out = tokio::io::BufReader::new(child.stdout.take().context("stdout")?);
                let mut line = String::new();
                out.read_line(&mut line).await?;
                if line.trim() != "ready" {
                    bail!("sqlite worker said {line:?}");
                }
                children.push((child, out));
            }
            let start = Instant::now();
            for (child, _) in &mut children {
                let stdin = child.stdin.as_mut().context("stdin")?;
                stdin.write_all(b"go\n").await?;
                stdin.flush().await?;
            }
            let mut acked = 0;
            for (mut child, mut out) in children {
                let mut line = String::new();
                out.read_line(&mut line).await?;
                let status = child.wait().await?;
                if !status.success() {
                    bail!("sqlite worker failed: {status}");
                }
                acked += line
                    .trim()
                    .strip_prefix("done ")
                    .context("worker output")?
                    .parse::<usize>()?;
            }
            Ok((acked, start.elapsed()))
        }
    }

    /// `bus sqlite-worker URL QUOTA BATCH`: receive and ack QUOTA messages, BATCH at a time.
    pub(super) fn sqlite_worker_main() -> Result<()> {
        let args: Vec<String> = std::env::args().skip(2).collect();
        let [url, quota, batch] = &args[..] else {
            bail!("usage: bus sqlite-worker URL QUOTA BATCH");
        };
        let quota: usize = quota.parse()?;
        let batch: usize = batch.parse()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        rt.block_on(async {
            let bus = SqliteBus::connect(url, SqlBusConfig::default()).await?;
            let rx = bus.receiver(QUEUE).await?;
            println!("ready");
            std::io::stdout().flush()?;
            let mut go = String::new();
            std::io::stdin().lock().read_line(&mut go)?;
            let start = Instant::now();
            let mut done = 0;
            let cap: u64 = std::env::var("BUS_BENCH_CAP_SECS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(30);
            while done < quota {
                if start.elapsed() > Duration::from_secs(cap) {
                    break;
                }
                done += receive_ack_once(rx.as_ref(), batch.min(quota - done)).await?;
            }
            println!("done {done}");
            std::io::stdout().flush()?;
            Ok(())
        })
    }
}
