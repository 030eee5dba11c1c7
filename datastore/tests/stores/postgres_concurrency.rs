//! The Postgres adapter under concurrency: many tasks on one pool and many separate
//! `PgDataStore`s (pools) leasing, recording, renewing and revoking at once. Every test ends
//! with assertions on the final state (never on timing), checked both through the trait and
//! directly in the tables:
//! - no pair is ever leased twice while unexpired, and no free pair is skipped;
//! - a pair recorded many times at once is recorded exactly once, counters exact;
//! - expired leases are taken over; renewals, revocations and cancellations racing with
//!   takeover keep the schema's invariant (a researched pair is never leased, `held_pairs` is
//!   exact);
//! - a revoked lease keeps the pairs whose results are still on their way, and goes away
//!   exactly when its last held pair is recorded, however revoking and recording interleave.
//!
//! Time is passed in (`now`), so expiry is decided by the test, not by a clock.
#![cfg(all(feature = "postgres", feature = "test-utils"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use datastore::testing::{clip, episode, result, t0};
use datastore::testing_pg::PgTestDb;
use datastore::{
    ClipInfo, DataStore, EpisodeInfo, Lease, LeaseRequest, LeaseUpdate, PgDataStore, RecordOutcome,
};
use uuid::Uuid;

type Pair = (String, String);
/// When a lease was taken and when it expires.
type Span = (DateTime<Utc>, DateTime<Utc>);

fn request(max_clips: u32, now: DateTime<Utc>, minutes: i64) -> LeaseRequest {
    LeaseRequest {
        max_clips,
        duration: Duration::minutes(minutes),
        now,
        lease_id: uuid::Uuid::new_v4(),
    }
}

fn pairs(lease: &Lease) -> Vec<Pair> {
    lease
        .clips
        .iter()
        .map(|c| (lease.episode.title.clone(), c.title.clone()))
        .collect()
}

async fn seed(
    store: &dyn DataStore,
    episodes: u32,
    clips: u32,
) -> (Vec<EpisodeInfo>, Vec<ClipInfo>) {
    let es: Vec<_> = (0..episodes)
        .map(|i| EpisodeInfo {
            // Mixed priorities, so selection order is not just insertion order.
            priority: (i % 3) as i32,
            ..episode(i)
        })
        .collect();
    let cs: Vec<_> = (0..clips)
        .map(|i| ClipInfo {
            priority: (i % 2) as i32,
            ..clip(i)
        })
        .collect();
    store.upsert_episodes(&es).await.unwrap();
    store.upsert_clips(&cs).await.unwrap();
    (es, cs)
}

fn all_pairs(es: &[EpisodeInfo], cs: &[ClipInfo]) -> HashSet<Pair> {
    es.iter()
        .flat_map(|e| cs.iter().map(move |c| (e.title.clone(), c.title.clone())))
        .collect()
}

/// Each task leases until there is nothing left, returning what it got.
fn spawn_leasers(
    stores: &[Arc<PgDataStore>],
    tasks_per_store: usize,
    max_clips: u32,
    now: DateTime<Utc>,
) -> Vec<tokio::task::JoinHandle<Vec<Lease>>> {
    stores
        .iter()
        .flat_map(|s| (0..tasks_per_store).map(move |_| s.clone()))
        .map(|store| {
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(l) = store.lease_next(request(max_clips, now, 60)).await.unwrap() {
                    assert!(!l.clips.is_empty() && l.clips.len() <= max_clips as usize);
                    got.push(l);
                    // A broken selection could lease forever: fail instead of hanging.
                    assert!(got.len() < 5_000, "lease_next never ran out of work");
                }
                got
            })
        })
        .collect()
}

