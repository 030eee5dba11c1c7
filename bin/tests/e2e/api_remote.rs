//! Remote researchers through the real gateway, not a fake: `archivist serve --api` on the
//! database bus (SQLite and Postgres) or RabbitMQ, `archivist research --server URL`
//! processes with an `--exec` analyser, a researcher's token and no bus of their own, and the
//! archivists run locally: every pair researched exactly once, with the matches a local
//! researcher records; also when a researcher is killed mid-item, when the gateway is killed
//! mid-results and started again, and the work-assignment rule counting remote researchers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Child;
use std::time::Instant;

use crate::common::api::{create_token, spawn_remote_researcher, start_gateway, DEADLINE};
use crate::common::research::{eventually, exits_within, free_port, python, shell, signal, World};
use crate::common::{BusEnv, PgDatabase, Run};

/// Every pair researched once, with the answers a local researcher's give, and nothing left
/// on the queues.
fn assert_all_researched_once(w: &World) {
    let s = w.status();
    let pairs = (w.episodes * w.clips) as u64;
    assert_eq!(s["research_pairs"], pairs, "{s}");
    assert_eq!(s["researched_pairs"], pairs, "{s}");
    assert_eq!(s["failed_pairs"], 0, "{s}");
    assert_eq!(s["active_leases"], 0, "{s}");
    // A pair recorded twice would show as two stored results or a second match.
    assert_eq!(w.matches(), w.expected_matches());
    assert_eq!(w.stored_results(), w.expected_results());
    let depths = w.queue_depths();
    for q in [&w.bus.pending_queue, &w.bus.completed_queue] {
        let q = &depths[q.as_str()];
        assert_eq!(q["waiting"], 0, "{depths:?}");
        assert_eq!(q["in_flight"], 0, "{depths:?}");
        assert_eq!(q["dead_letters"], 0, "{depths:?}");
    }
}

/// The pending-research queue's (waiting, in flight).
fn pending(w: &World) -> (u64, u64) {
    let d = w.queue_depths();
    let q = &d[w.bus.pending_queue.as_str()];
    (
        q["waiting"].as_u64().unwrap(),
        q["in_flight"].as_u64().unwrap(),
    )
}

/// How many times the analyser (with `SCRIPT` and `STATE_DIR`) started on episode `i`.
fn tries(state: &std::path::Path, i: usize) -> u32 {
    std::fs::read_to_string(state.join(format!("tries-Episode_{i}")))
        .map_or(0, |t| t.trim().parse().unwrap())
}

/// A world of `episodes` items (one per episode, `clips` clips each) with its researcher's
/// token, migrated and curated, on the database bus with the datastore at `database_url`.
fn world(database_url: Option<&str>, episodes: usize, clips: usize) -> (World, String) {
    let mut w = World::new(BusEnv::database(), database_url, episodes, clips);
    w.bus.set("ARCHIVIST_MAX_CLIPS", &clips.to_string());
    w.curate();
    let token = create_token(&w, "researcher", "remote");
    (w, token)
}

/// Rounds as an operator's cron would run them: work handed out for two researchers, two
/// remote researchers taking what waits, then the results recorded; until every pair is
/// recorded.
fn remote_researchers_research_every_pair_once(database_url: Option<&str>) {
    let mut w = World::new(BusEnv::database(), database_url, 4, 3);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "2");
    w.curate();
    let token = create_token(&w, "researcher", "remote");
    let (_gateway, addr) = start_gateway(&w, "127.0.0.1:0", &[]);
    let pairs = 4 * 3;
    let until = Instant::now() + DEADLINE;
    loop {
        w.run(&["pending-research"], &[("ARCHIVIST_RESEARCHERS", "2")])
            .expect_code(0);
        let children: Vec<Child> = (0..2)
            .map(|_| {
                spawn_remote_researcher(
                    &w,
                    &addr,
                    &token,
                    &["--once", "--concurrency", "1"],
                    &shell(),
                    &[],
                )
            })
            .collect();
        for child in children {
            let run = Run::from_output(child.wait_with_output().unwrap()).expect_code(0);
            assert!(
                !run.stderr.contains(&token) && !run.stdout.contains(&token),
                "the token reached the researcher's output"
            );
        }
        w.run(&["completed-research"], &[]).expect_code(0);
        let s = w.status();
        let done = s["researched_pairs"].as_u64().unwrap() + s["failed_pairs"].as_u64().unwrap();
        if done == pairs {
            break;
        }
        assert!(Instant::now() < until, "not done in time: {s}");
    }
    assert_all_researched_once(&w);
}

