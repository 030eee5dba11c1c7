//! End-to-end tests of the curators (`archivist curate feed`, `archivist curate clips`)
//! through the built binary, on the default database bus in each test's own folder, against
//! an HTTP server started in the test that serves generated feeds and counts every request
//! and every body byte: what arrives on the bus (`archivist receive`), what is fetched, what
//! the summary says, and the whole way to `status`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{archivist, Run};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// The feed server.

/// What the server answers on one path.
#[derive(Clone)]
enum Route {
    /// A feed with its ETag: 304 when asked with that ETag.
    Feed { body: String, etag: String },
    /// A feed with a Last-Modified and no ETag: 304 when asked If-Modified-Since that time.
    Dated { body: String, last_modified: String },
    /// Any answer, as it is.
    Raw {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// A redirect.
    Redirect { status: u16, to: String },
    /// `remaining` answers of `status` (429 or 503) with this Retry-After, then `then`.
    Throttle {
        status: u16,
        remaining: usize,
        retry_after: String,
        then: Box<Route>,
    },
    /// Headers never sent.
    Hang,
}

/// One request the server saw.
#[derive(Clone, Debug)]
struct Hit {
    path: String,
    status: u16,
    body_bytes: usize,
    user_agent: String,
    if_none_match: Option<String>,
    if_modified_since: Option<String>,
    /// Whether the body went gzipped (asked for with Accept-Encoding).
    gzip: bool,
}

#[derive(Default)]
struct Shared {
    routes: Mutex<HashMap<String, Route>>,
    hits: Mutex<Vec<Hit>>,
}

/// An HTTP server on a port of its own, on a runtime of its own (the test's thread runs the
/// binary and blocks).
struct FeedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _runtime: tokio::runtime::Runtime,
}

impl FeedServer {
    fn start() -> Self {
        Self::start_on("127.0.0.1")
    }

    /// A server on another address (another loopback one, as `127.0.0.2`).
    fn start_on(ip: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared::default());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind((ip, 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });
        FeedServer {
            addr,
            shared,
            _runtime: runtime,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn set(&self, path: &str, route: Route) {
        self.shared
            .routes
            .lock()
            .unwrap()
            .insert(path.to_string(), route);
    }

    fn feed(&self, path: &str, body: String) {
        let etag = format!("\"{:x}\"", fxhash(&body));
        self.set(path, Route::Feed { body, etag });
    }

    /// The requests seen on `path`, and forgets all requests.
    fn take_hits(&self, path: &str) -> Vec<Hit> {
        let mut hits = self.shared.hits.lock().unwrap();
        let all = std::mem::take(&mut *hits);
        all.into_iter().filter(|h| h.path == path).collect()
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    // Read out before any await: a request's body is not `Sync`.
    let (path, user_agent, if_none_match, if_modified_since, accepts_gzip) = {
        let text = |name: header::HeaderName| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        (
            request.uri().path().to_string(),
            text(header::USER_AGENT).unwrap_or_default(),
            text(header::IF_NONE_MATCH),
            text(header::IF_MODIFIED_SINCE),
            text(header::ACCEPT_ENCODING).is_some_and(|e| e.contains("gzip")),
        )
    };
    drop(request);
    let route = {
        let mut routes = shared.routes.lock().unwrap();
        match routes.get_mut(&path) {
            Some(Route::Throttle {
                remaining, then, ..
            }) if *remaining == 0 => Some((**then).clone()),
            Some(Route::Throttle {
                status,
                remaining,
                retry_after,
                ..
            }) => {
                *remaining -= 1;
                Some(Route::Raw {
                    status: *status,
                    content_type: "text/plain",
                    body: format!("retry-after:{retry_after}"),
                })
            }
            other => other.cloned(),
        }
    };
    let response = match route {
        None => plain(404, "text/plain", String::new()),
        Some(Route::Hang) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            plain(200, "text/plain", String::new())
        }
        Some(Route::Feed { body, etag }) => {
            if if_none_match.as_deref() == Some(etag.as_str()) {
                let mut r = plain(304, "application/rss+xml", String::new());
                r.headers_mut()
                    .insert(header::ETAG, HeaderValue::from_str(&etag).unwrap());
                r
            } else {
                let mut r = if accepts_gzip {
                    use std::io::Write;
                    let mut gz =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    gz.write_all(body.as_bytes()).unwrap();
                    let mut r = Response::new(Body::from(gz.finish().unwrap()));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/rss+xml"),
                    );
                    r.headers_mut()
                        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                    r
                } else {
                    plain(200, "application/rss+xml", body)
                };
                r.headers_mut()
                    .insert(header::ETAG, HeaderValue::from_str(&etag).unwrap());
                r
            }
        }
        Some(Route::Dated {
            body,
            last_modified,
        }) => {
            let status = if if_modified_since.as_deref() == Some(last_modified.as_str()) {
                304
            } else {
                200
            };
            let mut r = plain(
                status,
                "application/rss+xml",
                if status == 304 { String::new() } else { body },
            );
            r.headers_mut().insert(
                header::LAST_MODIFIED,
                HeaderValue::from_str(&last_modified).unwrap(),
            );
            r
        }
        Some(Route::Raw {
            status,
            content_type,
            body,
        }) => {
            let retry = body.strip_prefix("retry-after:").map(str::to_string);
            let mut r = plain(
                status,
                content_type,
                if retry.is_some() { String::new() } else { body },
            );
            if let Some(v) = retry {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_str(&v).unwrap());
            }
            r
        }
        Some(Route::Redirect { status, to }) => {
            let mut r = plain(status, "text/plain", String::new());
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_str(&to).unwrap());
            r
        }
        Some(Route::Throttle { .. }) => unreachable!("resolved above"),
    };
    let body_bytes = match response.body().size_hint().exact() {
        Some(n) => n as usize,
        None => 0,
    };
    let gzip = response.headers().contains_key(header::CONTENT_ENCODING);
    shared.hits.lock().unwrap().push(Hit {
        gzip,
        path,
        status: response.status().as_u16(),
        body_bytes,
        user_agent,
        if_none_match,
        if_modified_since,
    });
    response
}

use axum::body::HttpBody as _;

