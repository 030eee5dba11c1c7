//! End-to-end tests of the `archivist` binary's command line: help, exit codes, messages,
//! `migrate`. Each test runs the built binary in a temporary working directory of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use crate::common::archivist;

const SUBCOMMANDS: &[&str] = &[
    "migrate",
    "episodes",
    "clips",
    "pending-research",
    "completed-research",
    "run",
    "demo",
    "send",
    "receive",
    "redrive",
    "status",
    "matches",
    "queues",
    "serve",
];

#[test]
fn help_on_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let top = archivist(dir.path(), &["--help"], &[]).expect_code(0);
    for sub in SUBCOMMANDS {
        assert!(top.stdout.contains(sub), "top-level help lists {sub}");
        let run = archivist(dir.path(), &[sub, "--help"], &[]).expect_code(0);
        assert!(
            run.stdout.contains("Usage: archivist"),
            "{sub} --help: {}",
            run.stdout
        );
        // Every subcommand shows the variables it reads: all read the datastore's; only those
        // that lease show the lease's.
        assert!(run.stdout.contains("DATABASE_URL"), "{sub} --help");
        assert_eq!(
            run.stdout.contains("ARCHIVIST_LEASE_DURATION"),
            ["pending-research", "run", "demo"].contains(sub),
            "{sub} --help: {}",
            run.stdout
        );
    }
    // Help does not touch the datastore.
    assert!(!dir.path().join("archivist.sqlite").exists());
}

#[test]
fn clap_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    archivist(dir.path(), &["no-such-subcommand"], &[]).expect_code(2);
    archivist(dir.path(), &["receive"], &[]).expect_code(2);
    let run = archivist(dir.path(), &["receive", "q", "--wait", "soon"], &[]).expect_code(2);
    assert!(run.stderr.contains("--wait"), "{}", run.stderr);
}

#[test]
fn migrate_creates_the_default_sqlite_file_and_runs_twice() {
    let dir = tempfile::tempdir().unwrap();
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    assert!(dir.path().join("archivist.sqlite").exists());
    // No start jitter is a valid setting.
    archivist(
        dir.path(),
        &["migrate"],
        &[("ARCHIVIST_START_JITTER", "0s")],
    )
    .expect_code(0);
    // And an empty datastore has a status of zeros.
    let run = archivist(dir.path(), &["status", "--json"], &[]).expect_code(0);
    let status: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(status["episodes"], 0);
    assert_eq!(status["research_pairs"], 0);
}

#[test]
fn bad_configuration_exits_2_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        ("ARCHIVIST_MAX_CLIPS", "0"),
        ("ARCHIVIST_MAX_CLIPS", "many"),
        ("ARCHIVIST_LEASE_DURATION", "0s"),
        ("ARCHIVIST_LEASE_DURATION", "soon"),
        ("ARCHIVIST_MAX_RECEIVES", "0"),
        ("ARCHIVIST_RESEARCHERS", "-3"),
        ("ARCHIVIST_START_JITTER", "soon"),
        ("ARCHIVIST_START_JITTER", "-1s"),
        ("ARCHIVIST_START_JITTER", "2h"),
        ("ARCHIVIST_BUS", "kafka"),
        ("ARCHIVIST_CLIPS_QUEUE", "bad name!"),
        ("DATABASE_URL", "mysql://someone:hunter2@db/archive"),
    ];
    for (var, value) in cases {
        let run = archivist(dir.path(), &["migrate"], &[(var, value)]).expect_code(2);
        assert!(
            run.stderr.contains(var),
            "{var}={value}: the message names the variable: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("hunter2"), "password printed");
    }
    // Nothing was created on the way.
    assert!(!dir.path().join("archivist.sqlite").exists());
}

#[test]
fn separate_process_subcommands_on_the_memory_bus_exit_2_and_say_what_to_use() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[&[&str]] = &[
        // Even all four archivists in one process: nothing outside could reach them.
        &["run"],
        &["episodes"],
        &["clips", "--once"],
        &["pending-research"],
        &["completed-research", "--every", "1m"],
        &["send", "curated_episodes"],
        &["receive", "curated_clips"],
        &["queues"],
    ];
    for args in cases {
        let run = archivist(dir.path(), args, &[("ARCHIVIST_BUS", "memory")]).expect_code(2);
        assert!(
            run.stderr.contains("in-memory bus")
                && run.stderr.contains("ARCHIVIST_BUS=memory")
                && run.stderr.contains("database bus")
                && run.stderr.contains("archivist demo"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // Refused before the datastore is touched.
    assert!(!dir.path().join("archivist.sqlite").exists());
}

#[test]
fn a_database_bus_needs_a_database_of_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    // The default datastore is SQLite: a Postgres bus needs ARCHIVIST_BUS_URL.
    for args in [&["run"][..], &["episodes", "--once"][..]] {
        let run = archivist(dir.path(), args, &[("ARCHIVIST_BUS", "postgres")]).expect_code(2);
        assert!(
            run.stderr.contains("ARCHIVIST_BUS=postgres")
                && run.stderr.contains("ARCHIVIST_BUS_URL"),
            "{}",
            run.stderr
        );
    }
    let run = archivist(
        dir.path(),
        &["status"],
        &[("ARCHIVIST_BUS_URL", "mysql://u:secret@h/db")],
    )
    .expect_code(2);
    assert!(run.stderr.contains("ARCHIVIST_BUS_URL"), "{}", run.stderr);
    assert!(!run.stderr.contains("secret"), "{}", run.stderr);
}

#[test]
fn sqs_work_assignment_needs_the_researcher_count() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["pending-research", "run"] {
        let run = archivist(dir.path(), &[sub], &[("ARCHIVIST_BUS", "sqs")]).expect_code(2);
        assert!(
            run.stderr.contains("ARCHIVIST_RESEARCHERS"),
            "{sub}: {}",
            run.stderr
        );
    }
}