/// The schema's invariants, read straight from the tables.
async fn assert_invariants(store: &PgDataStore) {
    let pool = store.pool();
    let researched_and_leased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leased_pairs lp JOIN research_results r USING (episode_id, clip_id)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        researched_and_leased, 0,
        "a researched pair is still leased"
    );
    let wrong_held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leases l
         WHERE held_pairs <> (SELECT count(*) FROM leased_pairs p WHERE p.lease_id = l.id)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(wrong_held, 0, "held_pairs disagrees with leased_pairs");
    // No foreign key says so since migration 0004: the code keeps it.
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leased_pairs p
         WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = p.lease_id)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(orphans, 0, "a leased pair outlived its lease");
    let wrong_counts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM episodes e
         WHERE researched_count <> (SELECT count(*) FROM research_results r
                                    WHERE r.episode_id = e.id)
            OR matched_count <> (SELECT count(*) FROM research_results r
                                 WHERE r.episode_id = e.id AND r.matched)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        wrong_counts, 0,
        "episode counters disagree with research_results"
    );
    let ended_but_kept: i64 =
        sqlx::query_scalar("SELECT count(*) FROM leases WHERE revoked AND held_pairs = 0")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(
        ended_but_kept, 0,
        "a revoked lease with every result in was kept"
    );
}

/// Pairs in leased_pairs whose lease is unexpired at `now`, by (episode, clip) title.
async fn held_at(store: &PgDataStore, now: DateTime<Utc>) -> Vec<Pair> {
    sqlx::query_as(
        "SELECT e.title, c.title FROM leased_pairs lp
         JOIN leases l ON l.id = lp.lease_id
         JOIN episodes e ON e.id = lp.episode_id
         JOIN clips c ON c.id = lp.clip_id
         WHERE l.expires_at > $1",
    )
    .bind(now)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

async fn researched(store: &PgDataStore) -> HashSet<Pair> {
    let rows: Vec<Pair> = sqlx::query_as(
        "SELECT e.title, c.title FROM research_results r
         JOIN episodes e ON e.id = r.episode_id JOIN clips c ON c.id = r.clip_id",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    rows.into_iter().collect()
}

async fn stores(db: &PgTestDb, n: usize, pool_size: u32) -> Vec<Arc<PgDataStore>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(Arc::new(db.store(pool_size).await));
    }
    out
}

