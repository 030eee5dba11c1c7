//! End-to-end tests of `archivist research` through the binary: the whole pipeline with the
//! test analysers (`tests/analysers/`, Python and shell, speaking the README's protocol) on
//! the database bus (SQLite and Postgres), RabbitMQ and SQS; analysers that crash, hang,
//! print garbage or ask to try later; signals mid-item; media that is gone, failing for a
//! while, slow or too large; expired leases; and the pending-research capacity following
//! `--concurrency`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use crate::common::research::{python, shell, World};
use crate::common::{BusEnv, PgDatabase};

const PATIENCE: Duration = Duration::from_secs(120);

/// Every pair recorded exactly as the analyser answered (offsets, durations) with the media's
/// hashes, every lease ended by its last result, nothing failed or dead-lettered.
fn assert_all_researched(w: &World) {
    let s = w.status();
    let pairs = (w.episodes * w.clips) as u64;
    assert_eq!(s["research_pairs"], pairs, "{s}");
    assert_eq!(s["researched_pairs"], pairs, "{s}");
    assert_eq!(s["failed_pairs"], 0, "{s}");
    // `revoke_lease` on each item's last result ended its lease: none is left to expire.
    assert_eq!(s["active_leases"], 0, "{s}");
    assert_eq!(w.matches(), w.expected_matches());
    assert_eq!(w.stored_results(), w.expected_results());
    let depths = w.queue_depths();
    for q in [&w.bus.pending_queue, &w.bus.completed_queue] {
        assert_eq!(depths[q.as_str()]["dead_letters"], 0, "{q}: {depths:?}");
    }
}

#[test]
fn python_analyser_two_researchers_on_the_sqlite_bus() {
    let w = World::new(BusEnv::database(), None, 5, 4);
    w.curate();
    w.research_rounds(2, "2", &python(&[]), PATIENCE);
    assert_all_researched(&w);
    // The episodes were fetched once per item: each episode has two items (2 clips each).
    for i in 0..w.episodes {
        assert!(w.server.hits(&format!("/media/e{i}.mp3")) <= 2);
    }
}

/// An analyser's scores reach `matches` (JSON lines and the table), one per offset in their
/// order, on SQLite and on Postgres; the shell analyser's matches, without scores, carry none.
#[test]
fn scores_from_the_analyser_reach_matches() {
    let db = PgDatabase::create();
    for url in [None, Some(db.url.as_str())] {
        let w = World::new(BusEnv::database(), url, 3, 3);
        w.curate();
        w.research_rounds(1, "2", &python(&["scores"]), PATIENCE);
        assert_all_researched(&w);
        let lines = w.run(&["matches"], &[]).expect_code(0).json_lines();
        assert_eq!(lines.len(), w.expected_matches().len(), "{lines:?}");
        let score = |o: i64| ((o / 1_000_000) % 101) as f64 / 100.0;
        for m in &lines {
            let offsets: Vec<i64> = m["clip_offsets_ns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_i64().unwrap())
                .collect();
            let scores: Vec<f64> = m["clip_match_scores"]
                .as_array()
                .unwrap_or_else(|| panic!("no scores in {m}"))
                .iter()
                .map(|s| s.as_f64().unwrap())
                .collect();
            assert_eq!(
                scores,
                offsets.iter().map(|&o| score(o)).collect::<Vec<_>>(),
                "{m}"
            );
        }
        // The table shows each offset with its score beside it.
        let table = w
            .run(&["matches", "--format", "table"], &[])
            .expect_code(0)
            .stdout;
        for m in &lines {
            let first = m["clip_offsets_ns"][0].as_i64().unwrap();
            let ms = first / 1_000_000;
            let shown = format!(
                "{}:{:02}:{:02}.{:03} ({:.2})",
                ms / 3_600_000,
                ms / 60_000 % 60,
                ms / 1000 % 60,
                ms % 1000,
                score(first)
            );
            assert!(table.contains(&shown), "{shown} in\n{table}");
        }
    }
    // Without scores: none in the JSON lines.
    let w = World::new(BusEnv::database(), None, 3, 3);
    w.curate();
    w.research_rounds(1, "2", &shell(), PATIENCE);
    for m in w.run(&["matches"], &[]).expect_code(0).json_lines() {
        assert!(m.get("clip_match_scores").is_none(), "{m}");
    }
}

#[test]
fn shell_analyser_four_researchers_on_the_postgres_bus() {
    let db = PgDatabase::create();
    let w = World::new(BusEnv::database(), Some(&db.url), 5, 4);
    w.curate();
    w.research_rounds(4, "1", &shell(), PATIENCE);
    assert_all_researched(&w);
}

#[test]
fn shell_analyser_two_researchers_on_the_sqlite_bus() {
    let w = World::new(BusEnv::database(), None, 4, 3);
    w.curate();
    w.research_rounds(2, "2", &shell(), PATIENCE);
    assert_all_researched(&w);
}

#[test]
fn python_analyser_four_researchers_on_the_postgres_bus() {
    let db = PgDatabase::create();
    let w = World::new(BusEnv::database(), Some(&db.url), 5, 4);
    w.curate();
    w.research_rounds(4, "1", &python(&["progress"]), PATIENCE);
    assert_all_researched(&w);
}

#[test]
fn python_analyser_two_researchers_on_rabbitmq() {
    let w = World::new(BusEnv::rabbitmq(), None, 4, 3);
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    w.research_rounds(2, "2", &python(&["progress"]), PATIENCE);
    assert_all_researched(&w);
}

#[test]
fn shell_analyser_two_researchers_on_sqs() {
    let w = World::new(BusEnv::sqs(), None, 4, 3);
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    w.research_rounds(2, "2", &shell(), PATIENCE);
    assert_all_researched(&w);
}

/// One episode with four clips in one work item, on the SQLite database bus, with the
/// queues' receive limit at `max_receives`.
fn one_item_world(max_receives: &str) -> World {
    one_item_world_on(BusEnv::database(), None, max_receives)
}

/// [`one_item_world`] on `bus` with the datastore at `database_url`.
fn one_item_world_on(bus: BusEnv, database_url: Option<&str>, max_receives: &str) -> World {
    let mut w = World::new(bus, database_url, 1, 4);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "4");
    w.bus.set("ARCHIVIST_MAX_RECEIVES", max_receives);
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    w.pending_research_at_once(1, Some("1"));
    w
}

