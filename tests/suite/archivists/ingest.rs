//! The episodes and clips archivists.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use archivist::ingest::{start_clips, start_episodes, IngestConfig};
use archivist::messages::encode;
use archivist::{ArchivistError, Ended, ERROR_CHANNEL_CAPACITY};
use datastore::DataStore;
use tokio_util::sync::CancellationToken;

use super::common::*;

fn once() -> IngestConfig {
    IngestConfig {
        batch_size: 10,
        receive_wait: Duration::ZERO,
        once: true,
        retry: fast_retry(5),
        wake: None,
    }
}

#[tokio::test]
async fn episodes_are_stored_and_acknowledged() {
    let env = Env::new().await;
    env.send(EPISODES, episodes(0..25)).await;
    let handle = start_episodes(
        CancellationToken::new(),
        env.receiver(EPISODES).await,
        env.store.clone(),
        once(),
    );
    let report = done(handle).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.received, report.stored), (25, 25));
    assert_eq!((report.dead_lettered, report.released), (0, 0));
    assert_eq!(env.status().await.episodes, 25);
    let q = env.stats(EPISODES).await;
    assert_eq!((q.waiting, q.in_flight, q.dead_letters), (0, 0, 0));
}

#[tokio::test]
async fn clips_are_stored_and_updated() {
    let env = Env::new().await;
    env.send(CLIPS, clips(0..12)).await;
    // A later message about a known clip updates it rather than adding one.
    let mut again = clip(3);
    again.description = "updated".into();
    again.last_date_curated += chrono::Duration::days(1);
    env.send(CLIPS, vec![encode(&again)]).await;
    let report = done(start_clips(
        CancellationToken::new(),
        env.receiver(CLIPS).await,
        env.store.clone(),
        once(),
    ))
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.received, report.stored), (13, 13));
    assert_eq!(env.status().await.clips, 12);
}

#[tokio::test]
async fn poison_is_dead_lettered_with_its_reason_and_the_rest_stored() {
    let env = Env::new().await;
    env.store.upsert_episode(&episode(100)).await.unwrap();

    let mut missing = serde_json::to_value(episode(1)).unwrap();
    missing.as_object_mut().unwrap().remove("date_aired");
    let mut backwards = episode(2);
    backwards.last_date_curated = backwards.initial_date_curated - chrono::Duration::days(1);
    let mut conflict = episode(3);
    conflict.media_uri = episode(100).media_uri;

    let mut bodies = episodes(10..14);
    bodies.push(b"{not json".to_vec());
    bodies.push(vec![0xff, 0xfe, 0x00]);
    bodies.push(missing.to_string().into_bytes());
    bodies.push(encode(&backwards));
    bodies.push(encode(&conflict));
    bodies.extend(episodes(14..30));
    env.send(EPISODES, bodies).await;

    let report = done(start_episodes(
        CancellationToken::new(),
        env.receiver(EPISODES).await,
        env.store.clone(),
        once(),
    ))
    .await;
    assert!(finished(&report), "poison does not end the run: {report:?}");
    assert_eq!(report.received, 25);
    assert_eq!(report.stored, 20);
    assert_eq!(report.dead_lettered, 5);
    assert_eq!(env.status().await.episodes, 21);

    let mut reasons: Vec<String> = env
        .dead_letters(EPISODES)
        .await
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 5, "{reasons:?}");
    let expect = [
        "body is not a valid EpisodeInfo",
        "body is not valid UTF-8",
        "date_aired",
        "invalid data",
        "conflict",
    ];
    for e in expect {
        assert!(
            reasons.iter().any(|r| r.contains(e)),
            "no reason mentions {e:?}: {reasons:?}"
        );
    }
    let q = env.stats(EPISODES).await;
    assert_eq!((q.waiting, q.in_flight), (0, 0));
}

#[tokio::test]
async fn passing_datastore_failures_are_retried_and_nothing_is_lost() {
    let env = Env::new().await;
    env.send(CLIPS, clips(0..30)).await;
    let store = HookedStore::failing_first(env.store.clone(), 3);
    let mut handle = start_clips(
        CancellationToken::new(),
        env.receiver(CLIPS).await,
        store.clone(),
        once(),
    );
    let report = handle.done.await.unwrap();
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.received, report.stored), (30, 30));
    assert_eq!((report.dead_lettered, report.released), (0, 0));
    assert_eq!(store.failed.load(Ordering::SeqCst), 3);
    assert_eq!(env.status().await.clips, 30);
    let mut transient = 0;
    while let Ok(e) = handle.errors.try_recv() {
        assert!(matches!(e, ArchivistError::Transient(_)), "{e}");
        transient += 1;
    }
    assert_eq!(transient, 3);
}