#[test]
fn unreachable_datastore_exits_1_without_printing_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("DATABASE_URL", "postgres://archivist:hunter2@127.0.0.1:1/x"),
        ("ARCHIVIST_CONNECT_TIMEOUT", "1s"),
    ];
    for sub in ["migrate", "status"] {
        let run = archivist(dir.path(), &[sub], &env).expect_code(1);
        assert!(run.stderr.contains("unreachable"), "{}", run.stderr);
        assert!(run.stderr.contains("127.0.0.1:1"), "{}", run.stderr);
        assert!(
            !run.stderr.contains("hunter2"),
            "password printed: {}",
            run.stderr
        );
    }
}

#[test]
fn unreachable_sqs_exits_1_but_status_prints_the_counts_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: the bus is unreachable, the SQLite datastore is fine.
    let env = [
        ("ARCHIVIST_BUS", "sqs"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("ARCHIVIST_CONNECT_TIMEOUT", "2s"),
    ];
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    // status reports the datastore's counts whatever the bus does: the queue depths are
    // unknown, with a warning, and the exit code is 0.
    let run = archivist(dir.path(), &["status", "--json"], &env).expect_code(0);
    assert!(
        run.stderr.contains("queue depths unknown"),
        "{}",
        run.stderr
    );
    let lines = run.json_lines();
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    assert_eq!(lines[0]["episodes"], 0, "{}", run.stdout);
    assert!(lines[0]["queues"].is_null(), "{}", run.stdout);
    assert!(lines[0]["queues_unknown"].is_string(), "{}", run.stdout);
    let table = archivist(dir.path(), &["status"], &env).expect_code(0);
    assert!(table.stdout.contains("unknown"), "{}", table.stdout);
    // What needs the bus exits 1 after retrying it for ARCHIVIST_CONNECT_TIMEOUT.
    for args in [
        &["queues"][..],
        &["receive", "curated_clips", "--wait", "0s"],
        &["episodes", "--once"],
    ] {
        let run = archivist(dir.path(), args, &env).expect_code(1);
        assert!(
            run.stderr.contains("unreachable after"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_variable_set_to_nothing_means_its_default() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("ARCHIVIST_BUS", ""),
        ("ARCHIVIST_MAX_CLIPS", ""),
        ("ARCHIVIST_MAX_RECEIVES", " "),
        ("ARCHIVIST_EPISODES_QUEUE", ""),
        ("ARCHIVIST_CLIPS_QUEUE", ""),
        ("ARCHIVIST_PENDING_RESEARCH_QUEUE", ""),
        ("ARCHIVIST_COMPLETED_RESEARCH_QUEUE", ""),
        ("ARCHIVIST_CONNECT_TIMEOUT", ""),
        ("ARCHIVIST_SHUTDOWN_TIMEOUT", ""),
        ("ARCHIVIST_START_JITTER", ""),
        ("ARCHIVIST_LEASE_DURATION", ""),
        ("ARCHIVIST_RESEARCHERS", ""),
        ("DATABASE_URL", ""),
    ];
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    // The default datastore, in the working directory.
    assert!(dir.path().join("archivist.sqlite").exists());
    let run = archivist(dir.path(), &["status", "--json"], &env).expect_code(0);
    assert_eq!(run.json_lines()[0]["clips"], 0, "{}", run.stdout);
}

#[test]
fn an_sqlite_file_in_a_missing_directory_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}",
        dir.path().join("no-such-dir").join("a.sqlite").display()
    );
    for sub in ["migrate", "status"] {
        let run = archivist(dir.path(), &[sub], &[("DATABASE_URL", &url)]).expect_code(2);
        assert!(run.stderr.contains("DATABASE_URL"), "{}", run.stderr);
        assert!(run.stderr.contains("no-such-dir"), "{}", run.stderr);
    }
    // A relative file in the working directory is still created.
    archivist(
        dir.path(),
        &["migrate"],
        &[("DATABASE_URL", "sqlite:rel.sqlite")],
    )
    .expect_code(0);
    assert!(dir.path().join("rel.sqlite").exists());
}

/// Every credential form sqlx and libpq accept stays out of what is printed, and a refused
/// connection is reported as refused, after several attempts, the first logged at once.
#[test]
fn credentials_in_the_query_string_are_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://u:userpw77@127.0.0.1:1/db?password=hunter2&sslpassword=sslpw42&passfile=/etc/secretfile";
    for env in [
        vec![("DATABASE_URL", url), ("ARCHIVIST_CONNECT_TIMEOUT", "2s")],
        vec![
            ("DATABASE_URL", "sqlite://a.sqlite"),
            ("ARCHIVIST_BUS_URL", url),
            ("ARCHIVIST_CONNECT_TIMEOUT", "2s"),
        ],
    ] {
        let run = archivist(dir.path(), &["status"], &env);
        let all = format!("{}{}", run.stdout, run.stderr);
        for secret in ["userpw77", "hunter2", "sslpw42", "/etc/secretfile"] {
            assert!(!all.contains(secret), "{secret} printed:\n{all}");
        }
        if env.len() == 2 {
            let run = run.expect_code(1);
            assert!(run.stderr.contains("refused"), "{}", run.stderr);
            assert!(!run.stderr.contains("no answer within"), "{}", run.stderr);
            // The first failure is logged at once, and there are several attempts.
            assert!(run.stderr.contains("attempt=1"), "{}", run.stderr);
            assert!(run.stderr.contains("attempt=2"), "{}", run.stderr);
        }
    }
}

/// `archivist demo 2>&1 | head -1`: the reader goes away; the process ends quietly (no panic,
/// exit code 0), whichever stream it was writing.
#[test]
fn closed_output_streams_end_the_process_quietly() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::command(dir.path(), &["demo"], &[])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty());
    // Both readers go away, as `head -1` does.
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "first line: {first}");
}

