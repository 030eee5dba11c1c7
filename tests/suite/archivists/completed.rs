//! The completed-research archivist: recording results, renewing and revoking leases.

use std::sync::Arc;
use std::time::Duration;

use archivist::completed_research::{start, CompletedResearchConfig};
use archivist::messages::{decode, encode, CompletedResearchItem, PendingResearchItem};
use archivist::pending_research::PendingResearchConfig;
use archivist::{Ended, Report};
use chrono::Utc;
use datastore::{DataStore, MatchFilter};
use messagebus::Bus;
use tokio_util::sync::CancellationToken;

use super::common::*;

fn config() -> CompletedResearchConfig {
    CompletedResearchConfig {
        batch_size: 10,
        receive_wait: Duration::ZERO,
        retry: fast_retry(5),
        announce: None,
        wake: None,
    }
}

async fn seed(store: &dyn DataStore, episodes: u32, clips: u32) {
    let es: Vec<_> = (0..episodes).map(episode).collect();
    let cs: Vec<_> = (0..clips).map(clip).collect();
    store.upsert_episodes(&es).await.unwrap();
    store.upsert_clips(&cs).await.unwrap();
}

/// Leases every clip of the most urgent episode for an hour, 50 minutes ago: unrenewed, it
/// is due in 10 minutes; each renewal makes it due an hour after it.
async fn work(env: &Env) -> PendingResearchItem {
    let leased = Utc::now() - chrono::Duration::minutes(50);
    let lease = lease(&*env.store, 50, chrono::Duration::hours(1), leased)
        .await
        .unwrap();
    item_for(&lease)
}

async fn send(env: &Env, items: &[CompletedResearchItem]) {
    env.send(COMPLETED, items.iter().map(encode).collect())
        .await;
}

async fn run(env: &Env, store: Arc<dyn DataStore>) -> Report {
    done(start(
        CancellationToken::new(),
        env.receiver(COMPLETED).await,
        store,
        config(),
    ))
    .await
}

#[tokio::test]
async fn results_are_recorded_and_renew_then_revoke_the_lease() {
    let env = Env::new().await;
    seed(&*env.store, 1, 4).await;
    let item = work(&env).await;
    let all = answers(&item);

    send(&env, &all[..2]).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(
        (report.received, report.stored, report.duplicates),
        (2, 2, 0)
    );
    assert_eq!((report.leases_renewed, report.leases_revoked), (1, 0));
    let status = env.status().await;
    assert_eq!((status.researched_pairs, status.active_leases), (2, 1));

    // Renewed for the lease's hour: the two open pairs are still held past the time the
    // lease was first due.
    let later = Utc::now() + chrono::Duration::minutes(30);
    assert!(lease(&*env.store, 50, chrono::Duration::hours(1), later)
        .await
        .is_none());

    send(&env, &all[2..]).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.stored, 2);
    assert_eq!((report.leases_renewed, report.leases_revoked), (0, 1));
    let status = env.status().await;
    assert_eq!((status.researched_pairs, status.active_leases), (4, 0));
    // Clips 0 and 3 were found.
    let matches = env.store.matches(&MatchFilter::default()).await.unwrap();
    assert_eq!(matches.len(), 2);
    let q = env.stats(COMPLETED).await;
    assert_eq!((q.waiting, q.in_flight, q.dead_letters), (0, 0, 0));
}

/// The bus does not keep order: the researcher's last item (the revoke) can be recorded before
/// its other results. The lease then keeps their pairs, so a work-assignment run in between
/// leases none of them; the late results are recorded and end the lease.
#[tokio::test]
async fn a_revoke_that_arrives_first_keeps_the_other_pairs_held_until_their_results_come() {
    let env = Env::new().await;
    seed(&*env.store, 1, 4).await;
    let item = item_for(
        &lease(&*env.store, 3, chrono::Duration::hours(1), Utc::now())
            .await
            .unwrap(),
    );
    let all = answers(&item);
    assert!(all[2].revoke_lease);

    send(&env, &all[2..]).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.stored, report.leases_revoked), (1, 1));
    let status = env.status().await;
    assert_eq!(
        (
            status.researched_pairs,
            status.awaiting_late_results,
            status.leased_pairs
        ),
        (1, 1, 2)
    );

    // A work-assignment run meanwhile gets only the clip no lease holds.
    let pending = done(archivist::pending_research::start(
        CancellationToken::new(),
        env.sender(PENDING).await,
        env.store.clone(),
        PendingResearchConfig {
            lease_duration: chrono::Duration::hours(1),
            max_clips: 50,
            researchers: Some(5),
            start_jitter: Duration::ZERO,
            retry: fast_retry(5),
            hold_back: None,
            presence_window: datastore::PRESENCE_WINDOW,
        },
    ))
    .await;
    assert!(finished(&pending), "{pending:?}");
    assert_eq!(pending.published, 1);
    let published: Vec<PendingResearchItem> = env
        .drain(PENDING)
        .await
        .iter()
        .map(|b| decode(b).unwrap())
        .collect();
    assert_eq!(published[0].clips, vec![clip(0)]);
    assert!(item.clips.iter().all(|c| *c != clip(0)));

    // The late results: recorded; the revoked lease is not renewed, and ends.
    send(&env, &all[..2]).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.stored, report.duplicates), (2, 0));
    assert_eq!((report.leases_renewed, report.leases_revoked), (0, 0));
    let status = env.status().await;
    assert_eq!(
        (
            status.researched_pairs,
            status.active_leases,
            status.leased_pairs
        ),
        (3, 1, 1)
    );
    // Nothing of the revoked lease is left: after expiry only the other lease's clip is free.
    let later = Utc::now() + chrono::Duration::hours(2);
    let free = lease(&*env.store, 50, chrono::Duration::hours(1), later)
        .await
        .unwrap();
    assert_eq!((free.clips, free.reclaimed_pairs), (vec![clip(0)], 1));
}

