//! End-to-end tests of `archivist demo` and of what it leaves behind (`status`, `matches`,
//! `migrate` on a used datastore), on SQLite and on a fresh Postgres database.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;

use crate::common::{archivist, PgDatabase};

/// The demo's data set: the weekday episodes of a December and 15 clips, the last of them
/// curated after the first pass (every pair of the other 14 researched).
const EPISODES: u64 = 23;
const CLIPS: u64 = 15;

/// Runs the demo on `url` with ARCHIVIST_BUS=`bus` (None: the default, the database bus in
/// `url`'s database) and checks everything the datastore and the queues then answer.
fn demo_then_inspect(dir: &Path, url: &str, json_summary: bool, bus: Option<&str>) {
    let mut vars = vec![("DATABASE_URL", url)];
    if let Some(bus) = bus {
        vars.push(("ARCHIVIST_BUS", bus));
    }
    let env = vars.as_slice();
    let args: &[&str] = if json_summary {
        &["demo", "--json"]
    } else {
        &["demo"]
    };
    let demo = archivist(dir, args, env).expect_code(0);
    if json_summary {
        let s: serde_json::Value = serde_json::from_str(demo.stdout.trim()).unwrap();
        assert_eq!(s["all_researched_once"], true, "{s}");
        assert_eq!(s["research_pairs"], EPISODES * CLIPS);
        assert_eq!(s["researched_pairs"], EPISODES * CLIPS);
        assert_eq!(s["research_executions"], EPISODES * CLIPS);
        assert_eq!(s["pairs_researched_more_than_once"], 0);
        assert_eq!(s["messages_dead_lettered"], 2);
        assert_eq!(s["leases_expired"], 1);
        assert!(s["pairs_reclaimed"].as_u64().unwrap() > 0, "{s}");
        // The reference analyser on the generated audio, against the generator's truth.
        let a = &s["analysis"];
        assert!(a["occurrences"].as_u64().unwrap() > 50, "{s}");
        assert_eq!(a["found"], a["occurrences"], "{s}");
        assert_eq!(a["false_matches"], 0, "{s}");
        assert_eq!(a["absent_pairs_matched"], 0, "{s}");
        assert!(a["offset_error_ms_p95"].as_f64().unwrap() <= 10.0, "{s}");
        // The first pass analysed (and printed) every episode; the new clip's was answered
        // from those prints, decoding and reading a small part of what the first did.
        let (first, new) = (&s["first_pass"], &s["new_clip_pass"]);
        let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
        assert_eq!(n(first, "research_pairs"), EPISODES * (CLIPS - 1), "{s}");
        assert_eq!(n(new, "research_pairs"), EPISODES, "{s}");
        assert_eq!(new["clips"].as_array().unwrap().len(), 1, "{s}");
        assert!(n(first, "prints_written") >= EPISODES, "{s}");
        assert!(n(new, "items_from_prints") > 0, "{s}");
        assert_eq!(n(new, "items_from_prints"), n(new, "work_items"), "{s}");
        assert_eq!(n(new, "prints_written"), 0, "{s}");
        assert_eq!(
            n(new, "print_fallbacks") + n(first, "print_fallbacks"),
            0,
            "{s}"
        );
        assert!(f(new, "audio_decoded_seconds") > 0.0, "{s}");
        assert!(
            f(new, "audio_decoded_seconds") * 10.0 < f(first, "audio_decoded_seconds"),
            "{s}"
        );
        assert!(n(new, "media_bytes_read") > 0, "{s}");
        // A fifth, not a tenth: issue 46 spends more of a new clip's budget on candidates (3
        // votes: 12% of the first pass's bytes here, 2.0 of 16.8 MB), and the demo's
        // episodes last under a minute, where a candidate's window is a large part of one.
        assert!(
            n(new, "media_bytes_read") * 5 < n(first, "media_bytes_read"),
            "{s}"
        );
        // The new clip's answers against the truth, counted in the whole check too.
        let na = &new["analysis"];
        assert!(na["occurrences"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(na["found"], na["occurrences"], "{s}");
        assert_eq!(na["false_matches"], 0, "{s}");
        assert_eq!(na["absent_pairs_matched"], 0, "{s}");
        assert_eq!(
            n(a, "occurrences"),
            n(&first["analysis"], "occurrences") + n(na, "occurrences"),
            "{s}"
        );
        // The researchers kept every episode in the media archive, once.
        assert_eq!(s["archive"]["episodes"], EPISODES, "{s}");
        assert_eq!(s["archive"]["copies"], EPISODES, "{s}");
        assert!(s["archive"]["bytes"].as_u64().unwrap() > 0, "{s}");
        let media = Path::new(s["media"].as_str().unwrap());
        assert!(
            media.is_absolute() && media.join("episodes").is_dir(),
            "{s}"
        );
    } else {
        assert!(
            demo.stdout
                .contains("every pair was researched exactly once"),
            "{}",
            demo.stdout
        );
        assert!(demo.stdout.contains("345 of 345 pairs"), "{}", demo.stdout);
        let new_clip = demo
            .stdout
            .lines()
            .find(|l| l.contains("new clip"))
            .unwrap_or_default();
        assert!(
            new_clip.contains("curated after the first pass: 23 pairs in")
                && !new_clip.contains(" 0 answered from prints"),
            "{}",
            demo.stdout
        );
        assert!(
            demo.stdout.contains("dead-lettered    2 messages"),
            "{}",
            demo.stdout
        );
    }
    // The log goes to standard error, never to standard output.
    assert!(!demo.stdout.contains("INFO"), "{}", demo.stdout);

    // migrate on a used datastore changes nothing.
    archivist(dir, &["migrate"], env).expect_code(0);
    archivist(dir, &["migrate"], env).expect_code(0);

    let status = archivist(dir, &["status", "--json"], env).expect_code(0);
    let s: serde_json::Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(s["episodes"], EPISODES);
    assert_eq!(s["clips"], CLIPS);
    assert_eq!(s["research_pairs"], EPISODES * CLIPS);
    assert_eq!(s["researched_pairs"], EPISODES * CLIPS);
    assert_eq!(s["active_leases"], 0);
    assert_eq!(s["expired_leases"], 0);
    let matched = s["matched_pairs"].as_u64().unwrap();
    assert!(matched > 0 && matched < EPISODES * CLIPS, "{s}");
    if bus != Some("memory") {
        // The demo's messages went through the database's own queues: the curated ones and
        // the results are all taken, the two poison messages kept with their reasons.
        let q = |name: &str| s["queues"][name].clone();
        for name in ["curated_episodes", "curated_clips", "completed_research"] {
            assert_eq!(q(name)["waiting"], 0, "{s}");
        }
        assert_eq!(q("curated_episodes")["dead_letters"], 1, "{s}");
        assert_eq!(q("curated_clips")["dead_letters"], 1, "{s}");
    }

    let table = archivist(dir, &["status"], env).expect_code(0);
    assert!(table.stdout.contains("research pairs"), "{}", table.stdout);
    assert!(table.stdout.contains("345"), "{}", table.stdout);

    let all = archivist(dir, &["matches"], env)
        .expect_code(0)
        .json_lines();
    assert_eq!(all.len() as u64, matched);
    for m in &all {
        assert!(m["episode_title"].is_string(), "{m}");
        assert!(
            chrono::DateTime::parse_from_rfc3339(m["episode_date_aired"].as_str().unwrap()).is_ok(),
            "{m}"
        );
        assert!(m["clip_title"].is_string(), "{m}");
        let offsets = m["clip_offsets_ns"].as_array().unwrap();
        assert!(!offsets.is_empty(), "{m}");
        assert!(offsets.iter().all(|o| o.as_i64().unwrap() >= 0), "{m}");
    }

    // The same matches as a table for people: a header, then one row a match in the same
    // order, its offsets as h:mm:ss.mmm.
    let table = archivist(dir, &["matches", "--format", "table"], env).expect_code(0);
    let rows: Vec<&str> = table
        .stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains(" episode "))
        .collect();
    assert!(table.stdout.lines().nth(1).unwrap().contains(" episode "));
    assert_eq!(rows.len(), all.len(), "{}", table.stdout);
    for (row, m) in rows.iter().zip(&all) {
        assert!(row.contains(m["episode_title"].as_str().unwrap()), "{row}");
        assert!(row.contains(m["clip_title"].as_str().unwrap()), "{row}");
        assert!(
            row.contains(&m["episode_date_aired"].as_str().unwrap()[..10]),
            "{row}"
        );
        let first = m["clip_offsets_ns"][0].as_i64().unwrap() / 1_000_000;
        let shown = format!(
            "{}:{:02}:{:02}.{:03}",
            first / 3_600_000,
            first / 60_000 % 60,
            first / 1000 % 60,
            first % 1000
        );
        assert!(row.contains(&shown), "{row} lacks {shown}");
    }

    let intro = archivist(dir, &["matches", "--clip", "Intro Jingle"], env)
        .expect_code(0)
        .json_lines();
    assert!(!intro.is_empty() && intro.len() < all.len());
    assert!(intro.iter().all(|m| m["clip_title"] == "Intro Jingle"));
    assert_eq!(
        intro.len(),
        all.iter()
            .filter(|m| m["clip_title"] == "Intro Jingle")
            .count()
    );

    let episode = all[0]["episode_title"].as_str().unwrap().to_string();
    let in_episode = archivist(dir, &["matches", "--episode", &episode], env)
        .expect_code(0)
        .json_lines();
    assert!(!in_episode.is_empty());
    assert!(in_episode
        .iter()
        .all(|m| m["episode_title"] == episode.as_str()));
    assert_eq!(
        in_episode.len(),
        all.iter()
            .filter(|m| m["episode_title"] == episode.as_str())
            .count()
    );

    let both = archivist(
        dir,
        &["matches", "--episode", &episode, "--clip", "No Such Clip"],
        env,
    )
    .expect_code(0);
    assert_eq!(both.stdout, "");

    let limited = archivist(dir, &["matches", "--limit", "5"], env)
        .expect_code(0)
        .json_lines();
    assert_eq!(limited.len(), 5);

    // `serve` on what the demo left is ready at once (the demo names it as the next step).
    assert_ready(dir, env);

    // A second demo on the same datastore is refused: it needs an empty one.
    let again = archivist(dir, &["demo"], env).expect_code(2);
    assert!(
        again.stderr.contains("empty datastore") && again.stderr.contains("DATABASE_URL"),
        "{}",
        again.stderr
    );
}

/// Starts `archivist serve` on a free port in `dir` with `env` and expects `/readyz` to
/// answer 200 (and the status page too).
fn assert_ready(dir: &Path, env: &[(&str, &str)]) {
    use std::io::BufRead;
    let mut child = common::command(dir, &["serve", "--addr", "127.0.0.1:0"], env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _serving = common::serving::Running(child);
    // The reader keeps draining so the pipe never fills.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            match line.split_once("on http://") {
                Some((_, rest)) => drop(tx.send(Ok(rest.trim().to_string()))),
                None => drop(tx.send(Err(line))),
            }
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(Ok(addr)) => break addr,
            Ok(Err(line)) => log.push(line),
            Err(_) => panic!("serve never said where it serves: {}", log.join("\n")),
        }
    };
    let (code, body) = common::serving::get(&addr, "/readyz");
    assert_eq!(code, 200, "/readyz after the demo: {body}");
    let (code, body) = common::serving::get(&addr, "/");
    assert_eq!(code, 200, "/ after the demo: {body}");
}