/// `status` and `matches` read: with no datastore they create nothing and say how to make
/// one; `migrate` says what it applied.
#[test]
fn read_only_commands_never_create_a_datastore() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["status"][..], &["status", "--json"], &["matches"]] {
        let run = archivist(dir.path(), args, &[]).expect_code(2);
        assert!(run.stderr.contains("archivist migrate"), "{}", run.stderr);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?} wrote"
        );
    }
    let run = archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    assert!(
        run.stderr.contains(
            "applied 13 migrations: 0001 schema, 0002 lease duration, 0003 recent matches, \
             0004 failed research, 0005 episode completions, 0006 newer curation retries failures, \
             0007 browse, 0008 clip count, 0009 completion claims, 0010 match scores, \
             0011 api access, 0012 api held items, 0013 clip findability"
        ),
        "{}",
        run.stderr
    );
    let run = archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    assert!(run.stderr.contains("up to date"), "{}", run.stderr);
    archivist(dir.path(), &["status"], &[]).expect_code(0);
}

/// On Postgres, `status` neither migrates nor writes: on an empty database it says to run
/// `archivist migrate`, and a role that may only read runs it once the schema exists.
#[test]
fn status_on_postgres_runs_with_a_read_only_role() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::PgDatabase::create();
    let run = archivist(dir.path(), &["status"], &[("DATABASE_URL", &db.url)]).expect_code(2);
    assert!(run.stderr.contains("archivist migrate"), "{}", run.stderr);
    archivist(dir.path(), &["migrate"], &[("DATABASE_URL", &db.url)]).expect_code(0);

    let role = format!("ro_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let admin = |sql: String| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::query(&sql).execute(&pool).await.unwrap();
            pool.close().await;
        });
    };
    // Identifiers cannot be bind parameters; the role name is ours ([a-z0-9_]).
    admin(format!("CREATE ROLE {role} LOGIN"));
    admin(format!(
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    ));
    let ro_url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let run = archivist(
        dir.path(),
        &["status", "--json"],
        &[("DATABASE_URL", &ro_url)],
    );
    admin(format!("DROP OWNED BY {role}"));
    let run = run.expect_code(0);
    assert!(!run.stderr.contains("permission denied"), "{}", run.stderr);
    drop(db);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(&common::pg_admin_url())
            .await
            .unwrap();
        let _ = sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
            .execute(&pool)
            .await;
    });
}

/// A datastore made by an older archivist: `status` names the migration it lacks and changes
/// nothing; `migrate` carries it forward.
#[test]
fn status_on_an_old_schema_names_the_missing_migration() {
    let dir = tempfile::tempdir().unwrap();
    let first = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../datastore/migrations/sqlite/0001_schema.sql"
        ),
        first.path().join("0001_schema.sql"),
    )
    .unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.sqlite").display());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc"))
                .await
                .unwrap();
            sqlx::migrate::Migrator::new(first.path())
                .await
                .unwrap()
                .run(&pool)
                .await
                .unwrap();
            pool.close().await;
        });
    let env = [("DATABASE_URL", url.as_str())];
    let run = archivist(dir.path(), &["status"], &env).expect_code(2);
    assert!(
        run.stderr.contains("0002 lease duration") && run.stderr.contains("archivist migrate"),
        "{}",
        run.stderr
    );
    let run = archivist(dir.path(), &["migrate"], &env).expect_code(0);
    assert!(
        run.stderr.contains(
            "applied 12 migrations: 0002 lease duration, 0003 recent matches, 0004 failed research, \
             0005 episode completions, 0006 newer curation retries failures, 0007 browse, \
             0008 clip count, 0009 completion claims, 0010 match scores, 0011 api access, \
             0012 api held items, 0013 clip findability"
        ),
        "{}",
        run.stderr
    );
    archivist(dir.path(), &["status"], &env).expect_code(0);
}

/// An SQS endpoint that is not an http(s) URL is bad configuration: exit 2 at once, naming the
/// variable, with no retries and no debug dump.
#[test]
fn a_malformed_sqs_endpoint_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    for endpoint in ["127.0.0.1:4599", "ftp://127.0.0.1:4599"] {
        let run = archivist(
            dir.path(),
            &["queues"],
            &[
                ("ARCHIVIST_BUS", "sqs"),
                ("AWS_ENDPOINT_URL", endpoint),
                ("AWS_REGION", "us-east-1"),
                ("ARCHIVIST_CONNECT_TIMEOUT", "30s"),
            ],
        )
        .expect_code(2);
        assert!(run.stderr.contains("AWS_ENDPOINT_URL"), "{}", run.stderr);
        assert!(
            !run.stderr.contains("Error {"),
            "a Debug dump: {}",
            run.stderr
        );
        assert!(run.stderr.len() < 400, "{}", run.stderr);
        // Refused before any attempt to reach it, so never retried.
        assert!(!run.stderr.contains("attempt"), "{}", run.stderr);
    }
}

/// Variables meant for one command do not leak into others: ARCHIVIST_EVERY (for `run`)
/// leaves the cron runs one-shot, and ARCHIVIST_LEASE_DURATION (for production) leaves the
/// demo its short lease.
#[test]
fn production_variables_do_not_leak_into_other_commands() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("ARCHIVIST_EVERY", "1s"),
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", "1"),
    ];
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    // Each ends after one run (they would repeat every second until killed otherwise).
    archivist(dir.path(), &["pending-research"], &env).expect_code(0);
    archivist(dir.path(), &["completed-research"], &env).expect_code(0);

    let demo = tempfile::tempdir().unwrap();
    let run = archivist(
        demo.path(),
        &["demo", "--json"],
        &[("ARCHIVIST_LEASE_DURATION", "1h")],
    )
    .expect_code(0);
    let s: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(s["all_researched_once"], true, "{s}");
    assert_eq!(s["leases_expired"], 1, "{s}");
}

