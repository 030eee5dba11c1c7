//! End-to-end tests of the `archivist` binary across processes on the database bus, with no
//! bus configured at all (the default: queues in the datastore's own database): the pipeline
//! (`common::pipeline`) on an SQLite file and on a fresh Postgres database; work assignment
//! following the researchers the bus counts; and crashes (SIGKILL at a fail point inside the
//! transactions that lease and publish, record and acknowledge, store and acknowledge) that
//! leave nothing half done.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::pipeline::{
    assert_depth, clip_json, episode_json, pipeline, results_for, Scenario, CLIPS, EPISODES,
};
use crate::common::{expire_visibility, PgDatabase, Run};
use serde_json::{json, Value};

#[test]
fn pipeline_across_processes_on_the_sqlite_bus() {
    let s = Scenario::database(None);
    pipeline(&s);
    assert!(s.path().join("archive.sqlite").exists());
}

#[test]
fn pipeline_across_processes_on_the_postgres_bus() {
    let db = PgDatabase::create();
    let s = Scenario::database(Some(&db.url));
    pipeline(&s);
}

/// Runs `args` with `ARCHIVIST_FAIL_POINT=point`, waits until the process says it reached
/// the point (inside an open transaction), and SIGKILLs it there.
fn kill_at(s: &Scenario, args: &[&str], extra: &[(&str, &str)], point: &str) {
    common::kill_at_point(s.path(), args, &s.bus.with(extra), point);
}

fn queue<'a>(depths: &'a HashMap<String, Value>, name: &str) -> &'a Value {
    depths
        .get(name)
        .unwrap_or_else(|| panic!("no {name}: {depths:?}"))
}