/// The pending-research queue's depths: (waiting, in flight, dead letters).
fn pending_depths(w: &World) -> (u64, u64, u64) {
    let d = w.queue_depths();
    let q = &d[w.bus.pending_queue.as_str()];
    (
        q["waiting"].as_u64().unwrap(),
        q["in_flight"].as_u64().unwrap(),
        q["dead_letters"].as_u64().unwrap(),
    )
}

#[test]
fn a_crash_after_two_clips_keeps_them_and_the_next_try_finishes() {
    crash_after_two_clips(one_item_world("5"));
}

#[test]
fn a_crash_after_two_clips_on_the_postgres_bus() {
    let db = PgDatabase::create();
    crash_after_two_clips(one_item_world_on(BusEnv::database(), Some(&db.url), "5"));
}

/// The first try crashes after two answers; the second hangs, so that the test can look at
/// what was recorded between the two; the third finishes.
fn crash_after_two_clips(w: World) {
    let state = w.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let state = state.display().to_string();
    let script = r#"{"Episode 0": [["crash-after", "2"], ["hang"]]}"#;
    let env = [("SCRIPT", script), ("STATE_DIR", state.as_str())];
    let child = w.spawn_research(
        &[
            "--concurrency",
            "1",
            "--drain-timeout",
            "1s",
            "--kill-grace",
            "1s",
        ],
        &python(&[]),
        &env,
    );
    let tries = w.path().join("state/tries-Episode_0");
    common::research::eventually("the second try", PATIENCE, || {
        std::fs::read_to_string(&tries).is_ok_and(|t| t.trim() == "2")
    });
    // The crashed try's two answers were sent before the item went back: recorded now, while
    // the second try has answered nothing.
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(s["researched_pairs"], 2, "{s}");
    assert_eq!(s["failed_pairs"], 0, "{s}");
    let first = w.stored_results();
    let expected = w.expected_results();
    assert_eq!(first.len(), 2, "{first:?}");
    for (pair, stored) in &first {
        assert_eq!(Some(stored), expected.get(pair), "{pair:?}");
    }
    common::research::signal(child.id(), "TERM");
    let run = common::research::exits_within(child, "the researcher", PATIENCE).expect_code(0);
    assert!(run.stderr.contains("exited with code 3"), "{}", run.stderr);
    // The analyser's standard error, in the researcher's log.
    assert!(
        run.stderr.contains("analyser: crashing on purpose"),
        "{}",
        run.stderr
    );
    assert_eq!(pending_depths(&w), (1, 0, 0));
    w.research_once(&[], &python(&[]), &env).expect_code(0);
    let recorded = w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
    assert_eq!(pending_depths(&w), (0, 0, 0));
    // The two answered before came again: duplicates, not recorded twice.
    let duplicates: u64 = recorded
        .stderr
        .split("duplicates=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no duplicates count in {}", recorded.stderr));
    assert!(duplicates >= 2, "{}", recorded.stderr);
    let last = w.stored_results();
    for (pair, stored) in &first {
        assert_eq!(Some(stored), last.get(pair), "{pair:?} changed");
    }
}

#[test]
fn a_hanging_analyser_is_stopped_at_the_stall_timeout() {
    let w = one_item_world("2");
    let pidfile = w.path().join("pid").display().to_string();
    let run = w
        .research_once(
            &["--stall-timeout", "1s", "--kill-grace", "1s"],
            &python(&["hang"]),
            &[("PIDFILE", &pidfile)],
        )
        .expect_code(0);
    assert!(run.stderr.contains("--stall-timeout"), "{}", run.stderr);
    // Tried up to the receive limit, then set aside.
    assert_eq!(pending_depths(&w), (0, 0, 1));
    // Killed as the researcher gave up; it may take a moment to go. (Under load the analyser
    // may be stopped before it got as far as writing its pid: then there is nothing left.)
    if let Ok(pid) = std::fs::read_to_string(&pidfile) {
        let pid: u32 = pid.trim().parse().unwrap();
        common::research::eventually(&format!("analyser {pid} to stop"), PATIENCE, || {
            common::research::process_gone(pid)
        });
    }
}

#[test]
fn garbage_unknown_clips_and_exit_75_fail_or_release_the_item() {
    for (mode, said) in [
        (
            "garbage",
            "broke the protocol (not a JSON object) in the line \"this is not json\"",
        ),
        ("unknown-clip", "unknown clip \"no such clip\""),
        (
            "bad-scores",
            "clip_match_scores: score 1.5 is not a number from 0 to 1",
        ),
        ("exit-75", "exited with 75"),
    ] {
        let w = one_item_world("2");
        let run = w.research_once(&[], &python(&[mode]), &[]).expect_code(0);
        assert!(run.stderr.contains(said), "{mode}: {}", run.stderr);
        assert_eq!(pending_depths(&w), (0, 0, 1), "{mode}");
        w.run(&["completed-research"], &[]).expect_code(0);
        assert_eq!(w.status()["researched_pairs"], 0, "{mode}");
    }
}

