//! The status page through the binary, as a person would watch it: `archivist serve` on a
//! store while `archivist run` and a researcher (this test) work through the pipeline, the
//! page loaded again and again in a real headless browser (Debian's `chromium`, which
//! `scripts/test.sh` installs; without it these tests fail, they never skip), its numbers
//! seen to move, screenshots kept under the test's output directory; the same data as JSON
//! under `/api/…`; and no secret of the URLs anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::pipeline::{item_pairs, results_for, Scenario, CLIPS, EPISODES};
use crate::common::serving::{measurable, measured, request, start_serving, Running};
use crate::common::PgDatabase;
use serde_json::Value;

/// How long the processes may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(90);

/// The passwords put in the datastore's URL (Postgres trusts any password here).
const SECRETS: &[&str] = &["Secret-Page-Pw-1", "Secret-Page-Pw-2"];

/// A poison clip whose body is markup: the page must show it as text.
const MARKUP_POISON: &str = r#"<script>alert("not a clip")</script>"#;

/// Starts a long-running subcommand that serves nothing (its log drained).
fn start(s: &Scenario, args: &[&str], extra: &[(&str, &str)]) -> Running {
    let mut child = common::command(s.path(), args, &s.bus.with(extra))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Running(child)
}

/// GET `path` as JSON, expecting 200.
fn api(addr: &str, path: &str) -> Value {
    let (code, body) = request(addr, "GET", path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// Debian's headless Chromium, driven as a person's browser: each load a fresh profile.
struct Browser {
    binary: PathBuf,
    profiles: tempfile::TempDir,
    loads: u32,
}

impl Browser {
    /// The machine's `chromium`. Missing, the test fails: `scripts/test.sh` installs it.
    fn new() -> Self {
        let binary = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("chromium"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "no `chromium` on PATH: the status page is tested in a real browser; \
                     scripts/test.sh installs it (apt-get install chromium)"
                )
            });
        Browser {
            binary,
            profiles: tempfile::tempdir().unwrap(),
            loads: 0,
        }
    }

    /// Runs the browser on `url` with `args`, within the deadline; its standard output.
    fn run(&mut self, url: &str, args: &[&str]) -> String {
        self.loads += 1;
        let profile = self.profiles.path().join(self.loads.to_string());
        let mut child = Command::new(&self.binary)
            .args([
                "--headless",
                // Root in a container has no user namespace for the sandbox.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                &format!("--user-data-dir={}", profile.display()),
            ])
            .args(args)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "chromium {args:?} {url}: {status}");
                break;
            }
            if started.elapsed() > DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium {args:?} {url} did not finish within {DEADLINE:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        reader.join().unwrap()
    }

    /// The page as the browser built it.
    fn dom(&mut self, url: &str) -> String {
        let dom = self.run(url, &["--dump-dom"]);
        assert!(dom.contains("archivist status"), "not the page: {dom}");
        dom
    }

    /// A screenshot of the page at a phone's width (`width` × `height` CSS pixels).
    fn screenshot(&mut self, url: &str, path: &Path, width: u32, height: u32) {
        let _ = std::fs::remove_file(path);
        self.run(
            url,
            &[
                &format!("--screenshot={}", path.display()),
                &format!("--window-size={width},{height}"),
            ],
        );
        let png = std::fs::read(path).unwrap();
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{} is no PNG",
            path.display()
        );
        assert!(png.len() > 10_000, "{} is nearly empty", path.display());
        println!("screenshot: {}", path.display());
    }
}

/// The number in the element with `id` (`<… id="ID">123</…>`).
fn number(dom: &str, id: &str) -> u64 {
    let marker = format!("id=\"{id}\">");
    let start = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("no #{id} in the page: {dom}"))
        + marker.len();
    let digits: String = dom[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("#{id} holds no number: {}", &dom[start..]))
}

/// The part of the page inside `<section id="ID">`.
fn section<'a>(dom: &'a str, id: &str) -> &'a str {
    let marker = format!("<section id=\"{id}\">");
    let start = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("no section #{id}: {dom}"));
    let rest = &dom[start..];
    &rest[..rest.find("</section>").unwrap()]
}

/// Where this test keeps its screenshots: under the test's output directory.
fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status_page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Loads the page until `done` holds for it (the archivists act on their own clock).
fn load_until(browser: &mut Browser, url: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let dom = browser.dom(url);
        if done(&dom) {
            return dom;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the page never showed {what}:\n{dom}"
        );
    }
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows a secret: {text}");
    }
}