#[tokio::test]
async fn renewal_keeps_pairs_held_past_the_original_expiry() {
    let env = Env::new().await;
    seed(&*env.store, 1, 4).await;
    let item = work(&env).await;
    send(&env, &answers(&item)[..1]).await;
    let report = run(&env, env.store.clone()).await;
    assert_eq!(report.leases_renewed, 1);
    // Past the original expiry the pairs are still held; past the renewed one, free.
    let at = |m| Utc::now() + chrono::Duration::minutes(m);
    assert!(lease(&*env.store, 50, chrono::Duration::hours(1), at(30))
        .await
        .is_none());
    let freed = lease(&*env.store, 50, chrono::Duration::hours(1), at(120))
        .await
        .unwrap();
    assert_eq!(freed.clips.len(), 3);
}

#[tokio::test]
async fn duplicates_and_unknown_leases_are_fine() {
    let env = Env::new().await;
    seed(&*env.store, 1, 3).await;
    let item = work(&env).await;
    let all = answers(&item);
    let mut stranger = all[0].clone();
    stranger.lease_id = uuid::Uuid::new_v4();
    stranger.clip = clip(1);
    let batch = vec![
        all[0].clone(),
        all[0].clone(),
        stranger,
        all[2].clone(),
        all[2].clone(),
    ];
    send(&env, &batch).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.received, report.stored), (5, 5));
    assert_eq!(report.duplicates, 2);
    assert_eq!(report.dead_lettered, 0);
    // all[2] is the last: the lease is revoked; the stranger's lease is unknown.
    assert_eq!((report.leases_renewed, report.leases_revoked), (0, 1));
    assert_eq!(env.status().await.researched_pairs, 3);

    // Redelivered later, in another run: still fine.
    send(&env, &all).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.stored, report.duplicates), (3, 3));
    assert_eq!((report.leases_renewed, report.leases_revoked), (0, 0));
    assert_eq!(env.status().await.researched_pairs, 3);
}

#[tokio::test]
async fn a_result_for_an_expired_lease_is_still_recorded() {
    let env = Env::new().await;
    seed(&*env.store, 1, 2).await;
    let past = Utc::now() - chrono::Duration::hours(3);
    let expired = item_for(
        &lease(&*env.store, 50, chrono::Duration::hours(1), past)
            .await
            .unwrap(),
    );
    send(&env, &answers(&expired)[..1]).await;
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.stored, 1);
    assert_eq!((report.leases_renewed, report.leases_revoked), (0, 0));
    let status = env.status().await;
    assert_eq!((status.researched_pairs, status.active_leases), (1, 0));
}

#[tokio::test]
async fn poison_and_unknown_pairs_are_dead_lettered() {
    let env = Env::new().await;
    seed(&*env.store, 1, 2).await;
    let item = work(&env).await;
    let all = answers(&item);
    let mut unknown = all[0].clone();
    unknown.clip = clip(99);
    let mut negative = serde_json::to_value(&all[1]).unwrap();
    negative["clip_offsets_ns"] = serde_json::json!([-5]);
    let mut bodies: Vec<Vec<u8>> = all.iter().map(encode).collect();
    bodies.insert(1, b"[]".to_vec());
    bodies.insert(2, encode(&unknown));
    bodies.insert(3, negative.to_string().into_bytes());
    env.send(COMPLETED, bodies).await;

    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(
        (report.received, report.stored, report.dead_lettered),
        (5, 2, 3)
    );
    let reasons: Vec<_> = env
        .dead_letters(COMPLETED)
        .await
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    assert_eq!(reasons.len(), 3);
    for e in [
        "not a valid CompletedResearchItem",
        "unknown clip: no clip titled \"Clip 99\"",
        "clip_offsets_ns",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(e)),
            "{e:?} in {reasons:?}"
        );
    }
    assert_eq!(env.status().await.researched_pairs, 2);
}