fn plain(status: u16, content_type: &'static str, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

// ---------------------------------------------------------------------------------------
// Feeds.

/// One item of a generated RSS feed.
#[derive(Clone)]
struct Item {
    guid: Option<String>,
    title: String,
    date: Option<String>,
    enclosure: Option<(String, String)>,
    description: String,
}

fn item(n: u32) -> Item {
    Item {
        guid: Some(format!("urn:show:{n}")),
        title: format!("Episode {n}: The Archive"),
        date: Some(format!("Mon, {:02} Jan 2024 10:00:00 +0000", n % 28 + 1)),
        enclosure: Some((
            format!("https://cdn.example/show/{n}.mp3?utm_source=rss"),
            "audio/mpeg".into(),
        )),
        description: format!("<p>Part <b>{n}</b> &amp; more</p>"),
    }
}

/// A real-world-shaped podcast feed: the iTunes and Podcasting 2.0 namespaces, CDATA, a
/// channel image, categories, durations, transcripts.
fn rss(items: &[Item]) -> String {
    let mut s = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:itunes="http://www.itunes.com/dtds/podcast-1.0.dtd" xmlns:podcast="https://podcastindex.org/namespace/1.0" xmlns:content="http://purl.org/rss/1.0/modules/content/" xmlns:atom="http://www.w3.org/2005/Atom">
<channel>
<title>The Best Show in the Archive</title>
<link>https://show.example/</link>
<atom:link href="https://show.example/feed.xml" rel="self" type="application/rss+xml"/>
<language>en-us</language>
<itunes:author>Archive Radio</itunes:author>
<itunes:image href="https://show.example/art.jpg"/>
<itunes:category text="Comedy"><itunes:category text="Improv"/></itunes:category>
<itunes:explicit>false</itunes:explicit>
<podcast:guid>917393e3-1b1e-5cef-ace4-edaa54e1f810</podcast:guid>
<podcast:locked>yes</podcast:locked>
"#,
    );
    for i in items {
        s.push_str("<item>\n");
        s.push_str(&format!("<title>{}</title>\n", xml_escape(&i.title)));
        if let Some(g) = &i.guid {
            s.push_str(&format!("<guid isPermaLink=\"false\">{g}</guid>\n"));
        }
        if let Some(d) = &i.date {
            s.push_str(&format!("<pubDate>{d}</pubDate>\n"));
        }
        s.push_str(&format!(
            "<description><![CDATA[{}]]></description>\n",
            i.description
        ));
        if let Some((url, mime)) = &i.enclosure {
            s.push_str(&format!(
                "<enclosure url=\"{}\" length=\"123456\" type=\"{mime}\"/>\n",
                xml_escape(url)
            ));
        }
        s.push_str("<itunes:duration>01:02:03</itunes:duration>\n<itunes:episodeType>full</itunes:episodeType>\n");
        s.push_str("<podcast:transcript url=\"https://show.example/t.vtt\" type=\"text/vtt\"/>\n");
        s.push_str("</item>\n");
    }
    s.push_str("</channel>\n</rss>\n");
    s
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn atom() -> String {
    r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>Atom Show</title>
  <id>urn:uuid:60a76c80-d399-11d9-b93C-0003939e0af6</id>
  <updated>2024-03-01T00:00:00Z</updated>
  <entry>
    <title>Atom Episode One</title>
    <id>urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6a</id>
    <published>2024-02-01T08:00:00+01:00</published>
    <updated>2024-02-02T08:00:00Z</updated>
    <summary type="html">&lt;p&gt;First &lt;i&gt;atom&lt;/i&gt; episode&lt;/p&gt;</summary>
    <link rel="alternate" href="https://atom.example/1"/>
    <link rel="enclosure" type="audio/ogg" href="https://atom.example/1.ogg" length="1000"/>
  </entry>
  <entry>
    <title>Atom Episode Two</title>
    <id>urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6b</id>
    <updated>2024-02-09T08:00:00Z</updated>
    <link rel="enclosure" href="https://atom.example/2.flac"/>
  </entry>
  <entry>
    <title>Atom text post</title>
    <id>urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6c</id>
    <updated>2024-02-10T08:00:00Z</updated>
    <link rel="alternate" href="https://atom.example/3"/>
  </entry>
</feed>
"#
    .to_string()
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn curate(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["curate"];
    all.extend_from_slice(args);
    archivist(dir, &all, &[])
}

/// The JSON summary (the last line of standard output).
fn summary(run: &Run) -> Value {
    let last = run
        .stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary: {run:?}"));
    serde_json::from_str(last).unwrap()
}

/// Everything waiting on `queue`, as JSON.
fn receive(dir: &Path, queue: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let batch = archivist(
            dir,
            &["receive", queue, "--max", "1000", "--wait", "0s"],
            &[],
        )
        .expect_code(0)
        .json_lines();
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

fn titles(messages: &[Value]) -> Vec<String> {
    let mut t: Vec<String> = messages
        .iter()
        .map(|m| m["title"].as_str().unwrap().to_string())
        .collect();
    t.sort();
    t
}

// ---------------------------------------------------------------------------------------
// Feeds.

#[test]
fn a_podcast_feed_arrives_once_unchanged_costs_a_304_and_changes_arrive_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let mut items: Vec<Item> = (1..=3).map(item).collect();
    // An item with only a video enclosure, one with none, one without a date, a repeated
    // GUID, and a title far over the contract's limit.
    let mut video = item(4);
    video.enclosure = Some(("https://cdn.example/4.mp4".into(), "video/mp4".into()));
    let mut bare = item(5);
    bare.enclosure = None;
    let mut undated = item(6);
    undated.date = None;
    let mut repeat = item(7);
    repeat.guid = Some("urn:show:1".into());
    let mut long = item(8);
    long.title = "Long ".repeat(400);
    // An odd but readable date, and one without a GUID (keyed by its enclosure).
    let mut odd = item(9);
    odd.date = Some("2024-01-09T10:00:00Z".into());
    let mut no_guid = item(10);
    no_guid.guid = None;
    items.extend([video, bare, undated, repeat, long, odd, no_guid]);
    server.feed("/feed.xml", rss(&items));
    let url = server.url("/feed.xml");

    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    let feed = &s["feeds"][0];
    assert_eq!(feed["items_found"], 10, "{s}");
    assert_eq!(feed["sent"], 6, "{s}");
    assert_eq!(feed["skipped"], 4, "{s}");
    let reasons = feed["skipped_items"].to_string();
    for why in [
        "no audio enclosure (only video/mp4)",
        "no enclosure",
        "no publication date",
        "duplicate GUID",
    ] {
        assert!(reasons.contains(why), "{why}: {reasons}");
    }
    assert!(feed["notes"].to_string().contains("cut to 1024"), "{s}");
    assert_eq!(feed["title"], "The Best Show in the Archive");

    let sent = receive(dir.path(), "curated_episodes");
    assert_eq!(sent.len(), 6);
    let one = sent
        .iter()
        .find(|m| m["title"] == "Episode 1: The Archive")
        .unwrap();
    assert_eq!(one["description"], "Part 1 & more");
    assert_eq!(one["media_type"], "mp3");
    assert_eq!(one["date_aired"], "2024-01-02T10:00:00Z");
    assert_eq!(one["priority"], 0);
    assert_eq!(one["curator_information"], url.as_str());
    assert_eq!(one["initial_date_curated"], one["last_date_curated"]);
    let long = sent
        .iter()
        .find(|m| m["title"].as_str().unwrap().starts_with("Long"))
        .unwrap();
    assert_eq!(long["title"].as_str().unwrap().chars().count(), 1024);
    assert!(sent
        .iter()
        .any(|m| m["date_aired"] == "2024-01-09T10:00:00Z"));
    let hits = server.take_hits("/feed.xml");
    assert_eq!(hits.len(), 1);
    assert!(
        hits[0].user_agent.starts_with("archivist/"),
        "{:?}",
        hits[0]
    );
    assert!(
        hits[0].gzip,
        "the feed was not asked for gzipped: {:?}",
        hits[0]
    );
    assert!(hits[0].body_bytes < rss(&items).len() / 3, "{:?}", hits[0]);

    // Unchanged: one conditional request, a 304, no body, nothing sent.
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["not_modified"], true, "{s}");
    assert_eq!(s["sent"], 0);
    let hits = server.take_hits("/feed.xml");
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].status, 304);
    assert_eq!(hits[0].body_bytes, 0);
    assert!(hits[0].if_none_match.is_some());
    assert!(receive(dir.path(), "curated_episodes").is_empty());

    // Episode 2 gets a new enclosure, episode 3 a new description: both again, once, with a
    // newer curation; the rest not at all (a new ETag makes the feed be read in full).
    items[1].enclosure = Some(("https://cdn2.example/2.mp3".into(), "audio/mpeg".into()));
    items[2].description = "Now with notes".into();
    server.feed("/feed.xml", rss(&items));
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 2, "{s}");
    assert_eq!(s["feeds"][0]["unchanged"], 4, "{s}");
    let again = receive(dir.path(), "curated_episodes");
    assert_eq!(
        titles(&again),
        ["Episode 2: The Archive", "Episode 3: The Archive"]
    );
    let two = again
        .iter()
        .find(|m| m["title"] == "Episode 2: The Archive")
        .unwrap();
    let two_before = sent
        .iter()
        .find(|m| m["title"] == "Episode 2: The Archive")
        .unwrap();
    assert_eq!(two["media_uri"], "https://cdn2.example/2.mp3");
    assert_eq!(
        two["initial_date_curated"],
        two_before["initial_date_curated"]
    );
    assert!(
        two["last_date_curated"].as_str().unwrap()
            > two_before["last_date_curated"].as_str().unwrap()
    );

    // A retitled item keeps the identity it was first sent under (a new one would be a
    // second episode with a media_uri the first one holds: poison).
    items[0].title = "Episode 1: The Archive (remastered)".into();
    server.feed("/feed.xml", rss(&items));
    let run = curate(dir.path(), &["feed", &url]).expect_code(0);
    assert!(run.stderr.contains("was first sent as"), "{}", run.stderr);
    assert!(receive(dir.path(), "curated_episodes").is_empty());
}