#[test]
fn a_person_watches_the_pipeline_in_a_browser() {
    let mut browser = Browser::new();
    let db = PgDatabase::create();
    let url = db
        .url
        .replacen("postgres@", &format!("postgres:{}@", SECRETS[0]), 1)
        + &format!("?password={}", SECRETS[1]);
    let s = Scenario::database(Some(&url));
    s.run_with_input(
        &["send", "--raw", &s.bus.clips_queue],
        &format!("{MARKUP_POISON}\n"),
    )
    .expect_code(0);
    s.curate();
    let pairs = (EPISODES.len() * CLIPS.len()) as u64;

    let (_serve, addr) = start_serving(&s, &["serve", "--addr", "127.0.0.1:0"], &[], DEADLINE);
    let page = format!("http://{addr}/");
    let first = browser.dom(&page);
    assert_eq!(number(&first, "research-pairs"), pairs);
    assert_eq!(number(&first, "researched-pairs"), 0);
    assert!(
        first.contains(r#"<meta http-equiv="refresh" content="5">"#),
        "{first}"
    );
    assert!(first.contains(r#"name="viewport""#), "{first}");
    // The datastore is named, its passwords masked.
    assert!(first.contains("postgres://postgres:***@"), "{first}");
    assert_no_secret("the page", &first);
    // The poison clip is shown as text with its reason, never as markup.
    let dead = section(&first, "dead-letters");
    assert!(dead.contains("curated_clips_dead_letter: 1"), "{dead}");
    assert!(dead.contains("Reason: "), "{dead}");
    assert!(
        dead.contains("&lt;script&gt;alert(\"not a clip\")&lt;/script&gt;"),
        "{dead}"
    );
    assert!(!first.contains("<script>"), "{first}");
    let shots = screenshot_dir();
    browser.screenshot(&page, &shots.join("1-before-research.png"), 412, 2200);

    // The archivists run; this test is the researcher, one work item at a time, and
    // watches each lease and each result arrive on the page.
    let _run = start(
        &s,
        &["run", "--every", "1s"],
        &[("ARCHIVIST_START_JITTER", "0s")],
    );
    let mut researched = 0;
    let mut seen = vec![0];
    while researched < pairs {
        let items = s.receive_work("1", "30s");
        assert_eq!(
            items.len(),
            1,
            "no work item while {researched} of {pairs} researched"
        );
        let item = &items[0];
        let (episode, clips) = item_pairs(item);
        let lease = item["lease_id"].as_str().unwrap().to_string();
        let dom = load_until(&mut browser, &page, "the lease", |dom| {
            section(dom, "leases").contains(&lease)
        });
        let leases = section(&dom, "leases");
        assert!(leases.contains(&episode), "{leases}");
        assert!(leases.contains("<td>active</td>"), "{leases}");
        if researched == pairs / 2 {
            browser.screenshot(&page, &shots.join("2-half-researched.png"), 412, 2400);
        }

        // One match scored by its analyser: "Episode 3: Middle" × "Clip B", at 0.
        let results: Vec<String> = results_for(item)
            .into_iter()
            .map(|mut r| {
                if r["episode"]["title"] == "Episode 3: Middle" && r["clip"]["title"] == "Clip B" {
                    r["clip_match_scores"] = serde_json::json!([0.35]);
                }
                r.to_string()
            })
            .collect();
        s.run_with_input(
            &["send", &s.bus.completed_queue],
            &(results.join("\n") + "\n"),
        )
        .expect_code(0);
        let want = researched + clips.len() as u64;
        let dom = load_until(&mut browser, &page, "the results recorded", |dom| {
            number(dom, "researched-pairs") >= want
        });
        researched = number(&dom, "researched-pairs");
        assert_eq!(researched, want, "results recorded once each");
        seen.push(researched);
        assert_no_secret("the page", &dom);
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    println!("researched pairs on successive loads: {seen:?}");

    let last = load_until(&mut browser, &page, "every lease ended", |dom| {
        section(dom, "leases").contains("No lease holds pairs.")
    });
    assert_eq!(number(&last, "researched-pairs"), pairs);
    assert_eq!(number(&last, "percent-researched"), 100);
    let matched = number(&last, "matched-pairs");
    assert_eq!(matched, common::pipeline::FOUND.len() as u64);
    let matches = section(&last, "matches");
    for (episode, clip, _) in common::pipeline::FOUND {
        assert!(
            matches.contains(episode) && matches.contains(clip),
            "{matches}"
        );
    }
    // "Episode 2: High" × "Clip B" was found at 2 min and at 40 min.
    assert!(matches.contains("0:02:00.000, 0:40:00.000"), "{matches}");
    // The scored one shows its score beside its offset.
    assert!(matches.contains("0:00:00.000 (0.35)"), "{matches}");
    // Over time: the readings taken while the research went on, from none to all pairs.
    let research = section(&last, "research");
    let samples = &research[research.find("id=\"progress-samples\"").unwrap()..];
    let rows = samples.matches("<tr>").count() - 1;
    assert!(rows >= 3, "{samples}");
    assert!(research.contains("(0 of 12) to "), "{research}");
    assert!(research.contains("(12 of 12)"), "{research}");
    assert!(research.contains("<svg"), "{research}");
    browser.screenshot(&page, &shots.join("3-all-researched.png"), 412, 2600);
    browser.screenshot(&page, &shots.join("4-all-researched-wide.png"), 1280, 1800);

    // The same through the JSON API, with no secret either.
    for path in [
        "/api/status",
        "/api/progress",
        "/api/leases",
        "/api/queues",
        "/api/dead-letters",
        "/api/matches",
    ] {
        let (code, body) = request(&addr, "GET", path);
        assert_eq!(code, 200, "{path}: {body}");
        assert_no_secret(path, &body);
    }
    let status = api(&addr, "/api/status");
    assert_eq!(status["researched_pairs"], pairs);
    assert_eq!(status["matched_pairs"], matched);

    // The finished archive seen by a server started after it finished (its first reading is
    // all it has): the chart, as the browser drew it, is a full line along the top, where the
    // dashed line for every pair researched runs, not an empty box.
    let (_again, again) = start_serving(&s, &["serve", "--addr", "127.0.0.1:0"], &[], DEADLINE);
    let scratch = tempfile::tempdir().unwrap();
    let file = measurable(&again, "/", MEASURE_CHART, scratch.path());
    let drawn = measured(&browser.run(&file, &["--dump-dom", "--window-size=412,900"]));
    let (chart, line, all) = (&drawn["chart"], &drawn["line"], &drawn["all"]);
    let px = |v: &Value, k: &str| v[k].as_f64().unwrap();
    assert!(px(chart, "width") > 300.0, "{drawn}");
    assert!(
        (px(line, "left") - px(chart, "left")).abs() <= 1.0
            && (px(line, "width") - px(chart, "width")).abs() <= 1.0,
        "the line spans the chart: {drawn}"
    );
    assert!(px(line, "height") <= 1.0, "the line is level: {drawn}");
    assert!(
        (px(line, "top") - px(all, "top")).abs() <= 1.0,
        "the line runs along every pair researched: {drawn}"
    );
    assert!(
        px(line, "top") - px(chart, "top") < 0.15 * px(chart, "height"),
        "the line is at the top: {drawn}"
    );
    browser.screenshot(
        &format!("http://{again}/"),
        &shots.join("5-finished-archive.png"),
        412,
        1200,
    );
}

/// Measures the progress chart as drawn: its box, its line's and the dashed top line's.
const MEASURE_CHART: &str = "\
    var svg = document.getElementById('progress-chart');\
    var box = function (e) { var r = e.getBoundingClientRect();\
      return {left: r.left, top: r.top, width: r.width, height: r.height}; };\
    return {chart: box(svg), line: box(svg.querySelector('polyline.line')),\
      all: box(svg.querySelector('line.all'))};";

#[test]
fn the_api_serves_the_page_data_as_json_and_changes_nothing() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run_with_input(
        &["send", "--raw", &s.bus.episodes_queue],
        &format!("{}\n", common::pipeline::POISON),
    )
    .expect_code(0);
    s.curate();
    s.run(&["pending-research"], &[("ARCHIVIST_START_JITTER", "0s")])
        .expect_code(0);
    let status_before = s.status();
    let queues_before = s.queue_depths();

    let (serve, addr) = start_serving(&s, &["serve", "--addr", "127.0.0.1:0"], &[], DEADLINE);

    let status = api(&addr, "/api/status");
    for field in [
        "episodes",
        "clips",
        "research_pairs",
        "researched_pairs",
        "matched_pairs",
        "active_leases",
        "expired_leases",
        "awaiting_late_results",
        "leased_pairs",
        "unresearched_pairs",
    ] {
        assert_eq!(status[field], status_before[field], "{field}: {status}");
    }
    assert_eq!(status["active_leases"], 1);
    assert!(status["read_at"].is_string(), "{status}");

    let leases = api(&addr, "/api/leases");
    let leases = leases.as_array().unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    let lease = &leases[0];
    assert_eq!(lease["episode_title"], "Episode 2: High");
    assert_eq!(lease["state"], "active");
    assert_eq!(lease["held_pairs"], 2);
    assert!(lease["age_seconds"].as_i64().unwrap() >= 0, "{lease}");
    assert!(lease["expires_in_seconds"].as_i64().unwrap() > 0, "{lease}");

    let queues = api(&addr, "/api/queues");
    assert_eq!(queues["missing"], serde_json::json!([]), "{queues}");
    let pending = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "pending_research")
        .unwrap();
    assert_eq!(pending["waiting"], 1, "{queues}");

    let dead = api(&addr, "/api/dead-letters");
    let episodes = dead
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "curated_episodes")
        .unwrap();
    assert_eq!(episodes["dead_letters"], 1, "{dead}");
    assert_eq!(
        episodes["dead_letter_queue"],
        "curated_episodes_dead_letter"
    );
    let shown = &episodes["shown"][0];
    assert_eq!(shown["body"], common::pipeline::POISON, "{dead}");
    assert!(!shown["reason"].as_str().unwrap().is_empty(), "{dead}");
    assert_eq!(shown["body_truncated"], false);

    assert_eq!(api(&addr, "/api/matches"), serde_json::json!([]));
    let progress = api(&addr, "/api/progress");
    let samples = progress["samples"].as_array().unwrap();
    assert!(!samples.is_empty(), "{progress}");
    assert_eq!(samples.last().unwrap()["research_pairs"], 12);

    // Read-only: nothing but GET, and after all those reads (dead letters looked at
    // included) the datastore and the queues are as they were.
    for path in ["/", "/api/status", "/api/dead-letters"] {
        let (code, _) = request(&addr, "POST", path);
        assert_eq!(code, 405, "POST {path}");
    }
    let (code, page) = request(&addr, "GET", "/");
    assert_eq!(code, 200);
    assert!(page.contains("curated_episodes_dead_letter: 1"), "{page}");
    drop(serve);
    assert_eq!(s.status(), status_before);
    assert_eq!(s.queue_depths(), queues_before);
}

#[test]
fn serve_reads_only_a_missing_store_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::archivist(dir.path(), &["serve", "--addr", "127.0.0.1:0"], &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("archivist migrate"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let run = common::archivist(dir.path(), &["serve", "--addr", "not an address"], &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--addr"), "{}", run.stderr);
}

/// One raw HTTP/1.1 exchange with `host` as the Host header: the status code.
fn status_with_host(addr: &str, host: &str) -> u16 {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /api/status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split(' ').nth(1).unwrap().parse().unwrap()
}

/// The server keeps answering whoever else talks to it: a client that never finishes its
/// request is cut off (and does not hold up others), a host name other than loopback's is
/// refused on a loopback address (DNS rebinding), more connections than the bound are closed.
#[test]
fn the_server_bounds_slow_clients_and_answers_loopback_names_only() {
    use std::io::Write;
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let (_serving, addr) = start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &[],
        Duration::from_secs(60),
    );
    let port = addr.rsplit(':').next().unwrap();
    assert_eq!(status_with_host(&addr, &format!("localhost:{port}")), 200);
    assert_eq!(status_with_host(&addr, &addr), 200);
    assert_eq!(
        status_with_host(&addr, &format!("evil.example:{port}")),
        421
    );
    assert_eq!(
        status_with_host(&addr, &format!("127.0.0.1.nip.io:{port}")),
        421
    );

    // Slow clients: each sends half a request head and waits.
    let mut slow: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n")
                .unwrap();
            c
        })
        .collect();
    // Others are answered meanwhile.
    let (code, _) = request(&addr, "GET", "/api/status");
    assert_eq!(code, 200);
    // And the server closes the slow ones (within the head's 5 s deadline, with room).
    let started = Instant::now();
    for c in &mut slow {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        // An answer (408) or none, then the end: never a hang.
        let _ = c.read_to_end(&mut rest);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "a slow client held on"
        );
    }

    // More connections than the bound: the ones past it are closed at once, and the server
    // answers again once they are gone.
    let held: Vec<std::net::TcpStream> = (0..80)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let mut closed = 0;
    for c in &held {
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 1];
        if matches!((&*c).read(&mut buf), Ok(0)) {
            closed += 1;
        }
    }
    assert!(
        closed >= 80 - 64,
        "only {closed} of 80 connections were refused"
    );
    drop(held);
    let started = Instant::now();
    loop {
        // The held slots free as their heads time out.
        if let Ok(mut c) = std::net::TcpStream::connect(&addr) {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = write!(
                c,
                "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            );
            let mut response = String::new();
            if c.read_to_string(&mut response).is_ok() && response.contains(" 200 ") {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never answered again"
        );
    }
}

/// Dead letters are read cut by the database (a 100 KB body is read as its first 2 KiB, its
/// size said), and one that is not UTF-8 shows with replacement characters instead of
/// blanking the queues.
#[test]
fn dead_letters_are_cut_in_the_database_and_bytes_that_are_not_utf8_shown() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let url = s.database_url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        // As a program in another language could write them: a body that is not UTF-8, and
        // a large one.
        for (body, reason) in [
            (b"{\"title\":\"\xff\xfe\"}".to_vec(), "not UTF-8"),
            (vec![b'x'; 100_000], "large"),
        ] {
            sqlx::query(
                "INSERT INTO bus_messages (queue, body, sent_at, visible_at, dead_letter_reason) \
                 VALUES ('curated_clips_dead_letter', CAST(?1 AS TEXT), 0, 0, ?2)",
            )
            .bind(body)
            .bind(reason)
            .execute(&mut conn)
            .await
            .unwrap();
        }
    });
    let (_serving, addr) = start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &[],
        Duration::from_secs(60),
    );
    let (code, body) = request(&addr, "GET", "/api/dead-letters");
    assert_eq!(code, 200, "{body}");
    let all: Value = serde_json::from_str(&body).unwrap();
    let clips = all
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "curated_clips")
        .unwrap();
    let shown = clips["shown"].as_array().unwrap();
    assert_eq!(shown.len(), 2, "{clips}");
    assert_eq!(
        shown[0]["body"], "{\"title\":\"\u{fffd}\u{fffd}\"}",
        "{clips}"
    );
    assert_eq!(shown[0]["body_truncated"], false);
    assert_eq!(shown[1]["body_bytes"], 100_000);
    assert_eq!(shown[1]["body_truncated"], true);
    assert_eq!(shown[1]["body"].as_str().unwrap().len(), 2048);
    let (code, page) = request(&addr, "GET", "/");
    assert_eq!(code, 200);
    assert!(page.contains("large"), "the dead letters are on the page");
    let (code, body) = request(&addr, "GET", "/api/queues");
    assert_eq!(code, 200, "{body}");
}

