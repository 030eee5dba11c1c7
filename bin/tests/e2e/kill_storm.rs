//! Kill storms: the four archivists run as real `archivist` processes on a workload of
//! curators (re-curating, and sending poison) and a researcher (slow, and sending some results
//! twice), and are killed with SIGKILL at random moments and restarted, over and over; then
//! the final state is checked against what was sent. While the storm runs, the datastore's
//! lease tables are polled: no pair is ever held by two unexpired leases, and every lease's
//! count of held pairs is exact.
//!
//! `ARCHIVIST_STORM_SEED` fixes the randomness (printed by every run, so a failure can be
//! replayed); `ARCHIVIST_SOAK_KILLS` sets the kills over the four combinations (default 52,
//! a CI run) for a longer soak outside CI, with a workload growing with it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::pipeline::Scenario;
use crate::common::{command, PgDatabase};
use serde_json::{json, Value};

/// Kills per combination in a CI run: four combinations make 52.
const CI_KILLS: usize = 13;
/// Clips per work item.
const MAX_CLIPS: usize = 3;
/// Clip priorities: six clips.
const CLIP_PRIORITIES: &[i64] = &[4, 9, 2, 6, 1, 5];
/// Short leases: a lease whose work item a killed `pending-research` never published is
/// reclaimed within the storm.
const LEASE: Duration = Duration::from_secs(5);
/// How long after a work item arrives the researcher sends its results: research takes time,
/// so that kills find leases, results and work in flight.
const RESEARCH_TIME: Duration = Duration::from_millis(600);

/// splitmix64: small, seeded, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

fn seed() -> u64 {
    match std::env::var("ARCHIVIST_STORM_SEED") {
        Ok(s) if !s.trim().is_empty() => s.trim().parse().expect("ARCHIVIST_STORM_SEED: a u64"),
        _ => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

fn kills_per_combination() -> usize {
    match std::env::var("ARCHIVIST_SOAK_KILLS") {
        Ok(s) if !s.trim().is_empty() => {
            let total: usize = s.trim().parse().expect("ARCHIVIST_SOAK_KILLS: a count");
            total.div_ceil(4).max(1)
        }
        _ => CI_KILLS,
    }
}

/// The four archivists, as the long-running processes a deployment would run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Episodes,
    Clips,
    Pending,
    Completed,
}

impl Role {
    const ALL: [Role; 4] = [Role::Episodes, Role::Clips, Role::Pending, Role::Completed];

    fn args(self) -> &'static [&'static str] {
        match self {
            Role::Episodes => &["episodes"],
            Role::Clips => &["clips"],
            Role::Pending => &["pending-research", "--every", "300ms"],
            Role::Completed => &["completed-research", "--every", "300ms"],
        }
    }
}

/// What the storm counted.
#[derive(Debug, Default)]
struct Counts {
    kills: BTreeMap<String, usize>,
    restarts: usize,
    messages_sent: usize,
    work_items: usize,
    duplicate_work_items: usize,
    results_sent_twice: usize,
    leases_reclaimed: usize,
    lease_polls: usize,
}

/// The workload: episodes with distinct priorities, and which pairs the researcher finds.
struct Workload {
    episodes: Vec<(String, i64)>,
    clips: Vec<(String, i64)>,
}

