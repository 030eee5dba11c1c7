//! End-to-end tests of `archivist redrive` through the binary, on the default SQLite database
//! bus, on Postgres, on RabbitMQ and on SQS: researchers' results that arrive before their
//! episode and clips were curated are dead-lettered by a real `completed-research` run
//! (poison: unknown episode or clip); `--dry-run` counts them and moves nothing; once the
//! episode and clips are curated (the fix), `redrive --max 2` puts two back, the next
//! `completed-research` records them, and a second `redrive` the last one. On the database
//! bus, a redrive killed inside its transaction moves nothing and loses nothing; on SQS and
//! RabbitMQ, which move a batch at a time, SIGINT between two batches stops the redrive with
//! the first batch moved and the rest where they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::pipeline::{
    assert_depth, clip_json, episode_json, results_for, Scenario, CLIPS,
};
use crate::common::PgDatabase;
use serde_json::{json, Value};

/// Results for Episode 2 against clips A, B and C, under a lease nobody made (recorded all
/// the same, as the contract says), sent before either was curated.
fn send_early_results(s: &Scenario) {
    let item = json!({
        "lease_id": "00000000-0000-4000-8000-000000000001",
        "episode": episode_json("Episode 2: High", "2026-01-02T00:00:00Z", 9, 1),
        "clips": CLIPS[..3]
            .iter()
            .enumerate()
            .map(|(n, (t, p))| clip_json(t, *p, n))
            .collect::<Vec<_>>(),
    });
    let lines: Vec<String> = results_for(&item).iter().map(Value::to_string).collect();
    s.run_with_input(
        &["send", &s.bus.completed_queue],
        &(lines.join("\n") + "\n"),
    )
    .expect_code(0);
}

