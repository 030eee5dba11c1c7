//! Browsing the archive through the binary: `archivist serve`'s `/clips`, `/episodes` and
//! their pages in a real headless browser (Debian's `chromium`; without it these tests fail,
//! they never skip) on a store of 4,000 episodes loaded through the datastore's API, their
//! JSON under `/api/…`, and `archivist matches --format csv` read back by a CSV parser.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::serving::{get, Running};
use chrono::{DateTime, TimeZone, Utc};
use datastore::{ClipInfo, DataStore, EpisodeInfo, EpisodeKey, ResearchResult};
use serde_json::Value;

/// How long a process may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(90);

/// Episodes in the store: the reference size.
const EPISODES: u32 = 4_000;

/// Titles that are markup, quotes and scripts: they must show as text.
const HOSTILE_EPISODE: &str =
    r#"<script>alert("episode")</script> & "Quotes" <img src=x onerror=alert(1)>"#;
const HOSTILE_CLIP: &str = r#"Laugh <b>track</b> </title><script>alert('clip')</script>"#;

fn aired(i: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2015, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::days(i64::from(i))
}

fn episode(i: u32, title: &str, media_uri: &str) -> EpisodeInfo {
    EpisodeInfo {
        initial_date_curated: aired(i),
        last_date_curated: aired(i),
        curator_information: "tbtl.net".into(),
        date_aired: aired(i),
        title: title.into(),
        description: format!("Show number {i}."),
        media_uri: media_uri.into(),
        media_type: "mp3".into(),
        priority: 0,
    }
}

fn clip(title: &str, n: u32) -> ClipInfo {
    let t = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
    ClipInfo {
        initial_date_curated: t,
        last_date_curated: t,
        curator_information: "tbtl.net".into(),
        title: title.into(),
        description: "A clip.".into(),
        media_uri: format!("https://media.example.invalid/clips/{n}.mp3"),
        media_type: "mp3".into(),
        priority: 0,
    }
}

fn found(
    e: &EpisodeInfo,
    c: &ClipInfo,
    offsets_ns: &[i64],
    research_date: DateTime<Utc>,
) -> ResearchResult {
    ResearchResult {
        lease_id: uuid::Uuid::new_v4(),
        episode: EpisodeKey {
            title: e.title.clone(),
            date_aired: e.date_aired,
        },
        clip_title: c.title.clone(),
        research_date,
        episode_duration_ns: 3_600_000_000_000,
        episode_hash: "sha256:e".into(),
        clip_duration_ns: 4_000_000_000,
        clip_hash: "sha256:c".into(),
        clip_offsets_ns: offsets_ns.to_vec(),
        clip_match_scores: None,
        failure: None,
        clip_findability: None,
    }
}

/// Runs `f` to its end on a runtime of its own (the tests' helpers block).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A new SQLite store's URL in `dir`.
fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("archivist.sqlite").display())
}

/// Migrates the store at `url` with the binary (as a user would), then opens it through the
/// datastore's API to load it.
fn store_at(dir: &Path, url: &str) -> Arc<dyn DataStore> {
    common::archivist(dir, &["migrate"], &[("DATABASE_URL", url)]).expect_code(0);
    block_on(datastore::connect(url)).unwrap()
}