#[test]
fn gone_media_fails_its_pairs_until_retried() {
    gone_media_fails_its_pairs(None);
}

#[test]
fn gone_media_fails_its_pairs_until_retried_on_the_postgres_bus() {
    let db = PgDatabase::create();
    gone_media_fails_its_pairs(Some(&db.url));
}

fn gone_media_fails_its_pairs(database_url: Option<&str>) {
    let mut w = World::new(BusEnv::database(), database_url, 2, 3);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "3");
    w.curate();
    // Episode 1's media is gone; clip 2's file too.
    w.server
        .set("/media/e1.mp3", common::research::Answer::NotFound);
    let clip2 = w.path().join("media/c2.mp3");
    let clip2_bytes = std::fs::read(&clip2).unwrap();
    std::fs::remove_file(&clip2).unwrap();
    w.research_rounds(1, "2", &python(&[]), PATIENCE);
    let s = w.status();
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(2), Some(4)),
        "{s}"
    );
    let reasons = s["failure_reasons"].to_string();
    assert!(
        reasons.contains("episode media gone: HTTP 404 Not Found"),
        "{reasons}"
    );
    assert!(reasons.contains("clip media gone: no file"), "{reasons}");
    let table = w.run(&["status"], &[]).expect_code(0).stdout;
    assert!(
        table.contains("failed pairs") && table.contains("HTTP 404"),
        "{table}"
    );
    // The status page, its API and the metrics show them.
    let port = common::research::free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = common::command(w.path(), &["serve", "--addr", &addr], &w.bus.with(&[]))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut page = String::new();
    common::research::eventually("the status page", PATIENCE, || {
        page = common::research::http_get(port, "/").unwrap_or_default();
        page.contains("failed-pairs")
    });
    assert!(page.contains("HTTP 404"), "{page}");
    let api = common::research::http_get(port, "/api/status").unwrap();
    assert!(api.contains("\"failed_pairs\":4"), "{api}");
    let metrics = common::research::http_get(port, "/metrics").unwrap();
    assert!(metrics.contains("archivist_pairs_failed 4"), "{metrics}");
    common::research::signal(server.id(), "TERM");
    let _ = server.wait_with_output();
    // Not leased again.
    w.pending_research_at_once(1, Some("4"));
    assert_eq!(w.status()["active_leases"], 0);
    assert_eq!(pending_depths(&w).0, 0);
    // The media is back; a person retries.
    w.server.set(
        "/media/e1.mp3",
        common::research::Answer::Body(common::research::episode_audio(1, 3)),
    );
    std::fs::write(&clip2, clip2_bytes).unwrap();
    let retried = w
        .run(&["retry-failed", "--episode", "Episode 1", "--json"], &[])
        .expect_code(0);
    let retried: serde_json::Value = serde_json::from_str(retried.stdout.trim()).unwrap();
    assert_eq!(retried["retried"], 3, "{retried}");
    let all = w.run(&["retry-failed"], &[]).expect_code(0);
    assert!(all.stdout.starts_with("1 failed pair"), "{}", all.stdout);
    w.research_rounds(1, "2", &python(&[]), PATIENCE);
    assert_all_researched(&w);
}

#[test]
fn media_failing_for_a_while_slow_or_too_large() {
    use common::research::{episode_audio, Answer};
    let mut w = World::new(BusEnv::database(), None, 3, 2);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "2");
    w.curate();
    // Episode 0: 500 twice, then 200; episode 1: slow; episode 2: too large for the limit.
    w.server
        .set("/media/e0.mp3", Answer::FailThen(2, episode_audio(0, 2)));
    w.server
        .set("/media/e1.mp3", Answer::Slow(20, episode_audio(1, 2)));
    let mut large = episode_audio(2, 2);
    large.extend(std::iter::repeat_n(b'#', 4096));
    w.server.set("/media/e2.mp3", Answer::Body(large));
    w.pending_research_at_once(1, Some("3"));
    let run = w
        .research_once(
            &["--concurrency", "3", "--max-media-size", "2KB"],
            &python(&[]),
            &[],
        )
        .expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(4), Some(2)),
        "{s}\n{}",
        run.stderr
    );
    assert_eq!(w.server.hits("/media/e0.mp3"), 3);
    assert!(
        s["failure_reasons"].to_string().contains("media too large"),
        "{s}"
    );
    let expected: std::collections::BTreeSet<_> = w
        .expected_matches()
        .into_iter()
        .filter(|(e, _, _)| e != "Episode 2")
        .collect();
    assert_eq!(w.matches(), expected);
}

#[test]
fn an_item_whose_lease_expired_is_skipped() {
    let mut w = World::new(BusEnv::database(), None, 1, 2);
    w.bus.set("ARCHIVIST_LEASE_DURATION", "1s");
    w.curate();
    w.pending_research_at_once(1, Some("1"));
    // Time, not work, is what this waits for: the lease's second.
    std::thread::sleep(Duration::from_millis(1500));
    let run = w.research_once(&[], &python(&[]), &[]).expect_code(0);
    assert!(run.stderr.contains("lease has expired"), "{}", run.stderr);
    assert_eq!(pending_depths(&w), (0, 0, 0));
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(w.status()["researched_pairs"], 0);
}

