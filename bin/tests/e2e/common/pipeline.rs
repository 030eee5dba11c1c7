//! The end-to-end pipeline every bus runs through the binary, one process per step: queue
//! creation, curated messages sent with `send` and ingested with `episodes --once` /
//! `clips --once` (a poison message set aside with its reason), work assigned by several
//! `pending-research` processes at once, a researcher written here that receives the work and
//! sends results back, `completed-research`, and what `status` and `matches` then answer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::{json, Value};

use super::{archivist, archivist_with_input, BusEnv, Run};

/// Clips per work item: with four clips, each episode takes two items.
pub(crate) const MAX_CLIPS: usize = 2;

/// (title, date aired, priority) of the curated episodes.
pub(crate) const EPISODES: &[(&str, &str, i64)] = &[
    ("Episode 1: Low", "2026-01-01T00:00:00Z", 1),
    ("Episode 2: High", "2026-01-02T00:00:00Z", 9),
    ("Episode 3: Middle", "2026-01-03T00:00:00Z", 5),
];

/// (title, priority) of the curated clips.
pub(crate) const CLIPS: &[(&str, i64)] =
    &[("Clip A", 3), ("Clip B", 7), ("Clip C", 1), ("Clip D", 5)];

/// The researcher's findings: (episode, clip, offsets). Every other pair has no offsets.
pub(crate) const FOUND: &[(&str, &str, &[i64])] = &[
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
pub(crate) const POISON: &str = r#"{"title":"poison: not an episode"}"#;

pub(crate) fn episode_json(title: &str, aired: &str, priority: i64, n: usize) -> Value {
    json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-11T08:00:00Z",
        "curator_information": "e2e",
        "date_aired": aired,
        "title": title,
        "description": format!("episode {n}"),
        "media_uri": format!("https://example.test/episodes/{n}.mp3"),
        "media_type": "mp3",
        "priority": priority,
    })
}

pub(crate) fn clip_json(title: &str, priority: i64, n: usize) -> Value {
    json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-11T08:00:00Z",
        "curator_information": "e2e",
        "title": title,
        "description": format!("clip {n}"),
        "media_uri": format!("https://example.test/clips/{n}.mp3"),
        "media_type": "mp3",
        "priority": priority,
    })
}

pub(crate) fn offsets_found(episode: &str, clip: &str) -> Vec<i64> {
    FOUND
        .iter()
        .find(|(e, c, _)| *e == episode && *c == clip)
        .map(|(_, _, o)| o.to_vec())
        .unwrap_or_default()
}

pub(crate) fn clip_priority(title: &str) -> i64 {
    CLIPS.iter().find(|(t, _)| *t == title).unwrap().1
}

/// One test's world: a working directory, its datastore, and its bus.
pub(crate) struct Scenario {
    dir: tempfile::TempDir,
    pub(crate) bus: BusEnv,
}

impl Scenario {
    /// `bus` with the datastore at `database_url`; None: an SQLite file in the working
    /// directory.
    pub(crate) fn new(mut bus: BusEnv, database_url: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database_url = match database_url {
            Some(u) => u.to_string(),
            None => format!("sqlite://{}", dir.path().join("archive.sqlite").display()),
        };
        bus.set("DATABASE_URL", &database_url);
        bus.set("ARCHIVIST_MAX_CLIPS", &MAX_CLIPS.to_string());
        bus.set("RUST_LOG", "info");
        Scenario { dir, bus }
    }

    /// On SQS, with a datastore at `database_url` (None: SQLite in the working directory).
    pub(crate) fn sqs(database_url: Option<&str>) -> Self {
        Self::new(BusEnv::sqs(), database_url)
    }

    /// On RabbitMQ, with a datastore at `database_url` (None: SQLite in the working
    /// directory).
    pub(crate) fn rabbitmq(database_url: Option<&str>) -> Self {
        Self::new(BusEnv::rabbitmq(), database_url)
    }

    /// On the database bus in the datastore at `database_url` (None: SQLite in the working
    /// directory).
    pub(crate) fn database(database_url: Option<&str>) -> Self {
        Self::new(BusEnv::database(), database_url)
    }

    /// The datastore's URL.
    pub(crate) fn database_url(&self) -> String {
        self.bus
            .with(&[])
            .into_iter()
            .find(|(k, _)| *k == "DATABASE_URL")
            .map(|(_, v)| v.to_string())
            .unwrap()
    }