/// Leasing and publishing are one transaction: killed between them, neither happened.
fn killed_while_publishing_leaves_no_lease(s: &Scenario) {
    s.curate();
    let env = [
        ("ARCHIVIST_RESEARCHERS", "1"),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    kill_at(s, &["pending-research"], &env, "bus-send-in-transaction");
    let status = s.status();
    assert_eq!(status["active_leases"], 0, "{status}");
    assert_eq!(status["leased_pairs"], 0, "{status}");
    let depths = s.queue_depths();
    assert_eq!(
        queue(&depths, "pending_research")["waiting"],
        0,
        "{depths:?}"
    );
    // The next run leases the same work and publishes it.
    s.run(&["pending-research"], &env).expect_code(0);
    let status = s.status();
    assert_eq!(status["active_leases"], 1, "{status}");
    let work = s.receive_work("10", "1s");
    assert_eq!(work.len(), 1, "{work:?}");
    assert_eq!(work[0]["episode"]["title"], "Episode 2: High");
}

/// Recording and acknowledging are one transaction: killed between them, the results are
/// not recorded and their messages are still held, and they are recorded once they come back.
fn killed_while_recording_loses_nothing(s: &Scenario) {
    s.curate();
    let env = [
        ("ARCHIVIST_RESEARCHERS", "1"),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let work = s.receive_work("1", "1s");
    let results: Vec<String> = results_for(&work[0])
        .iter()
        .map(|r| r.to_string())
        .collect();
    s.run_with_input(
        &["send", "completed_research"],
        &(results.join("\n") + "\n"),
    )
    .expect_code(0);
    kill_at(s, &["completed-research"], &[], "bus-ack-in-transaction");
    let status = s.status();
    assert_eq!(status["researched_pairs"], 0, "{status}");
    let depths = s.queue_depths();
    let completed = queue(&depths, "completed_research");
    assert_eq!(completed["in_flight"], results.len() as u64, "{completed}");
    // Their visibility runs out; the next run records them, once.
    expire_visibility(&s.database_url());
    s.run(&["completed-research"], &[]).expect_code(0);
    let status = s.status();
    assert_eq!(status["researched_pairs"], results.len() as u64, "{status}");
    assert_eq!(status["active_leases"], 0, "{status}");
    let depths = s.queue_depths();
    assert_depth(&depths, "completed_research", 0, 0);
}

/// Storing and acknowledging curated messages are one transaction.
fn killed_while_ingesting_loses_nothing(s: &Scenario) {
    s.run(&["migrate"], &[]).expect_code(0);
    let episodes: Vec<String> = EPISODES
        .iter()
        .enumerate()
        .map(|(n, (t, a, p))| episode_json(t, a, *p, n).to_string())
        .collect();
    s.run_with_input(&["send", "curated_episodes"], &(episodes.join("\n") + "\n"))
        .expect_code(0);
    kill_at(s, &["episodes", "--once"], &[], "bus-ack-in-transaction");
    assert_eq!(s.status()["episodes"], 0);
    let depths = s.queue_depths();
    assert_eq!(
        queue(&depths, "curated_episodes")["in_flight"],
        EPISODES.len() as u64
    );
    expire_visibility(&s.database_url());
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    assert_eq!(s.status()["episodes"], EPISODES.len() as u64);
    assert_depth(&s.queue_depths(), "curated_episodes", 0, 0);
}

#[test]
fn sqlite_killed_while_publishing_leaves_no_lease() {
    killed_while_publishing_leaves_no_lease(&Scenario::database(None));
}

#[test]
fn postgres_killed_while_publishing_leaves_no_lease() {
    let db = PgDatabase::create();
    killed_while_publishing_leaves_no_lease(&Scenario::database(Some(&db.url)));
}

#[test]
fn sqlite_killed_while_recording_loses_nothing() {
    killed_while_recording_loses_nothing(&Scenario::database(None));
}

#[test]
fn postgres_killed_while_recording_loses_nothing() {
    let db = PgDatabase::create();
    killed_while_recording_loses_nothing(&Scenario::database(Some(&db.url)));
}

#[test]
fn sqlite_killed_while_ingesting_loses_nothing() {
    killed_while_ingesting_loses_nothing(&Scenario::database(None));
}

#[test]
fn postgres_killed_while_ingesting_loses_nothing() {
    let db = PgDatabase::create();
    killed_while_ingesting_loses_nothing(&Scenario::database(Some(&db.url)));
}

/// With no ARCHIVIST_RESEARCHERS, work assignment publishes one item per researcher the bus
/// counts (receivers waiting on `pending_research`), less the items already waiting; with
/// neither, one, which `status` shows waiting for the first researcher.
#[test]
fn work_assignment_follows_the_researchers_the_bus_counts() {
    let s = Scenario::database(None);
    s.curate();
    let no_jitter = [("ARCHIVIST_START_JITTER", "0s")];
    // No researcher and nothing waiting: one item, for the first researcher to come (the
    // contract: "while capacity is positive, or while there are neither researchers nor
    // waiting items"); the run says why, and `status` shows it waiting for a researcher.
    let run = s
        .run(
            &["pending-research"],
            &[("ARCHIVIST_START_JITTER", "0s"), ("RUST_LOG", "info")],
        )
        .expect_code(0);
    assert!(
        run.stderr.contains("researchers=0") && run.stderr.contains("to_publish=1"),
        "{}",
        run.stderr
    );
    assert_depth(&s.queue_depths(), "pending_research", 1, 0);
    assert_eq!(s.status()["active_leases"], 1);
    let table = s.run(&["status"], &[]).expect_code(0);
    assert!(
        table
            .stdout
            .contains("1 work item waits on pending_research with no researcher consuming it"),
        "{}",
        table.stdout
    );
    // The status page says the same.
    let (serving, addr) = common::serving::start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &[],
        std::time::Duration::from_secs(60),
    );
    let (code, page) = common::serving::get(&addr, "/");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("1 work item waits on pending_research with no researcher consuming it"),
        "{page}"
    );
    drop(serving);
    // It waits for a researcher: no capacity, still one.
    s.run(&["pending-research"], &no_jitter).expect_code(0);
    assert_depth(&s.queue_depths(), "pending_research", 1, 0);
    let first = s.receive_work("1", "1s");
    assert_eq!(first.len(), 1);

    // Three researchers wait for work.
    let researchers: Vec<_> = (0..3)
        .map(|_| {
            common::command(
                s.path(),
                &["receive", "pending_research", "--max", "1", "--wait", "60s"],
                &s.bus.with(&[]),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    // Until the bus counts all three (each registers as it starts): a bounded look, no sleep.
    let mut counted = 0;
    for _ in 0..600 {
        counted = queue(&s.queue_depths(), "pending_research")["consumers"]
            .as_u64()
            .unwrap_or(0);
        if counted >= 3 {
            break;
        }
    }
    assert_eq!(counted, 3, "the bus did not count three researchers");
    s.run(&["pending-research"], &no_jitter).expect_code(0);
    let mut leases = BTreeSet::new();
    for r in researchers {
        let run = Run::from_output(r.wait_with_output().unwrap()).expect_code(0);
        let items = run.json_lines();
        assert_eq!(items.len(), 1, "{}", run.stdout);
        assert!(leases.insert(items[0]["lease_id"].as_str().unwrap().to_string()));
    }
    let status = s.status();
    assert_eq!(status["active_leases"], 4, "{status}");
}

/// A queue that is not one of the configured ones is said so, naming them; a dead-letter queue
/// takes no message by hand.
#[test]
fn a_missing_queue_is_named_with_the_configured_ones() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    // Not a configured queue: the configured ones are named.
    let run = s
        .run(&["receive", "no_such_queue", "--wait", "0s"], &[])
        .expect_code(2);
    assert!(
        run.stderr.contains("no_such_queue")
            && run.stderr.contains("not one of the configured queues")
            && run
                .stderr
                .contains("curated_episodes, curated_clips, pending_research, completed_research"),
        "{}",
        run.stderr
    );
    let run = s
        .run_with_input(&["send", "curated_epsiodes"], "{}\n")
        .expect_code(2);
    assert!(run.stderr.contains("curated_episodes"), "{}", run.stderr);
    // A dead-letter queue takes no message by hand: its dead letters would have no reason.
    let run = s
        .run_with_input(&["send", "curated_clips_dead_letter"], "{}\n")
        .expect_code(2);
    assert!(
        run.stderr.contains("is a dead-letter queue") && run.stderr.contains("\"curated_clips\""),
        "{}",
        run.stderr
    );
    assert_eq!(queue(&s.queue_depths(), "curated_clips")["dead_letters"], 0);
}

/// `archivist run` with no configuration at all, in an empty directory, works with curators
/// and a researcher in other processes: the datastore and the queues are one SQLite file.
#[test]
fn run_with_no_configuration_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = common::command(dir.path(), &["run"], &[])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run's log, line by line, read on a thread of its own.
    let (log_tx, log) = std::sync::mpsc::channel::<String>();
    let stderr = run.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = log_tx.send(line);
        }
    });
    let wait_for = |what: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match log.recv_timeout(left) {
                Ok(line) if what(&line) => return line,
                Ok(_) => {}
                Err(e) => panic!("the run never logged what was awaited: {e}"),
            }
        }
    };
    wait_for(&|l| l.contains("archivists running"));

    // Curators, in processes of their own.
    let episode = episode_json(EPISODES[0].0, EPISODES[0].1, EPISODES[0].2, 0).to_string();
    let clips: Vec<String> = CLIPS[..2]
        .iter()
        .enumerate()
        .map(|(n, (t, p))| clip_json(t, *p, n).to_string())
        .collect();
    common::archivist_with_input(dir.path(), &["send", "curated_episodes"], &[], &episode)
        .expect_code(0);
    common::archivist_with_input(
        dir.path(),
        &["send", "curated_clips"],
        &[],
        &(clips.join("\n") + "\n"),
    )
    .expect_code(0);

    // A researcher: the run's work assignment finds it counted and hands it the work.
    let work = common::archivist(
        dir.path(),
        &["receive", "pending_research", "--max", "1", "--wait", "90s"],
        &[],
    )
    .expect_code(0)
    .json_lines();
    assert_eq!(work.len(), 1);
    let results: Vec<String> = results_for(&work[0])
        .iter()
        .map(|r| r.to_string())
        .collect();
    assert_eq!(results.len(), 2);
    common::archivist_with_input(
        dir.path(),
        &["send", "completed_research"],
        &[],
        &(results.join("\n") + "\n"),
    )
    .expect_code(0);
    wait_for(&|l| l.contains("completed-research") && l.contains("stored=2"));

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(run.wait().unwrap().code(), Some(0));
    reader.join().unwrap();

    let status = common::archivist(dir.path(), &["status", "--json"], &[]).expect_code(0);
    let status: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(status["researched_pairs"], 2, "{status}");
    assert_eq!(status["active_leases"], 0, "{status}");
    // One file holds it all.
    assert!(dir.path().join("archivist.sqlite").exists());
}