/// `send` checks every line before sending any: each bad line is named, nothing is sent (so
/// that sending the fixed file again duplicates nothing), and a pretty-printed file is told
/// to be compacted rather than sent raw.
#[test]
fn send_checks_every_line_first_and_sends_nothing_if_any_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    let input = "{\"n\":1}\nnot json\n{\"n\":3}\n{broken\n";
    let run = common::archivist_with_input(dir.path(), &["send", "curated_clips"], &[], input)
        .expect_code(2);
    assert!(
        run.stderr.contains("line 2") && run.stderr.contains("line 4"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("nothing was sent"), "{}", run.stderr);
    let got = archivist(
        dir.path(),
        &["receive", "curated_clips", "--max", "10", "--wait", "0s"],
        &[],
    )
    .expect_code(0);
    assert_eq!(got.stdout, "");

    let pretty = "{\n  \"n\": 1\n}\n";
    let run = common::archivist_with_input(dir.path(), &["send", "curated_clips"], &[], pretty)
        .expect_code(2);
    assert!(
        run.stderr.contains("one JSON message per line"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("jq -c"), "{}", run.stderr);
    assert!(!run.stderr.contains("--raw"), "{}", run.stderr);
}

/// Logs say what a run did, once: a run that did nothing is silent at INFO, each archivist
/// reports its own counters under its name (not twice), the start jitter is said, and an
/// invalid RUST_LOG is an error naming it.
#[test]
fn logs_say_what_each_run_did_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad = archivist(dir.path(), &["status"], &[("RUST_LOG", "info,=x=y")]).expect_code(2);
    assert!(bad.stderr.contains("RUST_LOG"), "{}", bad.stderr);

    let env = [
        ("RUST_LOG", "info"),
        ("ARCHIVIST_RESEARCHERS", "1"),
        ("ARCHIVIST_START_JITTER", "1ms"),
    ];
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    // Nothing to do: no summary at INFO.
    let idle = archivist(dir.path(), &["completed-research"], &env).expect_code(0);
    assert!(!idle.stderr.contains("run ended"), "{}", idle.stderr);
    let pending = archivist(dir.path(), &["pending-research"], &env).expect_code(0);
    assert!(
        pending.stderr.contains("before leasing"),
        "{}",
        pending.stderr
    );

    // Something to do: its own counters, its name once.
    let clip = r#"{"initial_date_curated":"2026-01-02T03:04:05Z","last_date_curated":"2026-01-02T03:04:05Z","curator_information":"c","title":"Clip","description":"d","media_uri":"https://x/c.mp3","media_type":"mp3","priority":0}"#;
    common::archivist_with_input(dir.path(), &["send", "curated_clips"], &env, clip).expect_code(0);
    let run = archivist(dir.path(), &["clips", "--once"], &env).expect_code(0);
    let summary = run
        .stderr
        .lines()
        .find(|l| l.contains("run ended"))
        .unwrap_or_else(|| panic!("no summary: {}", run.stderr));
    assert!(summary.contains("stored=1"), "{summary}");
    assert!(!summary.contains("published"), "{summary}");
    assert!(!summary.contains("leases_renewed"), "{summary}");
    assert_eq!(summary.matches("clips").count(), 1, "{summary}");
}

/// `queues` says which queues it created; an existing queue whose receive limit differs from
/// ARCHIVIST_MAX_RECEIVES is named and left alone, or changed with `--update`.
#[test]
fn queues_say_what_they_created_and_how_existing_ones_differ() {
    let dir = tempfile::tempdir().unwrap();
    let run = archivist(dir.path(), &["queues"], &[]).expect_code(0);
    assert!(
        run.stderr.contains("created queue curated_episodes")
            && run.stderr.contains("curated_episodes_dead_letter"),
        "{}",
        run.stderr
    );
    let three = [("ARCHIVIST_MAX_RECEIVES", "3")];
    let run = archivist(dir.path(), &["queues"], &three).expect_code(0);
    assert!(
        run.stderr
            .contains("receive limit is 5, ARCHIVIST_MAX_RECEIVES is 3")
            && run.stderr.contains("--update"),
        "{}",
        run.stderr
    );
    let run = archivist(dir.path(), &["queues", "--update"], &three).expect_code(0);
    assert!(run.stderr.contains("updated queue"), "{}", run.stderr);
    let run = archivist(dir.path(), &["queues"], &three).expect_code(0);
    assert!(!run.stderr.contains("left as it is"), "{}", run.stderr);
    assert!(
        run.stderr.contains("queue curated_clips exists"),
        "{}",
        run.stderr
    );
}

/// Each subcommand's help lists only the options it reads, shows examples for the commands
/// people type most, never shows a variable's (possibly empty) value, and errors share one
/// prefix with clap's own.
#[test]
fn help_lists_what_each_subcommand_uses_with_examples() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("ARCHIVIST_BUS", ""),
        ("DATABASE_URL", "sqlite://secret-path.sqlite"),
    ];
    let matches = archivist(dir.path(), &["matches", "--help"], &env).expect_code(0);
    for unused in [
        "--max-clips",
        "--lease-duration",
        "--researchers",
        "--start-jitter",
        "--bus ",
    ] {
        assert!(
            !matches.stdout.contains(unused),
            "{unused}: {}",
            matches.stdout
        );
    }
    assert!(
        matches.stdout.contains("--database-url"),
        "{}",
        matches.stdout
    );
    let pending = archivist(dir.path(), &["pending-research", "--help"], &env).expect_code(0);
    for used in [
        "--max-clips",
        "--lease-duration",
        "--researchers",
        "--start-jitter",
    ] {
        assert!(pending.stdout.contains(used), "{used}: {}", pending.stdout);
    }
    for sub in [
        "send",
        "receive",
        "run",
        "pending-research",
        "matches",
        "demo",
        "status",
        "completions",
        "redrive",
    ] {
        let help = archivist(dir.path(), &[sub, "--help"], &env).expect_code(0);
        assert!(help.stdout.contains("Examples:"), "{sub}: {}", help.stdout);
        assert!(!help.stdout.contains("=]"), "{sub}: {}", help.stdout);
        assert!(
            !help.stdout.contains("secret-path"),
            "{sub}: {}",
            help.stdout
        );
    }
    // Our errors and clap's read alike.
    let ours = archivist(dir.path(), &["status"], &[]).expect_code(2);
    assert!(ours.stderr.starts_with("error: "), "{}", ours.stderr);
    let clap = archivist(dir.path(), &["status", "--no-such-flag"], &[]).expect_code(2);
    assert!(clap.stderr.starts_with("error: "), "{}", clap.stderr);
}

