//! The database bus on Postgres (each test on a fresh database): the bus conformance suite,
//! then what is particular to it (stale receipts, the heartbeat, NOTIFY between processes,
//! consumers that stop showing they are alive, body checks, settling inside a transaction).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::sql_common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datastore::testing_pg::PgTestDb;
use messagebus::sql::{PgBus, SqlBusConfig};
use messagebus::testing::QueueSettings;
use messagebus::{Bus, BusError, Receiver, Sender};

/// A bus that keeps its database alive as long as it lives.
struct TestBus {
    bus: PgBus,
    db: Arc<PgTestDb>,
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
    /// Makes every in-flight message visible now, as if its visibility had run out.
    async fn expire_visibility(&self) {
        let pool = sqlx::PgPool::connect(self.db.url()).await.unwrap();
        sqlx::query("UPDATE bus_messages SET visible_at = now() WHERE visible_at > now()")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

async fn bus_on(db: Arc<PgTestDb>, config: SqlBusConfig) -> TestBus {
    let bus = PgBus::connect(db.url(), config).await.unwrap();
    TestBus { bus, db }
}

async fn fresh_with(config: SqlBusConfig) -> TestBus {
    bus_on(Arc::new(PgTestDb::create().await), config).await
}

async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
    Arc::new(fresh_with(sql_common::config(settings)).await)
}

messagebus::bus_conformance_tests!(fresh);

sql_bus_tests!(fresh_with, bus_on);

/// Two bus instances on one database, as two processes would have, neither polling within
/// the hour: `bodies` are sent on the second while a receiver of the first waits, and that
/// receiver must be woken (NOTIFY). Returns the receiver, what it was woken with, and the
/// instances, which keep the database.
async fn send_to_a_receiver_waiting_elsewhere(
    bodies: Vec<Vec<u8>>,
) -> (Arc<dyn Receiver>, Vec<messagebus::Delivery>, [TestBus; 2]) {
    let config = SqlBusConfig {
        poll_interval: Duration::from_secs(3600),
        ..SqlBusConfig::default()
    };
    let a = fresh_with(config.clone()).await;
    let b = bus_on(Arc::clone(&a.db), config).await;
    a.create_queue("q").await.unwrap();
    let rx = a.receiver("q").await.unwrap();
    // The receive looks once more when its wait ends (120 s): only a notification brings
    // the message within the 30 s given.
    let waiting = {
        let rx = Arc::clone(&rx);
        tokio::spawn(async move { rx.receive(1, Duration::from_secs(120)).await })
    };
    b.sender("q")
        .await
        .unwrap()
        .send_batch(bodies)
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiting receiver was not woken")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1, "the waiting receiver was not woken");
    (rx, got, [a, b])
}

/// A send on one bus instance wakes a receiver waiting on another at once (NOTIFY), long
/// before its hour-long poll would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_another_process() {
    send_to_a_receiver_waiting_elsewhere(vec![b"hi".to_vec()]).await;
}

/// A send too large for one statement (more than 5,000 rows) is several statements in one
/// transaction: it arrives whole, in order, and wakes a receiver on another bus instance as a
/// one-statement send does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_of_several_statements_arrives_whole_and_wakes() {
    let n = 12_001;
    let bodies: Vec<Vec<u8>> = (0..n).map(|i| format!("{i}").into_bytes()).collect();
    let (rx, first, _buses) = send_to_a_receiver_waiting_elsewhere(bodies).await;
    let mut got: Vec<usize> = Vec::new();
    let mut deliveries = first;
    loop {
        for d in &deliveries {
            got.push(std::str::from_utf8(d.body()).unwrap().parse().unwrap());
        }
        for r in messagebus::ack_all(deliveries).await {
            r.unwrap();
        }
        if got.len() >= n {
            break;
        }
        deliveries = rx.receive(1_000, Duration::from_secs(5)).await.unwrap();
        assert!(!deliveries.is_empty(), "only {} of {n} arrived", got.len());
    }
    assert_eq!(got, (0..n).collect::<Vec<_>>(), "not all, or not in order");
}

/// The documented SQL, from `psql`, as a program in another language would run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_sql_from_psql() {
    let bus = fresh_with(SqlBusConfig::default()).await;
    bus.create_queue("pending_research").await.unwrap();
    bus.create_queue("completed_research").await.unwrap();
    bus.sender("pending_research")
        .await
        .unwrap()
        .send(br#"{"work":1}"#.to_vec())
        .await
        .unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/bus-sql/postgres.sh"
    );
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(bus.db.url())
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
    // The script's result is on completed_research for us, and its work item is gone.
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

