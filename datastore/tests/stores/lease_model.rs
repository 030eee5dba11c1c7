//! Model-based tests of the datastore: random sequences of upserts (in batches), leases (some
//! taken concurrently), renewals, revocations, cancellations, recordings and time moving
//! forward, run against each datastore and against a small in-memory model of the contract's
//! rules written here. After every step what the datastore says agrees with the model: what
//! `lease_next` returned (episode, clips in order, pairs taken over from expired leases), what
//! each `update_lease` and `record_results` answered, every `status` count and the `matches`.
//! proptest generates the sequences and shrinks a failing one to a minimal case; each test
//! prints how many sequences and steps it ran.
#![cfg(all(feature = "postgres", feature = "sqlite", feature = "test-utils"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use datastore::{
    ClipInfo, DataStore, EpisodeInfo, EpisodeKey, LeaseRequest, LeaseUpdate, MatchFilter,
    RecordOutcome, ResearchResult, SqliteDataStore, Status,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use uuid::Uuid;

/// Episodes and clips the sequences speak of; the last of each is never upserted by some
/// sequences, so results can name unknown ones.
const ITEMS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    /// Upsert these (index, priority) episodes in one batch; a later one of the same index wins.
    UpsertEpisodes(Vec<(usize, i32)>),
    UpsertClips(Vec<(usize, i32)>),
    /// `n` concurrent `lease_next` calls at the same time, each for at most `max_clips`.
    Lease {
        n: usize,
        max_clips: u32,
        duration_s: i64,
    },
    /// The `k`-th lease made so far (modulo their number), or an unknown id when none.
    Renew(usize),
    Revoke(usize),
    Cancel(usize),
    /// Results, in one batch: (lease: the k-th or unknown, episode, clip, matched).
    Record(Vec<(Option<usize>, usize, usize, bool)>),
    /// Time moves on by this many seconds.
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let item = 0..ITEMS;
    let priority = 0..3i32; // few values: ties, broken by the other ordering rules
    prop_oneof![
        3 => proptest::collection::vec((item.clone(), priority.clone()), 1..4).prop_map(Op::UpsertEpisodes),
        3 => proptest::collection::vec((item.clone(), priority), 1..4).prop_map(Op::UpsertClips),
        5 => (1..4usize, 1..4u32, 5..60i64).prop_map(|(n, max_clips, duration_s)| Op::Lease { n, max_clips, duration_s }),
        2 => any::<usize>().prop_map(Op::Renew),
        2 => any::<usize>().prop_map(Op::Revoke),
        1 => any::<usize>().prop_map(Op::Cancel),
        4 => proptest::collection::vec(
            (proptest::option::weighted(0.8, any::<usize>()), item.clone(), item, any::<bool>()),
            1..5
        ).prop_map(Op::Record),
        3 => (1..90i64).prop_map(Op::Advance),
    ]
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
}

/// Seconds after t0 at which item `i` is curated at step `step`: distinct for every item
/// and step, so that ordering never comes down to a full tie.
fn curated(i: usize, step: usize) -> usize {
    step * ITEMS + i
}

/// Episode `i` as upserted with `priority` at step `step`: its identity and `media_uri` fixed
/// by `i`, the curation times by the step (a known episode keeps its first
/// `initial_date_curated`).
fn episode(i: usize, priority: i32, step: usize) -> EpisodeInfo {
    let at = t0() + Duration::seconds(curated(i, step) as i64);
    EpisodeInfo {
        initial_date_curated: at,
        last_date_curated: at,
        curator_information: "model".into(),
        date_aired: Utc
            .with_ymd_and_hms(2025, 1, 1 + i as u32, 0, 0, 0)
            .unwrap(),
        title: format!("Episode {i}"),
        description: format!("step {step}"),
        media_uri: format!("https://model.test/e/{i}"),
        media_type: "mp3".into(),
        priority,
    }
}

fn clip(i: usize, priority: i32, step: usize) -> ClipInfo {
    let at = t0() + Duration::seconds(curated(i, step) as i64);
    ClipInfo {
        initial_date_curated: at,
        last_date_curated: at,
        curator_information: "model".into(),
        title: format!("Clip {i}"),
        description: format!("step {step}"),
        media_uri: format!("https://model.test/c/{i}"),
        media_type: "mp3".into(),
        priority,
    }
}

/// A stored episode or clip, as far as ordering goes.
#[derive(Debug, Clone, Copy)]
struct Item {
    priority: i32,
    /// [`curated`] of the first upsert.
    first_curated: usize,
}

#[derive(Debug, Clone)]
struct ModelLease {
    episode: usize,
    pairs: BTreeSet<usize>,
    expires_at: DateTime<Utc>,
    duration: Duration,
    revoked: bool,
}

