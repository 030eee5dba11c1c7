//! The server's media archive and print store for its researchers, through the gateway on a
//! loopback port (the connection loop `serve --api` runs), a directory archive and a
//! directory print store in a temporary directory: scopes, ranges as HTTP serves them, copies
//! given back (checked against their SHA-256, bounded), versions recorded only for kept
//! copies, prints round trip in their envelope.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use archive::MediaArchive;
use datastore::{DataStore, TokenScope};
use messagebus::{Bus, MemoryBus, MemoryBusConfig};
use prints::PrintStore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

struct World {
    base: String,
    store: Arc<dyn DataStore>,
    archive: Arc<archive::DirArchive>,
    prints: Arc<dyn PrintStore>,
    uploads: PathBuf,
    http: reqwest::Client,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn world_with(limits: api::Limits, holdings: bool) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn DataStore> =
        Arc::new(datastore::SqliteDataStore::in_memory().await.unwrap());
    store.migrate().await.unwrap();
    let bus = Arc::new(MemoryBus::new(MemoryBusConfig::default()));
    let queues = api::Queues {
        curated_episodes: "curated_episodes".into(),
        curated_clips: "curated_clips".into(),
        pending_research: "pending_research".into(),
        completed_research: "completed_research".into(),
    };
    for q in [
        "curated_episodes",
        "curated_clips",
        "pending_research",
        "completed_research",
    ] {
        bus.create_queue(q).await.unwrap();
    }
    let archive = Arc::new(archive::DirArchive::new(dir.path().join("archive")).unwrap());
    let prints: Arc<dyn PrintStore> =
        Arc::new(prints::DirStore::new(dir.path().join("prints"), 1 << 30).unwrap());
    let uploads = dir.path().join("uploads");
    std::fs::create_dir_all(&uploads).unwrap();
    let held = if holdings {
        api::Holdings {
            archive: Some(archive.clone() as Arc<dyn MediaArchive>),
            prints: Some(prints.clone()),
            upload_dir: Some(uploads.clone()),
        }
    } else {
        api::Holdings::default()
    };
    let gateway =
        api::Gateway::with_holdings(store.clone(), bus as Arc<dyn Bus>, queues, limits, held)
            .unwrap();
    let stop = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = api::server::spawn(
        listener,
        gateway.router(),
        api::server::ServerLimits::default(),
        None,
        &stop,
    )
    .unwrap();
    World {
        base: format!("http://{addr}"),
        store,
        archive,
        prints,
        uploads,
        http: reqwest::Client::new(),
        stop,
        _dir: dir,
    }
}

async fn world() -> World {
    world_with(api::Limits::default(), true).await
}

impl World {
    async fn token(&self, scope: TokenScope) -> String {
        api::tokens::issue(
            self.store.api_access().unwrap(),
            None,
            scope,
            datastore::DEFAULT_MAX_RESEARCHERS,
            chrono::Utc::now(),
        )
        .await
        .unwrap()
        .1
    }

    fn request(&self, method: &str, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let request = self.http.request(method, format!("{}{path}", self.base));
        match token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    }

    /// Keeps `bytes` through `PUT /api/v1/archive/media/{sha256}`: the answer's status.
    async fn give(&self, token: &str, sha256: &str, bytes: Vec<u8>) -> (u16, String) {
        let answer = self
            .request(
                "PUT",
                &format!("/api/v1/archive/media/{sha256}"),
                Some(token),
            )
            .body(bytes)
            .send()
            .await
            .unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    }

    fn uploads_left(&self) -> usize {
        std::fs::read_dir(&self.uploads).unwrap().count()
    }
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Bytes that are not all alike, `n` of them.
fn media(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn aired() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2025-12-31T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc)
}

