//! What batch settlement buys on the database bus: the same messages received in batches
//! and acknowledged three ways, in one run, on Postgres and SQLite.
//!
//! ```text
//! cargo bench -p messagebus --features postgres,sqlite --bench settle -- [--messages 20000]
//!     [--batch 10,100] [--receivers 4] [--no-postgres] [--no-sqlite]
//! ```
//!
//! - `one by one`: `Delivery::ack().await` for each delivery in turn (one statement each);
//! - `join_all`: every delivery's `ack` at once (what the archivists did before
//!   `messagebus::ack_all`: the bus gathers concurrent acknowledgements into shared
//!   statements, group-commit style);
//! - `ack_all`: `messagebus::ack_all`, one statement for the batch, each receipt checked.
//!
//! Each measurement loads `--messages` into a fresh queue (untimed), then `--receivers`
//! receivers take and acknowledge them all; messages per second until the last is
//! acknowledged. Postgres: a fresh database on `ARCHIVIST_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), dropped afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use messagebus::sql::{PgBus, SqlBusConfig, SqliteBus};
use messagebus::Bus;

#[derive(Clone, Copy, Debug)]
enum How {
    OneByOne,
    JoinAll,
    AckAll,
}

async fn measure(
    bus: Arc<dyn Bus>,
    queue: &str,
    n: usize,
    batch: usize,
    receivers: usize,
    how: How,
) -> f64 {
    bus.create_queue(queue).await.unwrap();
    let tx = bus.sender(queue).await.unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(5_000) {
        tx.send_batch(
            chunk
                .iter()
                .map(|i| format!(r#"{{"n":{i},"pad":"{}"}}"#, "x".repeat(180)).into_bytes())
                .collect(),
        )
        .await
        .unwrap();
    }
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..receivers {
        let rx = bus.receiver(queue).await.unwrap();
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < n {
                let got = rx.receive(batch, Duration::from_millis(200)).await.unwrap();
                let k = got.len();
                match how {
                    How::OneByOne => {
                        for d in got {
                            d.ack().await.unwrap();
                        }
                    }
                    How::JoinAll => {
                        for r in futures::future::join_all(got.into_iter().map(|d| d.ack())).await {
                            r.unwrap();
                        }
                    }
                    How::AckAll => {
                        for r in messagebus::ack_all(got).await {
                            r.unwrap();
                        }
                    }
                }
                done.fetch_add(k, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize =
        value("--messages").map_or(20_000, |v| v.parse().expect("--messages takes a number"));
    let receivers: usize =
        value("--receivers").map_or(4, |v| v.parse().expect("--receivers takes a number"));
    let batches: Vec<usize> = value("--batch")
        .unwrap_or_else(|| "10,100".into())
        .split(',')
        .map(|b| b.parse().expect("--batch takes numbers"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("{n} messages, {receivers} receivers; messages/s acknowledged (and / join_all)");
    println!("| bus | batch | one by one | join_all (before) | ack_all | ack_all / join_all |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for backend in ["postgres", "sqlite"] {
        if args.iter().any(|a| a == &format!("--no-{backend}")) {
            continue;
        }
        for &batch in &batches {
            let mut rates = Vec::new();
            for how in [How::OneByOne, How::JoinAll, How::AckAll] {
                let rate = rt.block_on(async {
                    let queue = format!("settle_{how:?}_{batch}").to_lowercase();
                    if backend == "postgres" {
                        let db = datastore::testing_pg::PgTestDb::create().await;
                        let bus = PgBus::connect(db.url(), SqlBusConfig::default())
                            .await
                            .unwrap();
                        let rate =
                            measure(Arc::new(bus.clone()), &queue, n, batch, receivers, how).await;
                        bus.close().await.unwrap();
                        drop(bus);
                        rate
                    } else {
                        let dir = tempfile::tempdir().unwrap();
                        let url = format!("sqlite://{}", dir.path().join("bus.sqlite").display());
                        let bus = SqliteBus::connect(&url, SqlBusConfig::default())
                            .await
                            .unwrap();
                        measure(Arc::new(bus), &queue, n, batch, receivers, how).await
                    }
                });
                rates.push(rate);
            }
            println!(
                "| {backend} | {batch} | {:.0} | {:.0} | {:.0} | {:.2} |",
                rates[0],
                rates[1],
                rates[2],
                rates[2] / rates[1]
            );
        }
    }
}