#[test]
fn atom_feeds_and_dry_runs() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/atom", atom());
    let url = server.url("/atom");
    // A dry run prints the messages, sends nothing and remembers nothing.
    let run = curate(dir.path(), &["feed", "--dry-run", &url]).expect_code(0);
    let printed = run.json_lines();
    assert_eq!(titles(&printed), ["Atom Episode One", "Atom Episode Two"]);
    let one = printed
        .iter()
        .find(|m| m["title"] == "Atom Episode One")
        .unwrap();
    assert_eq!(one["media_type"], "ogg");
    assert_eq!(one["date_aired"], "2024-02-01T07:00:00Z");
    assert_eq!(one["description"], "First atom episode");
    let two = printed
        .iter()
        .find(|m| m["title"] == "Atom Episode Two")
        .unwrap();
    assert_eq!(two["media_type"], "flac");
    assert!(run.stderr.contains("no enclosure"), "{}", run.stderr);
    assert!(!dir.path().join("archivist-feeds.json").exists());
    assert!(!dir.path().join("archivist.sqlite").exists());
    // The real run sends the same two.
    curate(dir.path(), &["feed", &url, "--priority", "7"]).expect_code(0);
    let sent = receive(dir.path(), "curated_episodes");
    assert_eq!(titles(&sent), ["Atom Episode One", "Atom Episode Two"]);
    assert!(sent.iter().all(|m| m["priority"] == 7));
}

#[test]
fn a_permanent_redirect_moves_the_feed_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/new.xml", rss(&[item(1), item(2)]));
    server.set(
        "/old.xml",
        Route::Redirect {
            status: 301,
            to: "/new.xml".into(),
        },
    );
    let old = server.url("/old.xml");
    let run = curate(dir.path(), &["feed", &old, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 2, "{s}");
    assert_eq!(s["feeds"][0]["moved_to"], server.url("/new.xml"));
    assert!(run.stderr.contains("moved permanently"), "{}", run.stderr);
    assert_eq!(server.take_hits("/old.xml").len(), 1);
    // Next time straight to the new address (a 304 there), the old one is not asked.
    let run = curate(dir.path(), &["feed", &old, "--json"]).expect_code(0);
    assert_eq!(summary(&run)["feeds"][0]["not_modified"], true);
    let all = server.shared.hits.lock().unwrap().clone();
    assert!(all.iter().all(|h| h.path == "/new.xml"), "{all:?}");
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 2);
}

#[test]
fn too_many_requests_is_waited_out_or_put_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let feed = Route::Feed {
        body: rss(&[item(1)]),
        etag: "\"v1\"".into(),
    };
    server.set(
        "/busy",
        Route::Throttle {
            status: 429,
            remaining: 1,
            retry_after: "1".into(),
            then: Box::new(feed.clone()),
        },
    );
    server.set(
        "/closed",
        Route::Throttle {
            status: 429,
            remaining: 1,
            retry_after: "3600".into(),
            then: Box::new(feed),
        },
    );
    let busy = server.url("/busy");
    let closed = server.url("/closed");
    let run = curate(dir.path(), &["feed", &busy, &closed, "--json"]).expect_code(1);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 1, "{s}");
    assert!(s["feeds"][0]["error"].is_null(), "{s}");
    assert!(
        s["feeds"][1]["error"]
            .as_str()
            .unwrap()
            .contains("Retry-After"),
        "{s}"
    );
    assert!(run.stderr.contains(&closed), "{}", run.stderr);
    assert_eq!(server.take_hits("/busy").len(), 2);
    // Put off: the next run does not ask it at all, and that is no failure.
    let run = curate(dir.path(), &["feed", &closed, "--json"]).expect_code(0);
    assert!(!summary(&run)["feeds"][0]["deferred_until"].is_null());
    assert!(server.take_hits("/closed").is_empty());
}

/// One 503 asking to wait until the year 9999 puts the feed off a day, not for good.
#[test]
fn a_retry_after_date_far_ahead_puts_the_feed_off_a_day_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.set(
        "/feed.xml",
        Route::Raw {
            status: 503,
            content_type: "text/plain",
            body: "retry-after:Fri, 31 Dec 9999 23:59:59 GMT".into(),
        },
    );
    let url = server.url("/feed.xml");
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(1);
    assert!(
        summary(&run)["feeds"][0]["error"]
            .as_str()
            .unwrap()
            .contains("Retry-After"),
        "{}",
        run.stdout
    );
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let until = summary(&run)["feeds"][0]["deferred_until"]
        .as_str()
        .unwrap()
        .to_string();
    let until = chrono::DateTime::parse_from_rfc3339(&until).unwrap();
    let latest = chrono::Utc::now() + chrono::Duration::hours(24);
    assert!(until <= latest, "put off until {until}");
    assert!(
        until > latest - chrono::Duration::minutes(5),
        "put off until {until}"
    );
}

/// A feed typed on the command line is fetched as given, on loopback too; a public feed
/// (here one on 127.0.0.2, taken for public by a test-only setting) that redirects to a
/// private address is refused at the hop, whether the hop names the address or a host
/// name resolving to it, unless --allow-private-addresses.
#[test]
fn a_feed_redirecting_to_a_private_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let private = FeedServer::start();
    private.feed("/feed.xml", rss(&[item(1)]));
    let public = FeedServer::start_on("127.0.0.2");
    let port = private.addr.port();
    public.set(
        "/by-address.xml",
        Route::Redirect {
            status: 302,
            to: format!("http://127.0.0.1:{port}/feed.xml"),
        },
    );
    public.set(
        "/by-name.xml",
        Route::Redirect {
            status: 301,
            to: format!("http://localhost:{port}/feed.xml"),
        },
    );
    let (by_address, by_name) = (public.url("/by-address.xml"), public.url("/by-name.xml"));
    let test_env = [("ARCHIVIST_TEST_PUBLIC_ADDRESSES", "127.0.0.2")];
    let run = archivist(
        dir.path(),
        &[
            "curate",
            "feed",
            &by_address,
            &by_name,
            "--json",
            "--dry-run",
        ],
        &test_env,
    )
    .expect_code(1);
    let s = summary(&run);
    for (i, host) in [(0, "127.0.0.1"), (1, "localhost")] {
        let error = s["feeds"][i]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("refused to connect to {host}"))
                && error.contains("loopback")
                && error.contains("--allow-private-addresses"),
            "{s}"
        );
    }
    assert!(private.take_hits("/feed.xml").is_empty());
    assert_eq!(public.take_hits("/by-name.xml").len(), 1);
    // The private feed typed: fetched as given.
    let typed = private.url("/feed.xml");
    let run = archivist(
        dir.path(),
        &["curate", "feed", &typed, "--json", "--dry-run"],
        &test_env,
    )
    .expect_code(0);
    assert_eq!(
        summary(&run)["feeds"][0]["items_found"],
        1,
        "{}",
        run.stdout
    );
    // With the flag, both redirects are followed.
    let run = archivist(
        dir.path(),
        &[
            "curate",
            "feed",
            &by_address,
            &by_name,
            "--json",
            "--dry-run",
            "--allow-private-addresses",
        ],
        &test_env,
    )
    .expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["items_found"], 1, "{s}");
    assert_eq!(s["feeds"][1]["items_found"], 1, "{s}");
}