    /// Sends the curated episodes and clips and ingests them (the datastore migrated first:
    /// `send` creates no database).
    pub(crate) fn curate(&self) {
        self.run(&["migrate"], &[]).expect_code(0);
        let episodes: Vec<String> = EPISODES
            .iter()
            .enumerate()
            .map(|(n, (t, a, p))| episode_json(t, a, *p, n).to_string())
            .collect();
        let clips: Vec<String> = CLIPS
            .iter()
            .enumerate()
            .map(|(n, (t, p))| clip_json(t, *p, n).to_string())
            .collect();
        self.run_with_input(
            &["send", &self.bus.episodes_queue],
            &(episodes.join("\n") + "\n"),
        )
        .expect_code(0);
        self.run_with_input(&["send", &self.bus.clips_queue], &(clips.join("\n") + "\n"))
            .expect_code(0);
        self.run(&["episodes", "--once"], &[]).expect_code(0);
        self.run(&["clips", "--once"], &[]).expect_code(0);
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        archivist(self.path(), args, &self.bus.with(extra))
    }

    pub(crate) fn run_with_input(&self, args: &[&str], input: &str) -> Run {
        archivist_with_input(self.path(), args, &self.bus.with(&[]), input)
    }

    /// `archivist queues --json`, by queue name.
    pub(crate) fn queue_depths(&self) -> HashMap<String, Value> {
        self.run(&["queues", "--json"], &[])
            .expect_code(0)
            .json_lines()
            .into_iter()
            .map(|q| (q["queue"].as_str().unwrap().to_string(), q))
            .collect()
    }

    pub(crate) fn status(&self) -> Value {
        let run = self.run(&["status", "--json"], &[]).expect_code(0);
        serde_json::from_str(run.stdout.trim()).unwrap()
    }

    /// Runs `pending-research` in `processes` processes started together, each believing in
    /// `researchers` researchers; every one must exit 0.
    pub(crate) fn pending_research_at_once(&self, processes: usize, researchers: &str) {
        // No start jitter: processes started together really race for the leases.
        let env = self.bus.with(&[
            ("ARCHIVIST_RESEARCHERS", researchers),
            ("ARCHIVIST_START_JITTER", "0s"),
        ]);
        super::run_at_once(self.path(), &["pending-research"], &env, processes);
    }

    /// The researcher's receive: work items off `pending_research`, parsed.
    pub(crate) fn receive_work(&self, max: &str, wait: &str) -> Vec<Value> {
        self.run(
            &[
                "receive",
                &self.bus.pending_queue,
                "--max",
                max,
                "--wait",
                wait,
            ],
            &[],
        )
        .expect_code(0)
        .json_lines()
    }
}

pub(crate) fn assert_depth(depths: &HashMap<String, Value>, queue: &str, waiting: u64, dead: u64) {
    let q = depths
        .get(queue)
        .unwrap_or_else(|| panic!("no depth for {queue}: {depths:?}"));
    assert_eq!(q["waiting"], waiting, "{queue} waiting: {q}");
    assert_eq!(q["in_flight"], 0, "{queue} in flight: {q}");
    assert_eq!(q["dead_letters"], dead, "{queue} dead letters: {q}");
}