/// On the database bus too, queues not created yet are missing, not unreachable: with the bus
/// in a database of its own that `archivist migrate` has not made queues in, `serve` is ready
/// (it only reads) and its page names the queues as not created yet.
#[test]
fn serve_is_ready_with_queues_not_created_yet_on_the_database_bus() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    let bus = PgDatabase::create();
    let on_bus = [
        ("ARCHIVIST_BUS", "postgres"),
        ("ARCHIVIST_BUS_URL", bus.url.as_str()),
    ];
    let (_serving, addr) = start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &on_bus,
        Duration::from_secs(60),
    );
    let (code, ready) = request(&addr, "GET", "/readyz");
    assert_eq!((code, ready.as_str()), (200, "ready\n"));
    let (code, page) = request(&addr, "GET", "/");
    assert_eq!(code, 200);
    assert!(page.contains("Not created yet"), "{page}");
    assert!(!page.contains("unreachable"), "{page}");
}

/// A request the server cannot answer within its bound (15 s) is cut with 503, not left to
/// hang: the bus's database answers each round trip 1.2 s late, so that every read (a pool's
/// check and a statement, a prepare at most besides: 3.6 s) stays within its own 5 s bound
/// while the page's queue section, reading the four queues one after another (16 round trips
/// or more), would take over 19 s.
#[test]
fn a_request_past_its_time_bound_is_cut() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let bus = PgDatabase::create();
    let s = Scenario::database(None);
    let direct = [
        ("ARCHIVIST_BUS", "postgres"),
        ("ARCHIVIST_BUS_URL", bus.url.as_str()),
    ];
    s.run(&["migrate"], &direct).expect_code(0);
    s.run(&["queues"], &direct).expect_code(0);

    // A proxy to the bus's database that, once slowed, holds each answer 1.4 s.
    let slow = Arc::new(AtomicBool::new(false));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut url = url::Url::parse(&bus.url).unwrap();
    let upstream = format!(
        "{}:{}",
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap()
    );
    std::thread::spawn({
        let slow = Arc::clone(&slow);
        move || {
            use std::io::Write;
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut c_in, &mut s_out));
                // A delay line, not a pause per read: each chunk goes on 1.2 s after it
                // came, so an answer that arrives in several reads is late once, not once
                // per read (which, on a loaded machine, made one read outlast its 5 s).
                let (mut s_in, mut c_out) = (server, client);
                let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
                let slow = Arc::clone(&slow);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut due = Instant::now();
                        if slow.load(Ordering::SeqCst) {
                            due += Duration::from_millis(1200);
                        }
                        if tx.send((due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                });
                std::thread::spawn(move || {
                    for (due, chunk) in rx {
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                        if c_out.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(port)).unwrap();
    let through = [
        ("ARCHIVIST_BUS", "postgres"),
        ("ARCHIVIST_BUS_URL", url.as_str()),
    ];
    let (_serving, addr) = start_serving(
        &s,
        &["serve", "--addr", "127.0.0.1:0"],
        &through,
        Duration::from_secs(60),
    );
    // Answered in time while the database is quick (and the bus's id read once).
    let (code, body) = request(&addr, "GET", "/api/queues");
    assert_eq!(code, 200, "{body}");
    let (code, body) = request(&addr, "GET", "/");
    assert_eq!(code, 200, "{body}");

    slow.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let (code, body) = request(&addr, "GET", "/");
    let took = started.elapsed();
    assert_eq!(code, 503, "answered after {took:?}: {body}");
    assert!(body.contains("took too long"), "{body}");
    assert!(
        took >= Duration::from_secs(14) && took < Duration::from_secs(25),
        "cut after {took:?}"
    );
    // Quick again, answered again.
    slow.store(false, Ordering::SeqCst);
    let (code, _) = request(&addr, "GET", "/healthz");
    assert_eq!(code, 200);
}

/// With `serve --api`, the pages need a reader token on loopback too; a browser cannot send
/// one, so a person signs in once with it and reads the pages on a session, which ends when
/// the token is revoked: in a real browser, its cookies kept between pages.
#[test]
fn a_reader_signs_in_from_a_browser_and_is_sent_back_once_revoked() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let reader = s
        .run(
            &[
                "token",
                "create",
                "--scope",
                "reader",
                "--name",
                "wall-screen",
            ],
            &[],
        )
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let (_serve, addr) = start_serving(
        &s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        DEADLINE,
    );
    let mut browser = common::devtools::DevTools::start();
    let page = format!("http://{addr}/");

    // No session: the sign-in page, in the pages' own style, with the way back kept.
    let (at, dom) = browser.load(&page, "/sign-in");
    assert!(at.ends_with("/sign-in?next=/"), "{at}");
    assert!(dom.contains("Sign in · archivist"), "{dom}");
    assert!(dom.contains(r#"href="/style.css""#), "{dom}");
    assert!(dom.contains(r#"type="password""#), "{dom}");

    // Signed in with the reader token: the status page, and again on the next load.
    let (at, dom) = browser.fill_and_send("token", &reader, "/");
    assert_eq!(at, page);
    assert!(dom.contains("archivist status"), "{dom}");
    assert!(!dom.contains(&reader), "the token is on the page");
    let (_, again) = browser.load(&page, "/");
    assert!(again.contains("archivist status"), "{again}");
    let (_, clips) = browser.load(&format!("http://{addr}/clips"), "/clips");
    assert!(clips.contains("Clips"), "{clips}");

    // Revoked: the next page load is sent to sign in again.
    s.run(&["token", "revoke", "wall-screen"], &[])
        .expect_code(0);
    let (at, dom) = browser.load(&page, "/sign-in");
    assert!(at.contains("/sign-in"), "{at}");
    assert!(!dom.contains("archivist status"), "{dom}");
}
