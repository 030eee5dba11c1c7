//! End-to-end tests of the `archivist` binary across processes on the SQS bus (moto_server):
//! queue creation, curated messages sent with `send` and ingested with `episodes --once` /
//! `clips --once` (a poison message set aside with its reason), work assigned by several
//! `pending-research` processes at once, a researcher written here that receives the work and
//! sends results back, `completed-research`, and what `status` and `matches` then answer.
//! Once on an SQLite file and once on a fresh Postgres database.
//!
//! Every test uses queue names of its own, so tests can share one moto_server. The SQS
//! endpoint comes from `ARCHIVIST_TEST_SQS_ENDPOINT`, which `scripts/test.sh` sets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Stdio;

use common::{archivist, archivist_with_input, PgDatabase, Run};
use serde_json::{json, Value};

/// Clips per work item: with four clips, each episode takes two items.
const MAX_CLIPS: usize = 2;

/// (title, date aired, priority) of the curated episodes.
const EPISODES: &[(&str, &str, i64)] = &[
    ("Episode 1: Low", "2026-01-01T00:00:00Z", 1),
    ("Episode 2: High", "2026-01-02T00:00:00Z", 9),
    ("Episode 3: Middle", "2026-01-03T00:00:00Z", 5),
];

/// (title, priority) of the curated clips.
const CLIPS: &[(&str, i64)] = &[("Clip A", 3), ("Clip B", 7), ("Clip C", 1), ("Clip D", 5)];

/// The researcher's findings: (episode, clip, offsets). Every other pair has no offsets.
const FOUND: &[(&str, &str, &[i64])] = &[
    (
        "Episode 2: High",
        "Clip B",
        &[120_000_000_000, 2_400_000_000_000],
    ),
    ("Episode 2: High", "Clip A", &[5_000_000_000]),
    ("Episode 1: Low", "Clip D", &[60_000_000_000]),
    ("Episode 3: Middle", "Clip B", &[0]),
    (
        "Episode 3: Middle",
        "Clip C",
        &[1_000_000_000, 2_000_000_000, 3_000_000_000],
    ),
];

/// A body no archivist can read as an `EpisodeInfo`.
const POISON: &str = r#"{"title":"poison: not an episode"}"#;

fn episode_json(title: &str, aired: &str, priority: i64, n: usize) -> Value {
    json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-11T08:00:00Z",
        "curator_information": "sqs_e2e",
        "date_aired": aired,
        "title": title,
        "description": format!("episode {n}"),
        "media_uri": format!("https://example.test/episodes/{n}.mp3"),
        "media_type": "mp3",
        "priority": priority,
    })
}

fn clip_json(title: &str, priority: i64, n: usize) -> Value {
    json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-11T08:00:00Z",
        "curator_information": "sqs_e2e",
        "title": title,
        "description": format!("clip {n}"),
        "media_uri": format!("https://example.test/clips/{n}.mp3"),
        "media_type": "mp3",
        "priority": priority,
    })
}

fn offsets_found(episode: &str, clip: &str) -> Vec<i64> {
    FOUND
        .iter()
        .find(|(e, c, _)| *e == episode && *c == clip)
        .map(|(_, _, o)| o.to_vec())
        .unwrap_or_default()
}

fn clip_priority(title: &str) -> i64 {
    CLIPS.iter().find(|(t, _)| *t == title).unwrap().1
}

/// The SQS settings of the binary. Fails (never skips) without the emulator's endpoint.
fn sqs_env() -> Vec<(String, String)> {
    let endpoint = std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run scripts/test.sh, which starts \
             moto_server and exports it (with AWS_REGION and the AWS credentials)"
        )
    });
    let var = |name: &str, default: &str| {
        (
            name.to_string(),
            std::env::var(name).unwrap_or_else(|_| default.to_string()),
        )
    };
    vec![
        ("ARCHIVIST_BUS".to_string(), "sqs".to_string()),
        ("AWS_ENDPOINT_URL".to_string(), endpoint),
        var("AWS_REGION", "us-east-1"),
        var("AWS_ACCESS_KEY_ID", "testing"),
        var("AWS_SECRET_ACCESS_KEY", "testing"),
    ]
}

/// One test's world: a working directory, its datastore, and queue names no other test uses.
struct Scenario {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    episodes_queue: String,
    clips_queue: String,
    pending_queue: String,
    completed_queue: String,
}