#[test]
fn demo_on_sqlite_researches_every_pair_once_and_leaves_a_consistent_datastore() {
    let dir = tempfile::tempdir().unwrap();
    demo_then_inspect(dir.path(), "sqlite://demo.sqlite", false, None);
    assert!(dir.path().join("demo.sqlite").exists());
}

#[test]
fn demo_on_the_sqlite_bus_researches_every_pair_once() {
    let dir = tempfile::tempdir().unwrap();
    demo_then_inspect(dir.path(), "sqlite://demo.sqlite", true, Some("sqlite"));
}

#[test]
fn demo_on_the_postgres_bus_researches_every_pair_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    demo_then_inspect(dir.path(), &db.url, false, Some("postgres"));
}

#[test]
fn demo_on_postgres_researches_every_pair_once_and_leaves_a_consistent_datastore() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    demo_then_inspect(dir.path(), &db.url, true, Some("memory"));
}

#[test]
fn demo_without_database_url_leaves_its_results_in_the_default_datastore_to_explore() {
    let dir = tempfile::tempdir().unwrap();
    // A store that exists but is empty (as `migrate` leaves it) is fine for the demo.
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    // Its temporary directory of its own: the demo leaves nothing behind there.
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = archivist(dir.path(), &["demo"], &[("TMPDIR", tmp.to_str().unwrap())]).expect_code(0);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(
        left.is_empty(),
        "the demo left {left:?} in its temporary directory"
    );
    assert!(dir.path().join("archivist.sqlite").exists());
    // Its media archive, in the working directory: every episode kept, each copy whole.
    assert!(
        run.stdout
            .contains("media archive    23 episodes, 23 copies"),
        "{}",
        run.stdout
    );
    let verify = archivist(
        dir.path(),
        &["archive", "--media-archive", "archivist-media", "verify"],
        &[],
    )
    .expect_code(0);
    assert!(
        verify.stderr.contains("23 copies") && verify.stderr.contains("0 damaged"),
        "{}",
        verify.stderr
    );
    for command in [
        "archivist status",
        "archivist matches --format table",
        "archivist serve --media-archive archivist-media",
    ] {
        assert!(run.stdout.contains(command), "{command}: {}", run.stdout);
    }

    // The next commands a new user types see what the demo did.
    let status: serde_json::Value = serde_json::from_str(
        archivist(dir.path(), &["status", "--json"], &[])
            .expect_code(0)
            .stdout
            .trim(),
    )
    .unwrap();
    assert!(status["research_pairs"].as_u64().unwrap() > 0);
    assert_eq!(status["researched_pairs"], status["research_pairs"]);
    // The demo ran on the default database bus: its queues exist, its two poison messages
    // are there to look at, and nothing is said to be missing or unreachable.
    let q = |name: &str| status["queues"][name].clone();
    assert_eq!(q("curated_episodes")["dead_letters"], 1, "{status}");
    assert_eq!(q("curated_clips")["dead_letters"], 1, "{status}");
    assert_eq!(q("pending_research")["waiting"], 0, "{status}");
    let table = archivist(dir.path(), &["status"], &[]).expect_code(0);
    assert!(!table.stderr.contains("WARN"), "{}", table.stderr);
    let dead = archivist(
        dir.path(),
        &[
            "receive",
            "curated_clips",
            "--dead-letters",
            "--wait",
            "0s",
            "--max",
            "5",
        ],
        &[],
    )
    .expect_code(0)
    .json_lines();
    assert_eq!(dead.len(), 1);
    assert!(dead[0]["reason"].is_string(), "{:?}", dead[0]);
    assert_ready(dir.path(), &[]);
    let matches = archivist(dir.path(), &["matches"], &[])
        .expect_code(0)
        .json_lines();
    assert_eq!(
        matches.len() as u64,
        status["matched_pairs"].as_u64().unwrap()
    );

    // A second demo would mix with the first one's results: refused, saying what to do.
    let again = archivist(dir.path(), &["demo"], &[]).expect_code(2);
    assert!(
        again.stderr.contains("empty datastore") && again.stderr.contains("remove it"),
        "{}",
        again.stderr
    );
}