/// Waits (at most 30 s) until `queue` has `waiting` messages and `dead` dead letters, nothing
/// in flight, then asserts it. A quorum queue applies an acknowledgement a moment after the
/// broker took it, so a count read as a redrive exits may still include the dead letters it
/// moved; one that stays is a lost acknowledgement (a message in both queues).
fn settles_at(s: &Scenario, queue: &str, waiting: u64, dead: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let depths = s.queue_depths();
        let settled = depths.get(queue).is_some_and(|q| {
            q["waiting"] == waiting && q["in_flight"] == 0 && q["dead_letters"] == dead
        });
        if settled || std::time::Instant::now() >= until {
            assert_depth(&depths, queue, waiting, dead);
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn redrive_json(s: &Scenario, extra: &[&str]) -> Value {
    let mut args = vec!["redrive", s.bus.completed_queue.as_str(), "--json"];
    args.extend_from_slice(extra);
    let run = s.run(&args, &[]).expect_code(0);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// The whole story on one bus.
fn dead_letters_go_back_after_the_fix(s: &Scenario) {
    let completed = s.bus.completed_queue.clone();
    s.run(&["queues"], &[]).expect_code(0);
    send_early_results(s);
    s.run(&["completed-research"], &[]).expect_code(0);
    let depths = s.queue_depths();
    assert_depth(&depths, &completed, 0, 3);
    assert_eq!(s.status()["researched_pairs"], 0);

    // Looked at without taking (`--peek`), twice: both looks show them, and they stay.
    let rabbitmq = s.bus.with(&[]).contains(&("ARCHIVIST_BUS", "rabbitmq"));
    for _ in 0..2 {
        let peek = s.run(&["receive", &completed, "--dead-letters", "--peek"], &[]);
        if rabbitmq {
            // It cannot look without taking: it says so, with the count, and takes none.
            let peek = peek.expect_code(2);
            assert!(
                peek.stderr.contains("without taking") && peek.stderr.contains("has 3"),
                "{}",
                peek.stderr
            );
            continue;
        }
        let shown = peek.expect_code(0).json_lines();
        assert_eq!(shown.len(), 3, "{shown:?}");
        for d in &shown {
            let body: Value = serde_json::from_str(d["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["episode"]["title"], "Episode 2: High", "{d}");
            assert!(
                d["reason"].as_str().unwrap().contains("unknown episode"),
                "{d}"
            );
        }
    }
    assert_depth(&s.queue_depths(), &completed, 0, 3);
    // --peek is for dead letters only.
    s.run(&["receive", &completed, "--peek"], &[])
        .expect_code(2);

    // A dry run says how many would move, and moves nothing.
    let run = s
        .run(&["redrive", &completed, "--dry-run"], &[])
        .expect_code(0);
    assert_eq!(
        run.stdout.trim(),
        format!(
            "would move 3 of the 3 dead letters in {completed}_dead_letter back to {completed} \
             (dry run: nothing moved)"
        )
    );
    let dry = redrive_json(s, &["--dry-run", "--max", "2"]);
    assert_eq!(dry["dead_letters"], 3, "{dry}");
    assert_eq!(dry["would_move"], 2, "{dry}");
    assert_eq!(dry["moved"], 0, "{dry}");
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_depth(&s.queue_depths(), &completed, 0, 3);

    // The fix: the episode and clips are curated. Two results go back and are recorded.
    s.curate();
    let run = s
        .run(&["redrive", &completed, "--max", "2"], &[])
        .expect_code(0);
    assert_eq!(
        run.stdout.trim(),
        format!("moved 2 of the 3 dead letters in {completed}_dead_letter back to {completed}")
    );
    settles_at(s, &completed, 2, 1);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(s.status()["researched_pairs"], 2);
    assert_depth(&s.queue_depths(), &completed, 0, 1);

    // The rest; then nothing is left to move.
    let last = redrive_json(s, &[]);
    assert_eq!(last["moved"], 1, "{last}");
    assert_eq!(last["interrupted"], false, "{last}");
    settles_at(s, &completed, 1, 0);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(s.status()["researched_pairs"], 3);
    assert_depth(&s.queue_depths(), &completed, 0, 0);
    let run = s.run(&["redrive", &completed], &[]).expect_code(0);
    assert_eq!(
        run.stdout.trim(),
        format!("0 dead letters wait in {completed}_dead_letter: nothing to move")
    );

    // `receive --dead-letters` works as before: a poison clip, read off with its reason.
    s.run_with_input(
        &["send", &s.bus.clips_queue],
        "{\"title\":\"poison: not a clip\"}\n",
    )
    .expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let dead = s
        .run(
            &[
                "receive",
                &s.bus.clips_queue,
                "--dead-letters",
                "--wait",
                "5s",
            ],
            &[],
        )
        .expect_code(0)
        .json_lines();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["body"], "{\"title\":\"poison: not a clip\"}");
    assert!(dead[0]["reason"].is_string(), "{dead:?}");
}

#[test]
fn redrive_on_the_sqlite_bus() {
    dead_letters_go_back_after_the_fix(&Scenario::database(None));
}

#[test]
fn redrive_on_the_postgres_bus() {
    let db = PgDatabase::create();
    dead_letters_go_back_after_the_fix(&Scenario::database(Some(&db.url)));
}

#[test]
fn redrive_on_rabbitmq() {
    dead_letters_go_back_after_the_fix(&Scenario::rabbitmq(None));
}

#[test]
fn redrive_on_sqs() {
    dead_letters_go_back_after_the_fix(&Scenario::sqs(None));
}

/// Usage errors exit 2 and say what is wrong; nothing is moved.
#[test]
fn redrive_usage_errors() {
    let s = Scenario::database(None);
    s.run(&["queues"], &[]).expect_code(0);
    let run = s
        .run(&["redrive", "curated_clips_dead_letter"], &[])
        .expect_code(2);
    assert!(
        run.stderr.contains("is a dead-letter queue")
            && run.stderr.contains("redrive curated_clips"),
        "{}",
        run.stderr
    );
    let run = s.run(&["redrive", "no_such_queue"], &[]).expect_code(2);
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    s.run(&["redrive", "curated_clips", "--max", "0"], &[])
        .expect_code(2);
}

/// Killed inside its transaction, a redrive on the database bus has moved nothing and lost
/// nothing; run again, it moves them all.
fn killed_mid_redrive_moves_all_or_nothing(s: &Scenario) {
    let completed = s.bus.completed_queue.clone();
    s.run(&["queues"], &[]).expect_code(0);
    send_early_results(s);
    s.run(&["completed-research"], &[]).expect_code(0);
    assert_depth(&s.queue_depths(), &completed, 0, 3);

    let point = "bus-redrive-in-transaction";
    let mut env = s.bus.with(&[]);
    env.push(("ARCHIVIST_FAIL_POINT", point));
    let mut child = common::command(s.path(), &["redrive", &completed], &env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let marker = format!("fail point {point} reached");
    let mut seen = Vec::new();
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let Some(line) = lines.next() else {
            panic!(
                "redrive ended without reaching {point}: {:?}\n{}",
                child.wait(),
                seen.join("\n")
            );
        };
        let line = line.unwrap();
        if line.contains(&marker) {
            break;
        }
        seen.push(line);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_depth(&s.queue_depths(), &completed, 0, 3);

    let again = redrive_json(s, &[]);
    assert_eq!(again["moved"], 3, "{again}");
    assert_depth(&s.queue_depths(), &completed, 3, 0);
}

#[test]
fn killed_mid_redrive_on_the_sqlite_bus() {
    killed_mid_redrive_moves_all_or_nothing(&Scenario::database(None));
}

#[test]
fn killed_mid_redrive_on_the_postgres_bus() {
    let db = PgDatabase::create();
    killed_mid_redrive_moves_all_or_nothing(&Scenario::database(Some(&db.url)));
}

/// `n` poison clips, dead-lettered by a real `clips --once` run; redrive is signalled (SIGINT)
/// once its first step has moved `first_step` of them: it says so, exits 0, and every message
/// is in one queue or the other, none twice.
fn sigint_between_steps(s: &Scenario, n: usize, first_step: u64) {
    let clips = s.bus.clips_queue.clone();
    s.run(&["queues"], &[]).expect_code(0);
    let poison: Vec<String> = (0..n)
        .map(|i| json!({ "title": format!("poison {i}") }).to_string())
        .collect();
    s.run_with_input(&["send", &clips], &(poison.join("\n") + "\n"))
        .expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    assert_depth(&s.queue_depths(), &clips, 0, n as u64);

    let point = "redrive-step-done";
    let mut env = s.bus.with(&[]);
    env.push(("ARCHIVIST_PAUSE_POINT", point));
    let mut child = common::command(s.path(), &["redrive", &clips, "--json"], &env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let Some(line) = lines.next() else {
            panic!(
                "redrive ended without reaching {point}: {:?}\n{}",
                child.wait(),
                seen.join("\n")
            );
        };
        let line = line.unwrap();
        let reached = line.contains(&format!("pause point {point} reached"));
        seen.push(line);
        if reached {
            break;
        }
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // The rest of the log, so that the process never blocks on a full pipe.
    seen.extend(lines.map_while(Result::ok));
    let out = child.wait_with_output().unwrap();
    let log = seen.join("\n");
    assert_eq!(out.status.code(), Some(0), "{log}");
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["moved"], first_step, "{outcome}\n{log}");
    assert_eq!(outcome["would_move"], n, "{outcome}");
    assert_eq!(outcome["interrupted"], true, "{outcome}");
    let left = n as u64 - first_step;
    settles_at(s, &clips, first_step, left);

    // Every body once: the moved ones on the queue, the rest still dead letters.
    let mut bodies: Vec<String> = s
        .run(
            &["receive", &clips, "--max", &n.to_string(), "--wait", "2s"],
            &[],
        )
        .expect_code(0)
        .stdout
        .lines()
        .map(str::to_string)
        .collect();
    bodies.extend(
        s.run(
            &[
                "receive",
                &clips,
                "--dead-letters",
                "--max",
                &n.to_string(),
                "--wait",
                "2s",
            ],
            &[],
        )
        .expect_code(0)
        .json_lines()
        .iter()
        .map(|d| d["body"].as_str().unwrap().to_string()),
    );
    bodies.sort();
    let mut expected = poison;
    expected.sort();
    assert_eq!(bodies, expected);
}

#[test]
fn sigint_between_batches_on_sqs() {
    sigint_between_steps(&Scenario::sqs(None), 25, 10);
}

#[test]
fn sigint_between_batches_on_rabbitmq() {
    sigint_between_steps(&Scenario::rabbitmq(None), 120, messagebus::REDRIVE_BATCH);
}