/// A lease keeps the length it was made with: renewed by a `completed-research` whose
/// ARCHIVIST_LEASE_DURATION is 2 h, a 30 s lease is still due 30 s after the renewal.
#[test]
fn a_renewal_by_another_process_keeps_the_lease_length() {
    let s = Scenario::database(None);
    s.curate();
    s.run(
        &["pending-research"],
        &[
            ("ARCHIVIST_RESEARCHERS", "1"),
            ("ARCHIVIST_START_JITTER", "0s"),
            ("ARCHIVIST_LEASE_DURATION", "30s"),
        ],
    )
    .expect_code(0);
    let work = s.receive_work("1", "1s");
    // One result, not the last: it renews the lease.
    let first = results_for(&work[0]).remove(0).to_string();
    s.run_with_input(&["send", "completed_research"], &(first + "\n"))
        .expect_code(0);
    let before = chrono::Utc::now();
    s.run(
        &["completed-research"],
        &[("ARCHIVIST_LEASE_DURATION", "2h")],
    )
    .expect_code(0);
    let after = chrono::Utc::now();
    let expires_us: i64 = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let pool = sqlx::SqlitePool::connect(&s.database_url()).await.unwrap();
            let e = sqlx::query_scalar("SELECT expires_at FROM leases")
                .fetch_one(&pool)
                .await
                .unwrap();
            pool.close().await;
            e
        });
    let expires = chrono::DateTime::from_timestamp_micros(expires_us).unwrap();
    assert!(
        expires >= before + chrono::Duration::seconds(30)
            && expires <= after + chrono::Duration::seconds(30),
        "renewed to {expires}, between {before} and {after} plus 30 s expected"
    );
}