#[test]
fn remote_researchers_research_every_pair_once_on_the_sqlite_bus() {
    remote_researchers_research_every_pair_once(None);
}

#[test]
fn remote_researchers_research_every_pair_once_on_the_postgres_bus() {
    let db = PgDatabase::create();
    remote_researchers_research_every_pair_once(Some(&db.url));
}

/// A remote researcher SIGKILLed while its analyser works on an item: the item comes back
/// when its visibility runs out (made to run out now: the bus's visibility, not 60 s), and
/// another remote researcher researches every pair, each once.
fn sigkill_a_remote_researcher_mid_item(database_url: Option<&str>) {
    let (w, token) = world(database_url, 2, 3);
    let (_gateway, addr) = start_gateway(&w, "127.0.0.1:0", &[]);
    w.run(&["pending-research"], &[("ARCHIVIST_RESEARCHERS", "2")])
        .expect_code(0);
    // The analyser writes progress lines for ever: killed, the researcher's broken pipe ends
    // it. Its pid file says it holds an item.
    let pidfile = w.path().join("analyser.pid");
    let shown = pidfile.display().to_string();
    let killed = spawn_remote_researcher(
        &w,
        &addr,
        &token,
        &["--concurrency", "1"],
        &python(&["tick"]),
        &[("PIDFILE", &shown)],
    );
    eventually("the analyser to start", DEADLINE, || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| !p.trim().is_empty())
    });
    let analyser: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pending(&w), (1, 1), "it holds one item, the other waits");
    signal(killed.id(), "KILL");
    let _ = killed.wait_with_output();
    eventually("the orphaned analyser to exit", DEADLINE, || {
        common::research::process_gone(analyser)
    });
    // Still held: nobody gave it back.
    assert_eq!(pending(&w), (1, 1));
    common::expire_visibility(&w.database_url());
    assert_eq!(pending(&w), (2, 0), "its item is back");
    let state = w.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let state_dir = state.display().to_string();
    let other = spawn_remote_researcher(
        &w,
        &addr,
        &token,
        &["--once", "--concurrency", "1"],
        &python(&[]),
        &[("SCRIPT", "{}"), ("STATE_DIR", &state_dir)],
    );
    exits_within(other, "the other researcher", DEADLINE).expect_code(0);
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched_once(&w);
    for i in 0..w.episodes {
        assert_eq!(
            tries(&state, i),
            1,
            "episode {i}: analysed once after the kill"
        );
    }
}

#[test]
fn sigkill_a_remote_researcher_mid_item_on_the_sqlite_bus() {
    sigkill_a_remote_researcher_mid_item(None);
}

#[test]
fn sigkill_a_remote_researcher_mid_item_on_the_postgres_bus() {
    let db = PgDatabase::create();
    sigkill_a_remote_researcher_mid_item(Some(&db.url));
}

