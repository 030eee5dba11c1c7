//! The whole pipeline in-process: curators → ingestion → work assignment → a test researcher
//! → result recording, until every pair is researched; on a well-behaved bus and on one that
//! duplicates and reorders messages.

use std::time::Duration;

use archivist::completed_research::{self, CompletedResearchConfig};
use archivist::ingest::{start_clips, start_episodes, IngestConfig};
use archivist::messages::{decode, encode, PendingResearchItem};
use archivist::pending_research::{self, PendingResearchConfig};
use messagebus::{MemoryBusConfig, Receiver, Sender};
use tokio_util::sync::CancellationToken;

use super::common::*;

/// A researcher: answers every waiting work item, one result per clip, the last revoking the
/// lease. Returns how many items it answered.
async fn research(rx: &dyn Receiver, tx: &dyn Sender) -> u64 {
    let mut answered = 0;
    loop {
        let batch = rx.receive(10, Duration::ZERO).await.unwrap();
        if batch.is_empty() {
            return answered;
        }
        for d in batch {
            let item: PendingResearchItem = decode(d.body()).unwrap();
            tx.send_batch(answers(&item).iter().map(encode).collect())
                .await
                .unwrap();
            d.ack().await.unwrap();
            answered += 1;
        }
    }
}

async fn round_trip(backend: Backend, bus: MemoryBusConfig) {
    const EPISODES_N: u32 = 9;
    const CLIPS_N: u32 = 7;
    let env = Env::on(backend, bus).await;

    // Curators.
    env.send(EPISODES, episodes(0..EPISODES_N)).await;
    env.send(CLIPS, clips(0..CLIPS_N)).await;

    // Ingestion, both at once.
    let ingest = IngestConfig {
        batch_size: 4,
        receive_wait: Duration::ZERO,
        once: true,
        retry: fast_retry(20),
        wake: None,
    };
    let e = start_episodes(
        CancellationToken::new(),
        env.receiver(EPISODES).await,
        env.store.clone(),
        ingest.clone(),
    );
    let c = start_clips(
        CancellationToken::new(),
        env.receiver(CLIPS).await,
        env.store.clone(),
        ingest,
    );
    let (e, c) = (done(e).await, done(c).await);
    assert!(finished(&e) && finished(&c), "{e:?} {c:?}");
    assert_eq!((e.dead_lettered, c.dead_lettered), (0, 0));
    let status = env.status().await;
    assert_eq!(
        (status.episodes, status.clips),
        (u64::from(EPISODES_N), u64::from(CLIPS_N))
    );

    let researcher_rx = env.receiver(PENDING).await;
    let researcher_tx = env.sender(COMPLETED).await;
    let pairs = u64::from(EPISODES_N * CLIPS_N);
    let mut recorded = 0;
    let mut rounds = 0;
    while env.status().await.researched_pairs < pairs {
        rounds += 1;
        assert!(rounds <= 100, "no progress after {rounds} rounds");
        let report = done(pending_research::start(
            CancellationToken::new(),
            env.sender(PENDING).await,
            env.store.clone(),
            PendingResearchConfig {
                lease_duration: chrono::Duration::hours(1),
                max_clips: 3,
                researchers: Some(3),
                start_jitter: Duration::ZERO,
                retry: fast_retry(20),
                hold_back: None,
                presence_window: datastore::PRESENCE_WINDOW,
            },
        ))
        .await;
        assert!(finished(&report), "{report:?}");

        research(&*researcher_rx, &*researcher_tx).await;

        let report = done(completed_research::start(
            CancellationToken::new(),
            env.receiver(COMPLETED).await,
            env.store.clone(),
            CompletedResearchConfig {
                batch_size: 10,
                receive_wait: Duration::ZERO,
                retry: fast_retry(20),
                announce: None,
                wake: None,
            },
        ))
        .await;
        assert!(finished(&report), "{report:?}");
        assert_eq!(report.dead_lettered, 0);
        recorded += report.stored - report.duplicates;
    }

    // Every pair researched exactly once, whatever the bus did.
    assert_eq!(recorded, pairs);
    let status = env.status().await;
    assert_eq!(status.researched_pairs, pairs);
    assert_eq!(status.active_leases, 0);
    // Clips 0, 3 and 6 are found in every episode.
    assert_eq!(status.matched_pairs, u64::from(EPISODES_N) * 3);
    for q in [EPISODES, CLIPS, PENDING, COMPLETED] {
        assert!(env.dead_letters(q).await.is_empty(), "dead letters on {q}");
    }
}

fn misbehaving() -> MemoryBusConfig {
    MemoryBusConfig {
        misbehave: 0.3,
        ..MemoryBusConfig::default()
    }
}

#[tokio::test]
async fn every_pair_is_researched_exactly_once() {
    round_trip(Backend::Sqlite, MemoryBusConfig::default()).await;
}

#[tokio::test]
async fn every_pair_is_researched_exactly_once_on_a_misbehaving_bus() {
    round_trip(Backend::Sqlite, misbehaving()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pair_is_researched_exactly_once_on_postgres() {
    round_trip(Backend::Postgres, misbehaving()).await;
}