/// Every dead-letter reason names the field at fault and what was expected; a result for an
/// unknown pair says whether the episode or the clip is unknown.
#[test]
fn dead_letter_reasons_name_the_field() {
    let s = Scenario::database(None);
    s.curate();
    let good = episode_json("Reasons", "2026-02-01T00:00:00Z", 1, 99);
    let with = |field: &str, value: Value| {
        let mut e = good.clone();
        e[field] = value;
        e.to_string()
    };
    let cases = [
        (with("date_aired", json!("2025-13-45")), "date_aired"),
        (with("date_aired", json!("yesterday")), "date_aired"),
        (
            with("date_aired", json!("2025-12-31T00:00:00")),
            "date_aired",
        ),
        (with("title", json!(["an", "array"])), "title"),
        (with("priority", json!("high")), "priority"),
    ];
    let input: Vec<String> = cases.iter().map(|(b, _)| b.clone()).collect();
    s.run_with_input(&["send", "curated_episodes"], &(input.join("\n") + "\n"))
        .expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    let dead = s
        .run(
            &[
                "receive",
                "curated_episodes",
                "--dead-letters",
                "--max",
                "10",
                "--wait",
                "0s",
            ],
            &[],
        )
        .expect_code(0)
        .json_lines();
    assert_eq!(dead.len(), cases.len(), "{dead:?}");
    for (body, field) in &cases {
        let d = dead.iter().find(|d| d["body"] == body.as_str()).unwrap();
        let reason = d["reason"].as_str().unwrap();
        assert!(reason.contains(field), "{field}: {reason}");
        if *field == "date_aired" {
            assert!(reason.contains("RFC 3339"), "{reason}");
        }
    }

    // Results for an unknown episode and for an unknown clip.
    s.run(
        &["pending-research"],
        &[
            ("ARCHIVIST_RESEARCHERS", "1"),
            ("ARCHIVIST_START_JITTER", "0s"),
        ],
    )
    .expect_code(0);
    let work = s.receive_work("1", "1s");
    let mut unknown_episode = results_for(&work[0]).remove(0);
    unknown_episode["episode"]["title"] = json!("No Such Episode");
    let mut unknown_clip = results_for(&work[0]).remove(0);
    unknown_clip["clip"]["title"] = json!("No Such Clip");
    s.run_with_input(
        &["send", "completed_research"],
        &format!("{unknown_episode}\n{unknown_clip}\n"),
    )
    .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);
    let dead = s
        .run(
            &[
                "receive",
                "completed_research",
                "--dead-letters",
                "--max",
                "10",
                "--wait",
                "0s",
            ],
            &[],
        )
        .expect_code(0)
        .json_lines();
    let reasons: Vec<&str> = dead.iter().map(|d| d["reason"].as_str().unwrap()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("unknown episode") && r.contains("No Such Episode")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("unknown clip") && r.contains("No Such Clip")),
        "{reasons:?}"
    );
}