impl Scenario {
    /// `database_url` None: an SQLite file in the working directory.
    fn new(database_url: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Short enough for SQS's 80 characters with `_dead_letter` appended.
        let tag = format!("e2e_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let episodes_queue = format!("{tag}_curated_episodes");
        let clips_queue = format!("{tag}_curated_clips");
        let pending_queue = format!("{tag}_pending_research");
        let completed_queue = format!("{tag}_completed_research");
        let database_url = match database_url {
            Some(u) => u.to_string(),
            None => format!("sqlite://{}", dir.path().join("archive.sqlite").display()),
        };
        let mut env = sqs_env();
        env.extend(
            [
                ("DATABASE_URL", database_url.as_str()),
                ("ARCHIVIST_EPISODES_QUEUE", &episodes_queue),
                ("ARCHIVIST_CLIPS_QUEUE", &clips_queue),
                ("ARCHIVIST_PENDING_RESEARCH_QUEUE", &pending_queue),
                ("ARCHIVIST_COMPLETED_RESEARCH_QUEUE", &completed_queue),
                ("ARCHIVIST_MAX_CLIPS", &MAX_CLIPS.to_string()),
                ("RUST_LOG", "info"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        Scenario {
            dir,
            env,
            episodes_queue,
            clips_queue,
            pending_queue,
            completed_queue,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The environment with `extra` on top.
    fn env_with<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        env
    }

    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        archivist(self.path(), args, &self.env_with(extra))
    }

    fn run_with_input(&self, args: &[&str], input: &str) -> Run {
        archivist_with_input(self.path(), args, &self.env_with(&[]), input)
    }

    /// `archivist queues --json`, by queue name.
    fn queue_depths(&self) -> HashMap<String, Value> {
        self.run(&["queues", "--json"], &[])
            .expect_code(0)
            .json_lines()
            .into_iter()
            .map(|q| (q["queue"].as_str().unwrap().to_string(), q))
            .collect()
    }

    fn status(&self) -> Value {
        let run = self.run(&["status", "--json"], &[]).expect_code(0);
        serde_json::from_str(run.stdout.trim()).unwrap()
    }

    /// Runs `pending-research` in `processes` processes started together, each believing in
    /// `researchers` researchers; every one must exit 0.
    fn pending_research_at_once(&self, processes: usize, researchers: &str) {
        let env = self.env_with(&[("ARCHIVIST_RESEARCHERS", researchers)]);
        let children: Vec<_> = (0..processes)
            .map(|_| {
                common::command(self.path(), &["pending-research"], &env)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            Run {
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
            .expect_code(0);
        }
    }

    /// The researcher's receive: work items off `pending_research`, parsed.
    fn receive_work(&self, max: &str, wait: &str) -> Vec<Value> {
        self.run(
            &["receive", &self.pending_queue, "--max", max, "--wait", wait],
            &[],
        )
        .expect_code(0)
        .json_lines()
    }
}

fn assert_depth(depths: &HashMap<String, Value>, queue: &str, waiting: u64, dead: u64) {
    let q = depths
        .get(queue)
        .unwrap_or_else(|| panic!("no depth for {queue}: {depths:?}"));
    assert_eq!(q["waiting"], waiting, "{queue} waiting: {q}");
    assert_eq!(q["in_flight"], 0, "{queue} in flight: {q}");
    assert_eq!(q["dead_letters"], dead, "{queue} dead letters: {q}");
}

/// Checks a work item's shape and the order of its clips (most urgent first); returns its
/// episode title and clip titles.
fn item_pairs(item: &Value) -> (String, Vec<String>) {
    assert!(item["lease_id"].is_string(), "{item}");
    assert!(item["lease_expires_at"].is_string(), "{item}");
    let episode = item["episode"]["title"].as_str().unwrap().to_string();
    let clips: Vec<String> = item["clips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["title"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !clips.is_empty() && clips.len() <= MAX_CLIPS,
        "at most {MAX_CLIPS} clips: {item}"
    );
    let priorities: Vec<i64> = clips.iter().map(|c| clip_priority(c)).collect();
    assert!(
        priorities.windows(2).all(|w| w[0] > w[1]),
        "clips of a work item are most urgent first: {clips:?}"
    );
    (episode, clips)
}

/// The researcher's results for `item`: one per clip, the last one ending the lease.
fn results_for(item: &Value) -> Vec<Value> {
    let clips = item["clips"].as_array().unwrap();
    let episode = item["episode"]["title"].as_str().unwrap();
    clips
        .iter()
        .enumerate()
        .map(|(i, clip)| {
            json!({
                "lease_id": item["lease_id"],
                "revoke_lease": i + 1 == clips.len(),
                "research_date": "2026-02-01T12:00:00Z",
                "episode": item["episode"],
                "clip": clip,
                "episode_duration_ns": 3_600_000_000_000i64,
                "episode_hash": format!("hash of {episode}"),
                "clip_duration_ns": 4_000_000_000i64,
                "clip_hash": format!("hash of {}", clip["title"].as_str().unwrap()),
                "clip_offsets_ns": offsets_found(episode, clip["title"].as_str().unwrap()),
            })
        })
        .collect()
}

/// A match as a comparable tuple: (episode title, date aired, clip title, offsets).
fn match_key(m: &Value) -> (String, String, String, Vec<i64>) {
    (
        m["episode_title"].as_str().unwrap().to_string(),
        m["episode_date_aired"].as_str().unwrap().to_string(),
        m["clip_title"].as_str().unwrap().to_string(),
        m["clip_offsets_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_i64().unwrap())
            .collect(),
    )
}

fn expected_matches(clip: Option<&str>) -> BTreeSet<(String, String, String, Vec<i64>)> {
    FOUND
        .iter()
        .filter(|(_, c, _)| clip.is_none_or(|want| want == *c))
        .map(|(e, c, o)| {
            let aired = EPISODES.iter().find(|(t, _, _)| t == e).unwrap().1;
            (e.to_string(), aired.to_string(), c.to_string(), o.to_vec())
        })
        .collect()
}

/// The whole pipeline, one process per step, on the scenario's datastore and queues.
fn pipeline(s: &Scenario) {
    let pairs = (EPISODES.len() * CLIPS.len()) as u64;
    let all_queues = [
        &s.episodes_queue,
        &s.clips_queue,
        &s.pending_queue,
        &s.completed_queue,
    ];

    // 1. The queues and their dead-letter queues, empty.
    let table = s.run(&["queues"], &[]).expect_code(0);
    assert!(table.stdout.contains("dead letters"), "{}", table.stdout);
    for q in all_queues {
        assert!(table.stdout.contains(q.as_str()), "{q}: {}", table.stdout);
    }
    let depths = s.queue_depths();
    for q in all_queues {
        assert_depth(&depths, q, 0, 0);
        assert_eq!(
            depths[q.as_str()]["dead_letter_queue"],
            format!("{q}_dead_letter")
        );
    }

    // Work assignment on SQS needs the researcher count.
    let run = s.run(&["pending-research"], &[]).expect_code(2);
    assert!(
        run.stderr.contains("ARCHIVIST_RESEARCHERS"),
        "{}",
        run.stderr
    );

    // 2. Curated messages, then the ingestion archivists.
    let mut episodes: Vec<String> = EPISODES
        .iter()
        .enumerate()
        .map(|(n, (t, a, p))| episode_json(t, a, *p, n).to_string())
        .collect();
    episodes.insert(1, POISON.to_string());
    let sent = s
        .run_with_input(&["send", &s.episodes_queue], &(episodes.join("\n") + "\n"))
        .expect_code(0);
    assert!(
        sent.stderr
            .contains(&format!("sent {} messages", EPISODES.len() + 1)),
        "{}",
        sent.stderr
    );
    let clips: Vec<String> = CLIPS
        .iter()
        .enumerate()
        .map(|(n, (t, p))| clip_json(t, *p, n).to_string())
        .collect();
    s.run_with_input(&["send", &s.clips_queue], &(clips.join("\n") + "\n"))
        .expect_code(0);
    let depths = s.queue_depths();
    assert_depth(&depths, &s.episodes_queue, EPISODES.len() as u64 + 1, 0);
    assert_depth(&depths, &s.clips_queue, CLIPS.len() as u64, 0);

    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let depths = s.queue_depths();
    assert_depth(&depths, &s.episodes_queue, 0, 1);
    assert_depth(&depths, &s.clips_queue, 0, 0);

    let dead = s
        .run(
            &[
                "receive",
                &s.episodes_queue,
                "--dead-letters",
                "--max",
                "1",
                "--wait",
                "5s",
            ],
            &[],
        )
        .expect_code(0)
        .json_lines();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["body"], POISON);
    let reason = dead[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("EpisodeInfo"), "reason: {}", dead[0]);

    let status = s.status();
    assert_eq!(status["episodes"], EPISODES.len() as u64, "{status}");
    assert_eq!(status["clips"], CLIPS.len() as u64, "{status}");
    assert_eq!(status["research_pairs"], pairs, "{status}");
    assert_eq!(status["researched_pairs"], 0, "{status}");

    // 3. Work assignment. One item first, alone: the most urgent episode with its most
    // urgent clips.
    s.pending_research_at_once(1, "1");
    let first = s.receive_work("1", "5s");
    assert_eq!(first.len(), 1, "{first:?}");
    let (episode, clips) = item_pairs(&first[0]);
    assert_eq!(episode, "Episode 2: High");
    assert_eq!(clips, ["Clip B", "Clip D"]);

    // Then several processes at once, whose capacity together covers the rest of the work:
    // each believes in as many researchers as there are items left, and nothing waits.
    let items_per_episode = CLIPS.len().div_ceil(MAX_CLIPS);
    let items = EPISODES.len() * items_per_episode;
    s.pending_research_at_once(3, &items.to_string());
    let mut work = first;
    work.extend(s.receive_work("10", "2s"));
    assert_eq!(work.len(), items, "{work:#?}");

    // No pair in two work items, and every pair in one.
    let mut leased: BTreeSet<(String, String)> = BTreeSet::new();
    let mut by_episode: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    let mut leases = BTreeSet::new();
    for item in &work {
        assert!(leases.insert(item["lease_id"].as_str().unwrap().to_string()));
        let (episode, clips) = item_pairs(item);
        for c in &clips {
            assert!(
                leased.insert((episode.clone(), c.clone())),
                "({episode}, {c}) leased twice: {work:#?}"
            );
        }
        by_episode.entry(episode).or_default().push(clips);
    }
    assert_eq!(leased.len() as u64, pairs);
    // Within an episode, the items take its clips in order of urgency: sorted by their first
    // clip, they read as the clips ranked by priority.
    let mut ranked: Vec<&str> = CLIPS.iter().map(|(t, _)| *t).collect();
    ranked.sort_by_key(|t| -clip_priority(t));
    for (episode, mut items) in by_episode {
        items.sort_by_key(|clips| -clip_priority(&clips[0]));
        let order: Vec<String> = items.concat();
        assert_eq!(order, ranked, "{episode}: clips by priority");
    }

    let status = s.status();
    assert_eq!(status["active_leases"], items as u64, "{status}");
    assert_eq!(status["leased_pairs"], pairs, "{status}");

    // Nothing is left to lease, however many researchers there are.
    s.pending_research_at_once(1, "50");
    assert_depth(&s.queue_depths(), &s.pending_queue, 0, 0);

    // The researcher's results, and their recording.
    let results: Vec<String> = work
        .iter()
        .flat_map(results_for)
        .map(|r| r.to_string())
        .collect();
    assert_eq!(results.len() as u64, pairs);
    s.run_with_input(&["send", &s.completed_queue], &(results.join("\n") + "\n"))
        .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);

    // 4. What the datastore answers.
    let status = s.status();
    assert_eq!(status["episodes"], EPISODES.len() as u64, "{status}");
    assert_eq!(status["clips"], CLIPS.len() as u64, "{status}");
    assert_eq!(status["research_pairs"], pairs, "{status}");
    assert_eq!(status["researched_pairs"], pairs, "{status}");
    assert_eq!(status["matched_pairs"], FOUND.len() as u64, "{status}");
    assert_eq!(status["active_leases"], 0, "{status}");
    assert_eq!(status["expired_leases"], 0, "{status}");
    // On SQS, status shows each queue's depth (the contract does not fix the form: an object
    // by queue name, or a list of objects with a `queue` field).
    let queues: HashMap<String, Value> = match &status["queues"] {
        Value::Object(by_name) => by_name.clone().into_iter().collect(),
        Value::Array(list) => list
            .iter()
            .map(|q| (q["queue"].as_str().unwrap().to_string(), q.clone()))
            .collect(),
        _ => panic!("status on SQS shows the queues: {status}"),
    };
    assert_depth(&queues, &s.episodes_queue, 0, 0);
    assert_depth(&queues, &s.completed_queue, 0, 0);
    assert_depth(&queues, &s.pending_queue, 0, 0);

    let all: BTreeSet<_> = s
        .run(&["matches"], &[])
        .expect_code(0)
        .json_lines()
        .iter()
        .map(match_key)
        .collect();
    assert_eq!(all, expected_matches(None));
    let clip_b: Vec<_> = s
        .run(&["matches", "--clip", "Clip B"], &[])
        .expect_code(0)
        .json_lines()
        .iter()
        .map(match_key)
        .collect();
    assert_eq!(clip_b.len(), 2, "{clip_b:?}");
    assert_eq!(
        clip_b.into_iter().collect::<BTreeSet<_>>(),
        expected_matches(Some("Clip B"))
    );
}

#[test]
fn pipeline_across_processes_on_sqs_and_sqlite() {
    let s = Scenario::new(None);
    pipeline(&s);
    assert!(s.path().join("archive.sqlite").exists());
}

#[test]
fn pipeline_across_processes_on_sqs_and_postgres() {
    let db = PgDatabase::create();
    let s = Scenario::new(Some(&db.url));
    pipeline(&s);
}