/// On a terminal the logs are coloured, unless NO_COLOR is set (https://no-color.org). The
/// terminal is a pseudo-terminal from util-linux's `script`.
#[test]
fn no_color_is_honoured_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let on_a_terminal = |no_color: Option<&str>| {
        let mut cmd = std::process::Command::new("script");
        cmd.args([
            "-qec",
            &format!("{} migrate", env!("CARGO_BIN_EXE_archivist")),
        ])
        .arg("/dev/null")
        .current_dir(dir.path())
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        on_a_terminal(None).contains("\u{1b}["),
        "no colour on a terminal"
    );
    let plain = on_a_terminal(Some("1"));
    assert!(plain.contains("INFO"), "{plain}");
    assert!(
        !plain.contains("\u{1b}["),
        "coloured despite NO_COLOR: {plain:?}"
    );
}

/// Known secrets in every credential setting never reach any output of any subcommand, on
/// success and on failure paths, even with debug logs: the database password (in the user
/// part and as a parameter) and the AWS secret key.
#[test]
fn secrets_never_reach_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::PgDatabase::create();
    // Trust authentication accepts any password: the runs succeed with secrets in the URL.
    let url = db
        .url
        .replacen("postgres@", "postgres:Secret-User-Pw-1@", 1)
        + "?password=Secret-Param-Pw-2";
    let secrets = ["Secret-User-Pw-1", "Secret-Param-Pw-2", "Secret-Aws-Key-3"];
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("RUST_LOG", "debug"),
        ("AWS_SECRET_ACCESS_KEY", "Secret-Aws-Key-3"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_REGION", "us-east-1"),
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", "1"),
        ("ARCHIVIST_CONNECT_TIMEOUT", "1s"),
    ];
    let check = |what: &str, run: &common::Run| {
        for s in secrets {
            assert!(
                !run.stdout.contains(s) && !run.stderr.contains(s),
                "{what} printed {s}:\n{}\n{}",
                run.stdout,
                run.stderr
            );
        }
    };
    let runs: &[&[&str]] = &[
        &["migrate"],
        &["queues"],
        &["status"],
        &["status", "--json"],
        &["matches"],
        &["episodes", "--once"],
        &["clips", "--once"],
        &["pending-research"],
        &["completed-research"],
        &["receive", "curated_clips", "--wait", "0s"],
        &["status", "--help"],
        &["run", "--help"],
    ];
    for args in runs {
        check(&format!("{args:?}"), &archivist(dir.path(), args, &env));
    }
    let sent = common::archivist_with_input(dir.path(), &["send", "curated_clips"], &env, "{}\n");
    check("send", &sent);
    // Failure paths: an unreachable SQS bus with the AWS secret set, a refused database.
    let mut sqs = env.to_vec();
    sqs.push(("ARCHIVIST_BUS", "sqs"));
    sqs.push(("AWS_ENDPOINT_URL", "http://127.0.0.1:1"));
    check("queues on sqs", &archivist(dir.path(), &["queues"], &sqs));
    let refused = common::with_refused_port(&url);
    let mut down = env.to_vec();
    down[0] = ("DATABASE_URL", refused.as_str());
    check(
        "status, refused",
        &archivist(dir.path(), &["status"], &down),
    );
}

/// `--version`, and completion scripts that need no configuration and no datastore.
#[test]
fn version_and_completions_need_no_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let version = archivist(dir.path(), &["--version"], &[]).expect_code(0);
    assert!(
        version
            .stdout
            .starts_with(&format!("archivist {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        version.stdout
    );
    // A broken setting elsewhere does not stop a completion script from being printed.
    let broken = [("ARCHIVIST_MAX_CLIPS", "many"), ("RUST_LOG", "=x=y")];
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = archivist(dir.path(), &["completions", shell], &broken).expect_code(0);
        for word in ["pending-research", "database-url", "table"] {
            assert!(run.stdout.contains(word), "{shell}: {word}");
        }
    }
    let bash = archivist(dir.path(), &["completions", "bash"], &[]).expect_code(0);
    let script = dir.path().join("archivist.bash");
    std::fs::write(&script, &bash.stdout).unwrap();
    let syntax = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    archivist(dir.path(), &["completions", "tcsh"], &[]).expect_code(2);
    assert!(!dir.path().join("archivist.sqlite").exists());
}