/// A lease whose researcher sent its last result but skipped a clip is not active: `status`
/// counts it as awaiting late results, and says what each count means.
#[test]
fn a_revoked_lease_awaits_late_results_and_is_not_active() {
    let s = Scenario::database(None);
    s.curate();
    s.run(
        &["pending-research"],
        &[
            ("ARCHIVIST_RESEARCHERS", "1"),
            ("ARCHIVIST_START_JITTER", "0s"),
        ],
    )
    .expect_code(0);
    let work = s.receive_work("1", "1s");
    // Only the last result (which revokes the lease); the first clip is skipped.
    let last = results_for(&work[0]).pop().unwrap().to_string();
    s.run_with_input(&["send", "completed_research"], &(last + "\n"))
        .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);
    let status = s.status();
    assert_eq!(status["active_leases"], 0, "{status}");
    assert_eq!(status["awaiting_late_results"], 1, "{status}");
    assert_eq!(status["leased_pairs"], 1, "{status}");
    let table = s.run(&["status"], &[]).expect_code(0).stdout;
    assert!(table.contains("awaiting late results"), "{table}");
    assert!(table.contains("neither researched nor leased"), "{table}");
}

/// The datastore in one database and the bus in a copy of it (`cp`, `CREATE DATABASE …
/// TEMPLATE`, a restored dump): the copy carries the bus's stored id, yet its queues are not
/// the datastore's. Ingestion must acknowledge on the copy (not in the datastore's own
/// queues, leaving the message to come back until dead-lettered), and work items must go to
/// the copy's `pending_research`, where the researchers read.
fn a_copied_database_is_another_bus(store_url: &str, bus_url: &str, dir: &std::path::Path) {
    let env = [
        ("DATABASE_URL", store_url),
        ("ARCHIVIST_BUS_URL", bus_url),
        ("ARCHIVIST_RESEARCHERS", "1"),
        ("ARCHIVIST_START_JITTER", "0s"),
        ("RUST_LOG", "info"),
    ];
    let episode = episode_json("Copied episode", "2026-01-01T00:00:00Z", 1, 1).to_string();
    let clip = clip_json("Copied clip", 1, 1).to_string();
    common::archivist_with_input(dir, &["send", "curated_episodes"], &env, &(episode + "\n"))
        .expect_code(0);
    common::archivist_with_input(dir, &["send", "curated_clips"], &env, &(clip + "\n"))
        .expect_code(0);
    common::archivist(dir, &["episodes", "--once"], &env).expect_code(0);
    common::archivist(dir, &["clips", "--once"], &env).expect_code(0);
    common::archivist(dir, &["pending-research"], &env).expect_code(0);

    let depths = |bus: &str| -> HashMap<String, Value> {
        let env = [("DATABASE_URL", store_url), ("ARCHIVIST_BUS_URL", bus)];
        common::archivist(dir, &["queues", "--json"], &env)
            .expect_code(0)
            .json_lines()
            .into_iter()
            .map(|q| (q["queue"].as_str().unwrap().to_string(), q))
            .collect()
    };
    let on_copy = depths(bus_url);
    assert_depth(&on_copy, "curated_episodes", 0, 0);
    assert_depth(&on_copy, "curated_clips", 0, 0);
    assert_depth(&on_copy, "pending_research", 1, 0);
    let in_store = depths(store_url);
    assert_depth(&in_store, "pending_research", 0, 0);
    let status = common::archivist(dir, &["status", "--json"], &env).expect_code(0);
    let status: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(
        (&status["episodes"], &status["clips"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(status["active_leases"], 1, "{status}");
}

#[test]
fn a_copied_sqlite_file_is_another_bus() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("archivist.sqlite");
    let store_url = format!("sqlite://{}", store.display());
    common::archivist(
        dir.path(),
        &["migrate"],
        &[("DATABASE_URL", store_url.as_str())],
    )
    .expect_code(0);
    // The whole database: the file and its write-ahead log (which may hold what `migrate`
    // wrote, the bus's id included, not yet checkpointed into the file).
    let copy = dir.path().join("bus.sqlite");
    std::fs::copy(&store, &copy).unwrap();
    let wal = dir.path().join("archivist.sqlite-wal");
    if wal.exists() {
        std::fs::copy(&wal, dir.path().join("bus.sqlite-wal")).unwrap();
    }
    a_copied_database_is_another_bus(
        &store_url,
        &format!("sqlite://{}", copy.display()),
        dir.path(),
    );
}

#[test]
fn a_templated_postgres_database_is_another_bus() {
    let dir = tempfile::tempdir().unwrap();
    let store = PgDatabase::create();
    common::archivist(
        dir.path(),
        &["migrate"],
        &[("DATABASE_URL", store.url.as_str())],
    )
    .expect_code(0);
    let copy = store.copy();
    a_copied_database_is_another_bus(&store.url, &copy.url, dir.path());
}

/// A Postgres role that may not read `pg_control_system()` gets a bus id without the
/// cluster's identifier, and the log says so once per process, not silently; the datastore
/// and the bus in its database still work as one.
#[test]
fn a_role_without_pg_control_system_is_warned_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let role = format!("archivist_r_{}", uuid::Uuid::new_v4().simple());
    let admin_sql = |url: &str, statements: &[String]| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            for sql in statements {
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            }
        });
    };
    // Names of our own making: they cannot be bound. pg_proc is per database, so the revoke
    // stays in this one.
    admin_sql(
        &db.url,
        &[
            "REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC".to_string(),
            format!("CREATE ROLE {role} LOGIN"),
            format!("ALTER DATABASE {} OWNER TO {role}", db.name),
        ],
    );
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(None).unwrap();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    common::archivist(dir.path(), &["migrate"], &env).expect_code(0);
    let episode = episode_json("Warned episode", "2026-01-01T00:00:00Z", 1, 1).to_string();
    common::archivist_with_input(
        dir.path(),
        &["send", "curated_episodes"],
        &env,
        &(episode + "\n"),
    )
    .expect_code(0);
    let run = common::archivist(dir.path(), &["episodes", "--once"], &env).expect_code(0);
    assert_eq!(
        run.stderr
            .matches("cannot read pg_control_system()")
            .count(),
        1,
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("WARN"), "{}", run.stderr);
    let status = common::archivist(dir.path(), &["status", "--json"], &env).expect_code(0);
    let status: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(status["episodes"], 1, "{status}");

    drop(db);
    admin_sql(
        &common::pg_admin_url(),
        &[format!("DROP ROLE IF EXISTS {role}")],
    );
}

