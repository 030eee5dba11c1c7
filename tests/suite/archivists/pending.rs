//! The pending-research archivist: the capacity rule, publishing, and leases that could not be
//! published.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use archivist::messages::{decode, PendingResearchItem};
use archivist::pending_research::{start, HoldBack, PendingResearchConfig};
use archivist::{ArchivistError, Ended, Report};
use chrono::Utc;
use datastore::DataStore;
use messagebus::{BusError, Sender};
use tokio_util::sync::CancellationToken;

use super::common::*;

fn config(researchers: Option<u64>) -> PendingResearchConfig {
    PendingResearchConfig {
        lease_duration: chrono::Duration::hours(1),
        max_clips: 3,
        researchers,
        start_jitter: Duration::ZERO,
        retry: fast_retry(5),
        hold_back: None,
        presence_window: datastore::PRESENCE_WINDOW,
    }
}

async fn seed(store: &dyn DataStore, episodes: u32, clips: u32) {
    let es: Vec<_> = (0..episodes).map(episode).collect();
    let cs: Vec<_> = (0..clips).map(clip).collect();
    store.upsert_episodes(&es).await.unwrap();
    store.upsert_clips(&cs).await.unwrap();
}

async fn run(env: &Env, sender: Arc<dyn Sender>, config: PendingResearchConfig) -> Report {
    done(start(
        CancellationToken::new(),
        sender,
        env.store.clone(),
        config,
    ))
    .await
}

async fn published(env: &Env) -> Vec<PendingResearchItem> {
    env.drain(PENDING)
        .await
        .iter()
        .map(|b| decode(b).unwrap())
        .collect()
}

/// While as many results as configured wait to be recorded, a run leases nothing; below
/// that, the capacity rule alone decides.
#[tokio::test]
async fn work_is_held_back_while_results_wait_to_be_recorded() {
    let env = Env::new().await;
    seed(&*env.store, 5, 3).await;
    env.send(COMPLETED, vec![b"a result".to_vec(), b"another".to_vec()])
        .await;
    let held = PendingResearchConfig {
        hold_back: Some(HoldBack {
            results: env.sender(COMPLETED).await,
            max_waiting: 2,
        }),
        ..config(Some(3))
    };
    let report = run(&env, env.sender(PENDING).await, held.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.leases_created, report.published), (0, 0));
    assert_eq!(env.status().await.active_leases, 0);

    // One recorded (taken off the queue): below the limit, work flows again.
    let taken = env
        .receiver(COMPLETED)
        .await
        .receive(1, Duration::from_secs(5))
        .await
        .unwrap();
    for d in taken {
        d.ack().await.unwrap();
    }
    let report = run(&env, env.sender(PENDING).await, held).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.leases_created, report.published), (3, 3));
}

#[tokio::test]
async fn capacity_is_researchers_minus_waiting() {
    let env = Env::new().await;
    seed(&*env.store, 5, 3).await;
    env.send(PENDING, vec![b"an item already waiting".to_vec()])
        .await;
    let report = run(&env, env.sender(PENDING).await, config(Some(3))).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.leases_created, report.published), (2, 2));
    assert_eq!(report.leases_revoked, 0);
    assert_eq!(env.stats(PENDING).await.waiting, 3);

    let items: Vec<_> = env
        .drain(PENDING)
        .await
        .iter()
        .filter_map(|b| decode::<PendingResearchItem>(b).ok())
        .collect();
    assert_eq!(items.len(), 2);
    for item in &items {
        assert_eq!(item.clips.len(), 3, "max_clips is honoured");
        assert!(item.lease_expires_at > Utc::now());
    }
    assert_eq!(env.status().await.active_leases, 2);
}

#[tokio::test]
async fn researchers_are_counted_on_the_bus_unless_configured() {
    let env = Env::new().await;
    seed(&*env.store, 10, 2).await;
    // Two researchers listening.
    let _r1 = env.receiver(PENDING).await;
    let _r2 = env.receiver(PENDING).await;
    let report = run(&env, env.sender(PENDING).await, config(None)).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 2);

    // The configured count overrides the bus's: 5 − 2 waiting.
    let report = run(&env, env.sender(PENDING).await, config(Some(5))).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 3);

    // Full: nothing to do.
    let report = run(&env, env.sender(PENDING).await, config(Some(5))).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.leases_created, report.published), (0, 0));
}