impl Workload {
    fn new(kills: usize) -> Self {
        // Eight episodes for a CI run; a soak grows the work with its kills.
        let n = 8.max(kills / 2);
        // Distinct priorities in a shuffled-looking order: 3, 8, 5, 2, 7, 4, 1, 6, … (n < 10007).
        let episodes = (0..n)
            .map(|i| (format!("Storm episode {i}"), ((i * 5 + 3) % n) as i64 + 1))
            .collect();
        let clips = CLIP_PRIORITIES
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("Storm clip {i}"), *p))
            .collect();
        Workload { episodes, clips }
    }

    fn pairs(&self) -> usize {
        self.episodes.len() * self.clips.len()
    }

    fn episode_json(&self, i: usize, curated: &str) -> String {
        let (title, priority) = &self.episodes[i];
        json!({
            "initial_date_curated": "2026-01-10T08:00:00Z",
            "last_date_curated": curated,
            "curator_information": "storm",
            "date_aired": "2026-01-01T00:00:00Z",
            "title": title,
            "description": format!("episode {i}"),
            "media_uri": format!("https://example.test/storm/episodes/{i}.mp3"),
            "media_type": "mp3",
            "priority": priority,
        })
        .to_string()
    }

    fn clip_json(&self, i: usize, curated: &str) -> String {
        let (title, priority) = &self.clips[i];
        json!({
            "initial_date_curated": "2026-01-10T08:00:00Z",
            "last_date_curated": curated,
            "curator_information": "storm",
            "title": title,
            "description": format!("clip {i}"),
            "media_uri": format!("https://example.test/storm/clips/{i}.mp3"),
            "media_type": "mp3",
            "priority": priority,
        })
        .to_string()
    }

    fn clip_priority(&self, title: &str) -> i64 {
        self.clips.iter().find(|(t, _)| t == title).unwrap().1
    }

    /// The researcher finds a third of the pairs.
    fn offsets(episode: &str, clip: &str) -> Vec<i64> {
        let n = |s: &str| s.rsplit(' ').next().unwrap().parse::<i64>().unwrap();
        let (e, c) = (n(episode), n(clip));
        if (e + c) % 3 == 0 {
            vec![(e * 10 + c) * 1_000_000_000]
        } else {
            Vec::new()
        }
    }
}