/// The two-step route (the bus in an SQLite file, the datastore on Postgres): a lease whose
/// COMMIT reached the server but whose answer was lost is published once, as the lease it is,
/// not leased again. Every lease in the datastore has exactly one work item on the queue, and
/// no work item names a lease the datastore does not hold: nothing is stranded.
#[test]
fn a_lease_whose_commit_answer_was_lost_has_exactly_one_work_item() {
    use std::sync::atomic::Ordering;

    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let bus_url = format!("sqlite://{}", dir.path().join("bus.sqlite").display());
    let direct = [
        ("DATABASE_URL", db.url.as_str()),
        ("ARCHIVIST_BUS", "sqlite"),
        ("ARCHIVIST_BUS_URL", bus_url.as_str()),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    common::archivist(dir.path(), &["migrate"], &direct).expect_code(0);
    common::archivist(dir.path(), &["queues"], &direct).expect_code(0);
    let episodes: Vec<String> = (0..3)
        .map(|n| {
            episode_json(&format!("Cut episode {n}"), "2026-01-01T00:00:00Z", 1, n).to_string()
        })
        .collect();
    let clips: Vec<String> = (0..2)
        .map(|n| clip_json(&format!("Cut clip {n}"), 1, n).to_string())
        .collect();
    common::archivist_with_input(
        dir.path(),
        &["send", "curated_episodes"],
        &direct,
        &(episodes.join("\n") + "\n"),
    )
    .expect_code(0);
    common::archivist_with_input(
        dir.path(),
        &["send", "curated_clips"],
        &direct,
        &(clips.join("\n") + "\n"),
    )
    .expect_code(0);
    common::archivist(dir.path(), &["episodes", "--once"], &direct).expect_code(0);
    common::archivist(dir.path(), &["clips", "--once"], &direct).expect_code(0);

    // Cuts the answer to the COMMIT of a transaction that inserted a lease.
    let proxy = datastore::testing_pg::CommitCutter::start(&db.url, Some(b"INSERT INTO leases"));
    let through = proxy.url(&db.url);
    let mut cut = direct.to_vec();
    cut[0] = ("DATABASE_URL", through.as_str());
    cut.push(("ARCHIVIST_RESEARCHERS", "2"));
    proxy.armed.store(true, Ordering::SeqCst);
    let run = common::archivist(dir.path(), &["pending-research"], &cut);
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "no lease's COMMIT was cut: {}",
        run.stderr
    );
    assert_eq!(run.code, 0, "{}", run.stderr);

    let leases: BTreeSet<String> = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            let ids: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM leases")
                .fetch_all(&mut conn)
                .await
                .unwrap();
            ids.into_iter().map(|id| id.to_string()).collect()
        })
    };
    let items = common::archivist(
        dir.path(),
        &["receive", "pending_research", "--max", "10", "--wait", "1s"],
        &direct,
    )
    .expect_code(0)
    .json_lines();
    let mut published: Vec<String> = items
        .iter()
        .map(|i| i["lease_id"].as_str().unwrap().to_string())
        .collect();
    published.sort();
    assert_eq!(
        published,
        leases.iter().cloned().collect::<Vec<_>>(),
        "each lease must have exactly one work item, and each work item its lease"
    );
    assert_eq!(leases.len(), 2, "{}", run.stderr);
}