/// The contract's rules, as plainly as they can be written.
#[derive(Debug, Default)]
struct Model {
    now_s: i64,
    episodes: BTreeMap<usize, Item>,
    clips: BTreeMap<usize, Item>,
    /// Recorded pairs and whether they matched.
    results: BTreeMap<(usize, usize), bool>,
    leases: BTreeMap<Uuid, ModelLease>,
}

impl Model {
    fn now(&self) -> DateTime<Utc> {
        t0() + Duration::seconds(self.now_s)
    }

    fn holder(&self, e: usize, c: usize) -> Option<Uuid> {
        self.leases
            .iter()
            .find(|(_, l)| l.episode == e && l.pairs.contains(&c))
            .map(|(id, _)| *id)
    }

    fn free(&self, e: usize, c: usize) -> bool {
        !self.results.contains_key(&(e, c))
            && self
                .holder(e, c)
                .is_none_or(|id| self.leases[&id].expires_at <= self.now())
    }

    /// The next work item: the most urgent episode with a free pair (priority, then latest
    /// `date_aired`, which grows with the index, then latest first curation), with its most
    /// urgent free clips (priority, then latest first curation).
    fn next(&self, max_clips: u32) -> Option<(usize, Vec<usize>)> {
        let e = self
            .episodes
            .iter()
            .filter(|(e, _)| self.clips.keys().any(|c| self.free(**e, *c)))
            .max_by_key(|(e, item)| (item.priority, **e, item.first_curated))
            .map(|(e, _)| *e)?;
        let mut clips: Vec<(usize, Item)> = self
            .clips
            .iter()
            .filter(|(c, _)| self.free(e, **c))
            .map(|(c, i)| (*c, *i))
            .collect();
        clips.sort_by_key(|(_, i)| std::cmp::Reverse((i.priority, i.first_curated)));
        clips.truncate(max_clips as usize);
        Some((e, clips.into_iter().map(|(c, _)| c).collect()))
    }

    /// Takes the pairs of `(e, clips)` for a new lease; returns how many were taken over from
    /// expired leases. A lease left holding nothing by a takeover goes.
    fn take(&mut self, id: Uuid, e: usize, clips: &[usize], duration: Duration) -> u32 {
        let mut reclaimed = 0;
        for &c in clips {
            if let Some(old) = self.holder(e, c) {
                reclaimed += 1;
                let l = self.leases.get_mut(&old).unwrap();
                l.pairs.remove(&c);
                if l.pairs.is_empty() {
                    self.leases.remove(&old);
                }
            }
        }
        self.leases.insert(
            id,
            ModelLease {
                episode: e,
                pairs: clips.iter().copied().collect(),
                expires_at: self.now() + duration,
                duration,
                revoked: false,
            },
        );
        reclaimed
    }

    fn renew(&mut self, id: Uuid) -> bool {
        let now = self.now();
        match self.leases.get_mut(&id) {
            Some(l) if !l.revoked && l.expires_at > now => {
                l.expires_at = now + l.duration;
                true
            }
            _ => false,
        }
    }

    fn revoke(&mut self, id: Uuid) -> bool {
        match self.leases.get_mut(&id) {
            Some(l) if !l.revoked => {
                l.revoked = true;
                if l.pairs.is_empty() {
                    self.leases.remove(&id);
                }
                true
            }
            _ => false,
        }
    }

    fn cancel(&mut self, id: Uuid) -> bool {
        self.leases.remove(&id).is_some()
    }

    fn record(&mut self, e: usize, c: usize, matched: bool) -> RecordOutcome {
        if !self.episodes.contains_key(&e) {
            return RecordOutcome::UnknownEpisode;
        }
        if !self.clips.contains_key(&c) {
            return RecordOutcome::UnknownClip;
        }
        if self.results.contains_key(&(e, c)) {
            return RecordOutcome::Duplicate;
        }
        self.results.insert((e, c), matched);
        if let Some(id) = self.holder(e, c) {
            let l = self.leases.get_mut(&id).unwrap();
            l.pairs.remove(&c);
            if l.revoked && l.pairs.is_empty() {
                self.leases.remove(&id);
            }
        }
        RecordOutcome::Recorded
    }

    fn status(&self) -> Status {
        let now = self.now();
        let holding = |f: &dyn Fn(&ModelLease) -> bool| {
            self.leases
                .values()
                .filter(|l| !l.pairs.is_empty() && f(l))
                .count() as u64
        };
        let (episodes, clips) = (self.episodes.len() as u64, self.clips.len() as u64);
        Status {
            episodes,
            clips,
            research_pairs: episodes * clips,
            researched_pairs: self.results.len() as u64,
            matched_pairs: self.results.values().filter(|m| **m).count() as u64,
            active_leases: holding(&|l| l.expires_at > now && !l.revoked),
            awaiting_late_results: holding(&|l| l.expires_at > now && l.revoked),
            expired_leases: holding(&|l| l.expires_at <= now),
            leased_pairs: self
                .leases
                .values()
                .filter(|l| l.expires_at > now)
                .map(|l| l.pairs.len() as u64)
                .sum(),
            failed_pairs: 0,
        }
    }