#[tokio::test]
async fn no_researchers_and_nothing_waiting_publishes_one() {
    let env = Env::new().await;
    seed(&*env.store, 3, 3).await;
    let report = run(&env, env.sender(PENDING).await, config(None)).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 1);

    // One waits now: with no researchers there is no capacity.
    let report = run(&env, env.sender(PENDING).await, config(Some(0))).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 0);
    assert_eq!(published(&env).await.len(), 1);
}

#[tokio::test]
async fn a_bus_that_cannot_count_researchers_needs_a_configured_count() {
    let env = Env::new().await;
    seed(&*env.store, 3, 3).await;
    let mut sender = FailingSender::new(env.sender(PENDING).await, None);
    Arc::get_mut(&mut sender).unwrap().hide_consumers = true;
    let report = run(&env, sender.clone(), config(None)).await;
    match &report.ended {
        Ended::Failed(ArchivistError::Config(message)) => {
            assert!(message.contains("ARCHIVIST_RESEARCHERS"), "{message}")
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert_eq!(report.leases_created, 0);

    let report = run(&env, sender, config(Some(2))).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 2);
}

#[tokio::test]
async fn the_run_stops_when_there_is_no_more_work() {
    let env = Env::new().await;
    seed(&*env.store, 2, 4).await;
    let report = run(&env, env.sender(PENDING).await, config(Some(100))).await;
    assert!(finished(&report), "{report:?}");
    // Two episodes × four clips, three clips per item: 3 + 1 per episode.
    assert_eq!((report.leases_created, report.published), (4, 4));
    let pairs: usize = published(&env).await.iter().map(|i| i.clips.len()).sum();
    assert_eq!(pairs, 8);
}

#[tokio::test]
async fn a_lease_that_cannot_be_published_is_cancelled_freeing_its_pairs_at_once() {
    let env = Env::new().await;
    seed(&*env.store, 1, 3).await;
    let rejected: fn() -> BusError = || BusError::Rejected {
        message: "access denied".into(),
        source: None,
    };
    let sender = FailingSender::new(env.sender(PENDING).await, Some(rejected));
    let report = run(&env, sender.clone(), config(Some(4))).await;
    match &report.ended {
        Ended::Failed(ArchivistError::Bus(BusError::Rejected { .. })) => {}
        other => panic!("expected the bus error, got {other:?}"),
    }
    assert_eq!(sender.sends.load(Ordering::SeqCst), 1, "not retried");
    assert_eq!((report.leases_created, report.published), (1, 0));
    // Counted with revoked leases. Cancelled, not revoked: no researcher has the item, so no
    // result is on its way and the pairs are free at once, not when the lease would expire.
    assert_eq!(report.leases_revoked, 1);
    let status = env.status().await;
    assert_eq!((status.active_leases, status.leased_pairs), (0, 0));
    let free = lease(&*env.store, 50, chrono::Duration::hours(1), Utc::now())
        .await
        .unwrap();
    assert_eq!((free.clips.len(), free.reclaimed_pairs), (3, 0));
    assert!(env
        .store
        .update_lease(free.id, datastore::LeaseUpdate::Cancel)
        .await
        .unwrap());

    // A bus that stays unavailable: retried, then the same.
    let unavailable: fn() -> BusError = || BusError::unavailable("connection reset");
    let sender = FailingSender::new(env.sender(PENDING).await, Some(unavailable));
    let report = run(&env, sender.clone(), config(Some(4))).await;
    assert!(matches!(report.ended, Ended::Failed(_)), "{report:?}");
    assert_eq!(sender.sends.load(Ordering::SeqCst), 5);
    assert_eq!(report.leases_revoked, 1);

    // The pairs were not stranded: a working bus gets them all at once.
    let report = run(&env, env.sender(PENDING).await, config(Some(4))).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 1);
    assert_eq!(published(&env).await[0].clips.len(), 3);
}

#[tokio::test]
async fn cancelling_while_publishing_cancels_the_lease() {
    let env = Env::new().await;
    seed(&*env.store, 2, 2).await;
    let token = CancellationToken::new();
    let unavailable: fn() -> BusError = || BusError::unavailable("connection reset");
    let mut sender = FailingSender::new(env.sender(PENDING).await, Some(unavailable));
    Arc::get_mut(&mut sender).unwrap().cancel_on_send = Some(token.clone());
    let report = done(start(
        token,
        sender,
        env.store.clone(),
        PendingResearchConfig {
            retry: archivist::RetryPolicy {
                max_attempts: 100,
                initial_backoff: Duration::from_secs(3600),
                max_backoff: Duration::from_secs(3600),
                budget: None,
            },
            ..config(Some(2))
        },
    ))
    .await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!((report.leases_created, report.published), (1, 0));
    assert_eq!(report.leases_revoked, 1);
    let status = env.status().await;
    assert_eq!((status.active_leases, status.leased_pairs), (0, 0));
}