/// The gateway SIGKILLed while two remote researchers hold items with results sent and
/// more to come, and started again on the same address: the researchers carry on with the
/// items they hold (the receipts are the bus's, durable), every result arrives, each item
/// is finished (none waits for its visibility to run out: the queue is empty the moment
/// they exit) and analysed once.
fn sigkill_the_gateway_mid_results(database_url: Option<&str>) {
    let (w, token) = world(database_url, 2, 3);
    let addr = format!("127.0.0.1:{}", free_port());
    let (gateway, _) = start_gateway(&w, &addr, &[]);
    w.run(&["pending-research"], &[("ARCHIVIST_RESEARCHERS", "2")])
        .expect_code(0);
    let state = w.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let state_dir = state.display().to_string();
    let gate = w.path().join("gate");
    let gate_shown = gate.display().to_string();
    // Each analyser answers its first clip, then waits at the gate (a first try; a second
    // would run through).
    let script = r#"{"Episode 0": [["wait-after", "1"]], "Episode 1": [["wait-after", "1"]]}"#;
    let researchers: Vec<Child> = (0..2)
        .map(|_| {
            spawn_remote_researcher(
                &w,
                &addr,
                &token,
                &["--once", "--concurrency", "1"],
                &python(&[]),
                &[
                    ("GATE", gate_shown.as_str()),
                    ("SCRIPT", script),
                    ("STATE_DIR", state_dir.as_str()),
                ],
            )
        })
        .collect();
    eventually(
        "a first result of each item on completed_research",
        DEADLINE,
        || w.queue_depths()[w.bus.completed_queue.as_str()]["waiting"] == 2,
    );
    assert_eq!(pending(&w), (0, 2));
    drop(gateway); // SIGKILL, and reaped.
    let (_gateway, again) = start_gateway(&w, &addr, &[]);
    assert_eq!(again, addr);
    std::fs::write(&gate, "open").unwrap();
    for r in researchers {
        let run = exits_within(r, "a remote researcher", DEADLINE).expect_code(0);
        assert!(!run.stderr.contains(&token), "the token reached the log");
    }
    // Finished, not waiting for their visibility to run out.
    assert_eq!(pending(&w), (0, 0));
    w.run(&["completed-research"], &[]).expect_code(0);
    assert_all_researched_once(&w);
    for i in 0..w.episodes {
        assert_eq!(tries(&state, i), 1, "episode {i}: analysed once");
    }
}

#[test]
fn sigkill_the_gateway_mid_results_on_the_sqlite_bus() {
    sigkill_the_gateway_mid_results(None);
}

#[test]
fn sigkill_the_gateway_mid_results_on_the_postgres_bus() {
    let db = PgDatabase::create();
    sigkill_the_gateway_mid_results(Some(&db.url));
}

/// On RabbitMQ (the broker counts the consumers, the gateway's own receiver among them): N
/// remote researchers polling give N work items from one pending-research run in another
/// process, and once they stopped (the presence window, shortened for the test, passed),
/// they give none.
#[test]
fn remote_researchers_count_for_the_work_assignment_rule_on_rabbitmq() {
    const N: usize = 3;
    let window = std::time::Duration::from_secs(3);
    let mut w = World::new(BusEnv::rabbitmq(), None, 2 * N, 1);
    w.bus.set("ARCHIVIST_MAX_CLIPS", "1");
    w.bus.set("ARCHIVIST_PRESENCE_WINDOW", "3s");
    w.run(&["queues"], &[]).expect_code(0);
    w.curate();
    let token = create_token(&w, "researcher", "pool");
    let (_gateway, addr) = start_gateway(&w, "127.0.0.1:0", &[]);
    // They hold what they take (the analyser hangs) until they are told to stop.
    let researchers: Vec<Child> = (0..N)
        .map(|_| {
            spawn_remote_researcher(
                &w,
                &addr,
                &token,
                &[
                    "--concurrency",
                    "1",
                    "--drain-timeout",
                    "0s",
                    "--kill-grace",
                    "1s",
                ],
                &python(&["hang"]),
                &[],
            )
        })
        .collect();
    eventually("the remote researchers to be present", DEADLINE, || {
        let p = common::api::presence(&w.database_url(), window);
        p.researchers == N as u64 && p.gateway_receivers == 1
    });
    w.run(&["pending-research"], &[]).expect_code(0);
    let s = w.status();
    assert_eq!(s["active_leases"], N, "{s}");
    for r in researchers {
        signal(r.id(), "TERM");
        exits_within(r, "a remote researcher", DEADLINE).expect_code(0);
    }
    eventually("the remote researchers to lapse", DEADLINE, || {
        let p = common::api::presence(&w.database_url(), window);
        p.researchers == 0 && p.gateway_receivers == 1
    });
    // The figures a run decides on are said at DEBUG when it publishes nothing.
    let run = w
        .run(
            &["pending-research"],
            &[("RUST_LOG", "info,archivist::pending_research=debug")],
        )
        .expect_code(0);
    assert!(run.stderr.contains("researchers=0"), "{}", run.stderr);
    // No work for nobody: at most the one item the rule gives an idle pipeline (the items
    // given back may sit in the gateway's own prefetch, not counted as waiting).
    let s = w.status();
    assert!(s["active_leases"].as_u64().unwrap() <= N as u64 + 1, "{s}");
}
