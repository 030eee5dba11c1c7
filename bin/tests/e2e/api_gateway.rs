//! The API gateway through the binary (`archivist token …`, `archivist serve --api`), on the
//! SQLite database bus: tokens made, listed and revoked; every request refused without a
//! valid token of its scope, failed attempts rate-limited; curators' lines checked whole
//! before anything is sent; researchers taking, extending, answering and finishing work by
//! receipts that outlive the gateway; remote researchers counted by the work-assignment rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use crate::common::pipeline::{clip_json, episode_json, results_for, Scenario};
use crate::common::serving::{start_serving, Running};
use serde_json::Value;

/// How long a process may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

/// A migrated SQLite scenario with its queues.
fn scenario() -> Scenario {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    s
}

/// `token create`: the token printed, one line.
fn create_token(s: &Scenario, scope: &str, name: &str) -> String {
    let run = s
        .run(&["token", "create", "--scope", scope, "--name", name], &[])
        .expect_code(0);
    let token = run.stdout.trim().to_string();
    assert!(token.starts_with("archivist_"), "{token}");
    assert_eq!(run.stdout.lines().count(), 1);
    assert!(!run.stderr.contains(&token), "the token reached the log");
    token
}

/// `serve --api` on a free loopback port: the process and its base URL.
fn serve_api(s: &Scenario) -> (Running, String) {
    let (running, addr) = start_serving(
        s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        DEADLINE,
    );
    (running, format!("http://{addr}"))
}