#[tokio::test]
async fn an_item_too_large_for_the_bus_is_leased_again_with_fewer_clips() {
    let env = Env::new().await;
    let long = "x".repeat(archivist::messages::MAX_DESCRIPTION);
    let cs: Vec<_> = (0..20)
        .map(|i| {
            let mut c = clip(i);
            c.description = long.clone();
            c
        })
        .collect();
    env.store.upsert_episode(&episode(0)).await.unwrap();
    env.store.upsert_clips(&cs).await.unwrap();
    let report = run(
        &env,
        env.sender(PENDING).await,
        PendingResearchConfig {
            max_clips: 20,
            ..config(Some(1))
        },
    )
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.leases_created, report.leases_revoked), (2, 1));
    assert_eq!(report.published, 1);
    let items = published(&env).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].clips.len(), 10);
    assert_eq!(env.status().await.leased_pairs, 10);
}

#[tokio::test]
async fn passing_datastore_failures_are_retried() {
    let env = Env::new().await;
    seed(&*env.store, 3, 2).await;
    let store = HookedStore::failing_first(env.store.clone(), 2);
    let report = done(start(
        CancellationToken::new(),
        env.sender(PENDING).await,
        store,
        config(Some(2)),
    ))
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.published, 2);

    let report = done(start(
        CancellationToken::new(),
        env.sender(PENDING).await,
        HookedStore::down(env.store.clone()),
        config(Some(5)),
    ))
    .await;
    match &report.ended {
        Ended::Failed(e) => assert!(e.is_retryable(), "{e}"),
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(report.leases_created, 0);
}

#[tokio::test]
async fn the_start_jitter_can_be_cancelled() {
    let env = Env::new().await;
    seed(&*env.store, 3, 2).await;
    let token = CancellationToken::new();
    let handle = start(
        token.clone(),
        env.sender(PENDING).await,
        env.store.clone(),
        PendingResearchConfig {
            start_jitter: Duration::from_secs(3600),
            ..config(Some(2))
        },
    );
    token.cancel();
    let report = done(handle).await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!(report.leases_created, 0);
    assert_eq!(env.status().await.active_leases, 0);
}

#[tokio::test(start_paused = true)]
async fn the_run_goes_on_after_its_start_jitter() {
    // An hour of jitter on the paused clock; the store is not SQLite, whose pool timeouts
    // would fire as the clock jumps.
    let bus = messagebus::MemoryBus::default();
    messagebus::Bus::create_queue(&bus, PENDING).await.unwrap();
    let store = Arc::new(CuratedOnlyStore::default());
    let report = done(start(
        CancellationToken::new(),
        messagebus::Bus::sender(&bus, PENDING).await.unwrap(),
        store,
        PendingResearchConfig {
            start_jitter: Duration::from_secs(3600),
            ..config(Some(2))
        },
    ))
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.leases_created, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_never_lease_a_pair_twice() {
    concurrent_runs(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_never_lease_a_pair_twice_on_postgres() {
    concurrent_runs(Backend::Postgres).await;
}

async fn concurrent_runs(backend: Backend) {
    let env = Env::on(backend, messagebus::MemoryBusConfig::default()).await;
    seed(&*env.store, 12, 7).await;
    let sender = env.sender(PENDING).await;
    let handles: Vec<_> = (0..8)
        .map(|_| {
            start(
                CancellationToken::new(),
                sender.clone(),
                env.store.clone(),
                PendingResearchConfig {
                    retry: fast_retry(50),
                    ..config(Some(1000))
                },
            )
        })
        .collect();
    let mut leases = 0;
    for h in handles {
        let report = done(h).await;
        assert!(finished(&report), "{report:?}");
        leases += report.published;
    }
    let items = published(&env).await;
    assert_eq!(items.len() as u64, leases);
    let mut seen = HashSet::new();
    for item in &items {
        for c in &item.clips {
            assert!(
                seen.insert((item.episode.title.clone(), c.title.clone())),
                "pair leased twice: {} × {}",
                item.episode.title,
                c.title
            );
        }
    }
    assert_eq!(seen.len(), 12 * 7, "every pair leased");
}