/// ARCHIVIST_LOG_FORMAT=json: one object a line, the archivist's name and the message and
/// lease ids as fields; anything else is a usage error naming the variable.
#[test]
fn json_logs_carry_the_archivist_message_and_lease_ids() {
    let dir = tempfile::tempdir().unwrap();
    let bad =
        archivist(dir.path(), &["status"], &[("ARCHIVIST_LOG_FORMAT", "yaml")]).expect_code(2);
    assert!(
        bad.stderr.contains("ARCHIVIST_LOG_FORMAT"),
        "{}",
        bad.stderr
    );

    let env = [
        ("ARCHIVIST_LOG_FORMAT", "json"),
        ("RUST_LOG", "info,archivist=debug"),
        ("ARCHIVIST_RESEARCHERS", "1"),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    let episode = r#"{"initial_date_curated":"2026-01-02T03:04:05Z","last_date_curated":"2026-01-02T03:04:05Z","curator_information":"c","title":"Episode","date_aired":"2026-01-01T00:00:00Z","description":"d","media_uri":"https://x/e.mp3","media_type":"mp3","priority":0}"#;
    let clip = r#"{"initial_date_curated":"2026-01-02T03:04:05Z","last_date_curated":"2026-01-02T03:04:05Z","curator_information":"c","title":"Clip","description":"d","media_uri":"https://x/c.mp3","media_type":"mp3","priority":0}"#;
    common::archivist_with_input(
        dir.path(),
        &["send", "--raw", "curated_episodes"],
        &env,
        &format!("{episode}\nnot json\n"),
    )
    .expect_code(0);
    common::archivist_with_input(dir.path(), &["send", "curated_clips"], &env, clip).expect_code(0);
    let episodes = archivist(dir.path(), &["episodes", "--once"], &env).expect_code(0);
    archivist(dir.path(), &["clips", "--once"], &env).expect_code(0);
    let pending = archivist(dir.path(), &["pending-research"], &env).expect_code(0);

    let lines = |stderr: &str| -> Vec<serde_json::Value> {
        stderr
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let dead = lines(&episodes.stderr)
        .into_iter()
        .find(|l| l["message"] == "dead-lettered")
        .unwrap_or_else(|| panic!("{}", episodes.stderr));
    assert_eq!(dead["span"]["archivist"], "episodes", "{dead}");
    assert!(dead["message_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(dead["reason"].as_str().is_some_and(|r| r.contains("JSON")));
    assert!(dead["timestamp"].is_string() && dead["level"] == "WARN");

    let published = lines(&pending.stderr)
        .into_iter()
        .find(|l| l["message"] == "work item published")
        .unwrap_or_else(|| panic!("{}", pending.stderr));
    assert_eq!(published["span"]["archivist"], "pending-research");
    assert!(published["lease_id"]
        .as_str()
        .is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()));
}

/// `send`, `receive` and `redrive` (even `--dry-run`) in a directory with no datastore create
/// none: exit 2, naming the absolute path and `archivist migrate`, and the directory stays
/// empty; with an ARCHIVIST_BUS_URL file that is missing, the same names that file.
#[test]
fn bus_commands_never_create_a_datastore() {
    let dir = tempfile::tempdir().unwrap();
    let absolute = dir
        .path()
        .canonicalize()
        .unwrap()
        .join("archivist.sqlite")
        .display()
        .to_string();
    let runs: &[&[&str]] = &[
        &["send", "curated_clips"],
        &["receive", "curated_clips", "--wait", "0s"],
        &["receive", "curated_clips", "--dead-letters", "--wait", "0s"],
        &["redrive", "curated_clips"],
        &["redrive", "curated_clips", "--dry-run"],
    ];
    for args in runs {
        let run = common::archivist_with_input(dir.path(), args, &[], "{}\n").expect_code(2);
        assert!(
            run.stderr.contains("archivist migrate"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(&absolute), "{args:?}: {}", run.stderr);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?} wrote"
        );
    }
    // A missing bus file, with the datastore missing too and then with it migrated.
    let bus = [("ARCHIVIST_BUS_URL", "sqlite://bus.sqlite")];
    let bus_file = dir.path().canonicalize().unwrap().join("bus.sqlite");
    let check_bus_refused = |files: usize| {
        for args in runs {
            let run = common::archivist_with_input(dir.path(), args, &bus, "{}\n").expect_code(2);
            for named in [
                "ARCHIVIST_BUS_URL",
                "archivist migrate",
                &bus_file.display().to_string(),
            ] {
                assert!(run.stderr.contains(named), "{args:?}: {}", run.stderr);
            }
            assert!(!bus_file.exists(), "{args:?} created the bus file");
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                files,
                "{args:?} wrote"
            );
        }
    };
    check_bus_refused(0);
    let datastore = tempfile::tempdir().unwrap();
    archivist(datastore.path(), &["migrate"], &[]).expect_code(0);
    std::fs::copy(
        datastore.path().join("archivist.sqlite"),
        dir.path().join("archivist.sqlite"),
    )
    .unwrap();
    check_bus_refused(1);
    std::fs::remove_file(dir.path().join("archivist.sqlite")).unwrap();

    // Once migrated, a dry run changes nothing in the database. (Compared row by row, not
    // byte by byte: the last connection to close checkpoints the write-ahead log into the
    // file, which moves bytes without changing a row.)
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    let file = dir.path().join("archivist.sqlite");
    let before = sqlite_rows(&file);
    let run = archivist(dir.path(), &["redrive", "curated_clips", "--dry-run"], &[]).expect_code(0);
    assert!(run.stdout.contains("nothing to move"), "{}", run.stdout);
    assert_eq!(sqlite_rows(&file), before, "a dry run wrote");
    let sent = common::archivist_with_input(dir.path(), &["send", "curated_clips"], &[], "{}\n")
        .expect_code(0);
    assert!(sent.stderr.contains("sent 1 message"), "{}", sent.stderr);
}

/// Another program's sqlx migrations in `url`'s database: a table of its own and one
/// migration, applied by sqlx's own migrator.
fn migrate_another_program(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("1_create_users.sql"),
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);",
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let migrator = sqlx::migrate::Migrator::new(dir.path()).await.unwrap();
        if url.starts_with("sqlite:") {
            let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
            let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true))
                .await
                .unwrap();
            migrator.run(&pool).await.unwrap();
        } else {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            migrator.run(&pool).await.unwrap();
        }
    });
}

/// A database another sqlx program migrated is refused before anything is written (exit 2),
/// saying whose migrations are there and what archivist needs instead; a schema of its own,
/// chosen with the URL's `options=-c search_path=…`, works.
#[test]
fn a_database_of_another_sqlx_program_is_named_and_a_schema_of_our_own_works() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::PgDatabase::create();
    migrate_another_program(&db.url);
    for args in [&["status"][..], &["migrate"], &["episodes", "--once"]] {
        let run = archivist(dir.path(), args, &[("DATABASE_URL", &db.url)]).expect_code(2);
        assert!(
            run.stderr.contains("another program's migrations")
                && run.stderr.contains("1 \"create users\"")
                && run.stderr.contains("search_path"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("run `archivist migrate`"),
            "{}",
            run.stderr
        );
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tables = |schema: &str| -> i64 {
        rt.block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query_scalar(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            )
            .bind(schema)
            .fetch_one(&mut conn)
            .await
            .unwrap()
        })
    };
    // Nothing of ours was written: the other program's table and its migrations table only.
    assert_eq!(tables("public"), 2);
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("CREATE SCHEMA archivist")
            .execute(&mut conn)
            .await
            .unwrap();
    });
    let sep = if db.url.contains('?') { '&' } else { '?' };
    let in_schema = format!("{}{sep}options=-c%20search_path%3Darchivist", db.url);
    let env = [("DATABASE_URL", in_schema.as_str())];
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    let clip = r#"{"initial_date_curated":"2026-01-02T03:04:05Z","last_date_curated":"2026-01-02T03:04:05Z","curator_information":"c","title":"Clip","description":"d","media_uri":"https://x/c.mp3","media_type":"mp3","priority":0}"#;
    common::archivist_with_input(dir.path(), &["send", "curated_clips"], &env, clip).expect_code(0);
    archivist(dir.path(), &["clips", "--once"], &env).expect_code(0);
    let run = archivist(dir.path(), &["status", "--json"], &env).expect_code(0);
    let status: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(status["clips"], 1, "{status}");
    assert_eq!(tables("public"), 2, "archivist wrote outside its schema");
    assert!(tables("archivist") > 5);

    // SQLite: another file.
    let other = format!("sqlite://{}", dir.path().join("other.sqlite").display());
    migrate_another_program(&other);
    let run = archivist(dir.path(), &["migrate"], &[("DATABASE_URL", &other)]).expect_code(2);
    assert!(
        run.stderr.contains("another program's migrations")
            && run.stderr.contains("another SQLite file"),
        "{}",
        run.stderr
    );
}