/// The database going away under the bus (every connection killed) is a passing failure:
/// each call fails retryably or works, the bus recovers by itself, and a message held across
/// the outage comes back when its visibility runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_killed_mid_receive_are_retryable_and_lose_nothing() {
    let bus = fresh_with(SqlBusConfig {
        visibility_timeout: Duration::from_secs(1),
        ..SqlBusConfig::default()
    })
    .await;
    bus.create_queue("q").await.unwrap();
    let tx = bus.sender("q").await.unwrap();
    tx.send_batch(vec![b"held".to_vec(), b"waiting".to_vec()])
        .await
        .unwrap();
    let rx = bus.receiver("q").await.unwrap();
    let held = messagebus::testing::receive_n(rx.as_ref(), 1).await;

    let admin = sqlx::PgPool::connect(&datastore::testing_pg::admin_url())
        .await
        .unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
    )
    .bind(bus.db.name())
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(!killed.is_empty());

    // The holder dies with the connections: its message is not settled.
    drop(held);
    let mut bodies = Vec::new();
    let mut failures = 0;
    while bodies.len() < 2 {
        match rx.receive(2, Duration::from_secs(1)).await {
            Ok(got) => {
                for d in got {
                    bodies.push(d.body().to_vec());
                    // A settlement may meet a dead connection too; then the message comes
                    // back and is received again.
                    if let Err(e) = d.ack().await {
                        assert!(e.is_retryable(), "{e}");
                    }
                }
            }
            Err(e) => {
                assert!(e.is_retryable(), "not retryable: {e}");
                failures += 1;
                assert!(failures < 50, "the bus does not recover: {e}");
            }
        }
    }
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies, vec![b"held".to_vec(), b"waiting".to_vec()]);
}

/// A claim or an extension that waits for a lock on the table (another writer holding it)
/// counts its visibility from when it takes the row, not from when its statement started
/// (`now()`): otherwise a long wait would leave the message visible again almost at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visibility_counts_from_the_lock_not_the_wait() {
    use sqlx::Connection;

    let visibility = Duration::from_secs(30);
    let db = Arc::new(PgTestDb::create().await);
    // Two connections: one listens, every statement runs on the other, so the claim below
    // runs as a prepared statement, as every claim after a process's first does (a
    // statement's first run waits for its locks while being prepared, before its `now()`).
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(db.url())
        .await
        .unwrap();
    let bus = TestBus {
        bus: PgBus::from_pool(
            pool,
            SqlBusConfig {
                visibility_timeout: visibility,
                ..SqlBusConfig::default()
            },
        ),
        db,
    };
    let mut watcher = sqlx::PgConnection::connect(bus.db.url()).await.unwrap();
    loop {
        let listening: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'",
        )
        .bind(bus.db.name())
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if listening > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    bus.create_queue("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    assert!(rx.receive(1, Duration::ZERO).await.unwrap().is_empty());
    bus.sender("q")
        .await
        .unwrap()
        .send(b"m".to_vec())
        .await
        .unwrap();
    let url = bus.db.url().to_owned();

    // Another writer locks the table; returns its connection, in its transaction.
    let hold_the_lock = || {
        let url = url.clone();
        async move {
            let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query("BEGIN").execute(&mut other).await.unwrap();
            sqlx::query("LOCK TABLE bus_messages IN EXCLUSIVE MODE")
                .execute(&mut other)
                .await
                .unwrap();
            other
        }
    };
    let mut other = hold_the_lock().await;
    let claim = tokio::spawn({
        let rx = Arc::clone(&rx);
        async move { rx.receive(1, Duration::ZERO).await.unwrap() }
    });
    wait_until_blocked(&mut other, bus.db.name()).await;
    let released_at = clock(&mut other).await;
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    let got = claim.await.unwrap();
    assert_eq!(got.len(), 1);
    let receipt = got[0].sql_receipt().unwrap();
    let at = visible_at(&mut other, receipt.message_id).await;
    assert!(
        at >= released_at + visibility,
        "the claim's visibility was counted from before its wait for the lock: {} short",
        released_at + visibility - at
    );

    // Prepared once, as a heartbeat's every extension after its first.
    bus.bus
        .extend_visibility(&receipt, visibility)
        .await
        .unwrap();
    let mut other = hold_the_lock().await;
    let extend = tokio::spawn({
        let receipt = receipt.clone();
        let bus = bus.bus.clone();
        async move { bus.extend_visibility(&receipt, visibility).await.unwrap() }
    });
    wait_until_blocked(&mut other, bus.db.name()).await;
    let released_at = clock(&mut other).await;
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    extend.await.unwrap();
    let at = visible_at(&mut other, receipt.message_id).await;
    assert!(
        at >= released_at + visibility,
        "the extension was counted from before its wait for the lock"
    );
    drop(got);
}

