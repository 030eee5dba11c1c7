//! Known secrets reach no output, beyond what `cli.rs`'s `secrets_never_reach_any_output`
//! covers: `--help` (and `--version`) of every subcommand the binary lists, found from
//! `archivist --help` so that new subcommands are covered as they come; the password of
//! ARCHIVIST_BUS_URL (the database bus in its own database), on success and when refused;
//! the long-running `run` (stopped with SIGTERM) and `demo`; and a panic that formats the
//! whole configuration (a test-only fail point), which the panic hook must mask.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::{archivist, PgDatabase, Run};

const SECRETS: [&str; 5] = [
    "Secret-Db-Pw-1",
    "Secret-Db-Param-2",
    "Secret-Bus-Pw-3",
    "Secret-Aws-Key-4",
    "Secret-Aws-Token-5",
];

fn assert_clean(what: &str, run: &Run) {
    for s in SECRETS {
        assert!(
            !run.stdout.contains(s) && !run.stderr.contains(s),
            "{what} printed {s}:\n--- stdout\n{}\n--- stderr\n{}",
            run.stdout,
            run.stderr
        );
    }
}

/// DATABASE_URL and ARCHIVIST_BUS_URL (both on `db`, which trusts any password) with secrets,
/// the AWS secrets, debug logs.
fn env_with_secrets(db: &PgDatabase) -> (String, String) {
    let database =
        db.url.replacen("postgres@", "postgres:Secret-Db-Pw-1@", 1) + "?password=Secret-Db-Param-2";
    let bus = db.url.replacen("postgres@", "postgres:Secret-Bus-Pw-3@", 1);
    (database, bus)
}

fn base_env<'a>(database: &'a str, bus: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("DATABASE_URL", database),
        ("ARCHIVIST_BUS", "postgres"),
        ("ARCHIVIST_BUS_URL", bus),
        ("AWS_SECRET_ACCESS_KEY", "Secret-Aws-Key-4"),
        ("AWS_SESSION_TOKEN", "Secret-Aws-Token-5"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_REGION", "us-east-1"),
        ("RUST_LOG", "debug"),
        ("ARCHIVIST_START_JITTER", "0s"),
        // Long enough for a server that is there to answer on a loaded machine (1 s was seen
        // to run out); the runs against a refused port set their own.
        ("ARCHIVIST_CONNECT_TIMEOUT", "20s"),
    ]
}

/// The subcommands `archivist --help` lists.
fn subcommands(dir: &std::path::Path) -> Vec<String> {
    let help = archivist(dir, &["--help"], &[]).expect_code(0).stdout;
    let list = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    let names: Vec<String> = list
        .lines()
        // A name is indented by two spaces; wrapped descriptions by more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 10, "{names:?}\n{help}");
    names
}

#[test]
fn help_and_version_of_every_subcommand_print_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let (database, bus) = env_with_secrets(&db);
    let env = base_env(&database, &bus);
    let mut n = 0;
    for args in [vec!["--help"], vec!["--version"], vec!["help"]] {
        assert_clean(&format!("{args:?}"), &archivist(dir.path(), &args, &env));
        n += 1;
    }
    for sub in subcommands(dir.path()) {
        let run = archivist(dir.path(), &[&sub, "--help"], &env).expect_code(0);
        assert_clean(&format!("{sub} --help"), &run);
        assert_clean(
            &format!("help {sub}"),
            &archivist(dir.path(), &["help", &sub], &env),
        );
        n += 2;
    }
    println!("{n} help and version outputs, no secret in any");
}

#[test]
fn the_bus_url_password_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let (database, bus) = env_with_secrets(&db);
    let env = base_env(&database, &bus);
    let mut env_one = env.clone();
    env_one.push(("ARCHIVIST_RESEARCHERS", "1"));
    let runs: &[&[&str]] = &[
        &["migrate"],
        &["queues"],
        &["queues", "--json"],
        &["status"],
        &["status", "--json"],
        &["matches"],
        &["episodes", "--once"],
        &["clips", "--once"],
        &["pending-research"],
        &["completed-research"],
        &["receive", "pending_research", "--wait", "0s"],
        &["receive", "curated_clips", "--dead-letters", "--wait", "0s"],
    ];
    for args in runs {
        assert_clean(&format!("{args:?}"), &archivist(dir.path(), args, &env_one));
    }
    let sent = common::archivist_with_input(
        dir.path(),
        &["send", "curated_clips", "--raw"],
        &env,
        "not json\n",
    );
    assert_clean("send", &sent);
    // Refused: the bus's server is not there; the datastore's is.
    let refused = common::with_refused_port(&bus);
    assert_ne!(refused, bus);
    assert!(refused.contains("Secret-Bus-Pw-3"), "{refused}");
    let mut down = env.clone();
    down.retain(|(k, _)| *k != "ARCHIVIST_BUS_URL" && *k != "ARCHIVIST_CONNECT_TIMEOUT");
    down.push(("ARCHIVIST_BUS_URL", &refused));
    // A refused port is retried until the connect timeout: kept short.
    down.push(("ARCHIVIST_CONNECT_TIMEOUT", "1s"));
    for args in [&["episodes", "--once"][..], &["queues"], &["status"]] {
        assert_clean(
            &format!("{args:?}, bus refused"),
            &archivist(dir.path(), args, &down),
        );
    }
    println!(
        "{} runs with the bus password set, none printed it",
        runs.len() + 4
    );
}

