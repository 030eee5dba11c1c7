//! The database bus on SQLite (each test on a fresh file): the bus conformance suite, then what
//! is particular to it (stale receipts, the heartbeat, several processes on one file, body
//! checks, the documented SQL from another language).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::sql_common;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use messagebus::sql::{SqlBusConfig, SqliteBus};
use messagebus::testing::QueueSettings;
use messagebus::{Bus, BusError, Receiver, Sender};
use sqlx::Connection;
use tempfile::TempDir;

/// A bus that keeps its directory alive as long as it lives.
struct TestBus {
    bus: SqliteBus,
    db: Arc<TempDir>,
}

#[async_trait]
impl Bus for TestBus {
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        self.bus.sender(queue).await
    }
    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        self.bus.receiver(queue).await
    }
    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
        self.bus.create_queue(queue).await
    }
    async fn redrive(&self, queue: &str, max: u64) -> Result<u64, BusError> {
        self.bus.redrive(queue, max).await
    }
    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        self.bus.redrivable(queue).await
    }
    async fn close(&self) -> Result<(), BusError> {
        self.bus.close().await
    }
}

impl TestBus {
    fn url(&self) -> String {
        url(&self.db)
    }

    /// Makes every in-flight message visible now, as if its visibility had run out.
    async fn expire_visibility(&self) {
        let pool = sqlx::SqlitePool::connect(&self.url()).await.unwrap();
        sqlx::query("UPDATE bus_messages SET visible_at = 0")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

fn url(dir: &TempDir) -> String {
    format!("sqlite://{}", dir.path().join("bus.sqlite").display())
}

async fn bus_on(db: Arc<TempDir>, config: SqlBusConfig) -> TestBus {
    let bus = SqliteBus::connect(&url(&db), config).await.unwrap();
    TestBus { bus, db }
}

async fn fresh_with(config: SqlBusConfig) -> TestBus {
    bus_on(Arc::new(TempDir::new().unwrap()), config).await
}

async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
    Arc::new(fresh_with(sql_common::config(settings)).await)
}

messagebus::bus_conformance_tests!(fresh);

sql_bus_tests!(fresh_with, bus_on);

/// Several buses on one file (as several processes open it) send and receive at once: every
/// message is received exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_share_the_file() {
    let first = fresh_with(SqlBusConfig::default()).await;
    first.create_queue("q").await.unwrap();
    let mut tasks = Vec::new();
    for p in 0..4 {
        let bus = bus_on(Arc::clone(&first.db), SqlBusConfig::default()).await;
        tasks.push(tokio::spawn(async move {
            let tx = bus.sender("q").await.unwrap();
            for i in 0..50 {
                tx.send(format!("{p}-{i}").into_bytes()).await.unwrap();
            }
            let rx = bus.receiver("q").await.unwrap();
            let mut got = Vec::new();
            loop {
                let batch = rx.receive(10, Duration::from_millis(500)).await.unwrap();
                if batch.is_empty() {
                    break;
                }
                for d in batch {
                    got.push(String::from_utf8(d.body().to_vec()).unwrap());
                    d.ack().await.unwrap();
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    // Whatever a receiver missed after its last empty receive is still there.
    let rx = first.receiver("q").await.unwrap();
    loop {
        let batch = rx.receive(10, Duration::ZERO).await.unwrap();
        if batch.is_empty() {
            break;
        }
        for d in batch {
            all.push(String::from_utf8(d.body().to_vec()).unwrap());
            d.ack().await.unwrap();
        }
    }
    all.sort();
    let mut expected: Vec<String> = (0..4)
        .flat_map(|p| (0..50).map(move |i| format!("{p}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(all, expected);
}

/// The documented SQL, from a Python program, as a researcher in another language would run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_sql_from_python() {
    let bus = fresh_with(SqlBusConfig::default()).await;
    bus.create_queue("pending_research").await.unwrap();
    bus.create_queue("completed_research").await.unwrap();
    bus.sender("pending_research")
        .await
        .unwrap()
        .send(br#"{"work":1}"#.to_vec())
        .await
        .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/bus-sql/sqlite.py");
    let path = bus.db.path().join("bus.sqlite");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(r#"received {"work":1}"#), "{stdout}");
    let rx = bus.receiver("completed_research").await.unwrap();
    let got = messagebus::testing::receive_n(rx.as_ref(), 1).await;
    assert_eq!(got[0].body(), br#"{"result":1}"#);
    let stats = bus
        .sender("pending_research")
        .await
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

/// A claim that waited for another writer's lock still gets its whole visibility timeout,
/// counted from when it took the lock: a visibility counted from before the wait would let the
/// message go to a second consumer while the first still holds it. The same for the
/// heartbeat's extension.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visibility_counts_from_the_lock_not_the_wait() {
    let visibility = Duration::from_secs(30);
    let bus = fresh_with(SqlBusConfig {
        visibility_timeout: visibility,
        ..SqlBusConfig::default()
    })
    .await;
    bus.create_queue("q").await.unwrap();
    bus.sender("q")
        .await
        .unwrap()
        .send(b"m".to_vec())
        .await
        .unwrap();
    let rx = bus.receiver("q").await.unwrap();

    // Another writer holds the lock while the operation starts and waits for it.
    let hold_the_lock = || {
        let url = bus.url();
        async move {
            let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut other)
                .await
                .unwrap();
            other
        }
    };
    let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap();
    let now = || chrono::Utc::now().timestamp_micros();

    let mut other = hold_the_lock().await;
    let claim = tokio::spawn({
        let rx = Arc::clone(&rx);
        async move { rx.receive(1, Duration::ZERO).await.unwrap() }
    });
    // Long enough for the claim to be waiting on the lock (a shorter wait only weakens the
    // check below, it cannot fail it).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released_at = now();
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    let got = claim.await.unwrap();
    assert_eq!(got.len(), 1);
    let receipt = got[0].sql_receipt().unwrap();
    let visible_at: i64 = sqlx::query_scalar("SELECT visible_at FROM bus_messages WHERE id = ?1")
        .bind(receipt.message_id)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert!(
        visible_at >= released_at + micros(visibility),
        "the claim's visibility was counted from before its wait for the lock: {} ms short",
        (released_at + micros(visibility) - visible_at) / 1000
    );

    let mut other = hold_the_lock().await;
    let extend = tokio::spawn({
        let receipt = receipt.clone();
        let bus = bus.bus.clone();
        async move { bus.extend_visibility(&receipt, visibility).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released_at = now();
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    extend.await.unwrap();
    let visible_at: i64 = sqlx::query_scalar("SELECT visible_at FROM bus_messages WHERE id = ?1")
        .bind(receipt.message_id)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert!(
        visible_at >= released_at + micros(visibility),
        "the extension was counted from before its wait for the lock"
    );
    drop(got);
}

/// A send commits durably (`synchronous = FULL`: the sender lets go of what it sent once the
/// send returns), while claims and acknowledgements do not sync (a lost one only redelivers).
/// One connection, so the setting each left behind is the one it ran with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_are_durable_settlements_are_not() {
    let dir = Arc::new(TempDir::new().unwrap());
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(&url(&dir))
        .unwrap()
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
    let pool = messagebus::sql::sqlite::pool_options()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let bus = SqliteBus::from_pool(pool.clone(), SqlBusConfig::default());
    let synchronous = || async {
        sqlx::query_scalar::<_, i64>("PRAGMA synchronous")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    bus.create_queue("q").await.unwrap();
    bus.sender("q")
        .await
        .unwrap()
        .send(b"m".to_vec())
        .await
        .unwrap();
    assert_eq!(synchronous().await, 2, "a send is not durable");
    let rx = bus.receiver("q").await.unwrap();
    let got = messagebus::testing::receive_n(rx.as_ref(), 1).await;
    assert_eq!(synchronous().await, 1, "a claim syncs");
    for d in got {
        d.ack().await.unwrap();
    }
    assert_eq!(synchronous().await, 1, "an acknowledgement syncs");
}