#[tokio::test]
async fn a_datastore_that_stays_down_ends_the_run_and_releases_the_messages() {
    let env = Env::new().await;
    env.send(EPISODES, episodes(0..15)).await;
    let report = done(start_episodes(
        CancellationToken::new(),
        env.receiver(EPISODES).await,
        HookedStore::down(env.store.clone()),
        once(),
    ))
    .await;
    match &report.ended {
        Ended::Failed(e) => assert!(e.is_retryable(), "{e}"),
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!((report.received, report.stored), (10, 0));
    assert_eq!(report.released, 10);
    let q = env.stats(EPISODES).await;
    assert_eq!((q.waiting, q.in_flight, q.dead_letters), (15, 0, 0));

    // Once the datastore is back, everything goes through.
    let report = done(start_episodes(
        CancellationToken::new(),
        env.receiver(EPISODES).await,
        env.store.clone(),
        once(),
    ))
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.stored, 15);
    assert_eq!(env.status().await.episodes, 15);
}

#[tokio::test]
async fn a_non_retryable_database_error_releases_the_batch() {
    // Neither poison (Invalid/Conflict) nor passing: not the message's fault as far as we
    // know, so it goes back to the queue (whose receive limit sets it aside in the end).
    let env = Env::new().await;
    env.send(EPISODES, episodes(0..3)).await;
    let store = HookedStore::new(
        env.store.clone(),
        Arc::new(|_, _| {
            Some(datastore::DataStoreError::Database(
                sqlx::Error::RowNotFound,
            ))
        }),
    );
    let report = done(start_episodes(
        CancellationToken::new(),
        env.receiver(EPISODES).await,
        store.clone(),
        once(),
    ))
    .await;
    assert!(matches!(report.ended, Ended::Failed(_)), "{report:?}");
    assert_eq!(store.failed.load(Ordering::SeqCst), 1, "not retried");
    assert_eq!((report.released, report.dead_lettered), (3, 0));
    assert_eq!(env.stats(EPISODES).await.waiting, 3);
}

#[tokio::test]
async fn cancelling_while_a_receive_waits_stops_at_once() {
    let env = Env::new().await;
    env.send(EPISODES, episodes(0..5)).await;
    let (receiver, mut entered) = WatchedReceiver::new(env.receiver(EPISODES).await);
    let token = CancellationToken::new();
    let handle = start_episodes(
        token.clone(),
        receiver,
        env.store.clone(),
        IngestConfig {
            receive_wait: Duration::from_secs(3600),
            once: false,
            ..once()
        },
    );
    // The second receive starts once the first batch is stored; it waits an hour.
    assert_eq!(entered.recv().await, Some(1));
    assert_eq!(entered.recv().await, Some(2));
    token.cancel();
    let report = done(handle).await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!((report.received, report.stored), (5, 5));
    assert_eq!(env.status().await.episodes, 5);
    let q = env.stats(EPISODES).await;
    assert_eq!((q.waiting, q.in_flight), (0, 0));
}

#[tokio::test]
async fn cancelling_mid_batch_finishes_the_batch_then_stops() {
    let env = Env::new().await;
    let mut bodies = episodes(0..4);
    bodies.insert(1, b"junk".to_vec());
    bodies.extend(episodes(4..9));
    env.send(EPISODES, bodies).await;
    let token = CancellationToken::new();
    let cancel = token.clone();
    // The token fires while the datastore is storing the second batch.
    let store = HookedStore::new(
        env.store.clone(),
        Arc::new(move |_, call| {
            if call == 2 {
                cancel.cancel();
            }
            None
        }),
    );
    let report = done(start_episodes(
        token,
        env.receiver(EPISODES).await,
        store,
        IngestConfig {
            batch_size: 3,
            once: false,
            ..once()
        },
    ))
    .await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!((report.received, report.stored, report.released), (6, 5, 0));
    assert_eq!(report.dead_lettered, 1);
    let q = env.stats(EPISODES).await;
    assert_eq!((q.waiting, q.in_flight, q.dead_letters), (4, 0, 1));
    // Nothing lost: stored, waiting and dead-lettered make up everything sent.
    assert_eq!(env.status().await.episodes + q.waiting + q.dead_letters, 10);
}

#[tokio::test]
async fn cancelling_while_retrying_releases_the_batch() {
    let env = Env::new().await;
    env.send(CLIPS, clips(0..4)).await;
    let token = CancellationToken::new();
    let cancel = token.clone();
    let store = HookedStore::new(
        env.store.clone(),
        // The token fires during the first attempt; the run must not wait out the backoff.
        Arc::new(move |_, _| {
            cancel.cancel();
            Some(unavailable())
        }),
    );
    let report = done(start_clips(
        token,
        env.receiver(CLIPS).await,
        store,
        IngestConfig {
            retry: archivist::RetryPolicy {
                max_attempts: 100,
                initial_backoff: Duration::from_secs(3600),
                max_backoff: Duration::from_secs(3600),
                budget: None,
            },
            ..once()
        },
    ))
    .await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!((report.stored, report.released), (0, 4));
    let q = env.stats(CLIPS).await;
    assert_eq!((q.waiting, q.in_flight, q.dead_letters), (4, 0, 0));
}