/// Checks a work item's shape and the order of its clips (most urgent first); returns its
/// episode title and clip titles.
pub(crate) fn item_pairs(item: &Value) -> (String, Vec<String>) {
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
pub(crate) fn results_for(item: &Value) -> Vec<Value> {
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
pub(crate) fn match_key(m: &Value) -> (String, String, String, Vec<i64>) {
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

pub(crate) fn expected_matches(clip: Option<&str>) -> BTreeSet<(String, String, String, Vec<i64>)> {
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
pub(crate) fn pipeline(s: &Scenario) {
    let pairs = (EPISODES.len() * CLIPS.len()) as u64;

    // 1. On SQS, before `archivist queues` the queues do not exist: a configuration problem.
    // The database bus creates its tables and queues itself.
    if s.bus.is_sqs() {
        let run = s.run(&["episodes", "--once"], &[]).expect_code(2);
        assert!(run.stderr.contains("archivist queues"), "{}", run.stderr);
    } else {
        s.run(&["episodes", "--once"], &[]).expect_code(0);
    }

    // The queues and their dead-letter queues, empty; a second `queues` (the --json one)
    // finds them made and changes nothing.
    let table = s.run(&["queues"], &[]).expect_code(0);
    assert!(table.stdout.contains("dead letters"), "{}", table.stdout);
    for q in s.bus.queues() {
        assert!(table.stdout.contains(q), "{q}: {}", table.stdout);
    }
    let depths = s.queue_depths();
    assert_eq!(depths.len(), 4, "{depths:?}");
    for q in s.bus.queues() {
        assert_depth(&depths, q, 0, 0);
        assert_eq!(depths[q]["dead_letter_queue"], format!("{q}_dead_letter"));
    }

    // Work assignment on SQS needs the researcher count; the database bus counts consumers.
    if s.bus.is_sqs() {
        let run = s.run(&["pending-research"], &[]).expect_code(2);
        assert!(
            run.stderr.contains("ARCHIVIST_RESEARCHERS"),
            "{}",
            run.stderr
        );
    }

    // 2. Curated messages, then the ingestion archivists.
    let mut episodes: Vec<String> = EPISODES
        .iter()
        .enumerate()
        .map(|(n, (t, a, p))| episode_json(t, a, *p, n).to_string())
        .collect();
    episodes.insert(1, POISON.to_string());
    // A blank line is no message.
    episodes.insert(2, String::new());
    let sent = s
        .run_with_input(
            &["send", &s.bus.episodes_queue],
            &(episodes.join("\n") + "\n"),
        )
        .expect_code(0);
    assert!(
        sent.stderr
            .contains(&format!("sent {} messages", EPISODES.len() + 1)),
        "{}",
        sent.stderr
    );
    assert_eq!(sent.stdout, "");
    // A line that is not JSON is refused before anything is sent.
    let refused = s
        .run_with_input(&["send", &s.bus.episodes_queue], "not json\n")
        .expect_code(2);
    assert!(refused.stderr.contains("line 1"), "{}", refused.stderr);
    let clips: Vec<String> = CLIPS
        .iter()
        .enumerate()
        .map(|(n, (t, p))| clip_json(t, *p, n).to_string())
        .collect();
    s.run_with_input(&["send", &s.bus.clips_queue], &(clips.join("\n") + "\n"))
        .expect_code(0);
    let depths = s.queue_depths();
    assert_depth(&depths, &s.bus.episodes_queue, EPISODES.len() as u64 + 1, 0);
    assert_depth(&depths, &s.bus.clips_queue, CLIPS.len() as u64, 0);

    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let depths = s.queue_depths();
    assert_depth(&depths, &s.bus.episodes_queue, 0, 1);
    assert_depth(&depths, &s.bus.clips_queue, 0, 0);

    let dead = s
        .run(
            &[
                "receive",
                &s.bus.episodes_queue,
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

    // 3. Work assignment: capacity is the researchers less the items waiting. One
    // researcher and nothing waiting: one item, the most urgent episode with its most urgent
    // clips.
    s.pending_research_at_once(1, "1");
    assert_depth(&s.queue_depths(), &s.bus.pending_queue, 1, 0);
    // While it waits, one researcher leaves no capacity.
    s.pending_research_at_once(1, "1");
    assert_depth(&s.queue_depths(), &s.bus.pending_queue, 1, 0);
    let first = s.receive_work("10", "1s");
    assert_eq!(first.len(), 1, "{first:?}");
    let (episode, clips) = item_pairs(&first[0]);
    assert_eq!(episode, "Episode 2: High");
    assert_eq!(clips, ["Clip B", "Clip D"]);

    // Then several processes at once, racing for the leases, whose capacity together covers
    // the rest of the work: each believes in as many researchers as there are items in all,
    // and nothing waits.
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
    assert_depth(&s.queue_depths(), &s.bus.pending_queue, 0, 0);

    // The researcher's results, and their recording.
    let results: Vec<String> = work
        .iter()
        .flat_map(results_for)
        .map(|r| r.to_string())
        .collect();
    assert_eq!(results.len() as u64, pairs);
    s.run_with_input(
        &["send", &s.bus.completed_queue],
        &(results.join("\n") + "\n"),
    )
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
    // On a shared bus, status shows each queue's depth (the contract does not fix the form: an object
    // by queue name, or a list of objects with a `queue` field).
    let queues: HashMap<String, Value> = match &status["queues"] {
        Value::Object(by_name) => by_name.clone().into_iter().collect(),
        Value::Array(list) => list
            .iter()
            .map(|q| (q["queue"].as_str().unwrap().to_string(), q.clone()))
            .collect(),
        _ => panic!("status on a shared bus shows the queues: {status}"),
    };
    assert_depth(&queues, &s.bus.episodes_queue, 0, 0);
    assert_depth(&queues, &s.bus.completed_queue, 0, 0);
    assert_depth(&queues, &s.bus.pending_queue, 0, 0);

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