    fn matches(&self) -> BTreeSet<(String, String)> {
        self.results
            .iter()
            .filter(|(_, m)| **m)
            .map(|((e, c), _)| (format!("Episode {e}"), format!("Clip {c}")))
            .collect()
    }
}

fn index_of(title: &str) -> usize {
    title.rsplit(' ').next().unwrap().parse().unwrap()
}

fn result(lease_id: Uuid, e: usize, c: usize, matched: bool) -> ResearchResult {
    ResearchResult {
        lease_id,
        episode: EpisodeKey {
            title: format!("Episode {e}"),
            date_aired: Utc
                .with_ymd_and_hms(2025, 1, 1 + e as u32, 0, 0, 0)
                .unwrap(),
        },
        clip_title: format!("Clip {c}"),
        research_date: t0(),
        episode_duration_ns: 3_600_000_000_000,
        episode_hash: "eh".into(),
        clip_duration_ns: 1_000_000_000,
        clip_hash: "ch".into(),
        clip_offsets_ns: if matched { vec![7] } else { Vec::new() },
        clip_match_scores: None,
        failure: None,
        clip_findability: None,
    }
}

macro_rules! agree {
    ($got:expr, $want:expr, $($what:tt)*) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            return Err(TestCaseError::fail(format!(
                "{}: the datastore says {got:?}, the model {want:?}",
                format!($($what)*)
            )));
        }
    }};
}

/// Runs `ops` on `store` and on a fresh model, comparing after every step.
async fn run(store: Arc<dyn DataStore>, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    // Every lease made, in order, for `Renew(k)` and the like to pick from.
    let mut made: Vec<Uuid> = Vec::new();
    let pick = |made: &[Uuid], k: usize| -> Uuid {
        if made.is_empty() {
            Uuid::from_u128(k as u128)
        } else {
            made[k % made.len()]
        }
    };
    for (step, op) in ops.iter().enumerate() {
        let now = model.now();
        match op {
            Op::UpsertEpisodes(batch) => {
                let items: Vec<EpisodeInfo> =
                    batch.iter().map(|(i, p)| episode(*i, *p, step)).collect();
                store.upsert_episodes(&items).await.unwrap();
                for (i, p) in batch {
                    let first = model
                        .episodes
                        .get(i)
                        .map_or(curated(*i, step), |e| e.first_curated);
                    model.episodes.insert(
                        *i,
                        Item {
                            priority: *p,
                            first_curated: first,
                        },
                    );
                }
            }
            Op::UpsertClips(batch) => {
                let items: Vec<ClipInfo> = batch.iter().map(|(i, p)| clip(*i, *p, step)).collect();
                store.upsert_clips(&items).await.unwrap();
                for (i, p) in batch {
                    let first = model
                        .clips
                        .get(i)
                        .map_or(curated(*i, step), |c| c.first_curated);
                    model.clips.insert(
                        *i,
                        Item {
                            priority: *p,
                            first_curated: first,
                        },
                    );
                }
            }
            Op::Lease {
                n,
                max_clips,
                duration_s,
            } => {
                let request = LeaseRequest {
                    max_clips: *max_clips,
                    duration: Duration::seconds(*duration_s),
                    now,
                    lease_id: uuid::Uuid::new_v4(),
                };
                // Concurrent callers: together they must get what leasing one after the
                // other would give, in some order, and never the same pair twice.
                let got = futures_join(&store, request, *n).await;
                let mut got: Vec<_> = got.into_iter().flatten().collect();
                let mut want = Vec::new();
                let mut reclaimed_want = 0;
                for _ in 0..*n {
                    match model.next(*max_clips) {
                        Some((e, clips)) => {
                            // Matched to the datastore's lease with that content below.
                            let id = Uuid::new_v4();
                            reclaimed_want +=
                                model.take(id, e, &clips, Duration::seconds(*duration_s));
                            want.push((id, e, clips));
                        }
                        None => break,
                    }
                }
                agree!(got.len(), want.len(), "step {step} {op:?}: leases made");
                let reclaimed_got: u32 = got.iter().map(|l| l.reclaimed_pairs).sum();
                agree!(
                    reclaimed_got,
                    reclaimed_want,
                    "step {step} {op:?}: pairs taken over"
                );
                for (model_id, e, clips) in want {
                    let at = got.iter().position(|l| {
                        index_of(&l.episode.title) == e
                            && l.clips
                                .iter()
                                .map(|c| index_of(&c.title))
                                .collect::<Vec<_>>()
                                == clips
                    });
                    let Some(at) = at else {
                        return Err(TestCaseError::fail(format!(
                            "step {step} {op:?}: the model leases episode {e} clips {clips:?}; \
                             the datastore leased {:?}",
                            got.iter()
                                .map(|l| (
                                    l.episode.title.clone(),
                                    l.clips.iter().map(|c| c.title.clone()).collect::<Vec<_>>()
                                ))
                                .collect::<Vec<_>>()
                        )));
                    };
                    let lease = got.remove(at);
                    agree!(
                        lease.expires_at,
                        now + Duration::seconds(*duration_s),
                        "step {step}: expiry"
                    );
                    let l = model.leases.remove(&model_id).unwrap();
                    model.leases.insert(lease.id, l);
                    made.push(lease.id);
                }
            }
            Op::Renew(k) => {
                let id = pick(&made, *k);
                let got = store
                    .update_lease(id, LeaseUpdate::Renew { now })
                    .await
                    .unwrap();
                agree!(got, model.renew(id), "step {step} {op:?}: renewed");
            }
            Op::Revoke(k) => {
                let id = pick(&made, *k);
                let got = store.update_lease(id, LeaseUpdate::Revoke).await.unwrap();
                agree!(got, model.revoke(id), "step {step} {op:?}: revoked");
            }
            Op::Cancel(k) => {
                let id = pick(&made, *k);
                let got = store.update_lease(id, LeaseUpdate::Cancel).await.unwrap();
                agree!(got, model.cancel(id), "step {step} {op:?}: cancelled");
            }
            Op::Record(batch) => {
                let results: Vec<ResearchResult> = batch
                    .iter()
                    .map(|(k, e, c, m)| {
                        let id = k.map_or_else(Uuid::new_v4, |k| pick(&made, k));
                        result(id, *e, *c, *m)
                    })
                    .collect();
                let got = store.record_results(&results).await.unwrap();
                let want: Vec<RecordOutcome> = batch
                    .iter()
                    .map(|(_, e, c, m)| model.record(*e, *c, *m))
                    .collect();
                agree!(got, want, "step {step} {op:?}: outcomes");
            }
            Op::Advance(s) => model.now_s += s,
        }
        let now = model.now();
        agree!(
            store.status(now).await.unwrap(),
            model.status(),
            "after step {step} {op:?}: status"
        );
        let matches: BTreeSet<(String, String)> = store
            .matches(&MatchFilter::default())
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.episode_title, m.clip_title))
            .collect();
        agree!(
            matches,
            model.matches(),
            "after step {step} {op:?}: matches"
        );
    }
    Ok(())
}