#[tokio::test]
async fn an_unread_errors_channel_never_blocks_the_archivist() {
    let env = Env::new().await;
    let poison = ERROR_CHANNEL_CAPACITY as u64 + 44;
    let mut bodies: Vec<Vec<u8>> = (0..poison)
        .map(|i| format!("junk {i}").into_bytes())
        .collect();
    bodies.extend(clips(0..5));
    env.send(CLIPS, bodies).await;
    // The host holds the errors channel and never reads it.
    let handle = start_clips(
        CancellationToken::new(),
        env.receiver(CLIPS).await,
        env.store.clone(),
        IngestConfig {
            batch_size: 50,
            ..once()
        },
    );
    let report = handle.done.await.unwrap();
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.dead_lettered, poison);
    assert_eq!(report.stored, 5);
    assert_eq!(report.errors_dropped, 44);
    drop(handle.errors);

    // A host that dropped the channel altogether: every error is dropped and counted.
    env.send(CLIPS, vec![b"junk".to_vec(), b"more junk".to_vec()])
        .await;
    let handle = start_clips(
        CancellationToken::new(),
        env.receiver(CLIPS).await,
        env.store.clone(),
        once(),
    );
    drop(handle.errors);
    let report = handle.done.await.unwrap();
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.dead_lettered, report.errors_dropped), (2, 2));
}

#[tokio::test]
async fn a_long_running_archivist_keeps_ingesting_until_cancelled() {
    let env = Env::new().await;
    let (receiver, mut entered) = WatchedReceiver::new(env.receiver(CLIPS).await);
    let token = CancellationToken::new();
    let handle = start_clips(
        token.clone(),
        receiver,
        env.store.clone(),
        IngestConfig {
            receive_wait: Duration::from_secs(3600),
            once: false,
            ..once()
        },
    );
    // Messages sent while it waits are picked up by the waiting receive.
    assert_eq!(entered.recv().await, Some(1));
    env.send(CLIPS, clips(0..3)).await;
    assert_eq!(entered.recv().await, Some(2));
    env.send(CLIPS, vec![b"poison".to_vec()]).await;
    assert_eq!(entered.recv().await, Some(3));
    env.send(CLIPS, clips(3..5)).await;
    assert_eq!(entered.recv().await, Some(4));
    token.cancel();
    let report = done(handle).await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!((report.stored, report.dead_lettered), (5, 1));
    assert_eq!(env.status().await.clips, 5);
}

#[tokio::test(start_paused = true)]
async fn the_default_retry_policy_rides_out_an_outage() {
    // Seven failures in a row: the default policy's eighth attempt gets through. Its backoffs
    // (up to ten seconds each) pass on the paused clock, so this store is not SQLite.
    let bus = messagebus::MemoryBus::default();
    messagebus::Bus::create_queue(&bus, EPISODES).await.unwrap();
    let sender = messagebus::Bus::sender(&bus, EPISODES).await.unwrap();
    sender.send_batch(episodes(0..3)).await.unwrap();
    let inner = Arc::new(CuratedOnlyStore::default());
    let store = HookedStore::failing_first(inner.clone(), 7);
    let report = done(start_episodes(
        CancellationToken::new(),
        messagebus::Bus::receiver(&bus, EPISODES).await.unwrap(),
        store.clone(),
        IngestConfig {
            retry: archivist::RetryPolicy::default(),
            ..once()
        },
    ))
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.stored, report.released), (3, 0));
    assert_eq!(store.failed.load(Ordering::SeqCst), 7);
    assert_eq!(inner.status(chrono::Utc::now()).await.unwrap().episodes, 3);
}

#[tokio::test]
async fn batches_are_topped_up_from_a_bus_that_hands_out_few_messages_per_receive() {
    let env = Env::new().await;
    env.send(EPISODES, episodes(0..25)).await;
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = calls.clone();
    let counting = HookedStore::new(
        env.store.clone(),
        Arc::new(move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            None
        }),
    );
    let report = done(start_episodes(
        CancellationToken::new(),
        Arc::new(CappedReceiver {
            inner: env.receiver(EPISODES).await,
            cap: 3,
        }),
        counting,
        once(),
    ))
    .await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.stored, 25);
    // 10 + 10 + 5: three datastore calls, not nine.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