#[test]
fn run_and_demo_print_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let (database, bus) = env_with_secrets(&db);
    let env = base_env(&database, &bus);
    archivist(dir.path(), &["migrate"], &env).expect_code(0);

    // `run` until it has started every archivist, then SIGTERM.
    let mut child = common::command(dir.path(), &["run"], &env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut seen = String::new();
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if seen.matches("ingesting").count() >= 2 {
            break;
        }
    }
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    for line in lines {
        seen.push_str(&line.unwrap());
        seen.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: seen,
    };
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_clean("run, stopped by SIGTERM", &run);

    // The demo keeps its own in-memory bus; the datastore is the one with the secrets.
    let mut demo_env = env.clone();
    demo_env.retain(|(k, _)| !k.starts_with("ARCHIVIST_BUS"));
    let demo = archivist(dir.path(), &["demo", "--json"], &demo_env);
    assert_eq!(demo.code, 0, "{}", demo.stderr);
    assert_clean("demo", &demo);
    println!("run (until SIGTERM) and demo, with debug logs: no secret printed");
}

/// A panic that formats the whole configuration (URLs included) is printed as an error with
/// every credential masked. The fail point exists only in test builds (`fail-points`).
#[cfg(feature = "fail-points")]
#[test]
fn a_panic_prints_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let (database, bus) = env_with_secrets(&db);
    let mut env = base_env(&database, &bus);
    env.push(("ARCHIVIST_FAIL_POINT", "panic"));
    let run = archivist(dir.path(), &["status"], &env);
    assert_eq!(run.code, 101, "a panic: {}", run.stderr);
    assert!(
        run.stderr.contains("error: internal error") && run.stderr.contains("***"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("database_url"), "{}", run.stderr);
    assert_clean("a panic", &run);
}

/// API tokens (`token create`, `serve --api`) reach no output: not `token list`, not the
/// gateway's debug log while it answers good, wrong-scope and guessed tokens, not a page,
/// `/api/…` or `/metrics`.
#[test]
fn api_tokens_reach_no_log_page_or_metrics() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    let (database, bus) = env_with_secrets(&db);
    let env = base_env(&database, &bus);
    archivist(dir.path(), &["migrate"], &env).expect_code(0);
    archivist(dir.path(), &["queues"], &env).expect_code(0);
    let mut tokens = Vec::new();
    for scope in ["curator", "researcher", "reader"] {
        let run =
            archivist(dir.path(), &["token", "create", "--scope", scope], &env).expect_code(0);
        assert_clean("token create", &run);
        let token = run.stdout.trim().to_string();
        assert!(
            !run.stderr.contains(&token),
            "token create logged its token"
        );
        tokens.push(token);
    }
    let list = archivist(dir.path(), &["token", "list", "--json"], &env).expect_code(0);
    assert_clean("token list", &list);
    let mut child = common::command(
        dir.path(),
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &env,
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let log = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once("on http://") {
                let _ = tx.send(rest.trim().to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("serve --api never said where it serves");
    let request = |method: &str, path: &str, token: &str, body: &str| -> String {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    let guessed = "archivist_0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab";
    let mut answers = Vec::new();
    for token in tokens
        .iter()
        .map(String::as_str)
        .chain([guessed, "not-even-a-token"])
    {
        for (method, path, body) in [
            ("POST", "/api/v1/episodes", "{\"title\": 1}\n"),
            ("POST", "/api/v1/work?wait=0", ""),
            ("POST", "/api/v1/work/b.1.1/extend", ""),
            ("GET", "/api/v1/status", ""),
            ("GET", "/api/v1/matches", ""),
            ("GET", "/", ""),
            ("GET", "/api/status", ""),
            ("GET", "/metrics", ""),
        ] {
            answers.push(request(method, path, token, body));
        }
    }
    // SIGTERM, and the whole log read.
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    child.wait().unwrap();
    let log = log.join().unwrap();
    let run = Run {
        code: 0,
        stdout: answers.join("\n"),
        stderr: log,
    };
    assert_clean("serve --api", &run);
    for token in tokens.iter().map(String::as_str).chain([guessed]) {
        assert!(
            !run.stdout.contains(token) && !run.stderr.contains(token),
            "a token reached an answer or the log"
        );
    }
}