async fn futures_join(
    store: &Arc<dyn DataStore>,
    request: LeaseRequest,
    n: usize,
) -> Vec<Option<datastore::Lease>> {
    let calls = (0..n).map(|_| {
        let store = store.clone();
        // Each caller its own work item, so its own lease id.
        let request = LeaseRequest {
            lease_id: Uuid::new_v4(),
            ..request
        };
        tokio::spawn(async move { store.lease_next(request).await.unwrap() })
    });
    let mut out = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        out.push(call.await.unwrap());
    }
    out
}

/// Runs `cases` random sequences against stores made by `fresh`; prints the counts.
fn check_against_the_model<F, Fut>(label: &str, cases: u32, fresh: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (Arc<dyn DataStore>, Box<dyn std::any::Any>)>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = std::cell::Cell::new(0usize);
    let result = runner.run(&proptest::collection::vec(op(), 1..40), |ops| {
        steps.set(steps.get() + ops.len());
        rt.block_on(async {
            let (store, _guard) = fresh().await;
            run(store, &ops).await
        })
    });
    if let Err(e) = result {
        panic!("{label}: {e}");
    }
    println!(
        "{label}: {cases} random sequences, {} steps, every step agreeing with the model",
        steps.get()
    );
}

#[test]
fn sqlite_agrees_with_the_model() {
    check_against_the_model("SQLite", 256, || async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("model.sqlite").display());
        let store = SqliteDataStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        (
            Arc::new(store) as Arc<dyn DataStore>,
            Box::new(dir) as Box<dyn std::any::Any>,
        )
    });
}

#[test]
fn postgres_agrees_with_the_model() {
    check_against_the_model("Postgres", 64, || async {
        let (store, db) = datastore::testing_pg::fresh_pg_store().await;
        (
            Arc::new(store) as Arc<dyn DataStore>,
            Box::new(db) as Box<dyn std::any::Any>,
        )
    });
}