/// A database that stops answering holds no caller past the bus's call deadline: with the
/// message table locked by another transaction (every statement on it waits, with no timeout
/// of its own), a send, a receive, an acknowledgement and a look at the counts each return
/// `BusError::Timeout` once their deadline is up (the receive: its wait plus the deadline).
/// Once the lock is gone nothing is lost: the send tried again arrives, and the queue ends
/// empty. Before every call had a deadline, each of them waited as long as the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_blocked_by_the_database_returns_by_its_deadline() {
    use messagebus::testing::assert_times_out;
    use sqlx::Connection;
    use std::collections::HashSet;
    use tokio::time::Instant;

    const DEADLINE: Duration = Duration::from_secs(1);
    let bus = fresh_with(SqlBusConfig {
        call_deadline: DEADLINE,
        visibility_timeout: Duration::from_secs(2),
        ..SqlBusConfig::default()
    })
    .await;
    bus.create_queue("q").await.unwrap();
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    tx.send(b"before".to_vec()).await.unwrap();
    let held = messagebus::testing::receive_n(rx.as_ref(), 1).await;

    let mut other = sqlx::PgConnection::connect(bus.db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut other).await.unwrap();
    sqlx::query("LOCK TABLE bus_messages IN ACCESS EXCLUSIVE MODE")
        .execute(&mut other)
        .await
        .unwrap();
    let wait = Duration::from_millis(200);
    let ack = async {
        let mut held = held;
        held.remove(0).ack().await
    };
    tokio::join!(
        assert_times_out("a send", DEADLINE, tx.send(b"during".to_vec())),
        assert_times_out("a receive", wait + DEADLINE, rx.receive(1, wait)),
        assert_times_out("an acknowledgement", DEADLINE, ack),
        assert_times_out("a look at the counts", DEADLINE, tx.inspect()),
    );
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();

    // The send timed out, so it may or may not have happened: sent again, it is received
    // (twice at most); the acknowledgement may or may not have landed: the message comes
    // back after its visibility or is gone. Either way the queue ends empty.
    tx.send(b"during".to_vec()).await.unwrap();
    let mut seen = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the queue did not empty; saw {seen:?}"
        );
        for d in rx.receive(10, wait).await.unwrap() {
            seen.insert(d.body().to_vec());
            d.ack().await.unwrap();
        }
        let stats = tx.inspect().await.unwrap();
        if seen.contains(b"during".as_slice()) && (stats.waiting, stats.in_flight) == (0, 0) {
            break;
        }
    }
    messagebus::testing::assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// Returns once a statement on database `name` waits for a lock (no sleep: it is seen
/// waiting, so its `now()` is from before any time read after this).
async fn wait_until_blocked(other: &mut sqlx::PgConnection, name: &str) {
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
        )
        .bind(name)
        .fetch_one(&mut *other)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
}

async fn clock(other: &mut sqlx::PgConnection) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(other)
        .await
        .unwrap()
}

async fn visible_at(other: &mut sqlx::PgConnection, id: i64) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT visible_at FROM bus_messages WHERE id = $1")
        .bind(id)
        .fetch_one(other)
        .await
        .unwrap()
}

/// Dead letters are cut by the database, not after reading them whole: peeking at a dead
/// letter of 5 MB through a proxy that counts what the server sends reads a few KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peeking_cuts_dead_letters_in_the_database() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let db = Arc::new(PgTestDb::create().await);
    let direct = bus_on(Arc::clone(&db), SqlBusConfig::default()).await;
    direct.create_queue("q").await.unwrap();
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    let big = 5_000_000usize;
    sqlx::query(
        "INSERT INTO bus_messages (queue, body, dead_letter_reason)
         VALUES ('q_dead_letter', repeat('x', $1), 'large')",
    )
    .bind(i32::try_from(big).unwrap())
    .execute(&pool)
    .await
    .unwrap();

    // Every byte the server sends, through the proxy.
    let from_server = Arc::new(AtomicU64::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut upstream = url::Url::parse(db.url()).unwrap();
    let server_addr = format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port_or_known_default().unwrap()
    );
    tokio::spawn({
        let from_server = Arc::clone(&from_server);
        async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&server_addr).await else {
                    continue;
                };
                let (mut c_in, mut c_out) = client.into_split();
                let (mut s_in, mut s_out) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut c_in, &mut s_out).await });
                let from_server = Arc::clone(&from_server);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = s_in.read(&mut buf).await {
                        if n == 0 || c_out.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        from_server.fetch_add(n as u64, Ordering::SeqCst);
                    }
                });
            }
        }
    });
    upstream.set_host(Some("127.0.0.1")).unwrap();
    upstream.set_port(Some(port)).unwrap();
    let proxied = PgBus::connect(upstream.as_str(), SqlBusConfig::default())
        .await
        .unwrap();
    let sender = proxied.sender("q").await.unwrap();
    let before = from_server.load(Ordering::SeqCst);
    let letters = sender.peek_dead_letters(10, 2048).await.unwrap().unwrap();
    let read = from_server.load(Ordering::SeqCst) - before;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].body.len(), 2048);
    assert_eq!(letters[0].body_bytes, big);
    assert!(
        read < 64 * 1024,
        "{read} bytes read from the server to show 2048 of a dead letter"
    );
}
