//! End-to-end tests of the `archivist` binary on SQS (the moto emulator that
//! `scripts/test.sh` starts): `queues`, `send`, `receive` (and `--dead-letters`), the four
//! archivists as separate processes, `status` with queue depths, `matches`.
//!
//! Never skipped: without ARCHIVIST_TEST_SQS_ENDPOINT the test fails and says to run
//! `scripts/test.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{archivist, archivist_with_input, Run};
use serde_json::{json, Value};

/// The environment of a run on the emulator, with queue names of this test only.
struct Sqs {
    env: Vec<(String, String)>,
}

impl Sqs {
    fn new() -> Self {
        let endpoint = std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
            panic!(
                "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, \
                 which starts an SQS emulator (moto) and sets it"
            )
        });
        let var = |k: &str, default: &str| std::env::var(k).unwrap_or_else(|_| default.into());
        let suffix = format!("{:08x}", rand_suffix());
        let mut env = vec![
            ("ARCHIVIST_BUS".into(), "sqs".into()),
            ("AWS_ENDPOINT_URL".into(), endpoint),
            ("AWS_REGION".into(), var("AWS_REGION", "us-east-1")),
            (
                "AWS_ACCESS_KEY_ID".into(),
                var("AWS_ACCESS_KEY_ID", "testing"),
            ),
            (
                "AWS_SECRET_ACCESS_KEY".into(),
                var("AWS_SECRET_ACCESS_KEY", "testing"),
            ),
            ("DATABASE_URL".into(), "sqlite://sqs.sqlite".into()),
        ];
        for (var, name) in [
            ("ARCHIVIST_EPISODES_QUEUE", "episodes"),
            ("ARCHIVIST_CLIPS_QUEUE", "clips"),
            ("ARCHIVIST_PENDING_RESEARCH_QUEUE", "pending"),
            ("ARCHIVIST_COMPLETED_RESEARCH_QUEUE", "completed"),
        ] {
            env.push((var.into(), format!("e2e_{name}_{suffix}")));
        }
        Sqs { env }
    }

    fn queue(&self, var: &str) -> String {
        self.env.iter().find(|(k, _)| k == var).unwrap().1.clone()
    }

    fn env<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        env
    }

    fn run(&self, dir: &Path, args: &[&str]) -> Run {
        archivist(dir, args, &self.env(&[]))
    }

    fn send(&self, dir: &Path, queue: &str, input: &str) -> Run {
        archivist_with_input(dir, &["send", queue], &self.env(&[]), input)
    }
}

fn rand_suffix() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

fn episode(n: u32, priority: i32) -> Value {
    json!({
        "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
        "curator_information": "tbtl.net", "date_aired": format!("2025-12-{:02}T00:00:00Z", n),
        "title": format!("Episode {}: Test", 4000 + n), "description": "…",
        "media_uri": format!("https://example.invalid/{n}.mp3"), "media_type": "mp3", "priority": priority
    })
}

fn clip(title: &str) -> Value {
    json!({
        "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
        "curator_information": "tbtl.net", "title": title, "description": "",
        "media_uri": format!("https://example.invalid/{title}.wav"), "media_type": "wav", "priority": 0
    })
}