/// One request: status and body.
async fn call(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut request = client.request(method.parse().unwrap(), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_made_listed_and_revoked_without_showing_them() {
    let s = scenario();
    let curator = create_token(&s, "curator", "fan-script");
    let reader = create_token(&s, "reader", "dashboard");
    assert_ne!(curator, reader);
    // A taken name, an unknown scope: usage errors.
    let taken = s
        .run(
            &[
                "token",
                "create",
                "--scope",
                "reader",
                "--name",
                "dashboard",
            ],
            &[],
        )
        .expect_code(2);
    assert!(taken.stderr.contains("dashboard"), "{}", taken.stderr);
    s.run(&["token", "create", "--scope", "admin"], &[])
        .expect_code(2);
    let listed = s.run(&["token", "list", "--json"], &[]).expect_code(0);
    for secret in [&curator, &reader] {
        assert!(!listed.stdout.contains(secret.as_str()));
        assert!(!listed.stderr.contains(secret.as_str()));
    }
    let lines = listed.json_lines();
    let names: Vec<(&str, &str)> = lines
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["scope"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("dashboard", "reader"), ("fan-script", "curator")]);
    assert!(lines
        .iter()
        .all(|t| t["created"].is_string() && t["last_used"].is_null()));
    s.run(&["token", "revoke", "dashboard"], &[]).expect_code(0);
    s.run(&["token", "revoke", "dashboard"], &[]).expect_code(2);
    let left = s
        .run(&["token", "list", "--json"], &[])
        .expect_code(0)
        .json_lines();
    assert_eq!(left.len(), 1);
    // A token with no name given gets one.
    let run = s
        .run(&["token", "create", "--scope", "researcher"], &[])
        .expect_code(0);
    assert!(run.stdout.trim().starts_with("archivist_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_need_a_valid_token_of_their_scope() {
    let s = scenario();
    let curator = create_token(&s, "curator", "curator");
    let reader = create_token(&s, "reader", "reader");
    let revoked = create_token(&s, "curator", "gone");
    s.run(&["token", "revoke", "gone"], &[]).expect_code(0);
    let (_gateway, base) = serve_api(&s);
    let episodes = format!("{base}/api/v1/episodes");
    let one = episode_json("Episode 1", "2024-01-01T00:00:00Z", 0, 1).to_string();

    let (code, body) = call("POST", &episodes, None, Some(one.clone()), &[]).await;
    assert_eq!(code, 401, "{body}");
    let (code, _) = call(
        "POST",
        &episodes,
        Some("archivist_0000"),
        Some(one.clone()),
        &[],
    )
    .await;
    assert_eq!(code, 401);
    let (code, _) = call("POST", &episodes, Some(&revoked), Some(one.clone()), &[]).await;
    assert_eq!(code, 401);
    let (code, body) = call("POST", &episodes, Some(&reader), Some(one.clone()), &[]).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("curator"), "names the scope needed: {body}");
    let (code, body) = call("POST", &episodes, Some(&curator), Some(one), &[]).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(json(&body)["accepted"], 1);
    let (code, body) = call(
        "GET",
        &format!("{base}/api/v1/status"),
        Some(&reader),
        None,
        &[],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["episodes"].is_u64());
    let (code, _) = call(
        "GET",
        &format!("{base}/api/v1/status"),
        Some(&curator),
        None,
        &[],
    )
    .await;
    assert_eq!(code, 403);
    // The token was used: its last use is listed, never the token.
    let listed = s.run(&["token", "list", "--json"], &[]).expect_code(0);
    assert!(!listed.stdout.contains(&curator));
    let used = listed.json_lines();
    assert!(used
        .iter()
        .any(|t| t["name"] == "curator" && t["last_used"].is_string()));

    // Brute force: one credential past the failed attempts allowed waits (429, saying how
    // long); other clients behind the same address, a good token among them, do not.
    let mut limited = false;
    for _ in 0..40 {
        let (code, _) = call(
            "GET",
            &format!("{base}/api/v1/status"),
            Some("archivist_guess"),
            None,
            &[],
        )
        .await;
        assert!(code == 401 || code == 429, "{code}");
        if code == 429 {
            limited = true;
            break;
        }
    }
    assert!(limited, "failed attempts were never rate-limited");
    let (code, _) = call(
        "GET",
        &format!("{base}/api/v1/status"),
        Some(&reader),
        None,
        &[],
    )
    .await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curators_lines_are_checked_whole_before_any_is_sent() {
    let s = scenario();
    let curator = create_token(&s, "curator", "curator");
    let (_gateway, base) = serve_api(&s);
    let clips = format!("{base}/api/v1/clips");
    let good = |n: usize| clip_json(&format!("Clip {n}"), 0, n).to_string();
    let mut file = clip_json("Local", 0, 9);
    file["media_uri"] = "file:///etc/passwd".into();
    let mut empty_title = clip_json("", 0, 8);
    empty_title["title"] = "".into();

    // One poison line among good ones: 422 with each bad line's reason, nothing sent.
    let body = format!("{}\n\n{}\n{}\n{}\n", good(1), file, good(2), empty_title);
    let (code, answer) = call("POST", &clips, Some(&curator), Some(body), &[]).await;
    assert_eq!(code, 422, "{answer}");
    let errors = json(&answer)["errors"].as_array().unwrap().clone();
    let lines: Vec<u64> = errors.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [3, 5], "{answer}");
    assert!(
        errors[0]["reason"].as_str().unwrap().contains("http"),
        "{answer}"
    );
    // Not JSON: 400 naming the line.
    let (code, answer) = call(
        "POST",
        &clips,
        Some(&curator),
        Some(format!("{}\nnot json\n", good(1))),
        &[],
    )
    .await;
    assert_eq!(code, 400, "{answer}");
    assert!(answer.contains("line 2"), "{answer}");
    // Over the limit: 413.
    let huge = "x".repeat(17 * 1024 * 1024);
    let (code, _) = call("POST", &clips, Some(&curator), Some(huge), &[]).await;
    assert_eq!(code, 413);
    let depths = s.queue_depths();
    assert_eq!(depths["curated_clips"]["waiting"], 0, "{depths:?}");

    // Good lines: all sent, durably, before the answer; the clips archivist stores them.
    let (code, answer) = call(
        "POST",
        &clips,
        Some(&curator),
        Some(format!("{}\r\n{}\n", good(1), good(2))),
        &[],
    )
    .await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!(json(&answer)["accepted"], 2);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    assert_eq!(s.status()["clips"], 2);
}

/// Takes a work item through the API, waiting at most `wait` seconds.
async fn take(base: &str, token: &str, wait: u32, who: &str) -> (u16, String) {
    call(
        "POST",
        &format!("{base}/api/v1/work?wait={wait}"),
        Some(token),
        None,
        &[("x-archivist-researcher", who)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn researchers_work_by_receipts_that_outlive_the_gateway() {
    let s = scenario();
    s.curate();
    let researcher = create_token(&s, "researcher", "gpu-box");
    let other = create_token(&s, "researcher", "laptop");
    let (gateway, base) = serve_api(&s);
    // Nothing published yet: 204 after the wait.
    let (code, _) = take(&base, &researcher, 0, "a").await;
    assert_eq!(code, 204);
    s.run(
        &["pending-research"],
        &[
            ("ARCHIVIST_RESEARCHERS", "1"),
            ("ARCHIVIST_START_JITTER", "0s"),
        ],
    )
    .expect_code(0);
    let (code, body) = take(&base, &researcher, 10, "a").await;
    assert_eq!(code, 200, "{body}");
    let taken = json(&body);
    let receipt = taken["receipt"].as_str().unwrap().to_string();
    assert!(taken["visible_until"].is_string());
    let item = taken["item"].clone();
    assert!(item["lease_id"].is_string());

    let work = |what: &str| format!("{base}/api/v1/work/{receipt}/{what}");
    let (code, body) = call("POST", &work("extend"), Some(&researcher), None, &[]).await;
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["visible_until"].is_string());
    // A made-up receipt: 409, never another's item.
    let (code, _) = call(
        "POST",
        &format!("{base}/api/v1/work/b.1.12345/extend"),
        Some(&researcher),
        None,
        &[],
    )
    .await;
    assert_eq!(code, 409);

    // The gateway restarts: the receipt still holds the item, for its own token only.
    drop(gateway);
    let (_gateway, base) = serve_api(&s);
    let work = |what: &str| format!("{base}/api/v1/work/{receipt}/{what}");
    let (code, body) = call("POST", &work("extend"), Some(&other), None, &[]).await;
    assert_eq!(code, 409, "{body}");
    let (code, body) = call("POST", &work("extend"), Some(&researcher), None, &[]).await;
    assert_eq!(code, 200, "{body}");

    let results: Vec<String> = results_for(&item).iter().map(Value::to_string).collect();
    let n = results.len();
    let (code, body) = call(
        "POST",
        &work("results"),
        Some(&researcher),
        Some(results.join("\n")),
        &[],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["sent"], n);
    // A bad result line: 422, nothing sent.
    let (code, body) = call(
        "POST",
        &work("results"),
        Some(&researcher),
        Some("{\"lease_id\": 1}\n".into()),
        &[],
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let (code, _) = call("POST", &work("finish"), Some(&researcher), None, &[]).await;
    assert_eq!(code, 204);
    for what in ["finish", "release", "extend"] {
        let (code, _) = call("POST", &work(what), Some(&researcher), None, &[]).await;
        assert_eq!(code, 409, "{what} after finish");
    }
    s.run(&["completed-research"], &[]).expect_code(0);
    let status = s.status();
    assert_eq!(status["researched_pairs"], n, "{status}");

    // Released work comes back at once.
    s.run(
        &["pending-research"],
        &[
            ("ARCHIVIST_RESEARCHERS", "1"),
            ("ARCHIVIST_START_JITTER", "0s"),
        ],
    )
    .expect_code(0);
    let (code, body) = take(&base, &researcher, 10, "a").await;
    assert_eq!(code, 200, "{body}");
    let receipt = json(&body)["receipt"].as_str().unwrap().to_string();
    let (code, _) = call(
        "POST",
        &format!("{base}/api/v1/work/{receipt}/release"),
        Some(&researcher),
        None,
        &[],
    )
    .await;
    assert_eq!(code, 204);
    let (code, body) = take(&base, &researcher, 10, "a").await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_researchers_count_for_the_work_assignment_rule() {
    let mut s = scenario();
    // Every gateway and work-assignment run agrees on the window; a short one for the test.
    let window = Duration::from_secs(6);
    s.bus.set("ARCHIVIST_PRESENCE_WINDOW", "6s");
    s.curate();
    let researcher = create_token(&s, "researcher", "pool");
    let (_gateway, base) = serve_api(&s);
    // Three remote researchers poll (nothing to take yet).
    for who in ["r1", "r2", "r3"] {
        let (code, _) = take(&base, &researcher, 0, who).await;
        assert_eq!(code, 204);
    }
    // A run in another process, with no researcher configured: the bus's consumers (the
    // gateway's own receiver, not counted) and the three present through the API.
    let jitter = [("ARCHIVIST_START_JITTER", "0s")];
    s.run(&["pending-research"], &jitter).expect_code(0);
    let depths = s.queue_depths();
    assert_eq!(depths["pending_research"]["waiting"], 3, "{depths:?}");
    // Enough work for them: another run adds none.
    s.run(&["pending-research"], &jitter).expect_code(0);
    assert_eq!(s.queue_depths()["pending_research"]["waiting"], 3);
    // They take their items and finish them, then go away.
    for who in ["r1", "r2", "r3"] {
        let (code, body) = take(&base, &researcher, 10, who).await;
        assert_eq!(code, 200, "{body}");
        let receipt = json(&body)["receipt"].as_str().unwrap().to_string();
        let (code, _) = call(
            "POST",
            &format!("{base}/api/v1/work/{receipt}/finish"),
            Some(&researcher),
            None,
            &[],
        )
        .await;
        assert_eq!(code, 204);
    }
    // Within the window they stop counting: a run then counts no researcher (and, nothing
    // waiting, publishes the one item the rule gives an idle pipeline).
    let url = s.database_url();
    let until = Instant::now() + DEADLINE;
    while common::api::presence(&url, window).researchers > 0 {
        assert!(Instant::now() < until, "remote researchers never lapsed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let run = s.run(&["pending-research"], &jitter).expect_code(0);
    assert!(run.stderr.contains("researchers=0"), "{}", run.stderr);
    assert_eq!(s.queue_depths()["pending_research"]["waiting"], 1);
}

/// One request on a connection of its own, with `headers` (each ending in CRLF): the status
/// and the body.
fn raw_request(addr: &str, method: &str, path: &str, headers: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    // A connection closed at once (no room for it) reads as nothing.
    let _ = stream.read_to_string(&mut response);
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        return (0, response);
    };
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// While the API is flooded — as many long polls as it takes connections (held open), more
/// API requests, and slow clients that never finish their request head — `/healthz`, the
/// status page and `/metrics` on the same address still answer, and the API's own refusal
/// says why.
#[test]
fn health_and_pages_answer_while_the_api_is_flooded() {
    use std::io::Write;
    const API: usize = 16;
    let s = scenario();
    let researcher = {
        let run = s
            .run(
                &[
                    "token",
                    "create",
                    "--scope",
                    "researcher",
                    "--name",
                    "flood",
                ],
                &[],
            )
            .expect_code(0);
        run.stdout.trim().to_string()
    };
    let checker = create_token(&s, "researcher", "checker");
    let reader = create_token(&s, "reader", "watcher");
    let (_gateway, addr) = start_serving(
        &s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[("ARCHIVIST_API_MAX_CONNECTIONS", &API.to_string())],
        DEADLINE,
    );
    // Slow clients: half a request head each, then nothing.
    let _slow: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.write_all(b"GET /api/v1/status HTTP/1.1\r\nHost: ")
                .unwrap();
            c
        })
        .collect();
    // Long polls on keep-alive connections, one after another, until one is refused: as many
    // as may wait at once (seven in eight of the API's places) are in. A poll that waits gives
    // no answer; a refused one answers at once, saying why.
    let auth = format!("Authorization: Bearer {researcher}\r\n");
    let other = format!("Authorization: Bearer {checker}\r\n");
    let mut polls: Vec<std::net::TcpStream> = Vec::new();
    loop {
        assert!(polls.len() < 4 * API, "the long polls never filled up");
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            c,
            "POST /api/v1/work?wait=20 HTTP/1.1\r\nHost: {addr}\r\n{auth}\
             X-Archivist-Researcher: flood-{}\r\nContent-Length: 0\r\n\r\n",
            polls.len()
        )
        .unwrap();
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut answer = [0u8; 1024];
        match std::io::Read::read(&mut c, &mut answer) {
            Ok(n) if n > 0 => {
                let answer = String::from_utf8_lossy(&answer[..n]);
                assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
                assert!(
                    answer.to_ascii_lowercase().contains("retry-after: 1"),
                    "{answer}"
                );
                assert!(
                    answer.contains("too many researchers are waiting"),
                    "{answer}"
                );
                break;
            }
            _ => polls.push(c),
        }
    }
    assert!(polls.len() >= API * 7 / 8 - 1, "{} polls in", polls.len());
    // A researcher at work still gets its other requests answered: the API's places are
    // held per request, and the polls may not take them all.
    let until = Instant::now() + DEADLINE;
    loop {
        let (code, body) = raw_request(&addr, "POST", "/api/v1/work/00/extend", &other);
        if code == 409 {
            break;
        }
        assert_eq!(code, 429, "{body}");
        assert!(Instant::now() < until, "never answered: {code} {body}");
    }
    // The rest of `serve` answers all the same (to a reader: with the API, the pages need
    // a reader token on loopback too).
    let (code, body) = raw_request(&addr, "GET", "/healthz", "");
    assert_eq!(code, 200, "/healthz: {body}");
    let reader = format!("Authorization: Bearer {reader}\r\n");
    for path in ["/", "/metrics"] {
        let (code, body) = raw_request(&addr, "GET", path, &reader);
        assert_eq!(code, 200, "{path}: {body}");
    }
    // The readers' JSON is not the API: it answers too.
    let (code, body) = raw_request(&addr, "GET", "/api/status", &reader);
    assert_eq!(code, 200, "{body}");
}