#[test]
fn a_feed_with_only_last_modified_is_asked_if_modified_since_and_costs_a_304() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let date = "Wed, 21 Oct 2026 07:28:00 GMT";
    server.set(
        "/dated.xml",
        Route::Dated {
            body: rss(&[item(1), item(2)]),
            last_modified: date.into(),
        },
    );
    let url = server.url("/dated.xml");
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    assert_eq!(summary(&run)["feeds"][0]["sent"], 2);
    let first = server.take_hits("/dated.xml");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].if_modified_since, None);
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 2);
    // The second poll asks If-Modified-Since the date given, gets a 304, and sends nothing.
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["not_modified"], true, "{s}");
    assert_eq!(s["sent"], 0, "{s}");
    let second = server.take_hits("/dated.xml");
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].if_modified_since.as_deref(), Some(date));
    assert_eq!(second[0].if_none_match, None);
    assert_eq!(second[0].status, 304);
    assert_eq!(second[0].body_bytes, 0);
    assert!(receive(dir.path(), "curated_episodes").is_empty());
}

#[test]
fn service_unavailable_with_retry_after_is_waited_out_or_put_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let feed = Route::Feed {
        body: rss(&[item(1)]),
        etag: "\"v1\"".into(),
    };
    server.set(
        "/maintenance",
        Route::Throttle {
            status: 503,
            remaining: 1,
            retry_after: "1".into(),
            then: Box::new(feed.clone()),
        },
    );
    server.set(
        "/down",
        Route::Throttle {
            status: 503,
            remaining: 1,
            retry_after: "7200".into(),
            then: Box::new(feed),
        },
    );
    let maintenance = server.url("/maintenance");
    let down = server.url("/down");
    let run = curate(dir.path(), &["feed", &maintenance, &down, "--json"]).expect_code(1);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 1, "{s}");
    assert!(s["feeds"][0]["error"].is_null(), "{s}");
    let error = s["feeds"][1]["error"].as_str().unwrap();
    assert!(
        error.contains("503") && error.contains("Retry-After"),
        "{s}"
    );
    let hits = server.take_hits("/maintenance");
    assert_eq!(
        hits.iter().map(|h| h.status).collect::<Vec<_>>(),
        [503, 200]
    );
    // Put off: not asked again, and no failure.
    let run = curate(dir.path(), &["feed", &down, "--json"]).expect_code(0);
    assert!(!summary(&run)["feeds"][0]["deferred_until"].is_null());
    assert!(server.take_hits("/down").is_empty());
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 1);
}

#[test]
fn a_temporary_redirect_keeps_the_feeds_address() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/today.xml", rss(&[item(1), item(2)]));
    server.set(
        "/show.xml",
        Route::Redirect {
            status: 302,
            to: "/today.xml".into(),
        },
    );
    let url = server.url("/show.xml");
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 2, "{s}");
    assert!(s["feeds"][0]["moved_to"].is_null(), "{s}");
    assert!(!run.stderr.contains("moved"), "{}", run.stderr);
    let state = std::fs::read_to_string(dir.path().join("archivist-feeds.json")).unwrap();
    assert!(!state.contains("today.xml"), "{state}");
    server.take_hits("");
    // The next poll asks the address given again (and the feed's ETag gets a 304 there).
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    assert_eq!(summary(&run)["feeds"][0]["not_modified"], true);
    let all = server.shared.hits.lock().unwrap().clone();
    let paths: Vec<&str> = all.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(paths, ["/show.xml", "/today.xml"]);
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 2);
}

#[test]
fn repeats_by_enclosure_or_by_title_and_date_are_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let first = item(1);
    // Another GUID, the same file: only the tracking parameters differ.
    let mut same_file = item(2);
    same_file.enclosure = Some((
        "https://cdn.example/show/1.mp3?utm_source=apple&utm_medium=podcast".into(),
        "audio/mpeg".into(),
    ));
    // Another GUID and file, the same title and date: the same episode by the contract.
    let mut same_identity = item(3);
    same_identity.title = first.title.clone();
    same_identity.date = first.date.clone();
    // No GUID: known by its enclosure, whatever its tracking parameters say next time.
    let mut no_guid = item(4);
    no_guid.guid = None;
    let feed = |tracking: &str| {
        let mut n = no_guid.clone();
        n.enclosure = Some((
            format!("https://cdn.example/show/4.mp3?utm_source={tracking}"),
            "audio/mpeg".into(),
        ));
        rss(&[first.clone(), same_file.clone(), same_identity.clone(), n])
    };
    server.feed("/show.xml", feed("rss"));
    let url = server.url("/show.xml");
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 2, "{s}");
    let skipped = s["feeds"][0]["skipped_items"].to_string();
    assert!(skipped.contains("the same enclosure as item 1"), "{s}");
    assert!(skipped.contains("the same title and date as item 1"), "{s}");
    assert_eq!(
        titles(&receive(dir.path(), "curated_episodes")),
        ["Episode 1: The Archive", "Episode 4: The Archive"]
    );
    // The host rotates its tracking parameters: nothing has changed, nothing is sent.
    server.feed("/show.xml", feed("rotated-42"));
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 0, "{s}");
    assert_eq!(s["feeds"][0]["unchanged"], 2, "{s}");
    assert!(receive(dir.path(), "curated_episodes").is_empty());
}

#[test]
fn opus_enclosures_are_skipped_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let mut opus = item(1);
    opus.enclosure = Some((
        "https://cdn.example/show/1.opus".into(),
        "audio/opus".into(),
    ));
    let mut ogg_opus = item(2);
    ogg_opus.enclosure = Some((
        "https://cdn.example/show/2.ogg".into(),
        "audio/ogg; codecs=opus".into(),
    ));
    server.feed("/show.xml", rss(&[opus, ogg_opus, item(3)]));
    let run = curate(dir.path(), &["feed", &server.url("/show.xml"), "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["sent"], 1, "{s}");
    let skipped = s["feeds"][0]["skipped_items"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{s}");
    assert!(
        skipped
            .iter()
            .all(|k| k["reason"].as_str().unwrap().contains("cannot decode Opus")),
        "{s}"
    );
}

#[test]
fn bad_feeds_fail_alone_with_their_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/good", rss(&[item(1), item(2)]));
    server.set(
        "/text",
        Route::Raw {
            status: 200,
            content_type: "text/plain",
            body: "hello, this is not a feed".into(),
        },
    );
    server.set(
        "/page",
        Route::Raw {
            status: 200,
            content_type: "text/html",
            body: r#"<!DOCTYPE html><html><head><link rel="alternate" type="application/rss+xml" href="https://show.example/feed.xml"></head><body>Show</body></html>"#.into(),
        },
    );
    server.set(
        "/broken",
        Route::Raw {
            status: 200,
            content_type: "application/xml",
            body: "<rss version=\"2.0\"><channel><item><title>cut</ti".into(),
        },
    );
    server.set("/hang", Route::Hang);
    let urls: Vec<String> = ["/text", "/page", "/broken", "/hang", "/gone", "/good"]
        .iter()
        .map(|p| server.url(p))
        .collect();
    let mut args = vec!["feed", "--timeout", "1s", "--json"];
    args.extend(urls.iter().map(String::as_str));
    let started = Instant::now();
    let run = curate(dir.path(), &args).expect_code(1);
    assert!(started.elapsed() < Duration::from_secs(20));
    let s = summary(&run);
    let error = |i: usize| s["feeds"][i]["error"].as_str().unwrap_or("").to_string();
    assert!(error(0).contains("not XML"), "{s}");
    assert!(
        error(1).contains("HTML page") && error(1).contains("https://show.example/feed.xml"),
        "{s}"
    );
    assert!(error(2).contains("not a feed"), "{s}");
    assert!(error(3).contains("--timeout"), "{s}");
    assert!(error(4).contains("404"), "{s}");
    assert!(error(5).is_empty(), "{s}");
    assert_eq!(s["failed"], 5);
    // The error names each failed feed.
    for u in &urls[..5] {
        assert!(run.stderr.contains(u.as_str()), "{u}: {}", run.stderr);
    }
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 2);
    // Nothing remembered of the failures: the next run asks them in full again.
    let state = std::fs::read_to_string(dir.path().join("archivist-feeds.json")).unwrap();
    assert!(!state.contains("/text"), "{state}");
}