/// Collects the leases of all tasks, asserting that no pair was leased twice.
async fn collect_disjoint(
    tasks: Vec<tokio::task::JoinHandle<Vec<Lease>>>,
) -> (Vec<Lease>, HashSet<Pair>) {
    let mut leases = Vec::new();
    let mut leased = HashSet::new();
    for t in tasks {
        for l in t.await.unwrap() {
            for p in pairs(&l) {
                assert!(leased.insert(p.clone()), "pair {p:?} leased twice");
            }
            leases.push(l);
        }
    }
    (leases, leased)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_on_one_pool_lease_every_free_pair_exactly_once() {
    let db = PgTestDb::create().await;
    let store = Arc::new(db.store(8).await);
    store.migrate().await.unwrap();
    let (es, cs) = seed(&*store, 24, 30).await;

    let tasks = spawn_leasers(std::slice::from_ref(&store), 24, 7, t0());
    let (leases, leased) = collect_disjoint(tasks).await;

    assert_eq!(leased, all_pairs(&es, &cs), "free pairs were skipped");
    assert!(store
        .lease_next(request(7, t0(), 60))
        .await
        .unwrap()
        .is_none());
    let status = store.status(t0()).await.unwrap();
    assert_eq!(status.leased_pairs, leased.len() as u64);
    assert_eq!(status.active_leases, leases.len() as u64);
    assert_eq!(held_at(&store, t0()).await.len(), leased.len());
    assert_invariants(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_stores_with_their_own_pools_lease_every_free_pair_exactly_once() {
    let db = PgTestDb::create().await;
    let stores = stores(&db, 4, 3).await;
    // All four migrate at once, too.
    let migrations: Vec<_> = stores
        .iter()
        .map(|s| {
            let s = s.clone();
            tokio::spawn(async move { s.migrate().await })
        })
        .collect();
    for m in migrations {
        m.await.unwrap().unwrap();
    }
    let (es, cs) = seed(&*stores[0], 20, 25).await;
    // Some pairs researched before the race: they must not be leased.
    let done: Vec<_> = es
        .iter()
        .step_by(4)
        .flat_map(|e| {
            cs.iter()
                .step_by(3)
                .map(move |c| result(Uuid::new_v4(), e, c, &[]))
        })
        .collect();
    stores[1].record_results(&done).await.unwrap();

    let tasks = spawn_leasers(&stores, 4, 5, t0());
    let (_, leased) = collect_disjoint(tasks).await;

    let mut expected = all_pairs(&es, &cs);
    for r in &done {
        expected.remove(&(r.episode.title.clone(), r.clip_title.clone()));
    }
    assert_eq!(leased, expected);
    for s in &stores {
        assert!(s.lease_next(request(5, t0(), 60)).await.unwrap().is_none());
    }
    assert_invariants(&stores[2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicates_recorded_concurrently_are_recorded_exactly_once() {
    let db = PgTestDb::create().await;
    let stores = stores(&db, 3, 3).await;
    stores[0].migrate().await.unwrap();
    let (es, cs) = seed(&*stores[0], 8, 12).await;
    // Half the pairs under leases, so recording also frees leased pairs concurrently.
    let mut leases = Vec::new();
    for _ in 0..10 {
        if let Some(l) = stores[0].lease_next(request(5, t0(), 60)).await.unwrap() {
            leases.push(l);
        }
    }
    let lease_of: HashMap<Pair, Uuid> = leases
        .iter()
        .flat_map(|l| pairs(l).into_iter().map(move |p| (p, l.id)))
        .collect();
    let mut results = Vec::new();
    for (ei, e) in es.iter().enumerate() {
        for (ci, c) in cs.iter().enumerate() {
            let lease = lease_of
                .get(&(e.title.clone(), c.title.clone()))
                .copied()
                .unwrap_or_else(Uuid::new_v4);
            let offsets: Vec<i64> = if (ei + ci) % 3 == 0 {
                vec![1_000, 2_000 + ci as i64]
            } else {
                vec![]
            };
            results.push(result(lease, e, c, &offsets));
        }
    }
    let matched = results
        .iter()
        .filter(|r| !r.clip_offsets_ns.is_empty())
        .count();

    // 12 tasks; each records every result once, in its own batch sizes and order, some batches
    // also repeating a result inside the batch.
    let tasks: Vec<_> = (0..12usize)
        .map(|t| {
            let store = stores[t % stores.len()].clone();
            let mut mine = results.clone();
            mine.rotate_left((t * 7) % results.len());
            if t % 2 == 1 {
                mine.reverse();
            }
            tokio::spawn(async move {
                let batch = 3 + t * 5;
                let mut recorded = Vec::new();
                for chunk in mine.chunks(batch) {
                    let mut chunk = chunk.to_vec();
                    if t % 3 == 0 {
                        chunk.push(chunk[0].clone());
                    }
                    let outcomes = store.record_results(&chunk).await.unwrap();
                    assert_eq!(outcomes.len(), chunk.len());
                    if t % 3 == 0 {
                        assert_eq!(*outcomes.last().unwrap(), RecordOutcome::Duplicate);
                    }
                    for (r, o) in chunk.iter().zip(outcomes) {
                        assert!(!o.is_unknown(), "{o:?}");
                        if o == RecordOutcome::Recorded {
                            recorded.push((r.episode.title.clone(), r.clip_title.clone()));
                        }
                    }
                }
                recorded
            })
        })
        .collect();
    let mut recorded = HashSet::new();
    for t in tasks {
        for p in t.await.unwrap() {
            assert!(recorded.insert(p.clone()), "pair {p:?} recorded twice");
        }
    }
    assert_eq!(recorded, all_pairs(&es, &cs));
    let status = stores[0].status(t0()).await.unwrap();
    assert_eq!(status.researched_pairs, results.len() as u64);
    assert_eq!(status.matched_pairs, matched as u64);
    assert_eq!(status.leased_pairs, 0);
    assert_eq!(status.active_leases, 0);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM research_results")
        .fetch_one(stores[0].pool())
        .await
        .unwrap();
    assert_eq!(stored, results.len() as i64);
    assert_invariants(&stores[0]).await;
}

/// Phase 1 leases everything at t0 for 10 minutes. Phase 2 runs at once: leasers at t0+11m
/// (every phase-1 lease has expired for them, so they take pairs over), recorders finishing
/// some phase-1 pairs, renewers extending some phase-1 leases with an earlier `now` (t0+5m,
/// when those leases were still active: they then last until t0+15m), and revokers and
/// cancellers ending others. Whatever order these land in, the final state must be: every pair
/// either researched or held by exactly one lease unexpired at t0+11m, nothing held twice,
/// counters exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn takeover_of_expired_leases_races_with_renew_revoke_and_recording() {
    let db = PgTestDb::create().await;
    let stores = stores(&db, 3, 4).await;
    stores[0].migrate().await.unwrap();
    let (es, cs) = seed(&*stores[0], 10, 20).await;
    let (phase1, leased) = collect_disjoint(spawn_leasers(&stores, 2, 6, t0())).await;
    // (spawn_leasers leases for 60 minutes; shorten them to 10 so phase 2 sees them expired.)
    sqlx::query("UPDATE leases SET expires_at = $1")
        .bind(t0() + Duration::minutes(10))
        .execute(stores[0].pool())
        .await
        .unwrap();
    assert_eq!(leased, all_pairs(&es, &cs));

    let later = t0() + Duration::minutes(11);
    let mut handles: Vec<tokio::task::JoinHandle<Vec<Lease>>> = Vec::new();
    // Leasers at t0+11m.
    handles.extend(spawn_leasers(&stores, 2, 6, later));
    // Recorders: every third phase-1 lease's pairs.
    for (i, l) in phase1.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        let store = stores[i % stores.len()].clone();
        let results: Vec<_> = l
            .clips
            .iter()
            .map(|c| result(l.id, &l.episode, c, &[7]))
            .collect();
        handles.push(tokio::spawn(async move {
            for r in results {
                store.record_result(&r).await.unwrap();
            }
            Vec::new()
        }));
    }
    // Renewers (with the earlier now), revokers and cancellers.
    for (i, l) in phase1.iter().enumerate().filter(|(i, _)| i % 3 != 0) {
        let store = stores[(i + 1) % stores.len()].clone();
        let id = l.id;
        let update = match i % 6 {
            1 | 4 => LeaseUpdate::Renew {
                now: t0() + Duration::minutes(5),
            },
            2 => LeaseUpdate::Revoke,
            _ => LeaseUpdate::Cancel,
        };
        handles.push(tokio::spawn(async move {
            store.update_lease(id, update).await.unwrap();
            Vec::new()
        }));
    }
    let (_, _) = collect_disjoint(handles).await;
    // Leasers may have finished before some cancellations freed pairs: finish the run.
    let (_, _) = collect_disjoint(spawn_leasers(&stores, 1, 6, later)).await;

    assert_invariants(&stores[0]).await;
    let done = researched(&stores[0]).await;
    let held: Vec<Pair> = held_at(&stores[0], later).await;
    let held_set: HashSet<Pair> = held.iter().cloned().collect();
    assert_eq!(held.len(), held_set.len(), "a pair is held twice");
    assert!(done.is_disjoint(&held_set));
    let mut covered = done.clone();
    covered.extend(held_set);
    assert_eq!(
        covered,
        all_pairs(&es, &cs),
        "free pairs were left unleased"
    );
    // Nothing at all is held by a lease expired at t0+11m: everything was taken over.
    let stale: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leased_pairs lp JOIN leases l ON l.id = lp.lease_id
         WHERE l.expires_at <= $1",
    )
    .bind(later)
    .fetch_one(stores[0].pool())
    .await
    .unwrap();
    assert_eq!(stale, 0);
    let status = stores[0].status(later).await.unwrap();
    assert_eq!(status.researched_pairs, done.len() as u64);
    assert_eq!(status.leased_pairs, held.len() as u64);
}

/// Renewals and revocations of the same leases from many tasks at once: each revoke answers
/// true exactly once per lease; a renewal after a revocation answers false. Revoked leases
/// whose results never come keep their pairs until they expire. Then cancellations racing
/// with revocations: each cancel answers true exactly once, and every pair is free at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renew_revoke_and_cancel_races_answer_consistently() {
    let db = PgTestDb::create().await;
    let stores = stores(&db, 2, 4).await;
    stores[0].migrate().await.unwrap();
    seed(&*stores[0], 4, 10).await;
    let (leases, _) = collect_disjoint(spawn_leasers(&stores, 1, 5, t0())).await;
    let ids: Vec<Uuid> = leases.iter().map(|l| l.id).collect();

    // Each task goes through every lease; even tasks revoke, odd ones renew, and `ending`
    // picks what an ending task does. Returns the leases it ended (answered true for).
    let race = |ending: fn(usize) -> LeaseUpdate| {
        (0..8usize)
            .map(|t| {
                let store = stores[t % 2].clone();
                let ids = ids.clone();
                tokio::spawn(async move {
                    let mut ended = Vec::new();
                    for id in ids {
                        let update = if t % 2 == 0 {
                            ending(t)
                        } else {
                            LeaseUpdate::Renew {
                                now: t0() + Duration::minutes(1),
                            }
                        };
                        let answered = store.update_lease(id, update).await.unwrap();
                        if answered && t % 2 == 0 {
                            ended.push((id, update));
                        }
                    }
                    ended
                })
            })
            .collect::<Vec<_>>()
    };

    let mut revoked = HashSet::new();
    for t in race(|_| LeaseUpdate::Revoke) {
        for (id, _) in t.await.unwrap() {
            assert!(revoked.insert(id), "lease {id} revoked twice");
        }
    }
    assert_eq!(revoked.len(), ids.len());
    for id in &ids {
        let renewed = stores[0]
            .update_lease(*id, LeaseUpdate::Renew { now: t0() })
            .await
            .unwrap();
        assert!(!renewed, "a revoked lease was renewed");
    }
    // No result came: the revoked leases still hold every pair, awaiting late results.
    let status = stores[1].status(t0()).await.unwrap();
    assert_eq!(
        (
            status.active_leases,
            status.awaiting_late_results,
            status.leased_pairs
        ),
        (0, ids.len() as u64, 40)
    );
    assert!(stores[0]
        .lease_next(request(5, t0(), 60))
        .await
        .unwrap()
        .is_none());
    assert_invariants(&stores[0]).await;

    // Cancellers (tasks 0 and 4) race with revokers (tasks 2 and 6) and renewers.
    let mut cancelled = HashSet::new();
    let ending = |t: usize| {
        if t.is_multiple_of(4) {
            LeaseUpdate::Cancel
        } else {
            LeaseUpdate::Revoke
        }
    };
    for t in race(ending) {
        for (id, update) in t.await.unwrap() {
            assert_eq!(update, LeaseUpdate::Cancel, "lease {id} revoked twice");
            assert!(cancelled.insert(id), "lease {id} cancelled twice");
        }
    }
    assert_eq!(cancelled.len(), ids.len());
    let status = stores[1].status(t0()).await.unwrap();
    assert_eq!((status.active_leases, status.leased_pairs), (0, 0));
    assert_invariants(&stores[0]).await;
    // Every pair is free again, exactly once.
    let (_, again) = collect_disjoint(spawn_leasers(&stores, 2, 5, t0())).await;
    assert_eq!(again.len(), 40);
}

/// A researcher's results arrive out of order across many recorders, its revoke among them.
/// Per lease (by index mod 4): 0, 1: the revoke and each result race in tasks of their own,
/// on several pools (1: the researcher skipped the last clip); 2: the revoke comes after every
/// result; 3: before them. Leases whose every result came are gone at the end, however
/// revoking and recording interleaved; leases with a skipped result keep exactly that pair
/// (not leased again until they expire, then free). Nothing is recorded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revoke_racing_with_late_results_ends_each_lease_with_its_last_pair() {
    enum Job {
        Record(Box<datastore::ResearchResult>),
        Revoke(Uuid),
    }
    let db = PgTestDb::create().await;
    let stores = stores(&db, 3, 4).await;
    stores[0].migrate().await.unwrap();
    let (es, cs) = seed(&*stores[0], 8, 10).await;
    let (leases, leased) = collect_disjoint(spawn_leasers(&stores, 1, 5, t0())).await;
    assert_eq!(leased, all_pairs(&es, &cs));

    let mut skipped = HashSet::new();
    let mut complete = Vec::new();
    // Each task runs its jobs in order and returns the pairs it recorded.
    let mut tasks: Vec<Vec<Job>> = Vec::new();
    for (i, l) in leases.iter().enumerate() {
        let mut keep = l.clips.len();
        if i % 4 == 1 {
            keep -= 1;
            skipped.insert((l.episode.title.clone(), l.clips[keep].title.clone()));
        } else {
            complete.push(l.id);
        }
        let records = l.clips[..keep]
            .iter()
            .map(|c| Job::Record(Box::new(result(l.id, &l.episode, c, &[]))));
        match i % 4 {
            0 | 1 => {
                tasks.extend(records.map(|j| vec![j]));
                // Spawned among the results.
                let at = tasks.len() - i % (keep + 1);
                tasks.insert(at, vec![Job::Revoke(l.id)]);
            }
            2 => tasks.push(records.chain([Job::Revoke(l.id)]).collect()),
            _ => tasks.push([Job::Revoke(l.id)].into_iter().chain(records).collect()),
        }
    }
    let handles: Vec<_> = tasks
        .into_iter()
        .enumerate()
        .map(|(k, jobs)| {
            let store = stores[k % stores.len()].clone();
            tokio::spawn(async move {
                let mut recorded = Vec::new();
                for job in jobs {
                    match job {
                        Job::Revoke(id) => assert!(
                            store.update_lease(id, LeaseUpdate::Revoke).await.unwrap(),
                            "lease {id} was gone before its revoke"
                        ),
                        Job::Record(r) => {
                            let outcome = store.record_result(&r).await.unwrap();
                            assert_eq!(outcome, RecordOutcome::Recorded);
                            recorded.push((r.episode.title.clone(), r.clip_title.clone()));
                        }
                    }
                }
                recorded
            })
        })
        .collect();
    let mut recorded = HashSet::new();
    for h in handles {
        for p in h.await.unwrap() {
            assert!(recorded.insert(p.clone()), "pair {p:?} recorded twice");
        }
    }
    assert_invariants(&stores[0]).await;

    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM leases WHERE id = ANY($1)")
        .bind(&complete)
        .fetch_one(stores[0].pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "a lease with every result in was kept");
    let held: HashSet<Pair> = held_at(&stores[0], t0()).await.into_iter().collect();
    assert_eq!(held, skipped);
    let revoked_holding: i64 =
        sqlx::query_scalar("SELECT count(*) FROM leases WHERE revoked AND held_pairs = 1")
            .fetch_one(stores[0].pool())
            .await
            .unwrap();
    assert_eq!(revoked_holding as usize, skipped.len());

    // The skipped pairs are not handed out while their leases last...
    for s in &stores {
        assert!(s.lease_next(request(5, t0(), 60)).await.unwrap().is_none());
    }
    // ...and are once they expired: exactly those, each once.
    let later = t0() + Duration::hours(2);
    let (_, again) = collect_disjoint(spawn_leasers(&stores, 2, 5, later)).await;
    assert_eq!(again, skipped);
    assert!(recorded.is_disjoint(&again));
    assert_invariants(&stores[1]).await;
}

/// Leases expire while the run goes on: each task leases with its own advancing `now` and
/// three-minute leases, so pairs keep expiring and being taken over, while some results are
/// recorded. Whatever the interleaving, two leases that held the same pair never overlap in
/// time, a researched pair is not leased again, and at the end every free pair can be leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_expiring_mid_run_are_taken_over_without_overlap() {
    let db = PgTestDb::create().await;
    let stores = stores(&db, 2, 4).await;
    stores[0].migrate().await.unwrap();
    let (es, cs) = seed(&*stores[0], 6, 20).await;

    let tasks: Vec<_> = (0..8usize)
        .map(|t| {
            let store = stores[t % 2].clone();
            tokio::spawn(async move {
                let mut got: Vec<(DateTime<Utc>, Lease)> = Vec::new();
                let mut recorded = Vec::new();
                for k in 0..30i64 {
                    let now = t0() + Duration::minutes(k) + Duration::seconds(t as i64);
                    let Some(l) = store.lease_next(request(5, now, 3)).await.unwrap() else {
                        continue;
                    };
                    if k % 3 == 0 {
                        let c = &l.clips[0];
                        let r = result(l.id, &l.episode, c, &[]);
                        if store.record_result(&r).await.unwrap() == RecordOutcome::Recorded {
                            recorded.push((l.episode.title.clone(), c.title.clone()));
                        }
                    }
                    got.push((now, l));
                }
                (got, recorded)
            })
        })
        .collect();
    let mut holders: HashMap<Pair, Vec<Span>> = HashMap::new();
    let mut recorded = HashSet::new();
    let mut reclaimed = 0;
    for t in tasks {
        let (got, rec) = t.await.unwrap();
        for (now, l) in got {
            reclaimed += l.reclaimed_pairs;
            for p in pairs(&l) {
                holders.entry(p).or_default().push((now, l.expires_at));
            }
        }
        for p in rec {
            assert!(recorded.insert(p.clone()), "pair {p:?} recorded twice");
        }
    }
    assert!(
        reclaimed > 0,
        "no lease was taken over: the test did not exercise expiry"
    );
    for (pair, mut spans) in holders {
        spans.sort();
        for w in spans.windows(2) {
            assert!(
                w[1].0 >= w[0].1,
                "pair {pair:?} held by two leases at once: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }
    assert_invariants(&stores[0]).await;

    // Long after: every lease has expired; exactly the unresearched pairs are free.
    let end = t0() + Duration::hours(2);
    let (_, leased) = collect_disjoint(spawn_leasers(&stores, 2, 5, end)).await;
    let done = researched(&stores[0]).await;
    assert!(recorded.is_subset(&done));
    let mut expected = all_pairs(&es, &cs);
    expected.retain(|p| !done.contains(p));
    assert_eq!(leased, expected);
    assert_invariants(&stores[1]).await;
}

/// Research moves the lease frontier forward while curators add episodes ahead of it, behind
/// it and among the researched ones, and raise others' priority, all at once, from several
/// pools. However these interleave, no episode is skipped: when the curators are done and
/// leasing finds nothing, every pair is researched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn episodes_curated_while_research_moves_the_frontier_are_never_skipped() {
    let db = PgTestDb::create().await;
    let pools = stores(&db, 3, 4).await;
    pools[0].migrate().await.unwrap();
    let (seeded, _) = seed(&*pools[0], 40, 3).await;
    let curating = Arc::new(std::sync::atomic::AtomicBool::new(true));

    let researchers: Vec<_> = pools
        .iter()
        .flat_map(|s| [s.clone(), s.clone()])
        .map(|store| {
            let curating = curating.clone();
            tokio::spawn(async move {
                let mut leases = 0;
                loop {
                    let still_curating = curating.load(std::sync::atomic::Ordering::SeqCst);
                    match store.lease_next(request(3, t0(), 60)).await.unwrap() {
                        Some(l) => {
                            let results: Vec<_> = l
                                .clips
                                .iter()
                                .map(|c| result(l.id, &l.episode, c, &[]))
                                .collect();
                            store.record_results(&results).await.unwrap();
                            leases += 1;
                            assert!(leases < 5_000, "lease_next never ran out of work");
                        }
                        // Nothing now; the curators may still add some.
                        None if still_curating => tokio::task::yield_now().await,
                        None => return leases,
                    }
                }
            })
        })
        .collect();

    let curators: Vec<_> = (0..3_u32)
        .map(|k| {
            let store = pools[k as usize].clone();
            let seeded = seeded.clone();
            tokio::spawn(async move {
                for n in 0..30_u32 {
                    // New episodes aired among, before and after the seeded ones.
                    let i = 1_000 + k * 100 + n;
                    let mut e = episode(i);
                    e.date_aired =
                        episode((n * 7 + k * 13) % 60).date_aired + Duration::minutes(i64::from(i));
                    e.priority = (n % 3) as i32;
                    store.upsert_episode(&e).await.unwrap();
                    // A seeded episode raised to the top (researched or not).
                    let mut raised = seeded[((n * 11 + k) % 40) as usize].clone();
                    raised.priority = 3 + n as i32;
                    raised.last_date_curated += Duration::hours(1);
                    store.upsert_episode(&raised).await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for c in curators {
        c.await.unwrap();
    }
    curating.store(false, std::sync::atomic::Ordering::SeqCst);
    for r in researchers {
        r.await.unwrap();
    }
    let status = pools[0].status(t0()).await.unwrap();
    assert_eq!(status.episodes, 40 + 90);
    assert_eq!(
        status.researched_pairs, status.research_pairs,
        "leasing ran out of work with pairs unresearched: an episode was skipped"
    );
    assert_invariants(&pools[0]).await;
}