#[test]
fn pipeline_as_separate_processes_on_sqs() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let sqs = Sqs::new();
    let episodes_q = sqs.queue("ARCHIVIST_EPISODES_QUEUE");
    let clips_q = sqs.queue("ARCHIVIST_CLIPS_QUEUE");
    let pending_q = sqs.queue("ARCHIVIST_PENDING_RESEARCH_QUEUE");
    let completed_q = sqs.queue("ARCHIVIST_COMPLETED_RESEARCH_QUEUE");

    // Before `queues`, the queues do not exist: a configuration problem.
    let run = sqs.run(dir, &["episodes", "--once"]).expect_code(2);
    assert!(run.stderr.contains("archivist queues"), "{}", run.stderr);

    let queues = sqs
        .run(dir, &["queues", "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(queues.len(), 4);
    assert!(queues
        .iter()
        .all(|q| q["waiting"] == 0 && q["dead_letters"] == 0));
    // Twice is harmless.
    sqs.run(dir, &["queues"]).expect_code(0);

    // Three episodes, a blank line, and one that is JSON but not an EpisodeInfo.
    let input = format!(
        "{}\n\n{}\n{}\n{{\"title\": \"not an episode\"}}\n",
        episode(1, 0),
        episode(2, 5),
        episode(3, 0)
    );
    let run = sqs.send(dir, &episodes_q, &input).expect_code(0);
    assert!(run.stderr.contains("sent 4 messages"), "{}", run.stderr);
    assert_eq!(run.stdout, "");
    let run = sqs.send(dir, &episodes_q, "not json\n").expect_code(2);
    assert!(run.stderr.contains("line 1"), "{}", run.stderr);
    let clips = format!("{}\n{}\n", clip("Intro Jingle"), clip("Sweet Lord"));
    sqs.send(dir, &clips_q, &clips).expect_code(0);

    sqs.run(dir, &["episodes", "--once"]).expect_code(0);
    sqs.run(dir, &["clips", "--once"]).expect_code(0);

    let dead = sqs
        .run(
            dir,
            &["receive", &episodes_q, "--dead-letters", "--wait", "1s"],
        )
        .expect_code(0)
        .json_lines();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["body"], "{\"title\": \"not an episode\"}");
    assert!(
        dead[0]["reason"].as_str().unwrap().contains("EpisodeInfo"),
        "{dead:?}"
    );

    // SQS cannot count researchers: the count comes from the environment.
    archivist(
        dir,
        &["pending-research"],
        &sqs.env(&[("ARCHIVIST_RESEARCHERS", "2")]),
    )
    .expect_code(0);
    let items = sqs
        .run(dir, &["receive", &pending_q, "--max", "10", "--wait", "2s"])
        .expect_code(0)
        .json_lines();
    assert_eq!(items.len(), 2, "two researchers, two work items: {items:?}");
    // The most urgent episode first, with both clips.
    let titles: Vec<&str> = items
        .iter()
        .map(|i| i["episode"]["title"].as_str().unwrap())
        .collect();
    assert!(titles.contains(&"Episode 4002: Test"), "{titles:?}");
    assert!(items
        .iter()
        .all(|i| i["clips"].as_array().unwrap().len() == 2));

    // A researcher's results: the jingle found, the catchphrase not; the last ends the lease.
    let mut results = String::new();
    for item in &items {
        let clips = item["clips"].as_array().unwrap();
        for (i, c) in clips.iter().enumerate() {
            let offsets: Vec<i64> = if c["title"] == "Intro Jingle" {
                vec![120_000_000_000]
            } else {
                vec![]
            };
            let r = json!({
                "lease_id": item["lease_id"], "revoke_lease": i + 1 == clips.len(),
                "research_date": "2026-01-03T00:00:00Z", "episode": item["episode"], "clip": c,
                "episode_duration_ns": 3_600_000_000_000i64, "episode_hash": "e",
                "clip_duration_ns": 4_000_000_000i64, "clip_hash": "c", "clip_offsets_ns": offsets
            });
            results.push_str(&r.to_string());
            results.push('\n');
        }
    }
    sqs.send(dir, &completed_q, &results).expect_code(0);
    sqs.run(dir, &["completed-research"]).expect_code(0);

    let status = sqs.run(dir, &["status", "--json"]).expect_code(0);
    let s: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(s["episodes"], 3);
    assert_eq!(s["clips"], 2);
    assert_eq!(s["research_pairs"], 6);
    assert_eq!(s["researched_pairs"], 4);
    assert_eq!(s["matched_pairs"], 2);
    assert_eq!(s["active_leases"], 0);
    assert_eq!(s["queues"][&episodes_q]["dead_letters"], 0, "{s}");
    assert_eq!(s["queues"][&completed_q]["waiting"], 0, "{s}");

    let matches = sqs.run(dir, &["matches"]).expect_code(0).json_lines();
    assert_eq!(matches.len(), 2, "{matches:?}");
    assert!(
        matches.iter().all(|m| m["clip_title"] == "Intro Jingle"
            && m["clip_offsets_ns"] == json!([120_000_000_000i64])),
        "{matches:?}"
    );
}