#[tokio::test]
async fn passing_failures_are_retried_and_lasting_ones_release_the_batch() {
    let env = Env::new().await;
    seed(&*env.store, 2, 3).await;
    let first = work(&env).await;
    let second = work(&env).await;
    let mut all = answers(&first);
    all.extend(answers(&second));
    send(&env, &all).await;

    // Down for good: the run fails, nothing is recorded or lost.
    let report = run(&env, HookedStore::down(env.store.clone())).await;
    assert!(matches!(report.ended, Ended::Failed(_)), "{report:?}");
    assert_eq!((report.stored, report.released), (0, 6));
    let q = env.stats(COMPLETED).await;
    assert_eq!((q.waiting, q.in_flight, q.dead_letters), (6, 0, 0));

    // Down for a while (the record call, then a lease update): retried.
    let report = run(&env, HookedStore::failing_first(env.store.clone(), 2)).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(
        (report.stored, report.duplicates, report.released),
        (6, 0, 0)
    );
    assert_eq!(report.leases_revoked, 2);
    let status = env.status().await;
    assert_eq!((status.researched_pairs, status.active_leases), (6, 0));
}

#[tokio::test]
async fn a_failed_lease_update_releases_the_batch_and_the_redelivery_finishes_it() {
    let env = Env::new().await;
    seed(&*env.store, 1, 3).await;
    let item = work(&env).await;
    send(&env, &answers(&item)[..2]).await;
    let store = HookedStore::new(
        env.store.clone(),
        Arc::new(|method, _| (method == "update_lease").then(unavailable)),
    );
    let report = run(&env, store).await;
    // Leases are updated before recording, so nothing was recorded.
    assert!(matches!(report.ended, Ended::Failed(_)), "{report:?}");
    assert_eq!((report.stored, report.released), (0, 2));
    assert_eq!(report.leases_renewed, 0);
    assert_eq!(env.stats(COMPLETED).await.waiting, 2);

    // The redelivery records the results and does the renewal that was missed.
    let report = run(&env, env.store.clone()).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(
        (report.stored, report.duplicates, report.leases_renewed),
        (2, 0, 1)
    );
    // The third pair is still held by the renewed lease.
    let later = Utc::now() + chrono::Duration::minutes(30);
    assert!(lease(&*env.store, 50, chrono::Duration::hours(1), later)
        .await
        .is_none());
}

#[tokio::test]
async fn cancelling_while_a_receive_waits_stops_at_once() {
    let env = Env::new().await;
    let (receiver, mut entered) = WatchedReceiver::new(env.receiver(COMPLETED).await);
    let token = CancellationToken::new();
    let handle = start(
        token.clone(),
        receiver,
        env.store.clone(),
        CompletedResearchConfig {
            receive_wait: Duration::from_secs(3600),
            ..config()
        },
    );
    assert_eq!(entered.recv().await, Some(1));
    token.cancel();
    let report = done(handle).await;
    assert!(cancelled(&report), "{report:?}");
    assert_eq!(report.received, 0);
}

const ANNOUNCE: &str = "researched_episodes";

async fn run_announcing(env: &Env) -> Report {
    let announce = env.sender(ANNOUNCE).await;
    done(start(
        CancellationToken::new(),
        env.receiver(COMPLETED).await,
        env.store.clone(),
        CompletedResearchConfig {
            announce: Some(announce),
            ..config()
        },
    ))
    .await
}