/// An analyser quiet after its first answer: that answer goes out at once (so it renews the
/// lease while the analyser works on), not held back until the next line or the item's end.
#[test]
fn an_answer_goes_out_while_the_analyser_works_on() {
    let w = one_item_world("5");
    let child = w.spawn_research(
        &[
            "--concurrency",
            "1",
            "--drain-timeout",
            "1s",
            "--kill-grace",
            "1s",
        ],
        &python(&["hang-after", "1"]),
        &[],
    );
    common::research::eventually("the first answer on the bus", PATIENCE, || {
        let d = w.queue_depths();
        d[w.bus.completed_queue.as_str()]["waiting"].as_u64() == Some(1)
    });
    // Still working on the item: nothing else was sent, the item is in hand.
    assert_eq!(pending_depths(&w), (0, 1, 0));
    common::research::signal(child.id(), "TERM");
    common::Run::from_output(child.wait_with_output().unwrap()).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(w.status()["researched_pairs"], 1);
    // The rest is researched on the next try, and the lease ends with it.
    w.research_once(&[], &python(&[]), &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
    assert_eq!(w.status()["active_leases"], 0);
}

/// Starts a long-running researcher with the hanging analyser and waits until the analyser
/// runs (its pid file); returns the researcher and the analyser's pid.
fn researcher_mid_item(w: &World, args: &[&str]) -> (std::process::Child, u32) {
    researcher_mid_item_with(w, args, "hang")
}

/// [`researcher_mid_item`] with the Python analyser in `mode` (`hang` or `tick`).
fn researcher_mid_item_with(w: &World, args: &[&str], mode: &str) -> (std::process::Child, u32) {
    let pidfile = w
        .path()
        .join(format!("pid-{}", uuid::Uuid::new_v4().simple()));
    let shown = pidfile.display().to_string();
    let child = w.spawn_research(args, &python(&[mode]), &[("PIDFILE", &shown)]);
    common::research::eventually("the analyser to start", PATIENCE, || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| !p.trim().is_empty())
    });
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (child, pid)
}

#[test]
fn sigterm_mid_item_releases_it_at_the_drain_timeout() {
    sigterm_mid_item(one_item_world("5"));
}

#[test]
fn sigterm_mid_item_on_sqs_releases_it_at_once() {
    sigterm_mid_item(one_item_world_on(BusEnv::sqs(), None, "5"));
}

#[test]
fn sigterm_mid_item_on_the_postgres_bus_releases_it_at_once() {
    let db = PgDatabase::create();
    sigterm_mid_item(one_item_world_on(BusEnv::database(), Some(&db.url), "5"));
}

#[test]
fn sigterm_mid_item_on_rabbitmq_releases_it_at_once() {
    sigterm_mid_item(one_item_world_on(BusEnv::rabbitmq(), None, "5"));
}