/// The example messages in the book's *Messages* and in `send --help` are complete: each
/// passes `send --check` on its queue; `--check` gives the archivists' own reason for a bad
/// line, names the line, sends nothing, and needs no datastore.
#[test]
fn the_example_messages_are_valid_and_send_check_uses_the_archivists_rules() {
    let dir = tempfile::tempdir().unwrap();
    let messages = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/messages.md"
    ))
    .unwrap();
    let block = messages
        .split("```jsonl\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let readme_lines: Vec<&str> = block.lines().collect();
    assert_eq!(readme_lines.len(), 4, "{block}");
    let help = archivist(dir.path(), &["send", "--help"], &[]).expect_code(0);
    let queues = [
        "curated_episodes",
        "curated_clips",
        "pending_research",
        "completed_research",
    ];
    for (line, queue) in readme_lines.iter().zip(queues) {
        assert!(help.stdout.contains(line), "send --help lacks {line}");
        assert!(!line.contains('…'), "an example left incomplete: {line}");
        let run = common::archivist_with_input(
            dir.path(),
            &["send", "--check", queue],
            &[],
            &format!("{line}\n"),
        )
        .expect_code(0);
        assert!(
            run.stderr.contains("all 1 lines are valid"),
            "{}",
            run.stderr
        );
    }
    // A clip where an episode is expected, a poison line, an empty title: each named with
    // the archivists' reason.
    let input = format!(
        "{}\n\n{}\n{}\n",
        readme_lines[0],
        readme_lines[1],
        readme_lines[0].replace("\"title\":\"Episode 4012: The Archive\"", "\"title\":\"\"")
    );
    let run = common::archivist_with_input(
        dir.path(),
        &["send", "--check", "curated_episodes"],
        &[],
        &input,
    )
    .expect_code(2);
    let expected = |body: &str| {
        archivist::messages::decode::<datastore::EpisodeInfo>(body.as_bytes())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        run.stdout,
        format!(
            "line 3: {}\nline 4: {}\n",
            expected(readme_lines[1]),
            expected(&readme_lines[0].replace("Episode 4012: The Archive", ""))
        )
    );
    assert!(
        run.stdout.contains("title: must not be empty"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("nothing was sent"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "wrote");
}

/// Runs the binary in `dir` as a user who may not write there: `postgres` when the tests run
/// as root (root may write anywhere), else the current user with `dir` made read-only.
fn archivist_without_write_access(dir: &std::path::Path, args: &[&str]) -> common::Run {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap();
    if !root {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        let run = archivist(dir, args, &[]);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        return run;
    }
    let cmd = format!(
        "cd '{}' && exec env -i PATH=/usr/bin:/bin NO_COLOR=1 '{}' {}",
        dir.display(),
        env!("CARGO_BIN_EXE_archivist"),
        args.join(" ")
    );
    let out = std::process::Command::new("su")
        .args(["postgres", "-s", "/bin/sh", "-c", &cmd])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    common::Run::from_output(out)
}

/// A directory this user may not write: permission denied, with the absolute path (not
/// SQLite's "(code: 14) unable to open database file"), exit 2, whether the datastore or the
/// bus opens the file first.
#[test]
fn an_unwritable_directory_is_permission_denied_naming_the_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    let absolute = dir.path().canonicalize().unwrap().display().to_string();
    for args in [&["migrate"][..], &["episodes", "--once"]] {
        let run = archivist_without_write_access(dir.path(), args).expect_code(2);
        assert!(
            run.stderr.contains("permission denied") && run.stderr.contains(&absolute),
            "{args:?}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("code: 14"), "{}", run.stderr);
    }
}

/// An address already in use is bad configuration: exit 2, naming the setting and the
/// address.
#[test]
fn a_port_in_use_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let run = archivist(dir.path(), &["serve", "--addr", &addr], &[]).expect_code(2);
    assert!(
        run.stderr.contains("ARCHIVIST_SERVE_ADDR") && run.stderr.contains(&addr),
        "{}",
        run.stderr
    );
    let run = archivist(
        dir.path(),
        &["completed-research", "--metrics-addr", &addr],
        &[],
    )
    .expect_code(2);
    assert!(
        run.stderr.contains("ARCHIVIST_METRICS_ADDR"),
        "{}",
        run.stderr
    );
}

/// Small things a first user meets: a byte-order mark is named as one; `serve --addr
/// localhost:PORT` is resolved; the in-memory bus's refusal names every shared bus, RabbitMQ
/// included; the read-only subcommands' help does not say the datastore is created.
#[test]
fn small_things_a_first_user_meets() {
    let s = common::pipeline::Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let run = s
        .run_with_input(&["send", "curated_clips"], "\u{feff}{\"a\":1}\n")
        .expect_code(2);
    assert!(
        run.stderr
            .contains("line 1: starts with a byte-order mark (U+FEFF"),
        "{}",
        run.stderr
    );

    let (_serving, addr) = common::serving::start_serving(
        &s,
        &["serve", "--addr", "localhost:0"],
        &[],
        std::time::Duration::from_secs(60),
    );
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let (code, _) = common::serving::get(&addr, "/healthz");
    assert_eq!(code, 200);
    let run = s
        .run(&["serve", "--addr", "no-such-host.invalid:9898"], &[])
        .expect_code(2);
    assert!(run.stderr.contains("--addr"), "{}", run.stderr);

    let run = s
        .run(&["episodes"], &[("ARCHIVIST_BUS", "memory")])
        .expect_code(2);
    assert!(
        run.stderr.contains("ARCHIVIST_BUS=rabbitmq") && run.stderr.contains("ARCHIVIST_BUS=sqs"),
        "{}",
        run.stderr
    );

    for sub in ["matches", "status", "serve", "send", "receive", "redrive"] {
        let help = s.run(&[sub, "--help"], &[]).expect_code(0);
        assert!(
            !help.stdout.contains("created if missing"),
            "{sub}: {}",
            help.stdout
        );
        assert!(
            help.stdout.contains("archivist migrate"),
            "{sub}: {}",
            help.stdout
        );
    }
    let help = s.run(&["migrate", "--help"], &[]).expect_code(0);
    assert!(
        help.stdout.contains("created if missing"),
        "{}",
        help.stdout
    );
}

/// Every row of every table of the SQLite file, as text, in a stable order.
fn sqlite_rows(file: &std::path::Path) -> Vec<String> {
    use sqlx::{Connection, Row};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}?mode=ro", file.display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let mut out = Vec::new();
        for table in tables {
            // A table name from sqlite_master, quoted: not a value, so it cannot be bound.
            let rows = sqlx::query(&format!("SELECT * FROM \"{}\"", table.replace('"', "\"\"")))
                .fetch_all(&mut conn)
                .await
                .unwrap();
            for row in rows {
                let cells: Vec<String> = (0..row.len())
                    .map(|i| {
                        row.try_get::<Option<String>, _>(i)
                            .map(|v| format!("{v:?}"))
                            .or_else(|_| row.try_get::<Option<i64>, _>(i).map(|v| format!("{v:?}")))
                            .or_else(|_| {
                                row.try_get::<Option<Vec<u8>>, _>(i)
                                    .map(|v| format!("{v:?}"))
                            })
                            .unwrap_or_else(|e| format!("<{e}>"))
                    })
                    .collect();
                out.push(format!("{table}: {}", cells.join(", ")));
            }
        }
        out.sort();
        out
    })
}