/// Announcing: each episode's completion is published once, when its last pair is recorded,
/// with its counts and matches; results delivered twice and out of order change nothing; a
/// clip curated later reopens the episode and its completion is announced again.
#[tokio::test]
async fn each_completed_episode_is_announced_once_and_again_when_a_clip_reopens_it() {
    use archivist::messages::EpisodeResearched;
    let env = Env::new().await;
    env.bus.create_queue(ANNOUNCE).await.unwrap();
    seed(&*env.store, 2, 3).await;
    let first = work(&env).await;
    let second = work(&env).await;
    let mut a = answers(&first);
    let b = answers(&second);
    // Out of order, and the first episode's results twice.
    a.reverse();
    send(&env, &a[..2]).await;
    send(&env, &b).await;
    let report = run_announcing(&env).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.announced, 1, "only the second episode is complete");
    send(&env, &a).await;
    send(&env, &a).await;
    let report = run_announcing(&env).await;
    assert_eq!(report.announced, 1);
    assert_eq!(report.duplicates, 5);

    let announced: Vec<EpisodeResearched> = env
        .drain(ANNOUNCE)
        .await
        .iter()
        .map(|body| decode(body).unwrap())
        .collect();
    assert_eq!(announced.len(), 2);
    assert_eq!(announced[0].episode, second.episode);
    assert_eq!(announced[1].episode, first.episode);
    for (message, item) in announced.iter().zip([&second, &first]) {
        assert_eq!(message.clips_researched, 3);
        assert_eq!(message.clips_failed, 0);
        let expected: Vec<_> = answers(item)
            .into_iter()
            .filter(|r| !r.clip_offsets_ns.is_empty())
            .collect();
        assert_eq!(message.clips_matched, expected.len() as u64);
        let mut titles: Vec<_> = message.matches.iter().map(|m| &m.clip.title).collect();
        titles.sort();
        let mut want: Vec<_> = expected.iter().map(|r| &r.clip.title).collect();
        want.sort();
        assert_eq!(titles, want);
    }

    // A clip curated later reopens both; the first one researched is announced again.
    env.store.upsert_clip(&clip(9)).await.unwrap();
    let again = work(&env).await;
    assert_eq!(again.clips.len(), 1);
    send(&env, &answers(&again)).await;
    let report = run_announcing(&env).await;
    assert_eq!(report.announced, 1);
    let announced: Vec<EpisodeResearched> = env
        .drain(ANNOUNCE)
        .await
        .iter()
        .map(|body| decode(body).unwrap())
        .collect();
    assert_eq!(announced.len(), 1);
    assert_eq!(announced[0].episode, again.episode);
    assert_eq!(announced[0].clips_researched, 4);
}

/// A completion recorded by a run that failed to announce it (the datastore went away after
/// recording) is announced by the next run, which has nothing else to do.
#[tokio::test]
async fn a_completion_left_unannounced_is_announced_by_the_next_run() {
    let env = Env::new().await;
    env.bus.create_queue(ANNOUNCE).await.unwrap();
    seed(&*env.store, 1, 2).await;
    let item = work(&env).await;
    send(&env, &answers(&item)).await;
    // Recording works; reading completions works at the start of the run (nothing yet), and
    // fails after the batch for longer than the retries.
    let reads = std::sync::atomic::AtomicU64::new(0);
    let failing = HookedStore::new(
        env.store.clone(),
        Arc::new(move |method, _| {
            let nth = if method == "claim_completions" {
                reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
            } else {
                0
            };
            (nth > 1).then(unavailable)
        }),
    );
    let report = done(start(
        CancellationToken::new(),
        env.receiver(COMPLETED).await,
        failing,
        CompletedResearchConfig {
            announce: Some(env.sender(ANNOUNCE).await),
            ..config()
        },
    ))
    .await;
    assert!(matches!(report.ended, Ended::Failed(_)), "{report:?}");
    assert_eq!(env.status().await.researched_pairs, 2);
    assert_eq!(env.stats(ANNOUNCE).await.waiting, 0);

    let report = run_announcing(&env).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!((report.received, report.announced), (0, 1));
    assert_eq!(env.drain(ANNOUNCE).await.len(), 1);
}

/// An announcement whose send fails gives back the completions the run claimed: the next run
/// announces them at once (not once the claim runs out), each once.
#[tokio::test]
async fn a_failed_announcement_gives_its_claims_back() {
    let env = Env::new().await;
    env.bus.create_queue(ANNOUNCE).await.unwrap();
    seed(&*env.store, 2, 2).await;
    for _ in 0..2 {
        let item = work(&env).await;
        send(&env, &answers(&item)).await;
    }
    let failing = FailingSender::new(
        env.sender(ANNOUNCE).await,
        Some(|| messagebus::BusError::unavailable("the announcement queue is down")),
    );
    let report = done(start(
        CancellationToken::new(),
        env.receiver(COMPLETED).await,
        env.store.clone(),
        CompletedResearchConfig {
            announce: Some(failing.clone()),
            ..config()
        },
    ))
    .await;
    assert!(matches!(report.ended, Ended::Failed(_)), "{report:?}");
    assert_eq!(report.announced, 0);
    assert_eq!(env.store.completions(10).await.unwrap().len(), 2);

    let report = run_announcing(&env).await;
    assert!(finished(&report), "{report:?}");
    assert_eq!(report.announced, 2);
    assert_eq!(env.drain(ANNOUNCE).await.len(), 2);
    assert!(env.store.completions(10).await.unwrap().is_empty());
}