/// `archivist serve` on `url`, and the address it serves on.
fn serve(dir: &Path, url: &str) -> (Running, String) {
    let mut child = common::command(
        dir,
        &["serve", "--addr", "127.0.0.1:0"],
        &[("DATABASE_URL", url)],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once("on http://") {
                let _ = tx.send(rest.trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("`archivist serve` never said where it serves"));
    (running, addr)
}

/// GET `path` as JSON, expecting 200.
fn api(addr: &str, path: &str) -> Value {
    let (code, body) = get(addr, path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// The machine's headless `chromium`: the page as a person's browser builds it.
fn dom(url: &str) -> String {
    chromium(url, &["--dump-dom"])
}

/// A screenshot of `url` at `width` × `height` CSS pixels (a phone's: 390 × 844), kept under
/// the test's output directory (its path printed).
fn screenshot(url: &str, name: &str, width: u32, height: u32) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browse_pages");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    chromium(
        url,
        &[
            &format!("--screenshot={}", path.display()),
            &format!("--window-size={width},{height}"),
            "--hide-scrollbars",
        ],
    );
    let png = std::fs::read(&path).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is no PNG",
        path.display()
    );
    println!("screenshot: {}", path.display());
}

/// Runs headless `chromium` on `url` with `args`, within the deadline; its standard output.
fn chromium(url: &str, args: &[&str]) -> String {
    let binary = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no `chromium` on PATH: the pages are tested in a real browser; \
                 scripts/test.sh installs it (apt-get install chromium)"
            )
        });
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args([
            "--headless",
            // Root in a container has no user namespace for the sandbox.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.path().display()),
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
            assert!(status.success(), "chromium {url}: {status}");
            break;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {url} did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// Every value of attribute `name` in `dom`, in order.
fn attributes(dom: &str, name: &str) -> Vec<String> {
    let marker = format!(" {name}=\"");
    dom.match_indices(&marker)
        .map(|(i, _)| {
            let rest = &dom[i + marker.len()..];
            rest[..rest.find('"').unwrap()].replace("&amp;", "&")
        })
        .collect()
}

/// The part of `dom` from the first `start` to the next `end` after it.
fn between<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let from = dom
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in {dom}"));
    let rest = &dom[from..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

#[test]
fn a_person_browses_clips_and_episodes_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    browse_in_a_browser(dir.path(), &sqlite_url(dir.path()));
}

/// The same on Postgres: its own search index, its own escaping of nothing.
#[test]
fn a_person_browses_clips_and_episodes_in_a_browser_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::PgDatabase::create();
    browse_in_a_browser(dir.path(), &db.url);
}

fn browse_in_a_browser(dir: &Path, url: &str) {
    let store = store_at(dir, url);

    // 4,000 episodes, one of them with a word no other title has, one hostile, one whose
    // media is a script.
    let mut episodes: Vec<EpisodeInfo> = (0..EPISODES)
        .map(|i| {
            episode(
                i,
                &format!("Episode {i}: The regular show"),
                &format!("https://media.example.invalid/episodes/{i}.mp3"),
            )
        })
        .collect();
    episodes[2417].title = "Episode 2417: The Zeppelin Incident".into();
    episodes[3001].title = HOSTILE_EPISODE.into();
    episodes[3002].media_uri = "javascript:alert(document.domain)".into();
    episodes[30].title = "Episode 30: The Timeline Special".into();
    let started = Instant::now();
    let laugh = clip(HOSTILE_CLIP, 1);
    let other = clip("Theme tune", 2);
    let t = Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).unwrap();
    block_on(async {
        store.upsert_episodes(&episodes).await.unwrap();
        store
            .upsert_clips(&[laugh.clone(), other.clone()])
            .await
            .unwrap();
        // The laugh is in three playable moments of two episodes, and in the one whose media is a
        // script.
        store
            .record_results(&[
                found(&episodes[10], &laugh, &[120_000_000_000], t),
                // Scored by the analyser: a weak match late, a sure one early; its researcher
                // predicted the clip findable from +6 dB over its background.
                ResearchResult {
                    clip_match_scores: Some(vec![0.42, 0.97]),
                    clip_findability: Some(datastore::Findability { from_db: Some(6) }),
                    ..found(
                        &episodes[20],
                        &laugh,
                        &[3_725_900_000_000, 1_000_000_000],
                        t,
                    )
                },
                found(&episodes[3002], &laugh, &[60_000_000_000], t),
                found(&episodes[3001], &laugh, &[], t),
                found(&episodes[3001], &other, &[5_000_000_000], t),
                // An hour long (as `found` measures it), the theme at 10, 30 and 50 minutes.
                ResearchResult {
                    clip_match_scores: Some(vec![0.91, 0.5, 1.0]),
                    ..found(
                        &episodes[30],
                        &other,
                        &[600_000_000_000, 1_800_000_000_000, 3_000_000_000_000],
                        t,
                    )
                },
            ])
            .await
            .unwrap();
    });
    println!("loaded {EPISODES} episodes in {:?}", started.elapsed());
    drop(store);

    let (_serve, addr) = serve(dir, url);
    let base = format!("http://{addr}");

    // The status page links the pages.
    let status = dom(&format!("{base}/"));
    assert!(status.contains(r#"href="/clips""#), "{status}");
    assert!(status.contains(r#"href="/episodes""#), "{status}");

    // The clip, found through the JSON listing.
    let listed = api(&addr, "/api/clips?q=laugh");
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["clip"]["title"], HOSTILE_CLIP);
    // Found four times, in three episodes.
    assert_eq!(items[0]["occurrences"], 4, "{listed}");
    assert_eq!(items[0]["episodes"], 3, "{listed}");
    assert_eq!(items[0]["total_pairs"], EPISODES);
    // How findable it is, as its researcher predicted it.
    assert_eq!(
        items[0]["findability"],
        serde_json::json!({ "from_db": 6 }),
        "{listed}"
    );
    let clip_id = items[0]["id"].as_i64().unwrap();
    // A clip no researcher predicted says nothing of it.
    let theme = api(&addr, "/api/clips?q=theme");
    assert!(theme["items"][0].get("findability").is_none(), "{theme}");

    // Its page: three players, newest episode first, each starting 3 s before its moment
    // (not before the start); the episode whose media is a script gets no player and no link.
    let page = dom(&format!("{base}/clips/{clip_id}"));
    let players = page.matches("<audio").count();
    assert_eq!(players, 3, "{page}");
    let sources: Vec<String> = attributes(&page, "src");
    assert_eq!(
        sources,
        [
            "https://media.example.invalid/episodes/20.mp3#t=0",
            "https://media.example.invalid/episodes/20.mp3#t=3722",
            "https://media.example.invalid/episodes/10.mp3#t=117",
        ],
        "{page}"
    );
    assert!(page.contains(r#"preload="none""#), "{page}");
    assert!(page.contains("1:02:05"), "{page}");
    assert!(
        page.contains("findable from +6 dB over its background"),
        "{page}"
    );
    assert!(!page.contains("javascript:alert"), "{page}");
    assert!(page.contains("Not playable here"), "{page}");
    // The hostile title is text: escaped in the heading and the title, no element made of it.
    assert!(
        page.contains("Clip: Laugh &lt;b&gt;track&lt;/b&gt; &lt;/title&gt;&lt;script&gt;alert('clip')&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<b>track"), "{page}");
    assert!(!page.contains("<script>"), "{page}");
    // Each scored moment shows its score, to judge a weak match by ear; the others none.
    let moments = between(&page, "Where it occurs", "As JSON");
    assert!(moments.contains("score 0.97"), "{moments}");
    assert!(moments.contains("score 0.42"), "{moments}");
    assert_eq!(moments.matches("class=\"score\"").count(), 2, "{moments}");
    assert!(
        moments.find("score 0.97").unwrap() < moments.find("score 0.42").unwrap(),
        "in the order of their offsets: {moments}"
    );
    // The JSON says the same: the scores sorted with their offsets, none where none was given.
    let json = api(&addr, &format!("/api/clips/{clip_id}"));
    assert_eq!(
        json["summary"]["findability"],
        serde_json::json!({ "from_db": 6 }),
        "{json}"
    );
    let occurrences = json["occurrences"]["items"].as_array().unwrap();
    let by_title = |title: &str| {
        occurrences
            .iter()
            .find(|o| o["episode"]["title"].as_str().unwrap().starts_with(title))
            .unwrap_or_else(|| panic!("{title} in {json}"))
    };
    let scored = by_title("Episode 20:");
    assert_eq!(
        scored["clip_offsets_ns"],
        serde_json::json!([1_000_000_000_i64, 3_725_900_000_000_i64]),
        "{json}"
    );
    assert_eq!(
        scored["clip_match_scores"],
        serde_json::json!([0.97, 0.42]),
        "{json}"
    );
    assert!(
        by_title("Episode 10:").get("clip_match_scores").is_none(),
        "{json}"
    );
    // `/api/matches` carries them too.
    let recent = api(&addr, "/api/matches");
    let text = recent.to_string();
    assert!(text.contains("\"clip_match_scores\":[0.42,0.97]"), "{text}");

    let kind = if url.starts_with("sqlite") {
        "sqlite"
    } else {
        "postgres"
    };
    screenshot(
        &format!("{base}/clips/{clip_id}"),
        &format!("clip-phone-{kind}.png"),
        390,
        844,
    );

    // Search finds the one episode among 4,000 by a word of its title, any case.
    let search = dom(&format!("{base}/episodes?q=ZEPPELIN"));
    let table = between(&search, "<table id=\"episodes\"", "</table>");
    assert_eq!(
        table.matches("<tr>").count(),
        2,
        "a header and one row: {table}"
    );
    assert!(
        table.contains("Episode 2417: The Zeppelin Incident"),
        "{table}"
    );
    assert!(search.contains(r#"value="ZEPPELIN""#), "{search}");
    // Without a search: the newest 50, and a next page.
    let first = dom(&format!("{base}/episodes"));
    let table = between(&first, "<table id=\"episodes\"", "</table>");
    assert_eq!(table.matches("<tr>").count(), 51, "{table}");
    assert!(table.contains("Episode 3999: The regular show"), "{table}");
    assert!(first.contains("rel=\"next\""), "{first}");

    // Hostile titles and a hostile search render as text.
    let hostile = dom(&format!(
        "{base}/episodes?q=%3Cscript%3Ealert(%22episode%22)%3C%2Fscript%3E"
    ));
    let table = between(&hostile, "<table id=\"episodes\"", "</table>");
    assert!(
        table.contains("&lt;script&gt;alert(\"episode\")&lt;/script&gt; &amp; \"Quotes\" &lt;img src=x onerror=alert(1)&gt;"),
        "{table}"
    );
    // (The search box holds the query as an attribute value; no element is made of it.)
    assert!(!hostile.contains("<script>alert(\"episode\")"), "{hostile}");
    assert!(!hostile.contains("<img"), "{hostile}");

    // The hostile episode's page: its timeline, and no element made of its title.
    let episode_id = api(&addr, "/api/episodes?q=onerror")["items"][0]["id"]
        .as_i64()
        .unwrap();
    let episode_page = dom(&format!("{base}/episodes/{episode_id}"));
    let timeline = between(
        &episode_page,
        "<ol class=\"moments\" id=\"timeline\"",
        "</ol>",
    );
    assert!(timeline.contains("0:00:05"), "{timeline}");
    assert!(timeline.contains("Theme tune"), "{timeline}");
    assert!(!episode_page.contains("<script>"), "{episode_page}");
    assert!(!episode_page.contains("<img"), "{episode_page}");
    screenshot(
        &format!("{base}/episodes/{episode_id}"),
        &format!("episode-phone-{kind}.png"),
        390,
        844,
    );
    screenshot(
        &format!("{base}/episodes"),
        &format!("episodes-phone-{kind}.png"),
        390,
        844,
    );

    // The timeline as a picture, checked by what the browser drew: the episode a bar, each
    // occurrence a marker whose left edge lies at its offset's share of the episode, as wide
    // as the clip (at least a few pixels), and playing the episode from 3 s before it.
    let special = api(&addr, "/api/episodes?q=timeline")["items"][0]["id"]
        .as_i64()
        .unwrap();
    let json = api(&addr, &format!("/api/episodes/{special}"));
    assert_eq!(json["duration_ns"], 3_600_000_000_000_i64, "{json}");
    let scores: Vec<_> = json["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["clip_match_score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores, [0.91, 0.5, 1.0], "{json}");
    // Each marker's tooltip and each moment of the list give the score.
    let special_page = dom(&format!("{base}/episodes/{special}"));
    for (at, score) in [
        ("0:10:00", "0.91"),
        ("0:30:00", "0.50"),
        ("0:50:00", "1.00"),
    ] {
        assert!(
            special_page.contains(&format!("title=\"Theme tune at {at} (score {score})\"")),
            "{at}: {special_page}"
        );
    }
    let timeline = between(
        &special_page,
        "<ol class=\"moments\" id=\"timeline\"",
        "</ol>",
    );
    assert!(timeline.contains("score 0.50"), "{timeline}");
    let scratch = tempfile::tempdir().unwrap();
    let file = common::serving::measurable(
        &addr,
        &format!("/episodes/{special}"),
        MEASURE_TIMELINE,
        scratch.path(),
    );
    for width in [390, 1280] {
        let drawn = common::serving::measured(&chromium(
            &file,
            &["--dump-dom", &format!("--window-size={width},900")],
        ));
        let bar = &drawn["bar"];
        let (left, inner) = (
            bar["left"].as_f64().unwrap() + bar["border"].as_f64().unwrap(),
            bar["inner"].as_f64().unwrap(),
        );
        assert!(
            inner > 250.0,
            "the bar is {inner} px wide at {width}: {drawn}"
        );
        let markers = drawn["markers"].as_array().unwrap();
        let want = [
            (600.0, "#t=597"),
            (1_800.0, "#t=1797"),
            (3_000.0, "#t=2997"),
        ];
        assert_eq!(markers.len(), want.len(), "{drawn}");
        for (marker, (seconds, fragment)) in markers.iter().zip(want) {
            let at = left + inner * seconds / 3_600.0;
            let x = marker["left"].as_f64().unwrap();
            assert!(
                (x - at).abs() <= 1.5,
                "a marker at {x} px, its offset at {at} px: {drawn}"
            );
            let w = marker["width"].as_f64().unwrap();
            let clip = (inner * 4.0 / 3_600.0).max(4.0);
            assert!(
                (w - clip).abs() <= 1.5,
                "a marker {w} px wide, the clip {clip} px: {drawn}"
            );
            assert!(marker["height"].as_f64().unwrap() >= 20.0, "{drawn}");
            let href = marker["href"].as_str().unwrap();
            assert!(href.ends_with(fragment), "{href}");
        }
    }
    screenshot(
        &format!("{base}/episodes/{special}"),
        &format!("episode-timeline-{kind}.png"),
        1280,
        900,
    );
}

/// Measures the episode page's timeline picture: the bar's box (its left edge, border and the
/// width inside it) and each marker's box and link.
const MEASURE_TIMELINE: &str = "\
    var bar = document.querySelector('#timeline-picture .bar');\
    var box = bar.getBoundingClientRect();\
    return {\
      bar: {left: box.left, border: bar.clientLeft, inner: bar.clientWidth},\
      markers: Array.prototype.map.call(document.querySelectorAll('#timeline-picture .marker'),\
        function (m) {\
          var r = m.getBoundingClientRect();\
          return {left: r.left, width: r.width, height: r.height, href: m.href};\
        })\
    };";

/// The JSON listings page by cursor through all 4,000 episodes, each once; bad cursors and
/// ids are refused with 400 and 404.
#[test]
fn the_json_pages_through_every_episode_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let store = store_at(dir.path(), &url);
    let episodes: Vec<EpisodeInfo> = (0..EPISODES)
        .map(|i| {
            episode(
                i,
                &format!("Episode {i}"),
                &format!("https://media.example.invalid/episodes/{i}.mp3"),
            )
        })
        .collect();
    block_on(store.upsert_episodes(&episodes)).unwrap();
    drop(store);
    let (_serve, addr) = serve(dir.path(), &url);

    let mut seen = std::collections::HashSet::new();
    let mut path = "/api/episodes?limit=500".to_string();
    let mut pages = 0;
    loop {
        let page = api(&addr, &path);
        pages += 1;
        for e in page["items"].as_array().unwrap() {
            assert!(seen.insert(e["episode"]["title"].as_str().unwrap().to_string()));
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/episodes?limit=500&cursor={cursor}"),
            None => break,
        }
        assert!(pages <= 8, "paging does not end");
    }
    assert_eq!(seen.len(), EPISODES as usize);

    for (path, code) in [
        ("/api/episodes?cursor=nonsense", 400),
        ("/api/episodes?limit=0", 400),
        ("/api/episodes?limit=501", 400),
        ("/api/clips/999999", 404),
        ("/api/episodes/abc", 404),
        ("/episodes/999999", 404),
        ("/clips?cursor=00", 400),
    ] {
        let (got, body) = get(&addr, path);
        assert_eq!(got, code, "{path}: {body}");
    }
}

/// `matches --format csv` writes RFC 4180 that a CSV parser reads back to the exact titles
/// (commas, quotes, line breaks, unicode), with a header; `--since` keeps the later ones.
#[test]
fn matches_as_csv_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let store = store_at(dir.path(), &url);
    let titles = [
        "Commas, \"quotes\", and\na line break",
        "Ünïcødé 🎙 — ✓ עברית",
        "=SUM(A1:A9);\r\n'tab\there'",
    ];
    let episodes: Vec<EpisodeInfo> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| {
            episode(
                i as u32,
                t,
                &format!("https://media.example.invalid/episodes/{i}.mp3"),
            )
        })
        .collect();
    let c = clip("Clip, \"the\" one\n", 1);
    let day = |d: u32| Utc.with_ymd_and_hms(2026, 6, d, 12, 0, 0).unwrap();
    block_on(async {
        store.upsert_episodes(&episodes).await.unwrap();
        store.upsert_clips(std::slice::from_ref(&c)).await.unwrap();
        store
            .record_results(&[
                found(&episodes[0], &c, &[1, 2_000_000_000], day(1)),
                found(&episodes[1], &c, &[3], day(2)),
                found(&episodes[2], &c, &[4], day(3)),
            ])
            .await
            .unwrap();
    });
    drop(store);
    let env = [("DATABASE_URL", url.as_str())];

    let read = |args: &[&str]| -> Vec<Vec<String>> {
        let run = common::archivist(dir.path(), args, &env).expect_code(0);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(run.stdout.as_bytes());
        reader
            .records()
            .map(|r| r.unwrap().iter().map(str::to_string).collect())
            .collect()
    };
    let all = read(&["matches", "--format", "csv"]);
    assert_eq!(
        all[0],
        [
            "episode_title",
            "episode_date_aired",
            "clip_title",
            "clip_offsets_ns",
            "research_date",
            "clip_match_scores"
        ]
    );
    // Latest aired first.
    let expected: Vec<Vec<String>> = [(2, "4", 3), (1, "3", 2), (0, "1 2000000000", 1)]
        .iter()
        .map(|&(i, offsets, d)| {
            vec![
                titles[i].to_string(),
                aired(i as u32).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                c.title.clone(),
                offsets.to_string(),
                day(d).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                String::new(),
            ]
        })
        .collect();
    assert_eq!(all[1..], expected[..]);

    // The JSON lines say the same.
    let json = common::archivist(dir.path(), &["matches"], &env).expect_code(0);
    let lines = json.json_lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["episode_title"], titles[0]);

    // Incremental: researched at or after a day, or an exact time.
    assert_eq!(
        read(&["matches", "--format", "csv", "--since", "2026-06-02"])[1..],
        expected[..2]
    );
    assert_eq!(
        read(&[
            "matches",
            "--format",
            "csv",
            "--since",
            "2026-06-03T12:00:00+00:00"
        ])[1..],
        expected[..1]
    );
    // Nothing after: the header alone.
    assert_eq!(
        read(&["matches", "--format", "csv", "--since", "2027-01-01"]).len(),
        1
    );
    let bad = common::archivist(dir.path(), &["matches", "--since", "yesterday"], &env);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--since"), "{}", bad.stderr);
}
