//! The hostile-input corpus (`tests/corpus/hostile/`) through the archivists on the in-memory
//! bus, with SQLite and with Postgres as the datastore: no crash, every poison message in the
//! dead-letter queue with its reason, every valid one stored, each run finishing normally.
//! The other buses get the same corpus through the binary (`bin/tests/e2e/hostile_input_e2e.rs`).
//! The in-memory bus carries bodies that are not UTF-8, so here those reach the archivists
//! too and must be dead-lettered; it refuses bodies over 1 MiB at send, as every bus does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../corpus/hostile.rs"]
mod corpus;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use archivist::completed_research::{self, CompletedResearchConfig};
use archivist::ingest::{self, IngestConfig};
use archivist::{ArchivistHandle, Ended, Report};
use chrono::Utc;
use datastore::{DataStore, SqliteDataStore};
use messagebus::{dead_letter_queue_name, Bus, MemoryBus, MemoryBusConfig};

use corpus::{Case, Leases, Outcome};

async fn done(handle: ArchivistHandle) -> Report {
    let report = handle.done.await.unwrap();
    assert!(
        matches!(report.ended, Ended::Finished),
        "the archivist goes on through hostile input and finishes: {report:?}"
    );
    report
}

/// Runs the archivist of `queue` until its queue is empty.
async fn drain(bus: &MemoryBus, store: &Arc<dyn DataStore>, queue: &str) -> Report {
    let token = tokio_util::sync::CancellationToken::new();
    let rx = bus.receiver(queue).await.unwrap();
    let ingest = IngestConfig {
        once: true,
        receive_wait: Duration::ZERO,
        ..IngestConfig::default()
    };
    let handle = match queue {
        "curated_episodes" => ingest::start_episodes(token, rx, store.clone(), ingest),
        "curated_clips" => ingest::start_clips(token, rx, store.clone(), ingest),
        _ => completed_research::start(
            token,
            rx,
            store.clone(),
            CompletedResearchConfig {
                receive_wait: Duration::ZERO,
                ..CompletedResearchConfig::default()
            },
        ),
    };
    done(handle).await
}

async fn run_corpus(label: &str, store: Arc<dyn DataStore>) {
    let cases = corpus::load();
    let bus = MemoryBus::new(MemoryBusConfig::default());
    for q in corpus::QUEUES {
        bus.create_queue(q).await.unwrap();
    }
    let mut leases = Leases::default();
    let mut refused = BTreeSet::new();
    for phase in [0u8, 1] {
        for queue in corpus::QUEUES {
            if queue == "completed_research" {
                if phase == 0 {
                    continue;
                }
                leases = corpus::make_leases(&*store).await;
            }
            let sender = bus.sender(queue).await.unwrap();
            let mut bodies = Vec::new();
            for case in cases
                .iter()
                .filter(|c| c.queue == queue && c.phase == phase)
            {
                if case.send_refused {
                    // Alone: the bus may refuse it (over its size limit), as `send` would.
                    if let Err(e) = sender.send(case.body(&leases)).await {
                        println!("{label}: the bus refused {:?} at send: {e}", case.name);
                        refused.insert(case.name.clone());
                    }
                } else {
                    bodies.push(case.body(&leases));
                }
            }
            sender.send_batch(bodies).await.unwrap();
            drain(&bus, &store, queue).await;
        }
    }

    let mut all_cases: Vec<&Case> = Vec::new();
    let mut all_outcomes: Vec<Outcome> = Vec::new();
    let mut total = corpus::Counts::default();
    for queue in corpus::QUEUES {
        let stats = bus.sender(queue).await.unwrap().inspect().await.unwrap();
        assert_eq!(
            (stats.waiting, stats.in_flight),
            (0, 0),
            "{label}: {queue} is drained"
        );
        let mut dead = Vec::new();
        let rx = bus.receiver(&dead_letter_queue_name(queue)).await.unwrap();
        loop {
            let batch = rx.receive(100, Duration::ZERO).await.unwrap();
            if batch.is_empty() {
                break;
            }
            for d in batch {
                let reason = d.dead_letter_reason().unwrap_or_default().to_string();
                dead.push((d.body().to_vec(), reason));
                d.ack().await.unwrap();
            }
        }
        let cases: Vec<&Case> = cases.iter().filter(|c| c.queue == queue).collect();
        let outcomes = corpus::outcomes(&cases, &leases, dead, &refused);
        let counts = corpus::check(&format!("{label} {queue}"), &cases, &outcomes, true);
        println!(
            "{label} {queue}: {} cases, {} stored, {} dead-lettered with the expected reason, \
             {} refused by the bus at send",
            counts.cases, counts.stored, counts.dead_lettered, counts.refused_at_send
        );
        total.cases += counts.cases;
        total.stored += counts.stored;
        total.dead_lettered += counts.dead_lettered;
        total.refused_at_send += counts.refused_at_send;
        all_cases.extend(cases);
        all_outcomes.extend(outcomes);
    }
    let want = corpus::expected_state(&all_cases, &all_outcomes, &leases);
    let status = store.status(Utc::now()).await.unwrap();
    assert_eq!(
        corpus::Stored {
            episodes: status.episodes,
            clips: status.clips,
            researched_pairs: status.researched_pairs,
        },
        want,
        "{label}: what the datastore holds"
    );
    println!(
        "{label}: {} cases, {} stored, {} dead-lettered, {} refused at send; datastore: {} \
         episodes, {} clips, {} researched pairs",
        total.cases,
        total.stored,
        total.dead_lettered,
        total.refused_at_send,
        want.episodes,
        want.clips,
        want.researched_pairs
    );
}

#[tokio::test]
async fn hostile_corpus_on_the_memory_bus_with_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("archive.sqlite").display());
    let store = SqliteDataStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    run_corpus("memory bus, SQLite", Arc::new(store)).await;
}

#[tokio::test]
async fn hostile_corpus_on_the_memory_bus_with_postgres() {
    let (store, _db) = datastore::testing_pg::fresh_pg_store().await;
    run_corpus("memory bus, Postgres", Arc::new(store)).await;
}