fn sigterm_mid_item(w: World) {
    let port = common::research::free_port();
    let addr = format!("127.0.0.1:{port}");
    let (child, analyser) = researcher_mid_item(
        &w,
        &[
            "--concurrency",
            "1",
            "--drain-timeout",
            "1s",
            "--kill-grace",
            "1s",
            "--metrics-addr",
            &addr,
        ],
    );
    // What it works on, and its metrics.
    let mut state = serde_json::Value::Null;
    common::research::eventually("the analyser's progress", PATIENCE, || {
        state = common::research::http_get(port, "/api/researcher")
            .and_then(|b| serde_json::from_str(&b).ok())
            .unwrap_or_default();
        state["slots"][0]["progress"] == "decoding"
    });
    assert_eq!(state["slots"][0]["state"], "working", "{state}");
    assert_eq!(state["slots"][0]["episode_title"], "Episode 0", "{state}");
    assert_eq!(state["slots"][0]["progress"], "decoding", "{state}");
    let metrics = common::research::http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("archivist_researcher_items_taken_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("archivist_researcher_slots_busy 1"),
        "{metrics}"
    );
    common::research::signal(child.id(), "TERM");
    // The drain (1 s), the analyser's grace (1 s), the release: seconds, not a timeout's worth.
    let run = common::research::exits_within(child, "the researcher", Duration::from_secs(15))
        .expect_code(0);
    assert!(run.stderr.contains("drain timeout"), "{}", run.stderr);
    // Released at once: waiting again, not in flight until a visibility timeout.
    assert_eq!(pending_depths(&w), (1, 0, 0));
    assert!(!std::path::Path::new(&format!("/proc/{analyser}")).exists());
    w.research_once(&[], &python(&[]), &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
}

#[test]
fn sigkill_mid_item_leaves_it_to_another_researcher() {
    sigkill_mid_item(one_item_world("5"), Redelivery::AfterVisibilityTimeout);
}

#[test]
fn sigkill_mid_item_on_the_postgres_bus() {
    let db = PgDatabase::create();
    sigkill_mid_item(
        one_item_world_on(BusEnv::database(), Some(&db.url), "5"),
        Redelivery::AfterVisibilityTimeout,
    );
}

#[test]
fn sigkill_mid_item_on_rabbitmq_redelivers_when_the_connection_drops() {
    sigkill_mid_item(
        one_item_world_on(BusEnv::rabbitmq(), None, "5"),
        Redelivery::WhenTheConnectionDrops,
    );
}

/// SQS: nobody extends the dead researcher's message any more, so it comes back when the
/// visibility its heartbeat last set runs out (the queue's 30 s, which the test waits for:
/// SQS has no way to end another consumer's visibility early without its receipt).
#[test]
fn sigkill_mid_item_on_sqs_comes_back_after_the_visibility_timeout() {
    sigkill_mid_item(
        one_item_world_on(BusEnv::sqs(), None, "5"),
        Redelivery::WhenItsVisibilityRunsOut,
    );
}

/// When a bus gives a dead researcher's item to another.
enum Redelivery {
    /// The database bus: once the visibility timeout runs out (the test makes it run out).
    AfterVisibilityTimeout,
    /// SQS: once the visibility timeout runs out (the test waits for it).
    WhenItsVisibilityRunsOut,
    /// RabbitMQ: as soon as the broker sees the connection gone.
    WhenTheConnectionDrops,
}

fn sigkill_mid_item(w: World, redelivery: Redelivery) {
    let (child, analyser) = researcher_mid_item(&w, &[]);
    common::research::signal(child.id(), "KILL");
    let _ = child.wait_with_output();
    // The analyser lives on in its own process group until it writes to its broken output
    // (README, the analyser protocol); the hanging one never writes, so the test stops it.
    common::research::signal(analyser, "KILL");
    match redelivery {
        Redelivery::AfterVisibilityTimeout => {
            assert_eq!(pending_depths(&w).1, 1, "held until its visibility timeout");
            common::expire_visibility(&w.database_url());
        }
        Redelivery::WhenItsVisibilityRunsOut => {
            assert_eq!(pending_depths(&w).1, 1, "held until its visibility timeout");
            common::research::eventually("the item back on the queue", PATIENCE, || {
                pending_depths(&w) == (1, 0, 0)
            });
        }
        Redelivery::WhenTheConnectionDrops => {
            common::research::eventually("the item back on the queue", PATIENCE, || {
                pending_depths(&w) == (1, 0, 0)
            });
        }
    }
    w.research_once(&[], &python(&[]), &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
}

/// A researcher killed outright cannot stop its analyser; one that keeps writing (progress
/// lines) learns it at its next write, its output broken, and exits (README, the analyser
/// protocol).
#[test]
fn sigkill_mid_item_an_analyser_that_writes_exits_on_its_broken_output() {
    let w = one_item_world("5");
    let (child, analyser) = researcher_mid_item_with(&w, &[], "tick");
    common::research::signal(child.id(), "KILL");
    let _ = child.wait_with_output();
    common::research::eventually("the orphaned analyser to exit", PATIENCE, || {
        // Gone, or a zombie waiting for whoever adopted it to reap it.
        std::fs::read_to_string(format!("/proc/{analyser}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
    });
    common::expire_visibility(&w.database_url());
    w.research_once(&[], &python(&[]), &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
}

/// A researcher with `--concurrency 3` counts as three: one pending-research run hands out
/// exactly three items.
fn capacity_follows_concurrency(bus: BusEnv, database_url: Option<&str>) {
    let mut w = World::new(bus, database_url, 6, 1);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "1");
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    let mut child = w.spawn_research(
        &[
            "--concurrency",
            "3",
            "--drain-timeout",
            "0s",
            "--kill-grace",
            "1s",
        ],
        &python(&["hang"]),
        &[],
    );
    common::research::eventually("three consumers", PATIENCE, || {
        w.queue_depths()[w.bus.pending_queue.as_str()]["consumers"] == 3
    });
    w.pending_research_at_once(1, None);
    let s = w.status();
    assert_eq!(s["active_leases"], 3, "{s}");
    common::research::signal(child.id(), "TERM");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn capacity_follows_concurrency_on_the_database_bus() {
    capacity_follows_concurrency(BusEnv::database(), None);
}

#[test]
fn capacity_follows_concurrency_on_the_postgres_bus() {
    let db = PgDatabase::create();
    capacity_follows_concurrency(BusEnv::database(), Some(&db.url));
}

#[test]
fn capacity_follows_concurrency_on_rabbitmq() {
    capacity_follows_concurrency(BusEnv::rabbitmq(), None);
}

#[test]
fn an_http_analyser_busy_at_first() {
    let mut w = World::new(BusEnv::database(), None, 2, 3);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "3");
    w.curate();
    let service = common::research::AnalyserService::start(1);
    w.pending_research_at_once(1, Some("2"));
    let run = w
        .research_http_once(&service.url, &["--concurrency", "1"])
        .expect_code(0);
    assert!(run.stderr.contains("HTTP 503"), "{}", run.stderr);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
}

/// A service that accepts the request and never answers is a stall: the item fails at
/// `--stall-timeout` and goes back, up to the receive limit.
#[test]
fn an_http_analyser_that_never_answers_fails_at_the_stall_timeout() {
    let w = one_item_world("2");
    let service = common::research::SilentService::start();
    let run = w
        .research_once(
            &["--concurrency", "1", "--stall-timeout", "1s"],
            &common::research::http(&service.url),
            &[],
        )
        .expect_code(0);
    assert!(
        run.stderr
            .contains("the analyser did not answer within 1s (--stall-timeout)"),
        "{}",
        run.stderr
    );
    assert_eq!(service.accepted(), 2, "one request per try");
    assert_eq!(pending_depths(&w), (0, 0, 1));
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_eq!(w.status()["researched_pairs"], 0);
}

/// SIGTERM while the service holds the request unanswered: the drain timeout ends the wait,
/// the item is released at once and the researcher exits.
#[test]
fn sigterm_while_an_http_analyser_never_answers() {
    let w = one_item_world("5");
    let service = common::research::SilentService::start();
    let child = w.spawn_research(
        &["--concurrency", "1", "--drain-timeout", "1s"],
        &common::research::http(&service.url),
        &[],
    );
    common::research::eventually("the request", PATIENCE, || service.accepted() == 1);
    common::research::signal(child.id(), "TERM");
    let run = common::research::exits_within(child, "the researcher", Duration::from_secs(15))
        .expect_code(0);
    assert!(run.stderr.contains("drain timeout"), "{}", run.stderr);
    assert_eq!(pending_depths(&w), (1, 0, 0));
    let answering = common::research::AnalyserService::start(0);
    w.research_http_once(&answering.url, &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
}

/// 429 is "try later" (released, not failed); a body cut off after one answer fails the
/// item, the answer standing; the third try finishes.
#[test]
fn an_http_analyser_answering_429_then_cutting_its_body_off() {
    use common::research::Reply;
    let w = one_item_world("5");
    let service =
        common::research::AnalyserService::scripted(vec![Reply::Status(429), Reply::CutOff(1)]);
    let run = w
        .research_http_once(&service.url, &["--concurrency", "1"])
        .expect_code(0);
    assert!(run.stderr.contains("HTTP 429"), "{}", run.stderr);
    assert!(
        run.stderr.contains("work item released for later"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("the analyser's response broke off"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("work item finished"), "{}", run.stderr);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
    assert_eq!(pending_depths(&w), (0, 0, 0));
}

/// The analyser answers `failure` for a clip that is not audio: that pair is failed research
/// with the analyser's reason, not leased again, until a person retries the clip.
#[test]
fn an_analyser_rejecting_a_clip_fails_that_pair_until_retried() {
    let w = one_item_world("5");
    let clip1 = w.path().join("media/c1.mp3");
    let clip1_bytes = std::fs::read(&clip1).unwrap();
    std::fs::write(&clip1, "NOT AUDIO\n").unwrap();
    w.research_once(&[], &python(&[]), &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(3), Some(1)),
        "{s}"
    );
    assert_eq!(s["active_leases"], 0, "{s}");
    assert!(
        s["failure_reasons"]
            .to_string()
            .contains("not audio: no frames found"),
        "{s}"
    );
    // Not leased again.
    w.pending_research_at_once(1, Some("1"));
    assert_eq!(w.status()["active_leases"], 0);
    assert_eq!(pending_depths(&w), (0, 0, 0));
    // The clip is fixed; a person retries it.
    std::fs::write(&clip1, clip1_bytes).unwrap();
    let retried = w
        .run(&["retry-failed", "--clip", "Clip 1", "--json"], &[])
        .expect_code(0);
    let retried: serde_json::Value = serde_json::from_str(retried.stdout.trim()).unwrap();
    assert_eq!(retried["retried"], 1, "{retried}");
    assert_eq!(retried["clip"], "Clip 1", "{retried}");
    w.pending_research_at_once(1, Some("1"));
    w.research_once(&[], &python(&[]), &[]).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched(&w);
}

/// A scripted run and the researcher's counters after it: four items (one finished at once,
/// one crashing on its first try, one asking for later on its first, one whose episode is
/// gone), an item whose lease expired and a poison item.
#[test]
fn the_researchers_metrics_count_a_scripted_run() {
    use common::research::{episode_audio, metric, Answer};
    let w = World::new(BusEnv::database(), None, 4, 2);
    w.curate();
    w.server.set("/media/e3.mp3", Answer::NotFound);
    w.pending_research_at_once(1, Some("4"));
    let expired = serde_json::json!({
        "lease_id": uuid::Uuid::new_v4(),
        "lease_expires_at": "2026-01-01T00:00:00Z",
        "episode": w.episode_json(0, &w.server.url("/media/e0.mp3")),
        "clips": [w.clip_json(0, "/nowhere/c0.mp3")],
    });
    w.send(
        &w.bus.pending_queue.clone(),
        &[expired.to_string(), r#"{"not":"a work item"}"#.to_string()],
    );
    let state = w.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let state = state.display().to_string();
    let script = r#"{"Episode 1": [["crash-after", "1"]], "Episode 2": [["exit-75"]]}"#;
    let port = common::research::free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = w.spawn_research(
        &["--concurrency", "1", "--metrics-addr", &addr],
        &python(&[]),
        &[("SCRIPT", script), ("STATE_DIR", &state)],
    );
    let mut scrape = String::new();
    let outcome = |o: &str| format!("archivist_researcher_items_total{{outcome=\"{o}\"}}");
    common::research::eventually("every item handled", PATIENCE, || {
        scrape = common::research::http_get(port, "/metrics").unwrap_or_default();
        metric(&scrape, &outcome("finished")) == Some(4.0)
            && metric(&scrape, &outcome("skipped_expired")) == Some(1.0)
            && metric(&scrape, &outcome("poison")) == Some(1.0)
    });
    common::research::signal(child.id(), "TERM");
    common::research::exits_within(child, "the researcher", PATIENCE).expect_code(0);
    let fetched: usize = (0..3).map(|i| episode_audio(i, 2).len()).sum();
    for (name, value) in [
        // Valid bodies received: 4 items, 2 second tries, the expired one.
        ("archivist_researcher_items_taken_total".to_string(), 7.0),
        (outcome("failed"), 1.0),
        (outcome("released"), 1.0),
        (
            "archivist_researcher_clips_total{result=\"researched\"}".to_string(),
            7.0,
        ),
        (
            "archivist_researcher_clips_total{result=\"failed\"}".to_string(),
            2.0,
        ),
        // Each episode downloaded once: second tries find it in the cache.
        (
            "archivist_researcher_fetched_bytes_total".to_string(),
            fetched as f64,
        ),
        // 5 analyser runs of 3 media each; misses: the 5 media once, and the gone episode.
        ("archivist_researcher_cache_hits_total".to_string(), 10.0),
        ("archivist_researcher_cache_misses_total".to_string(), 6.0),
        // Every run, however it ended: the crash and the exit 75 too.
        (
            "archivist_researcher_analysis_duration_seconds_count".to_string(),
            5.0,
        ),
        ("archivist_researcher_slots".to_string(), 1.0),
        ("archivist_researcher_slots_busy".to_string(), 0.0),
    ] {
        assert_eq!(metric(&scrape, &name), Some(value), "{name}\n{scrape}");
    }
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(6), Some(2)),
        "{s}"
    );
}

#[test]
fn bad_usage_exits_2_and_says_why() {
    let w = World::new(BusEnv::database(), None, 1, 1);
    let run = w
        .run(&["research", "--http", "http://x", "--exec", "true"], &[])
        .expect_code(2);
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
    let run = w
        .run(&["research", "--http", "ftp://x/analyse"], &[])
        .expect_code(2);
    assert!(run.stderr.contains("http:// or https://"), "{}", run.stderr);
    // A --media-root that is not there.
    let run = w
        .run(
            &[
                "research",
                "--once",
                "--media-root",
                "/no/such/folder",
                "--exec",
                "true",
            ],
            &[],
        )
        .expect_code(2);
    assert!(
        run.stderr
            .contains("--media-root /no/such/folder: No such file"),
        "{}",
        run.stderr
    );
}

/// Sends episodes and clips with these media URIs (episode i, clip k, in order) as curated
/// items and ingests them.
fn curate_uris(w: &World, episodes: &[String], clips: &[String]) {
    let episodes: Vec<String> = episodes
        .iter()
        .enumerate()
        .map(|(i, uri)| w.episode_json(i, uri).to_string())
        .collect();
    let clips: Vec<String> = clips
        .iter()
        .enumerate()
        .map(|(k, uri)| w.clip_json(k, uri).to_string())
        .collect();
    w.run(&["migrate"], &[]).expect_code(0);
    w.send(&w.bus.episodes_queue.clone(), &episodes);
    w.send(&w.bus.clips_queue.clone(), &clips);
    w.run(&["episodes", "--once"], &[]).expect_code(0);
    w.run(&["clips", "--once"], &[]).expect_code(0);
}

/// (researched, failed) pairs, and the most common failure reasons as JSON text.
fn pairs_and_reasons(w: &World) -> ((u64, u64), String) {
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    (
        (
            s["researched_pairs"].as_u64().unwrap(),
            s["failed_pairs"].as_u64().unwrap(),
        ),
        s["failure_reasons"].to_string(),
    )
}

/// Local media that is no regular file (a character device that never ends, a FIFO nobody
/// writes) is failed research at once, saying what it is; the researcher is not held up by it
/// and stops on SIGINT.
#[test]
fn special_local_media_is_failed_research_and_the_researcher_still_stops() {
    use common::research::{clip_audio, episode_audio, Kind};
    let w = World::new(BusEnv::database(), None, 2, 2);
    let fifo = w.path().join("media/c0.fifo");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RUSR).unwrap();
    let e1 = w.place("e1.mp3", episode_audio(1, 2), Kind::Http);
    let c1 = w.place("c1.mp3", clip_audio(1), Kind::FileUrl);
    curate_uris(
        &w,
        &["/dev/zero".into(), e1],
        &[fifo.display().to_string(), c1],
    );
    w.pending_research_at_once(1, Some("2"));
    let child = w.spawn_research(&["--concurrency", "2"], &python(&[]), &[]);
    common::research::eventually("a result for every pair", PATIENCE, || {
        let d = w.queue_depths();
        d[w.bus.completed_queue.as_str()]["waiting"].as_u64() == Some(4)
    });
    common::research::signal(child.id(), "INT");
    common::research::exits_within(child, "the researcher", PATIENCE).expect_code(0);
    let (pairs, reasons) = pairs_and_reasons(&w);
    assert_eq!(pairs, (1, 3), "{reasons}");
    assert!(
        reasons.contains("episode not a regular file: /dev/zero is a character device"),
        "{reasons}"
    );
    assert!(
        reasons.contains(&format!(
            "clip not a regular file: {} is a FIFO",
            fifo.display()
        )),
        "{reasons}"
    );
}

/// With --media-root, local media outside it (a path, a symlink inside pointing out) is
/// failed research naming the flag; inside it is read.
#[test]
fn media_root_limits_where_local_media_is_read() {
    use common::research::{clip_audio, episode_audio, Kind};
    let mut w = World::new(BusEnv::database(), None, 1, 3);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "3");
    let outside = w.path().join("outside.mp3");
    std::fs::write(&outside, clip_audio(1)).unwrap();
    let link = w.path().join("media/c1.mp3");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let e0 = w.place("e0.mp3", episode_audio(0, 3), Kind::Http);
    let c2 = w.place("c2.mp3", clip_audio(2), Kind::FileUrl);
    curate_uris(
        &w,
        &[e0],
        &[
            "file:///etc/passwd".into(),
            format!("file://{}", link.display()),
            c2,
        ],
    );
    w.pending_research_at_once(1, Some("1"));
    let root = w.path().join("media").display().to_string();
    w.research_once(&["--media-root", &root], &python(&[]), &[])
        .expect_code(0);
    let (pairs, reasons) = pairs_and_reasons(&w);
    assert_eq!(pairs, (1, 2), "{reasons}");
    for refused in ["/etc/passwd".to_string(), link.display().to_string()] {
        assert!(
            reasons.contains(&format!(
                "clip media refused: {refused} is outside every --media-root"
            )),
            "{reasons}"
        );
    }
}

/// Researchers share one cache folder (two at once), and a restarted one finds what an
/// earlier one downloaded instead of downloading it again.
#[test]
fn researchers_share_a_cache_folder_that_outlives_them() {
    use common::research::{clip_audio, episode_audio, free_port, http_get, Kind};
    let mut w = World::new(BusEnv::database(), None, 2, 1);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "1");
    let e0 = w.place("e0.mp3", episode_audio(0, 1), Kind::Http);
    let e1 = w.place("e1.mp3", episode_audio(1, 1), Kind::Http);
    let c0 = w.place("c0.mp3", clip_audio(0), Kind::Http);
    curate_uris(&w, &[e0, e1], &[c0]);
    let cache = w.path().join("shared-cache").display().to_string();
    // One item, one researcher: it downloads the clip, and exits.
    w.pending_research_at_once(1, Some("1"));
    w.research_once(&["--cache-dir", &cache], &python(&[]), &[])
        .expect_code(0);
    assert_eq!(pairs_and_reasons(&w).0, (1, 0));
    assert_eq!(w.server.hits("/media/c0.mp3"), 1);
    // Two researchers on that folder at once, either of them taking the other item.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let long = w.spawn_research(
        &["--cache-dir", &cache],
        &python(&[]),
        &[("ARCHIVIST_METRICS_ADDR", &addr)],
    );
    common::research::eventually("the long-running researcher", PATIENCE, || {
        http_get(port, "/healthz").is_some()
    });
    w.pending_research_at_once(1, Some("2"));
    w.research_once(&["--cache-dir", &cache], &python(&[]), &[])
        .expect_code(0);
    common::research::eventually("the other item researched", PATIENCE, || {
        pairs_and_reasons(&w).0 == (2, 0)
    });
    common::research::signal(long.id(), "TERM");
    common::research::exits_within(long, "the researcher", PATIENCE).expect_code(0);
    assert_eq!(
        w.server.hits("/media/c0.mp3"),
        1,
        "downloaded again after a restart"
    );
}

/// A failure reason names the media by its URI, not by the researcher's cache file (which
/// means nothing once the researcher is gone).
#[test]
fn a_failure_reason_names_the_media_uri_not_the_cache_file() {
    use common::research::{clip_audio, Kind};
    let w = World::new(BusEnv::database(), None, 1, 1);
    let e0 = w.place("e0.mp3", b"not audio at all".repeat(64), Kind::Http);
    let c0 = w.place("c0.mp3", clip_audio(0), Kind::FileUrl);
    curate_uris(&w, std::slice::from_ref(&e0), &[c0]);
    w.pending_research_at_once(1, Some("1"));
    let cache = w.path().join("cache-reference").display().to_string();
    // The reference analyser, which names the files it cannot decode.
    w.run(&["research", "--once", "--cache-dir", &cache], &[])
        .expect_code(0);
    let (pairs, reasons) = pairs_and_reasons(&w);
    assert_eq!(pairs, (0, 1), "{reasons}");
    assert!(
        reasons.contains(&format!("the episode: {e0}: ")),
        "{reasons}"
    );
    assert!(!reasons.contains(&cache), "{reasons}");
}

#[test]
fn run_and_long_running_researchers_finish_the_archive() {
    let mut w = World::new(BusEnv::database(), None, 6, 4);
    w.bus.set("ARCHIVIST_EVERY", "1s");
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    let archivists = common::command(w.path(), &["run"], &w.bus.with(&[]))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let researchers: Vec<_> = (0..2)
        .map(|_| w.spawn_research(&["--concurrency", "2"], &python(&["progress"]), &[]))
        .collect();
    common::research::eventually("every pair researched", PATIENCE, || {
        w.status()["researched_pairs"] == 24
    });
    for child in researchers.into_iter().chain([archivists]) {
        common::research::signal(child.id(), "TERM");
        let out = common::Run::from_output(child.wait_with_output().unwrap());
        out.expect_code(0);
    }
    assert_all_researched(&w);
}

#[test]
fn media_too_slow_for_the_read_timeout_fails_the_item_not_the_pairs() {
    use common::research::{episode_audio, Answer};
    let w = one_item_world("1");
    w.server
        .set("/media/e0.mp3", Answer::Slow(500, episode_audio(0, 4)));
    let run = w
        .research_once(
            &["--fetch-read-timeout", "100ms", "--fetch-attempts", "2"],
            &python(&[]),
            &[],
        )
        .expect_code(0);
    assert!(run.stderr.contains("after 2 tries"), "{}", run.stderr);
    // A passing failure: retried up to the receive limit, then set aside; never failed pairs.
    assert_eq!(pending_depths(&w), (0, 0, 1));
    w.run(&["completed-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(
        (s["researched_pairs"].as_u64(), s["failed_pairs"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
}