#[test]
fn a_feed_of_100000_items_is_read_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    let items: Vec<Item> = (1..=100_000)
        .map(|n| Item {
            guid: Some(format!("g{n}")),
            title: format!("E{n}"),
            date: Some(format!(
                "{}-{:02}-{:02}T00:00:00Z",
                1900 + n / 400,
                n / 31 % 12 + 1,
                n % 28 + 1
            )),
            enclosure: Some((format!("https://c.example/{n}.mp3"), "audio/mpeg".into())),
            description: String::new(),
        })
        .collect();
    let body = rss(&items);
    server.feed("/huge", body.clone());
    let url = server.url("/huge");
    // Too large for a small limit: refused before parsing.
    let run = curate(dir.path(), &["feed", &url, "--max-feed-size", "1M"]).expect_code(1);
    assert!(run.stderr.contains("--max-feed-size"), "{}", run.stderr);
    // Read in full: the newest --max-items are curated, the rest counted. (How fast is the
    // benchmarks' business, not a test's: a bound on the time failed under load.)
    let run = curate(dir.path(), &["feed", &url, "--max-items", "50", "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["items_found"], 100_000, "{s}");
    assert_eq!(s["feeds"][0]["sent"], 50, "{s}");
    assert_eq!(s["feeds"][0]["skipped"], 1, "{s}");
    assert!(
        s["feeds"][0]["skipped_items"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("newest 50"),
        "{s}"
    );
    let sent = receive(dir.path(), "curated_episodes");
    assert_eq!(sent.len(), 50);
    assert!(sent
        .iter()
        .any(|m| m["title"] == "E99999" || m["title"] == "E100000"));
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = curate(dir.path(), &["feed", "ftp://x.example/feed"]).expect_code(2);
    assert!(
        run.stderr.contains("ftp://x.example/feed"),
        "{}",
        run.stderr
    );
    curate(dir.path(), &["feed"]).expect_code(2);
    curate(dir.path(), &["feed", "--every", "0s", "http://x.example/"]).expect_code(2);
    curate(dir.path(), &["clips", "--base-url", "ftp://x/", "."]).expect_code(2);
    std::fs::write(dir.path().join("archivist-feeds.json"), "garbage").unwrap();
    let run = curate(dir.path(), &["feed", "--dry-run", "http://127.0.0.1:9/"]).expect_code(2);
    assert!(run.stderr.contains("state file"), "{}", run.stderr);
}

// ---------------------------------------------------------------------------------------
// Clips.

fn write(path: &Path, content: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Each clip sent says how findable it is, predicted from the clip alone: a jingle from its
/// background's level or below it, a steady tone not even 12 dB over it; a file that is not
/// audio says why it could not be predicted. In `--json` and to a person.
#[test]
fn each_clip_sent_says_how_findable_it_is() {
    use analysis::synth;
    let dir = tempfile::tempdir().unwrap();
    let clips = dir.path().join("clips");
    std::fs::create_dir_all(&clips).unwrap();
    let rate = 16_000;
    common::audio::write_samples(
        &clips.join("Jingle.wav"),
        rate,
        &synth::jingle(5, rate, 3.0),
    );
    let tone: Vec<f32> = (0..rate * 3)
        .map(|i| 0.3 * (2.0 * std::f32::consts::PI * 800.0 * i as f32 / rate as f32).sin())
        .collect();
    common::audio::write_samples(&clips.join("Tone.wav"), rate, &tone);
    write(&clips.join("Broken.mp3"), b"not audio at all");
    let folder = clips.to_str().unwrap();

    let run = curate(dir.path(), &["clips", folder, "--json"]).expect_code(0);
    let s = summary(&run);
    let sent = s["paths"][0]["clips"].as_array().unwrap();
    let by_title = |t: &str| {
        sent.iter()
            .find(|c| c["title"] == t)
            .unwrap_or_else(|| panic!("{t} in {s}"))
    };
    let jingle = by_title("Jingle");
    assert!(
        jingle["findable_from_db"]
            .as_i64()
            .is_some_and(|db| db <= 0),
        "{jingle}"
    );
    assert!(jingle["findability"]
        .as_str()
        .unwrap()
        .starts_with("findable from "));
    assert!(
        jingle["findability_detail"]["landmarks_per_s"]
            .as_f64()
            .unwrap()
            > 10.0
    );
    assert_eq!(
        jingle["findability_detail"]["found"][0]["db"], 0,
        "{jingle}"
    );
    assert_eq!(
        jingle["findability_detail"]["found"][0]["found"], true,
        "{jingle}"
    );
    let tone = by_title("Tone");
    assert_eq!(tone["findable_from_db"], Value::Null, "{tone}");
    assert!(
        tone["findability"]
            .as_str()
            .unwrap()
            .contains("not found even +12 dB over its background"),
        "{tone}"
    );
    let broken = by_title("Broken");
    assert!(
        broken["findability"]
            .as_str()
            .unwrap()
            .starts_with("not predicted: "),
        "{broken}"
    );
    // To a person (without `--json`), on standard error: another datastore, so that the
    // clips are sent again.
    let other = tempfile::tempdir().unwrap();
    let run = curate(other.path(), &["clips", folder]).expect_code(0);
    assert!(
        run.stderr
            .contains("\"Tone\": not found even +12 dB over its background"),
        "{}",
        run.stderr
    );
}

#[test]
fn clip_folders_arrive_once_and_changed_files_again() {
    let dir = tempfile::tempdir().unwrap();
    let clips = dir.path().join("my clips");
    write(&clips.join("Intro Jingle.mp3"), b"intro");
    write(&clips.join("sub/Laugh #2.wav"), b"laugh");
    write(&clips.join("sub/deeper/Outro.FLAC"), b"outro");
    write(&clips.join("notes.txt"), b"not audio");
    write(&clips.join(".hidden.mp3"), b"hidden");
    // The same title as the first: clips are identified by title.
    write(&clips.join("sub/Intro Jingle.ogg"), b"intro again");
    let folder = clips.to_str().unwrap();

    let run = curate(dir.path(), &["clips", folder, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["paths"][0]["sent"], 3, "{s}");
    assert!(
        s["paths"][0]["skipped_files"]
            .to_string()
            .contains("same title"),
        "{s}"
    );
    let sent = receive(dir.path(), "curated_clips");
    assert_eq!(titles(&sent), ["Intro Jingle", "Laugh #2", "Outro"]);
    let laugh = sent.iter().find(|m| m["title"] == "Laugh #2").unwrap();
    let canonical = clips.canonicalize().unwrap();
    assert_eq!(
        laugh["media_uri"],
        url::Url::from_file_path(canonical.join("sub/Laugh #2.wav"))
            .unwrap()
            .to_string()
    );
    assert_eq!(laugh["media_type"], "wav");
    assert!(laugh.get("date_aired").is_none());

    // Unchanged: nothing. Touched only: nothing. Changed content: that one again.
    curate(dir.path(), &["clips", folder]).expect_code(0);
    assert!(receive(dir.path(), "curated_clips").is_empty());
    let outro = clips.join("sub/deeper/Outro.FLAC");
    let f = std::fs::File::options().write(true).open(&outro).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    curate(dir.path(), &["clips", folder]).expect_code(0);
    assert!(receive(dir.path(), "curated_clips").is_empty());
    write(&clips.join("sub/Laugh #2.wav"), b"a longer laugh");
    curate(dir.path(), &["clips", folder]).expect_code(0);
    let again = receive(dir.path(), "curated_clips");
    assert_eq!(titles(&again), ["Laugh #2"]);
    assert_eq!(
        again[0]["initial_date_curated"],
        laugh["initial_date_curated"]
    );

    // Served to researchers elsewhere: the addresses change, so every clip is sent again.
    let run = curate(
        dir.path(),
        &[
            "clips",
            folder,
            "--base-url",
            "https://media.example/clips",
            "--json",
        ],
    )
    .expect_code(0);
    assert_eq!(summary(&run)["sent"], 3);
    let served = receive(dir.path(), "curated_clips");
    let laugh = served.iter().find(|m| m["title"] == "Laugh #2").unwrap();
    assert_eq!(
        laugh["media_uri"],
        "https://media.example/clips/sub/Laugh%20%232.wav"
    );

    // Another folder's file of a title already sent is another clip's claim: skipped.
    let other = dir.path().join("other");
    write(&other.join("Outro.mp3"), b"another outro");
    let run = curate(
        dir.path(),
        &[
            "clips",
            other.to_str().unwrap(),
            "--base-url",
            "https://media.example/clips",
        ],
    )
    .expect_code(0);
    assert!(
        run.stderr.contains("same title \"Outro\""),
        "{}",
        run.stderr
    );
    assert!(receive(dir.path(), "curated_clips").is_empty());

    // A missing path fails alone (exit 1, named); a dry run sends nothing.
    let run = curate(
        dir.path(),
        &[
            "clips",
            "--dry-run",
            "--base-url",
            "https://media.example/clips",
            "nowhere",
            folder,
        ],
    )
    .expect_code(1);
    assert!(run.stderr.contains("nowhere"), "{}", run.stderr);
    assert!(
        run.stdout.is_empty(),
        "unchanged clips printed: {}",
        run.stdout
    );
    let single = dir.path().join("single/Sting.wav");
    write(&single, b"sting");
    let run = curate(
        dir.path(),
        &["clips", "--dry-run", single.to_str().unwrap()],
    )
    .expect_code(0);
    assert_eq!(titles(&run.json_lines()), ["Sting"]);
    assert!(receive(dir.path(), "curated_clips").is_empty());

    // Opus is found but not taken, and says why: the analyser has no Opus decoder.
    let opus = dir.path().join("single/Bumper.opus");
    write(&opus, b"bumper");
    write(&clips.join("sub/Bumper.opus"), b"bumper");
    let run = curate(dir.path(), &["clips", opus.to_str().unwrap()]).expect_code(1);
    assert!(run.stderr.contains("cannot decode Opus"), "{}", run.stderr);
    let run = curate(
        dir.path(),
        &[
            "clips",
            folder,
            "--base-url",
            "https://media.example/clips",
            "--json",
        ],
    )
    .expect_code(0);
    let s = summary(&run);
    assert_eq!(s["sent"], 0, "{s}");
    assert!(
        s["paths"][0]["skipped_files"]
            .to_string()
            .contains("cannot decode Opus"),
        "{s}"
    );
    assert!(receive(dir.path(), "curated_clips").is_empty());
}

/// A second of a tone as WAV, then encoded by ffmpeg to `dst` with `metadata` tags.
fn tagged(dst: &Path, codec: &[&str], metadata: &[&str]) {
    let wav = dst.with_extension("source.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 8_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&wav, spec).unwrap();
    for i in 0..8_000 {
        let s = (i as f32 * 0.3).sin();
        w.write_sample((s * 8_000.0) as i16).unwrap();
    }
    w.finalize().unwrap();
    let mut cmd = std::process::Command::new("ffmpeg");
    cmd.args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
        .arg(&wav)
        .args(codec);
    for m in metadata {
        cmd.args(["-metadata", m]);
    }
    let status = cmd
        .arg(dst)
        .status()
        .expect("ffmpeg (scripts/test.sh installs it)");
    assert!(status.success());
    std::fs::remove_file(&wav).unwrap();
}

#[test]
fn clips_are_titled_by_their_tags_and_keep_the_title_they_were_sent_under() {
    let dir = tempfile::tempdir().unwrap();
    let clips = dir.path().join("clips");
    std::fs::create_dir_all(&clips).unwrap();
    let artist = ["artist=Archive Radio", "album=Station Sounds"];
    tagged(
        &clips.join("01 jingle.mp3"),
        &["-c:a", "libmp3lame"],
        &["title=Intro Jingle", artist[0], artist[1]],
    );
    tagged(&clips.join("bell.flac"), &[], &["title=Closing Bell"]);
    tagged(
        &clips.join("vm.ogg"),
        &["-c:a", "libvorbis"],
        &["title=Voicemail: Dave"],
    );
    tagged(
        &clips.join("laugh.m4a"),
        &["-c:a", "aac"],
        &["title=Big Laugh"],
    );
    // No title tag: its file name.
    tagged(&clips.join("Outro Theme.wav"), &[], &["title="]);
    let folder = clips.to_str().unwrap();
    curate(dir.path(), &["clips", folder]).expect_code(0);
    let sent = receive(dir.path(), "curated_clips");
    assert_eq!(
        titles(&sent),
        [
            "Big Laugh",
            "Closing Bell",
            "Intro Jingle",
            "Outro Theme",
            "Voicemail: Dave"
        ]
    );
    let jingle = sent.iter().find(|m| m["title"] == "Intro Jingle").unwrap();
    assert_eq!(jingle["description"], "Archive Radio — Station Sounds");
    assert_eq!(jingle["media_type"], "mp3");
    let bell = sent.iter().find(|m| m["title"] == "Closing Bell").unwrap();
    assert_eq!(bell["description"], "");

    // Retagged: the content changed, so it is sent again, under the title it was sent under
    // (a new title would be a second clip with the first one's address), and a note says so.
    tagged(
        &clips.join("01 jingle.mp3"),
        &["-c:a", "libmp3lame"],
        &["title=Intro Jingle (2026 mix)", artist[0]],
    );
    let run = curate(dir.path(), &["clips", folder, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["sent"], 1, "{s}");
    assert!(
        s["paths"][0]["notes"]
            .to_string()
            .contains("keeps the title it was sent under"),
        "{s}"
    );
    let again = receive(dir.path(), "curated_clips");
    assert_eq!(titles(&again), ["Intro Jingle"]);
    assert_eq!(again[0]["description"], "Archive Radio");
    // Unchanged since: nothing.
    let run = curate(dir.path(), &["clips", folder, "--json"]).expect_code(0);
    assert_eq!(summary(&run)["sent"], 0);
}

// ---------------------------------------------------------------------------------------
// The whole way.

#[test]
fn from_a_feed_and_a_clip_folder_to_research_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/show.xml", rss(&[item(1), item(2), item(3)]));
    let clips = dir.path().join("clips");
    write(&clips.join("Intro.mp3"), b"intro");
    write(&clips.join("Outro.wav"), b"outro");
    curate(dir.path(), &["feed", &server.url("/show.xml")]).expect_code(0);
    curate(dir.path(), &["clips", clips.to_str().unwrap()]).expect_code(0);
    archivist(dir.path(), &["episodes", "--once"], &[]).expect_code(0);
    archivist(dir.path(), &["clips", "--once"], &[]).expect_code(0);
    let status = archivist(dir.path(), &["status", "--json"], &[]).expect_code(0);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["episodes"], 3, "{status}");
    assert_eq!(status["clips"], 2, "{status}");
    assert_eq!(status["research_pairs"], 6, "{status}");
    // Nothing went to a dead-letter queue.
    for q in ["curated_episodes", "curated_clips"] {
        let dead = archivist(
            dir.path(),
            &["receive", q, "--dead-letters", "--wait", "0s"],
            &[],
        )
        .expect_code(0);
        assert!(dead.stdout.is_empty(), "{q}: {}", dead.stdout);
    }
    // Work assignment hands it out.
    archivist(
        dir.path(),
        &[
            "pending-research",
            "--start-jitter",
            "0s",
            "--researchers",
            "1",
        ],
        &[],
    )
    .expect_code(0);
    let work = receive(dir.path(), "pending_research");
    assert_eq!(work.len(), 1);
    assert_eq!(work[0]["clips"].as_array().unwrap().len(), 2);
}

/// The value of the metric line that starts with `series` (name and labels) in a scrape.
fn metric(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn polling_serves_metrics_and_the_curators_page_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/show.xml", rss(&[item(1), item(2)]));
    server.set(
        "/dated.xml",
        Route::Dated {
            body: rss(&[item(3)]),
            last_modified: "Wed, 21 Oct 2026 07:28:00 GMT".into(),
        },
    );
    // Always 404: an error at each poll.
    let broken = server.url("/gone.xml");
    // 429 with a Retry-After of an hour: asked once, then put off.
    server.set(
        "/closed.xml",
        Route::Throttle {
            status: 429,
            remaining: usize::MAX,
            retry_after: "3600".into(),
            then: Box::new(Route::Hang),
        },
    );
    let show = server.url("/show.xml");
    let dated = server.url("/dated.xml");
    let closed = server.url("/closed.xml");
    // Every 2 s: the second pass comes on its own; the test waits for its report lines.
    let mut child = common::command(
        dir.path(),
        &[
            "curate",
            "feed",
            "--every",
            "2s",
            "--metrics-addr",
            "127.0.0.1:0",
            &show,
            &dated,
            &broken,
            &closed,
        ],
        &[],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut running = common::serving::Running(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let wait_for = |text: &str, seen: &mut Vec<String>| {
        while !seen.iter().any(|l| l.contains(text)) {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("never {text:?}: {seen:#?}"));
            seen.push(line);
        }
    };
    // The first pass ends with the last feed's report: asked, refused, put off.
    wait_for(&format!("feed {closed}: FAILED"), &mut seen);
    let addr = seen
        .iter()
        .find_map(|l| Some(l.split_once("on http://")?.1.trim().to_string()))
        .unwrap_or_else(|| panic!("no address: {seen:#?}"));
    let (code, first) = common::serving::get(&addr, "/api/curator");
    assert_eq!(code, 200, "{first}");
    let first: Value = serde_json::from_str(&first).unwrap();
    let closed_first_poll = first["feeds"][3]["last_poll"].clone();
    assert!(closed_first_poll.is_string(), "{first}");
    // The second pass: 304s, the error again, and the put-off feed not asked.
    wait_for(&format!("feed {closed}: put off until"), &mut seen);
    let (code, metrics) = common::serving::get(&addr, "/metrics");
    assert_eq!(code, 200);
    let (code, api) = common::serving::get(&addr, "/api/curator");
    assert_eq!(code, 200, "{api}");
    let api: Value = serde_json::from_str(&api).unwrap();
    let (code, page) = common::serving::get(&addr, "/");
    assert_eq!(code, 200);
    server.take_hits("");

    let m = |name: &str, feed: &str| {
        metric(&metrics, &format!("{name}{{feed=\"{feed}\"}}"))
            .unwrap_or_else(|| panic!("{name} of {feed}:\n{metrics}"))
    };
    // Per feed, so that a third pass starting meanwhile cannot make the test flaky.
    for feed in [&show, &dated] {
        let polled = m("archivist_curator_feeds_polled_total", feed);
        assert!(polled >= 2.0, "{feed}: {polled}\n{metrics}");
        assert_eq!(
            m("archivist_curator_not_modified_total", feed),
            polled - 1.0,
            "{feed}\n{metrics}"
        );
        assert_eq!(m("archivist_curator_errors_total", feed), 0.0);
    }
    assert_eq!(m("archivist_curator_items_sent_total", &show), 2.0);
    assert_eq!(m("archivist_curator_items_sent_total", &dated), 1.0);
    assert_eq!(
        m("archivist_curator_errors_total", &broken),
        m("archivist_curator_feeds_polled_total", &broken)
    );
    // Put off: polled once (the 429), never counted again, its last poll unchanged.
    assert_eq!(m("archivist_curator_feeds_polled_total", &closed), 1.0);
    assert_eq!(m("archivist_curator_errors_total", &closed), 1.0);
    assert!(m("archivist_curator_put_off_total", &closed) >= 1.0);
    assert!(metrics.contains(&format!(
        "archivist_curator_last_poll_timestamp_seconds{{feed=\"{show}\"}}"
    )));

    let feeds = api["feeds"].as_array().unwrap();
    assert_eq!(feeds.len(), 4, "{api}");
    // Finished passes: the second one's last report line may come just before it counts.
    assert!(api["passes"].as_u64().unwrap() >= 1, "{api}");
    let by = |url: &str| feeds.iter().find(|f| f["feed"] == url).unwrap();
    assert_eq!(by(&show)["outcome"], "not_modified", "{api}");
    assert_eq!(by(&show)["items_sent"], 2, "{api}");
    assert!(by(&show)["not_modified"].as_u64().unwrap() >= 1, "{api}");
    assert_eq!(by(&show)["title"], "The Best Show in the Archive", "{api}");
    assert_eq!(by(&dated)["outcome"], "not_modified", "{api}");
    assert_eq!(by(&broken)["outcome"], "failed", "{api}");
    assert!(
        by(&broken)["error"].as_str().unwrap().contains("404"),
        "{api}"
    );
    assert_eq!(by(&broken)["errors"], by(&broken)["polls"], "{api}");
    assert_eq!(by(&closed)["outcome"], "put_off", "{api}");
    assert_eq!(by(&closed)["polls"], 1, "{api}");
    assert_eq!(by(&closed)["errors"], 1, "{api}");
    assert_eq!(by(&closed)["last_poll"], closed_first_poll, "{api}");
    assert!(by(&closed)["deferred_until"].is_string(), "{api}");
    // The page says the same in words, each feed on it.
    for text in [
        "archivist curator",
        show.as_str(),
        broken.as_str(),
        "not modified (304)",
        "put off (Retry-After)",
        "the server answered 404",
    ] {
        assert!(page.contains(text), "{text}:\n{page}");
    }
    assert_eq!(
        common::serving::request(&addr, "POST", "/api/curator").0,
        405
    );

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = running.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{seen:#?}");
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 3);
}

/// `rss(items)` with `<atom:link rel="next">` to `next`.
fn rss_page(items: &[Item], next: Option<&str>) -> String {
    let feed = rss(items);
    match next {
        Some(n) => feed.replacen(
            "<language>",
            &format!("<atom:link rel=\"next\" href=\"{n}\"/>\n<language>"),
            1,
        ),
        None => feed,
    }
}

#[test]
fn a_paged_feed_is_read_to_its_end_once_then_only_while_pages_bring_new_items() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/p1", rss_page(&[item(1), item(2)], Some("/p2")));
    server.feed(
        "/p2",
        rss_page(&[item(3), item(2)], Some(&server.url("/p3"))),
    );
    server.feed("/p3", rss_page(&[item(4)], None));
    let url = server.url("/p1");
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["feeds"][0]["items_found"], 5, "{s}");
    assert_eq!(s["feeds"][0]["sent"], 4, "{s}");
    assert!(
        s["feeds"][0]["skipped_items"]
            .to_string()
            .contains("newer page"),
        "{s}"
    );
    assert_eq!(receive(dir.path(), "curated_episodes").len(), 4);
    for p in ["/p1", "/p2", "/p3"] {
        let all = server.shared.hits.lock().unwrap().clone();
        assert_eq!(
            all.iter().filter(|h| h.path == p).count(),
            1,
            "{p}: {all:?}"
        );
    }
    server.take_hits("");
    // A new episode on the first page: the second is read (all known), the third is not.
    server.feed("/p1", rss_page(&[item(5), item(1), item(2)], Some("/p2")));
    let run = curate(dir.path(), &["feed", &url, "--json"]).expect_code(0);
    assert_eq!(summary(&run)["feeds"][0]["sent"], 1);
    let all = server.shared.hits.lock().unwrap().clone();
    let paths: Vec<&str> = all.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(paths, ["/p1", "/p2"]);
    assert_eq!(
        titles(&receive(dir.path(), "curated_episodes")),
        ["Episode 5: The Archive"]
    );
}

#[test]
fn a_private_feeds_key_is_shown_nowhere_but_in_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = FeedServer::start();
    server.feed("/private.xml", rss(&[item(1)]));
    server.set(
        "/old-private.xml",
        Route::Redirect {
            status: 308,
            to: "/private.xml?token=s3cr3tk3y".into(),
        },
    );
    let url = format!(
        "http://listener:passw0rd@{}/old-private.xml?token=s3cr3tk3y",
        server.addr
    );
    let mut outputs = Vec::new();
    for args in [vec!["feed", "--json", &url], vec!["feed", &url]] {
        let run = curate(dir.path(), &args).expect_code(0);
        outputs.push(run.stdout);
        outputs.push(run.stderr);
    }
    let sent = receive(dir.path(), "curated_episodes");
    assert_eq!(sent.len(), 1);
    outputs.push(serde_json::to_string(&sent).unwrap());
    for out in &outputs {
        assert!(
            !out.contains("s3cr3tk3y") && !out.contains("passw0rd"),
            "{out}"
        );
    }
    assert!(sent[0]["curator_information"]
        .as_str()
        .unwrap()
        .contains("token=***"));
    // The key still works: the state file keeps it.
    let state = std::fs::read_to_string(dir.path().join("archivist-feeds.json")).unwrap();
    assert!(state.contains("s3cr3tk3y"));
}

// ------------------------------------------------------------------ links that lead nowhere

/// A symbolic link named like an audio file that leads to no file (a loop of links, or a
/// dangling one) is skipped with its reason, in the summary and on standard error; the other
/// clips are sent.
#[test]
fn a_link_loop_named_like_audio_is_skipped_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let clips = dir.path().join("clips");
    write(&clips.join("Intro.mp3"), b"intro");
    std::os::unix::fs::symlink("loop.mp3", clips.join("loop.mp3")).unwrap();
    std::os::unix::fs::symlink("gone.wav", clips.join("dangling.wav")).unwrap();
    let folder = clips.to_str().unwrap();

    let run = curate(dir.path(), &["clips", folder, "--json"]).expect_code(0);
    let s = summary(&run);
    assert_eq!(s["paths"][0]["sent"], 1, "{s}");
    assert_eq!(s["paths"][0]["skipped"], 2, "{s}");
    let skipped = s["paths"][0]["skipped_files"].to_string();
    assert!(
        skipped.contains("loop.mp3") && skipped.contains("a symbolic link that leads to no file"),
        "{s}"
    );
    assert!(skipped.contains("dangling.wav"), "{s}");
    assert_eq!(titles(&receive(dir.path(), "curated_clips")), ["Intro"]);

    let run = curate(dir.path(), &["clips", folder]).expect_code(0);
    assert!(
        run.stderr.contains("loop.mp3") && run.stderr.contains("symbolic link"),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// Through the API.

/// A remote curator with no bus of its own (a datastore that does not exist) and a
/// curator's token: `curate feed --server` on a served feed and `curate clips --server
/// --base-url` send through the real gateway (`serve --api`), and what they sent arrives in
/// the datastore; `curate clips --server` without `--base-url` is a usage error saying so.
#[test]
fn a_remote_curator_sends_a_feed_and_clips_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    archivist(dir.path(), &["queues"], &[]).expect_code(0);
    let token = archivist(
        dir.path(),
        &["token", "create", "--scope", "curator", "--name", "fan"],
        &[],
    )
    .expect_code(0)
    .stdout
    .trim()
    .to_string();
    let (_gateway, addr) = common::serving::start_serving_in(
        dir.path(),
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        Duration::from_secs(60),
    );
    let server = format!("http://{addr}");
    let curator = tempfile::tempdir().unwrap();
    let remote = [
        ("ARCHIVIST_TOKEN", token.as_str()),
        ("DATABASE_URL", common::api::NO_DATABASE),
    ];
    let feeds = FeedServer::start();
    feeds.feed("/show.xml", rss(&[item(1), item(2), item(3)]));
    let run = archivist(
        curator.path(),
        &[
            "curate",
            "feed",
            "--server",
            &server,
            &feeds.url("/show.xml"),
            "--json",
        ],
        &remote,
    )
    .expect_code(0);
    assert_eq!(summary(&run)["feeds"][0]["sent"], 3, "{run:?}");
    let clips = curator.path().join("clips");
    write(&clips.join("Intro.mp3"), b"intro");
    write(&clips.join("sub/Outro.wav"), b"outro");
    let folder = clips.to_str().unwrap();
    // Without --base-url the clips would be file:// URLs of the curator's machine.
    let refused = archivist(
        curator.path(),
        &["curate", "clips", "--server", &server, folder],
        &remote,
    )
    .expect_code(2);
    assert!(refused.stderr.contains("--base-url"), "{}", refused.stderr);
    let run = archivist(
        curator.path(),
        &[
            "curate",
            "clips",
            "--server",
            &server,
            "--base-url",
            "https://media.example/clips/",
            folder,
            "--json",
        ],
        &remote,
    )
    .expect_code(0);
    assert_eq!(summary(&run)["sent"], 2, "{run:?}");
    for run in [&run, &refused] {
        assert!(!run.stderr.contains(&token) && !run.stdout.contains(&token));
    }
    // The archivists, where the bus is, store what arrived.
    archivist(dir.path(), &["episodes", "--once"], &[]).expect_code(0);
    archivist(dir.path(), &["clips", "--once"], &[]).expect_code(0);
    let status = archivist(dir.path(), &["status", "--json"], &[]).expect_code(0);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["episodes"], 3, "{status}");
    assert_eq!(status["clips"], 2, "{status}");
    assert_eq!(status["research_pairs"], 6, "{status}");
    for q in ["curated_episodes", "curated_clips"] {
        let dead = archivist(
            dir.path(),
            &["receive", q, "--dead-letters", "--wait", "0s"],
            &[],
        )
        .expect_code(0);
        assert!(dead.stdout.is_empty(), "{q}: {}", dead.stdout);
    }
}