/// Poison, by queue kind: (body, sent raw). Each must end in its queue's dead-letter queue.
const POISON_EPISODES: &[&str] = &[r#"{"title":"storm poison: not an episode"}"#, "not json"];
const POISON_CLIPS: &[&str] = &[r#"{"title":"storm poison: not a clip"}"#, "[1, 2, 3]"];
const POISON_RESULTS: &[&str] = &["storm poison: not a result"];

/// The archivist processes, restarted after every kill; logs go to files in the working
/// directory (appended across restarts).
struct Fleet<'a> {
    s: &'a Scenario,
    env: Vec<(String, String)>,
    children: BTreeMap<Role, Child>,
}

impl<'a> Fleet<'a> {
    fn log_path(&self, role: Role) -> std::path::PathBuf {
        self.s.path().join(format!("{role:?}.log"))
    }

    fn start(&mut self, role: Role) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path(role))
            .unwrap();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let child = command(self.s.path(), role.args(), &self.s.bus.with(&env))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.insert(role, child);
    }

    /// SIGKILL (what `Child::kill` sends on Unix), reaped, then restarted.
    fn kill_and_restart(&mut self, role: Role) {
        let mut child = self.children.remove(&role).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        self.start(role);
    }

    /// Fails with its log if an archivist ended by itself: none may crash or give up.
    fn check_alive(&mut self) {
        for (role, child) in &mut self.children {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.s.path().join(format!("{role:?}.log")))
                    .unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!("{role:?} ended by itself ({status}) during the storm:\n{tail}");
            }
        }
    }

    fn stop_all(&mut self) {
        for (_, mut child) in std::mem::take(&mut self.children) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Fleet<'_> {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// When to kill, and how many so far.
struct Killer {
    planned: usize,
    done: usize,
    next: Instant,
}

impl Killer {
    /// Kills one of `allowed`, chosen at random, if one is due: at random intervals.
    fn maybe_kill(
        &mut self,
        fleet: &mut Fleet,
        rng: &mut Rng,
        allowed: &[Role],
        counts: &mut Counts,
    ) {
        if self.done >= self.planned || Instant::now() < self.next {
            return;
        }
        // Every archivist killed at least once: those not yet killed first, then at random.
        let fresh: Vec<Role> = allowed
            .iter()
            .copied()
            .filter(|r| !counts.kills.contains_key(&format!("{r:?}")))
            .collect();
        let pool = if fresh.is_empty() {
            allowed
        } else {
            &fresh[..]
        };
        let role = pool[rng.below(pool.len() as u64) as usize];
        fleet.kill_and_restart(role);
        *counts.kills.entry(format!("{role:?}")).or_default() += 1;
        counts.restarts += 1;
        self.done += 1;
        self.next = Instant::now() + rng.millis(150, 900);
    }
}

/// The datastore's lease tables, read directly while the storm runs.
struct LeaseProbe {
    rt: tokio::runtime::Runtime,
    pool: Pool,
    /// Leases seen expired while still holding pairs: the storm's reclaimed leases.
    expired_holding: BTreeSet<String>,
}

enum Pool {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

/// (lease, expiry in µs since the epoch, held_pairs, rows in leased_pairs)
type LeaseRow = (String, i64, i64, i64);

const PG_LEASES: &str = "SELECT l.id::text, \
        (extract(epoch FROM l.expires_at) * 1000000)::bigint, l.held_pairs::bigint, \
        (SELECT count(*) FROM leased_pairs p WHERE p.lease_id = l.id)::bigint \
     FROM leases l";
const SQLITE_LEASES: &str = "SELECT hex(l.id), l.expires_at, l.held_pairs, \
        (SELECT count(*) FROM leased_pairs p WHERE p.lease_id = l.id) \
     FROM leases l";
/// The same pair in two rows of leased_pairs would be two leases holding it.
const DOUBLY_HELD: &str = "SELECT count(*) FROM \
     (SELECT episode_id, clip_id FROM leased_pairs GROUP BY episode_id, clip_id \
      HAVING count(*) > 1) d";

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

impl LeaseProbe {
    fn new(database_url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pool = rt.block_on(async {
            if database_url.starts_with("postgres") {
                Pool::Postgres(
                    sqlx::postgres::PgPoolOptions::new()
                        .max_connections(1)
                        .connect(database_url)
                        .await
                        .unwrap(),
                )
            } else {
                Pool::Sqlite(
                    sqlx::sqlite::SqlitePoolOptions::new()
                        .max_connections(1)
                        .connect(database_url)
                        .await
                        .unwrap(),
                )
            }
        });
        LeaseProbe {
            rt,
            pool,
            expired_holding: BTreeSet::new(),
        }
    }

    /// Every lease, and the pairs held twice; None when the database is busy (SQLite under
    /// the storm's writes): the next poll reads again.
    fn read(&self) -> Option<(Vec<LeaseRow>, i64)> {
        self.rt.block_on(async {
            match &self.pool {
                Pool::Postgres(p) => {
                    let leases = sqlx::query_as::<_, LeaseRow>(PG_LEASES)
                        .fetch_all(p)
                        .await
                        .ok()?;
                    let doubly: i64 = sqlx::query_scalar(DOUBLY_HELD).fetch_one(p).await.ok()?;
                    Some((leases, doubly))
                }
                Pool::Sqlite(p) => {
                    let leases = sqlx::query_as::<_, LeaseRow>(SQLITE_LEASES)
                        .fetch_all(p)
                        .await
                        .ok()?;
                    let doubly: i64 = sqlx::query_scalar(DOUBLY_HELD).fetch_one(p).await.ok()?;
                    Some((leases, doubly))
                }
            }
        })
    }

    /// Checks the lease rules on what the datastore holds now.
    fn check(&mut self) {
        let Some((leases, doubly)) = self.read() else {
            return;
        };
        assert_eq!(doubly, 0, "a pair is held by two leases at once");
        let now = now_us();
        for (id, expires_us, held, rows) in leases {
            assert_eq!(
                held, rows,
                "lease {id}: held_pairs {held} but {rows} rows in leased_pairs"
            );
            if expires_us <= now && held > 0 {
                self.expired_holding.insert(id);
            }
        }
    }

    /// Leases not yet expired.
    fn unexpired(&self) -> Vec<String> {
        let (leases, _) = self
            .read()
            .expect("the datastore answers once the storm is over");
        let now = now_us();
        leases
            .into_iter()
            .filter(|l| l.1 > now)
            .map(|l| l.0)
            .collect()
    }
}

/// A work item the researcher holds until its research is done.
struct InHand {
    due: Instant,
    item: Value,
    twice: bool,
}

fn results_for(item: &Value) -> Vec<String> {
    let clips = item["clips"].as_array().unwrap();
    let episode = item["episode"]["title"].as_str().unwrap();
    clips
        .iter()
        .enumerate()
        .map(|(i, clip)| {
            let title = clip["title"].as_str().unwrap();
            json!({
                "lease_id": item["lease_id"],
                "revoke_lease": i + 1 == clips.len(),
                "research_date": "2026-02-01T12:00:00Z",
                "episode": item["episode"],
                "clip": clip,
                "episode_duration_ns": 3_600_000_000_000i64,
                "episode_hash": format!("hash of {episode}"),
                "clip_duration_ns": 4_000_000_000i64,
                "clip_hash": format!("hash of {title}"),
                "clip_offsets_ns": Workload::offsets(episode, title),
            })
            .to_string()
        })
        .collect()
}

/// Sends `lines` to `queue` (raw: as they are, poison included).
fn send(s: &Scenario, queue: &str, lines: &[String], raw: bool, counts: &mut Counts) {
    if lines.is_empty() {
        return;
    }
    let mut args = vec!["send", queue];
    if raw {
        args.push("--raw");
    }
    s.run_with_input(&args, &(lines.join("\n") + "\n"))
        .expect_code(0);
    counts.messages_sent += lines.len();
}

fn depths(s: &Scenario) -> HashMap<String, Value> {
    s.queue_depths()
}

/// The storm on one combination of bus and datastore.
fn storm(s: Scenario) {
    let seed = seed();
    let kills = kills_per_combination();
    let mut rng = Rng(seed);
    let work = Workload::new(kills);
    let mut counts = Counts::default();
    eprintln!(
        "kill storm: ARCHIVIST_STORM_SEED={seed}, {kills} kills, {} episodes x {} clips",
        work.episodes.len(),
        work.clips.len()
    );

    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let mut probe = LeaseProbe::new(&s.database_url());

    let researchers = if kills > CI_KILLS { "4" } else { "2" };
    let lease = format!("{}s", LEASE.as_secs());
    let mut fleet = Fleet {
        s: &s,
        env: vec![
            ("ARCHIVIST_RESEARCHERS".into(), researchers.into()),
            ("ARCHIVIST_LEASE_DURATION".into(), lease),
            ("ARCHIVIST_MAX_CLIPS".into(), MAX_CLIPS.to_string()),
            ("ARCHIVIST_START_JITTER".into(), "0s".into()),
            // A valid message caught by many kills comes back many times: it must not be
            // dead-lettered for that (the receive limit is for messages that fail).
            ("ARCHIVIST_MAX_RECEIVES".into(), "1000".into()),
            ("RUST_LOG".into(), "warn".into()),
        ],
        children: BTreeMap::new(),
    };
    let mut killer = Killer {
        planned: kills,
        done: 0,
        next: Instant::now(),
    };

    // Phase 1, curation: the curators send in chunks, every episode and clip twice (the second
    // time re-curated), poison among them, while the ingestion archivists are killed.
    fleet.start(Role::Episodes);
    fleet.start(Role::Clips);
    let mut chunks: Vec<(String, Vec<String>, bool)> = Vec::new();
    for (round, curated) in ["2026-01-11T08:00:00Z", "2026-01-12T08:00:00Z"]
        .into_iter()
        .enumerate()
    {
        for chunk in (0..work.episodes.len()).collect::<Vec<_>>().chunks(4) {
            let lines = chunk
                .iter()
                .map(|&i| work.episode_json(i, curated))
                .collect();
            chunks.push((s.bus.episodes_queue.clone(), lines, false));
        }
        let lines = (0..work.clips.len())
            .map(|i| work.clip_json(i, curated))
            .collect();
        chunks.push((s.bus.clips_queue.clone(), lines, false));
        let poison = |p: &[&str]| p.iter().map(|b| b.to_string()).collect::<Vec<_>>();
        if round == 0 {
            chunks.push((s.bus.episodes_queue.clone(), poison(POISON_EPISODES), true));
            chunks.push((s.bus.clips_queue.clone(), poison(POISON_CLIPS), true));
            chunks.push((s.bus.completed_queue.clone(), poison(POISON_RESULTS), true));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120 + kills as u64);
    let ingest_kills = (kills / 3).max(2);
    let mut chunks = chunks.into_iter();
    loop {
        assert!(
            Instant::now() < deadline,
            "curation did not finish: {counts:?}"
        );
        if let Some((queue, lines, raw)) = chunks.next() {
            send(&s, &queue, &lines, raw, &mut counts);
        }
        if killer.done < ingest_kills {
            killer.maybe_kill(
                &mut fleet,
                &mut rng,
                &[Role::Episodes, Role::Clips],
                &mut counts,
            );
        }
        fleet.check_alive();
        probe.check();
        let status = s.status();
        if killer.done >= ingest_kills
            && status["episodes"] == work.episodes.len() as u64
            && status["clips"] == work.clips.len() as u64
            && chunks.len() == 0
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // Phase 2, research: work assignment and recording start; every archivist is killed at
    // random (work assignment only once the first two items arrived, which must be the most
    // urgent episode's, its clips in order of urgency).
    fleet.start(Role::Pending);
    fleet.start(Role::Completed);
    let mut in_hand: Vec<InHand> = Vec::new();
    let mut first_items: Vec<Value> = Vec::new();
    let mut seen_leases: BTreeSet<String> = BTreeSet::new();
    let mut pair_items: BTreeMap<(String, String), usize> = BTreeMap::new();
    let pairs = work.pairs() as u64;
    let expected_matches = work
        .episodes
        .iter()
        .flat_map(|(e, _)| work.clips.iter().map(move |(c, _)| (e.clone(), c.clone())))
        .filter(|(e, c)| !Workload::offsets(e, c).is_empty())
        .count() as u64;
    let dead_expected = [
        (s.bus.episodes_queue.clone(), POISON_EPISODES.len() as u64),
        (s.bus.clips_queue.clone(), POISON_CLIPS.len() as u64),
        (s.bus.pending_queue.clone(), 0),
        (s.bus.completed_queue.clone(), POISON_RESULTS.len() as u64),
    ];
    let deadline = Instant::now() + Duration::from_secs(240 + 2 * kills as u64);
    loop {
        assert!(
            Instant::now() < deadline,
            "the storm did not finish: {counts:?}\nstatus {}\nqueues {:?}",
            s.status(),
            depths(&s)
        );
        // The researcher: takes work, and answers each item when its research is done.
        for item in s.receive_work("10", "0s") {
            counts.work_items += 1;
            let lease = item["lease_id"].as_str().unwrap().to_string();
            if !seen_leases.insert(lease.clone()) {
                counts.duplicate_work_items += 1;
                continue;
            }
            let episode = item["episode"]["title"].as_str().unwrap().to_string();
            let clips: Vec<String> = item["clips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["title"].as_str().unwrap().to_string())
                .collect();
            assert!(!clips.is_empty() && clips.len() <= MAX_CLIPS, "{item}");
            let priorities: Vec<i64> = clips.iter().map(|c| work.clip_priority(c)).collect();
            assert!(
                priorities.windows(2).all(|w| w[0] > w[1]),
                "clips of a work item are most urgent first: {item}"
            );
            for c in clips {
                *pair_items.entry((episode.clone(), c)).or_default() += 1;
            }
            if first_items.len() < 2 {
                first_items.push(item.clone());
            }
            let twice = rng.below(4) == 0;
            in_hand.push(InHand {
                due: Instant::now() + RESEARCH_TIME,
                item,
                twice,
            });
        }
        let now = Instant::now();
        let (done, waiting): (Vec<_>, Vec<_>) = in_hand.into_iter().partition(|h| h.due <= now);
        in_hand = waiting;
        let mut results = Vec::new();
        for h in done {
            let r = results_for(&h.item);
            if h.twice {
                // The same results delivered twice: recorded once.
                counts.results_sent_twice += r.len();
                results.extend(r.iter().cloned());
            }
            results.extend(r);
        }
        send(&s, &s.bus.completed_queue, &results, false, &mut counts);

        let roles: &[Role] = if first_items.len() >= 2 {
            &Role::ALL
        } else {
            &[Role::Episodes, Role::Clips, Role::Completed]
        };
        killer.maybe_kill(&mut fleet, &mut rng, roles, &mut counts);
        fleet.check_alive();
        probe.check();
        counts.lease_polls += 1;

        if killer.done >= kills && in_hand.is_empty() {
            let status = s.status();
            let q = depths(&s);
            let queues_settled = dead_expected.iter().all(|(name, dead)| {
                // At least: on SQS setting a message aside is a send to the dead-letter queue
                // then a delete, so a kill between the two sets it aside twice. The final check
                // below compares the distinct bodies: every poison message, no valid one.
                q.get(name).is_some_and(|d| {
                    d["waiting"] == 0
                        && d["in_flight"] == 0
                        && d["dead_letters"].as_u64().is_some_and(|n| n >= *dead)
                })
            });
            if status["researched_pairs"] == pairs && status["active_leases"] == 0 && queues_settled
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    fleet.stop_all();
    counts.leases_reclaimed = probe.expired_holding.len();

    // The final state against what was sent.
    let status = s.status();
    assert_eq!(status["episodes"], work.episodes.len() as u64, "{status}");
    assert_eq!(status["clips"], work.clips.len() as u64, "{status}");
    assert_eq!(status["research_pairs"], pairs, "{status}");
    assert_eq!(status["researched_pairs"], pairs, "{status}");
    assert_eq!(status["matched_pairs"], expected_matches, "{status}");
    assert_eq!(status["active_leases"], 0, "{status}");
    let unexpired = probe.unexpired();
    assert!(
        unexpired.is_empty(),
        "leases unexpired at the end: {unexpired:?}"
    );
    // Every pair was in a work item; each found pair is one match, recorded once.
    assert_eq!(pair_items.len() as u64, pairs);
    let matches = s.run(&["matches"], &[]).expect_code(0).json_lines();
    let mut keys = BTreeSet::new();
    for m in &matches {
        let key = (
            m["episode_title"].as_str().unwrap().to_string(),
            m["clip_title"].as_str().unwrap().to_string(),
        );
        let offsets: Vec<i64> = m["clip_offsets_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_i64().unwrap())
            .collect();
        assert_eq!(offsets, Workload::offsets(&key.0, &key.1), "{m}");
        assert!(keys.insert(key), "a match recorded twice: {m}");
    }
    assert_eq!(keys.len() as u64, expected_matches);
    // The first work items: the most urgent episode, its clips in order of urgency.
    let top = work
        .episodes
        .iter()
        .max_by_key(|(_, p)| *p)
        .unwrap()
        .0
        .clone();
    let mut ranked: Vec<String> = work.clips.iter().map(|(t, _)| t.clone()).collect();
    ranked.sort_by_key(|t| -work.clip_priority(t));
    let mut firsts: Vec<Vec<String>> = first_items
        .iter()
        .map(|item| {
            assert_eq!(
                item["episode"]["title"],
                top.as_str(),
                "first items: {first_items:?}"
            );
            item["clips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["title"].as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    firsts.sort_by_key(|clips| -work.clip_priority(&clips[0]));
    assert_eq!(
        firsts.concat(),
        ranked,
        "the first items take the clips by urgency"
    );
    // Every poison message in its dead-letter queue with a reason; no valid one there.
    for (queue, poison) in [
        (&s.bus.episodes_queue, POISON_EPISODES),
        (&s.bus.clips_queue, POISON_CLIPS),
        (&s.bus.completed_queue, POISON_RESULTS),
        (&s.bus.pending_queue, &[][..]),
    ] {
        let dead = s
            .run(
                &[
                    "receive",
                    queue,
                    "--dead-letters",
                    "--max",
                    "10",
                    "--wait",
                    "1s",
                ],
                &[],
            )
            .expect_code(0)
            .json_lines();
        let bodies: BTreeSet<&str> = dead.iter().map(|d| d["body"].as_str().unwrap()).collect();
        assert_eq!(
            bodies,
            poison.iter().copied().collect(),
            "{queue}: {dead:?}"
        );
        for d in &dead {
            assert!(
                d["reason"].as_str().is_some_and(|r| !r.trim().is_empty()),
                "no reason: {d}"
            );
        }
    }
    let total_kills: usize = counts.kills.values().sum();
    eprintln!(
        "kill storm counts: seed {seed}, kills {total_kills} {:?}, restarts {}, messages sent {}, \
         work items received {} (duplicates delivered {}), results sent twice {}, leases \
         reclaimed {}, lease-table polls {}",
        counts.kills,
        counts.restarts,
        counts.messages_sent,
        counts.work_items,
        counts.duplicate_work_items,
        counts.results_sent_twice,
        counts.leases_reclaimed,
        counts.lease_polls
    );
    assert!(total_kills >= kills, "{counts:?}");
    for role in Role::ALL {
        assert!(
            counts.kills.contains_key(&format!("{role:?}")),
            "{role:?} never killed: {counts:?}"
        );
    }
}

// One test per combination of bus and datastore; another bus is one more line.

#[test]
fn kill_storm_sqs_postgres() {
    let db = PgDatabase::create();
    storm(Scenario::sqs(Some(&db.url)));
}

#[test]
fn kill_storm_sqs_sqlite() {
    storm(Scenario::sqs(None));
}

#[test]
fn kill_storm_database_bus_postgres() {
    let db = PgDatabase::create();
    storm(Scenario::database(Some(&db.url)));
}

#[test]
fn kill_storm_database_bus_sqlite() {
    storm(Scenario::database(None));
}