// ------------------------------------------------------------- words that say what is true

/// The top-level help says what `demo` runs on: the datastore's own queues by default, not an
/// in-memory bus (that is ARCHIVIST_BUS=memory).
#[test]
fn help_says_where_the_demo_runs() {
    let dir = tempfile::tempdir().unwrap();
    let help = archivist(dir.path(), &["--help"], &[])
        .expect_code(0)
        .stdout;
    // Its entry, wrapped over several lines, up to the next subcommand's.
    let from = help
        .find("\n  demo ")
        .unwrap_or_else(|| panic!("no demo: {help}"));
    let to = help[from..]
        .find("\n  send ")
        .map_or(help.len(), |i| from + i);
    let demo = help[from..to]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!demo.contains("in-memory"), "{demo}");
    assert!(demo.contains("datastore's database"), "{demo}");
}

/// Work items waiting with no researcher, which work assignment did not publish under the
/// "neither researchers nor waiting items" rule (two, for two researchers it was told of):
/// `status` says they wait and what happens next, and names no cause that is not theirs.
/// `matches --clip` with a title no clip has says so, suggests similar titles, and takes the
/// one title that differs only in case.
#[test]
fn waiting_items_and_unknown_clip_titles_are_said_as_they_are() {
    use common::pipeline::{results_for, Scenario, FOUND};
    let s = Scenario::database(None);
    s.curate();
    let env = [
        ("ARCHIVIST_RESEARCHERS", "2"),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let table = s.run(&["status"], &[]).expect_code(0).stdout;
    assert!(
        table.contains(
            "2 work items wait on pending_research with no researcher consuming them: the \
             first researcher to start takes them"
        ),
        "{table}"
    );
    assert!(!table.contains("neither researchers nor"), "{table}");

    // Every pair researched, matches recorded.
    let env = [
        ("ARCHIVIST_RESEARCHERS", "50"),
        ("ARCHIVIST_START_JITTER", "0s"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let work = s.receive_work("50", "2s");
    let results: Vec<String> = work
        .iter()
        .flat_map(results_for)
        .map(|r| r.to_string())
        .collect();
    s.run_with_input(
        &["send", &s.bus.completed_queue],
        &(results.join("\n") + "\n"),
    )
    .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);
    let clip_b = FOUND.iter().filter(|(_, c, _)| *c == "Clip B").count();
    let exact = s.run(&["matches", "--clip", "Clip B"], &[]).expect_code(0);
    assert_eq!(exact.json_lines().len(), clip_b, "{}", exact.stdout);
    assert!(!exact.stderr.contains("no clip"), "{}", exact.stderr);

    let nope = s.run(&["matches", "--clip", "nope"], &[]).expect_code(0);
    assert!(nope.stdout.is_empty(), "{}", nope.stdout);
    assert!(
        nope.stderr.contains("no clip is titled \"nope\""),
        "{}",
        nope.stderr
    );
    // Another case: that clip's matches, said so.
    let case = s.run(&["matches", "--clip", "clip b"], &[]).expect_code(0);
    assert_eq!(case.json_lines().len(), clip_b, "{}", case.stderr);
    assert!(
        case.stderr
            .contains("no clip is titled \"clip b\"; listing the matches of \"Clip B\""),
        "{}",
        case.stderr
    );
    // Words of several titles: suggested.
    let close = s.run(&["matches", "--clip", "Clip"], &[]).expect_code(0);
    assert!(close.stdout.is_empty(), "{}", close.stdout);
    assert!(
        close.stderr.contains("clips with similar titles: ") && close.stderr.contains("\"Clip A\""),
        "{}",
        close.stderr
    );
}