#[tokio::test]
async fn only_researchers_reach_the_holdings() {
    let w = world().await;
    let key = "a".repeat(64);
    let routes = [
        ("GET", "/api/v1/archive".to_string()),
        ("GET", format!("/api/v1/archive/episodes/{key}")),
        ("POST", format!("/api/v1/archive/episodes/{key}/versions")),
        ("GET", format!("/api/v1/archive/media/{key}")),
        ("HEAD", format!("/api/v1/archive/media/{key}")),
        ("PUT", format!("/api/v1/archive/media/{key}")),
        ("GET", format!("/api/v1/prints/{key}")),
        ("PUT", format!("/api/v1/prints/{key}")),
    ];
    let researcher = w.token(TokenScope::Researcher).await;
    let curator = w.token(TokenScope::Curator).await;
    let reader = w.token(TokenScope::Reader).await;
    for (method, path) in &routes {
        let status = |t: Option<&str>| {
            let request = w.request(method, path, t);
            async move { request.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status(None).await, 401, "{method} {path}");
        assert_eq!(status(Some("not-a-token")).await, 401, "{method} {path}");
        assert_eq!(status(Some(&curator)).await, 403, "{method} {path}");
        assert_eq!(status(Some(&reader)).await, 403, "{method} {path}");
        let as_researcher = status(Some(&researcher)).await;
        assert!(
            ![401, 403, 429, 500].contains(&as_researcher),
            "{method} {path}: {as_researcher}"
        );
    }
    // What is offered.
    let offered: Value = w
        .request("GET", "/api/v1/archive", Some(&researcher))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    assert_eq!(offered["media"], true);
    assert_eq!(offered["prints"], true);
    assert_eq!(offered["max_media_bytes"], api::DEFAULT_MAX_MEDIA_BYTES);
    assert_eq!(offered["max_read"], archive::MAX_READ);
}

#[tokio::test]
async fn a_server_without_holdings_says_so() {
    let w = world_with(api::Limits::default(), false).await;
    let researcher = w.token(TokenScope::Researcher).await;
    let offered: Value = w
        .request("GET", "/api/v1/archive", Some(&researcher))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    assert_eq!(
        (&offered["media"], &offered["prints"]),
        (&json!(false), &json!(false))
    );
    let key = "b".repeat(64);
    let answer = w
        .request(
            "GET",
            &format!("/api/v1/archive/media/{key}"),
            Some(&researcher),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    assert!(answer.text().await.unwrap().contains("no media archive"));
    let answer = w
        .request("GET", &format!("/api/v1/prints/{key}"), Some(&researcher))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    assert!(answer.text().await.unwrap().contains("no print store"));
}

#[tokio::test]
async fn copies_are_read_by_range_as_http_serves_them() {
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    // Longer than one piece of an answer (1 MiB): read back whole, in order.
    let bytes = media(2_500_000);
    let sha = sha256(&bytes);
    let (status, body) = w.give(&researcher, &sha, bytes.clone()).await;
    assert_eq!(status, 201, "{body}");
    let given: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(given["kept"], "new");
    assert_eq!(given["size"], bytes.len());
    assert_eq!(
        w.archive.size(&sha).await.unwrap(),
        Some(bytes.len() as u64)
    );
    let path = format!("/api/v1/archive/media/{sha}");
    let get = |range: Option<&str>| {
        let mut request = w.request("GET", &path, Some(&researcher));
        if let Some(range) = range {
            request = request.header("range", range);
        }
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            let content_range = answer
                .headers()
                .get("content-range")
                .map(|v| v.to_str().unwrap().to_string());
            (
                status,
                content_range,
                answer.bytes().await.unwrap().to_vec(),
            )
        }
    };
    let (status, range, body) = get(None).await;
    assert_eq!((status, range), (200, None));
    assert!(body == bytes, "the whole copy");
    let (status, range, body) = get(Some("bytes=10-19")).await;
    assert_eq!(status, 206);
    assert_eq!(range.as_deref(), Some("bytes 10-19/2500000"));
    assert_eq!(body, &bytes[10..20]);
    let (status, range, body) = get(Some("bytes=1048570-2097160")).await;
    assert_eq!(status, 206);
    assert_eq!(range.as_deref(), Some("bytes 1048570-2097160/2500000"));
    assert!(body == bytes[1_048_570..2_097_161], "a range across pieces");
    let (status, _, body) = get(Some("bytes=-5")).await;
    assert_eq!((status, body.as_slice()), (206, &bytes[bytes.len() - 5..]));
    let (status, _, body) = get(Some("bytes=2499990-")).await;
    assert_eq!((status, body.as_slice()), (206, &bytes[2_499_990..]));
    let (status, range, _) = get(Some("bytes=2500000-")).await;
    assert_eq!((status, range.as_deref()), (416, Some("bytes */2500000")));
    // HEAD: the length, no body.
    let answer = w
        .request("HEAD", &path, Some(&researcher))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-length"], "2500000");
    assert_eq!(answer.headers()["accept-ranges"], "bytes");
    assert!(answer.bytes().await.unwrap().is_empty());
    // No such copy; not a key.
    let other = sha256(b"other");
    let answer = w
        .request(
            "GET",
            &format!("/api/v1/archive/media/{other}"),
            Some(&researcher),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    for bad in [
        sha.to_uppercase(),
        sha[1..].to_string(),
        "..".into(),
        "%2e%2e%2fetc".into(),
    ] {
        let answer = w
            .request(
                "GET",
                &format!("/api/v1/archive/media/{bad}"),
                Some(&researcher),
            )
            .send()
            .await
            .unwrap();
        assert!(
            [400, 404].contains(&answer.status().as_u16()),
            "{bad}: {}",
            answer.status()
        );
        if bad.len() > 3 {
            assert_eq!(answer.status(), 400, "{bad}");
        }
    }
    // Given again: nothing written, 200.
    let (status, body) = w.give(&researcher, &sha, bytes.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("already"));
    assert_eq!(w.uploads_left(), 0, "no upload left behind");
}

#[tokio::test]
async fn a_copy_that_is_not_its_name_is_refused_and_nothing_kept() {
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    let bytes = media(10_000);
    let claimed = sha256(b"something else");
    let (status, body) = w.give(&researcher, &claimed, bytes).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(w.archive.size(&claimed).await.unwrap(), None);
    assert!(w.archive.copies().await.unwrap().is_empty());
    assert_eq!(w.uploads_left(), 0, "no upload left behind");
    let (status, _) = w.give(&researcher, "not-a-sha", vec![1, 2, 3]).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn copies_and_prints_are_bounded() {
    let limits = api::Limits {
        max_media_bytes: 1000,
        max_print_bytes: 500,
        ..api::Limits::default()
    };
    let w = world_with(limits, true).await;
    let researcher = w.token(TokenScope::Researcher).await;
    let bytes = media(1001);
    let sha = sha256(&bytes);
    // Said in its length, and sent without one (chunked).
    let (status, body) = w.give(&researcher, &sha, bytes.clone()).await;
    assert_eq!(status, 413, "{body}");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(100).map(|c| Ok(c.to_vec())).collect();
    let answer = w
        .request(
            "PUT",
            &format!("/api/v1/archive/media/{sha}"),
            Some(&researcher),
        )
        .body(reqwest::Body::wrap(http_body_util::StreamBody::new(
            futures::stream::iter(
                chunks
                    .into_iter()
                    .map(|c| c.map(|c| hyper::body::Frame::data(bytes::Bytes::from(c)))),
            ),
        )))
        .send()
        .await;
    // The server may close the connection as it answers 413 to a body still being sent.
    if let Ok(answer) = answer {
        assert_eq!(answer.status(), 413);
    }
    assert_eq!(w.archive.size(&sha).await.unwrap(), None);
    assert_eq!(w.uploads_left(), 0, "no upload left behind");
    // At the limit: kept.
    let (status, body) = w
        .give(&researcher, &sha256(&bytes[..1000]), bytes[..1000].to_vec())
        .await;
    assert_eq!(status, 201, "{body}");
    // A print over the limit.
    let print = prints::envelope::wrap(&media(500));
    let key = prints::print_key("https://example.com/4012.mp3");
    let answer = w
        .request("PUT", &format!("/api/v1/prints/{key}"), Some(&researcher))
        .body(print)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    assert!(w.prints.get(&key).await.unwrap().is_none());
    // A version's body over its limit.
    let answer = w
        .request(
            "POST",
            &format!("/api/v1/archive/episodes/{key}/versions"),
            Some(&researcher),
        )
        .body(vec![b' '; api::MAX_RECORD_BYTES + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
}

#[tokio::test]
async fn versions_are_recorded_only_for_kept_copies() {
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    let title = "Episode 4012";
    let key = archive::episode_key(title, &aired());
    let first = media(5000);
    let second = media(6000);
    let version = |bytes: &[u8]| {
        json!({
            "sha256": sha256(bytes),
            "size": bytes.len(),
            "media_uri": "https://example.com/4012.mp3",
            "etag": "\"v1\"",
            "media_type": "mp3",
            "kept_at": "2026-01-01T00:00:00Z",
        })
    };
    let record = |body: Value, key: String| {
        let request = w
            .request(
                "POST",
                &format!("/api/v1/archive/episodes/{key}/versions"),
                Some(&researcher),
            )
            .header("content-type", "application/json")
            .body(body.to_string());
        async move {
            let answer = request.send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let body = |v: Value| json!({"title": title, "date_aired": aired(), "version": v});
    // Unknown yet.
    let answer = w
        .request(
            "GET",
            &format!("/api/v1/archive/episodes/{key}"),
            Some(&researcher),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    // The copy is not kept: refused.
    let (status, text) = record(body(version(&first)), key.clone()).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("not kept"), "{text}");
    assert!(w.archive.versions(&key).await.unwrap().is_none());
    assert_eq!(
        w.give(&researcher, &sha256(&first), first.clone()).await.0,
        201
    );
    // Another length, another key, a file URI, a media type that could be a path, junk.
    let mut wrong = version(&first);
    wrong["size"] = json!(4999);
    assert_eq!(record(body(wrong), key.clone()).await.0, 422);
    let other_key = archive::episode_key("Episode 4013", &aired());
    assert_eq!(record(body(version(&first)), other_key).await.0, 422);
    let mut file = version(&first);
    file["media_uri"] = json!("file:///etc/passwd");
    assert_eq!(record(body(file), key.clone()).await.0, 422);
    let mut path = version(&first);
    path["media_type"] = json!("../mp3");
    assert_eq!(record(body(path), key.clone()).await.0, 422);
    assert_eq!(record(json!({"title": title}), key.clone()).await.0, 400);
    assert_eq!(record(body(version(&first)), "nope".into()).await.0, 400);
    assert!(w.archive.versions(&key).await.unwrap().is_none());
    // Kept: recorded, and chosen.
    let (status, text) = record(body(version(&first)), key.clone()).await;
    assert_eq!(status, 200, "{text}");
    let episode: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(episode["chosen"], sha256(&first));
    // A second version: recorded, not chosen.
    assert_eq!(
        w.give(&researcher, &sha256(&second), second.clone())
            .await
            .0,
        201
    );
    let (status, text) = record(body(version(&second)), key.clone()).await;
    assert_eq!(status, 200, "{text}");
    let episode: archive::EpisodeVersions = w
        .request(
            "GET",
            &format!("/api/v1/archive/episodes/{key}"),
            Some(&researcher),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    assert_eq!(episode.chosen, sha256(&first));
    assert_eq!(episode.versions.len(), 2);
    assert_eq!(episode.versions[1].sha256, sha256(&second));
    assert_eq!(episode.versions[0].media_type.as_deref(), Some("mp3"));
}

#[tokio::test]
async fn a_damaged_copy_is_not_served() {
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    let bytes = media(4096);
    let sha = sha256(&bytes);
    assert_eq!(w.give(&researcher, &sha, bytes).await.0, 201);
    let path = w.archive.local_path(&sha).unwrap();
    let mut damaged = std::fs::read(&path).unwrap();
    damaged[0] ^= 1;
    std::fs::write(&path, damaged).unwrap();
    let why = w.archive.verify(&sha).await.unwrap().unwrap();
    w.archive
        .put_report(&archive::VerifyReport {
            checked_at: chrono::Utc::now(),
            copies: 1,
            bytes: 4096,
            failed: vec![(sha.clone(), why)],
        })
        .await
        .unwrap();
    let answer = w
        .request(
            "GET",
            &format!("/api/v1/archive/media/{sha}"),
            Some(&researcher),
        )
        .header("range", "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    assert!(answer.text().await.unwrap().contains("damaged"));
}

#[tokio::test]
async fn prints_round_trip_in_their_envelope() {
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    let key = prints::print_key("https://example.com/4012.mp3");
    let path = format!("/api/v1/prints/{key}");
    let answer = w
        .request("GET", &path, Some(&researcher))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let payload = media(3000);
    let answer = w
        .request("PUT", &path, Some(&researcher))
        .body(prints::envelope::wrap(&payload))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
    assert_eq!(
        w.prints.get(&key).await.unwrap().as_deref(),
        Some(&payload[..])
    );
    let answer = w
        .request("GET", &path, Some(&researcher))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let got = answer.bytes().await.unwrap();
    assert_eq!(prints::envelope::unwrap(&got).unwrap(), &payload[..]);
    // Not an envelope, or one cut short: refused, the print kept stays.
    let mut cut = prints::envelope::wrap(&media(100));
    cut.pop();
    for bad in [b"just bytes".to_vec(), cut] {
        let answer = w
            .request("PUT", &path, Some(&researcher))
            .body(bad)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 422);
    }
    assert_eq!(
        w.prints.get(&key).await.unwrap().as_deref(),
        Some(&payload[..])
    );
    // Not a key.
    let answer = w
        .request("GET", "/api/v1/prints/ABC", Some(&researcher))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
}

fn client_config(w: &World, token: &str) -> messagebus::api::ApiConfig {
    let mut config =
        messagebus::api::ApiConfig::new(w.base.clone(), messagebus::api::ApiToken::new(token));
    config.attempts = 2;
    config
}

#[tokio::test]
async fn the_remote_researcher_s_archive_is_the_server_s() {
    use archive::{ArchiveError, Kept};
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    let config = client_config(&w, &researcher);
    let offer = messagebus::api::ApiHoldings::new(&config)
        .unwrap()
        .offered()
        .await
        .unwrap();
    assert!(offer.media && offer.prints, "{offer:?}");
    let remote = messagebus::api::ApiArchive::new(&config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bytes = media(1_500_000);
    let sha = sha256(&bytes);
    let file = dir.path().join("episode.mp3");
    std::fs::write(&file, &bytes).unwrap();
    // A file that is not its name is refused here, before it is sent.
    let other = sha256(b"other");
    assert!(matches!(
        remote.keep(&other, &file).await,
        Err(ArchiveError::Mismatch { .. })
    ));
    assert_eq!(remote.size(&sha).await.unwrap(), None);
    assert_eq!(remote.keep(&sha, &file).await.unwrap(), Kept::New);
    assert_eq!(remote.keep(&sha, &file).await.unwrap(), Kept::Already);
    assert_eq!(w.archive.size(&sha).await.unwrap(), Some(1_500_000));
    assert_eq!(remote.size(&sha).await.unwrap(), Some(1_500_000));
    assert_eq!(remote.read(&sha, 100..200).await.unwrap(), &bytes[100..200]);
    assert_eq!(
        remote.read(&sha, 1_499_000..1_500_000).await.unwrap(),
        &bytes[1_499_000..]
    );
    assert!(remote.read(&sha, 10..10).await.unwrap().is_empty());
    match remote.read(&sha, 1_499_000..1_500_001).await {
        Err(ArchiveError::BadRange { size, .. }) => assert_eq!(size, 1_500_000),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        remote.read(&sha, 0..archive::MAX_READ + 1).await,
        Err(ArchiveError::BadRange { .. })
    ));
    assert!(matches!(
        remote.read(&other, 0..10).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert!(matches!(
        remote.read("../etc", 0..10).await,
        Err(ArchiveError::BadKey(_))
    ));
    let copy = dir.path().join("copy");
    assert_eq!(remote.copy_to(&sha, &copy).await.unwrap(), 1_500_000);
    assert!(std::fs::read(&copy).unwrap() == bytes);
    assert!(matches!(
        remote.copy_to(&other, &dir.path().join("none")).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert!(remote.local_path(&sha).is_none());
    // Versions.
    let key = archive::episode_key("Episode 4012", &aired());
    assert_eq!(remote.versions(&key).await.unwrap(), None);
    let version = archive::Version {
        sha256: sha.clone(),
        size: 1_500_000,
        media_uri: "https://example.com/4012.mp3".into(),
        etag: Some("\"v1\"".into()),
        last_modified: None,
        media_type: Some("mp3".into()),
        kept_at: chrono::Utc::now(),
        also_from: Vec::new(),
    };
    let episode = remote
        .record(&key, "Episode 4012", aired(), version.clone())
        .await
        .unwrap();
    assert_eq!(episode.chosen, sha);
    assert_eq!(remote.versions(&key).await.unwrap(), Some(episode.clone()));
    assert_eq!(w.archive.versions(&key).await.unwrap(), Some(episode));
    // What the API does not offer says so.
    for e in [
        remote.copies().await.map(|_| ()).unwrap_err(),
        remote.verify(&sha).await.map(|_| ()).unwrap_err(),
        remote.episodes().await.map(|_| ()).unwrap_err(),
        remote.choose(&key, &sha).await.map(|_| ()).unwrap_err(),
    ] {
        assert!(
            matches!(&e, ArchiveError::Unavailable { why, .. } if why.contains("not offered through the API")),
            "{e}"
        );
    }
    // The server applies its last check itself.
    assert_eq!(remote.report().await.unwrap(), None);
    // A token of another scope is a configuration to change.
    let curator = w.token(TokenScope::Curator).await;
    let wrong = messagebus::api::ApiArchive::new(&client_config(&w, &curator)).unwrap();
    assert!(matches!(
        wrong.size(&sha).await,
        Err(ArchiveError::Config { .. })
    ));
}

#[tokio::test]
async fn the_remote_researcher_s_prints_are_the_server_s() {
    let w = world().await;
    let researcher = w.token(TokenScope::Researcher).await;
    let remote = messagebus::api::ApiPrintStore::new(&client_config(&w, &researcher)).unwrap();
    let key = prints::print_key("https://example.com/4012.mp3");
    assert_eq!(remote.get(&key).await.unwrap(), None);
    let payload = media(20_000);
    remote.put(&key, &payload).await.unwrap();
    assert_eq!(
        w.prints.get(&key).await.unwrap().as_deref(),
        Some(&payload[..])
    );
    assert_eq!(
        remote.get(&key).await.unwrap().as_deref(),
        Some(&payload[..])
    );
    assert!(matches!(
        remote.get("nope").await,
        Err(prints::StoreError::BadKey(_))
    ));
    let e = remote.list().await.unwrap_err();
    assert!(e.to_string().contains("not offered through the API"), "{e}");
}
