//! Media that failed for a reason of its own (it will not decode) is remembered with its
//! validators: a new clip of it fails at once with the same reason, after a conditional
//! request and without a download, until the media changes or a failed pair is asked for
//! again (`archivist retry-failed`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use messagebus::{Bus, MemoryBus};
use research::{Media, MediaConfig, ResearcherSettings};
use tokio_util::sync::CancellationToken;

/// Not audio: every episode served here fails to decode (each its own bytes, 1000 of them).
fn not_audio(path: &str) -> Vec<u8> {
    let mut bytes = format!("{path}: this is not audio at all\n")
        .repeat(40)
        .into_bytes();
    bytes.resize(1000, b'.');
    bytes
}

/// Served media: each path's ETag, and the bodies sent (200s) by path.
#[derive(Default)]
struct Served {
    etags: HashMap<String, String>,
    bodies: HashMap<String, u32>,
}

async fn media(
    axum::extract::State(served): axum::extract::State<Arc<Mutex<Served>>>,
    uri: Uri,
    headers: HeaderMap,
) -> axum::response::Response {
    let path = uri.path().to_string();
    let mut served = served.lock().unwrap();
    let etag = served
        .etags
        .get(&path)
        .cloned()
        .unwrap_or_else(|| "\"v1\"".into());
    let asked = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    if asked == Some(etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    let body = not_audio(&path);
    *served.bodies.entry(path).or_default() += 1;
    ([(header::ETAG, etag)], body).into_response()
}

/// A WAV file (16-bit mono) of a second of a synthesised jingle: a clip that decodes.
fn clip_wav(path: &Path, seed: u64) {
    let rate = 8000u32;
    let samples = analysis::synth::jingle(seed, rate, 1.0);
    let data: Vec<u8> = samples
        .iter()
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
        .collect();
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    std::fs::write(path, out).unwrap();
}

fn item(episode_uri: &str, clip: &str, clip_path: &Path) -> Vec<u8> {
    let now = "2026-01-02T03:04:05Z";
    serde_json::json!({
        "lease_id": uuid::Uuid::new_v4(),
        "lease_expires_at": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339(),
        "episode": {
            "initial_date_curated": now, "last_date_curated": now,
            "curator_information": "test", "date_aired": now,
            "title": format!("episode at {episode_uri}"), "description": "",
            "media_uri": episode_uri, "media_type": "mp3", "priority": 0
        },
        "clips": [{
            "initial_date_curated": now, "last_date_curated": now,
            "curator_information": "test", "title": clip, "description": "",
            "media_uri": clip_path.display().to_string(), "media_type": "wav", "priority": 0
        }]
    })
    .to_string()
    .into_bytes()
}

/// One researcher run (`--once`) over `item` with a cache of `cache_size` bytes in `dir`:
/// the failure reason of its one result.
async fn research_one(dir: &Path, item: Vec<u8>) -> String {
    let bus = MemoryBus::default();
    bus.create_queue("pending_research").await.unwrap();
    bus.create_queue("completed_research").await.unwrap();
    bus.sender("pending_research")
        .await
        .unwrap()
        .send(item)
        .await
        .unwrap();
    let media = Media::new(MediaConfig {
        cache_dir: dir.join("cache"),
        // One episode's bytes: a second episode's download evicts the first.
        cache_size: 1000,
        max_size: 1 << 20,
        media_roots: Vec::new(),
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        attempts: 1,
        addresses: net::address_policy::AddressPolicy::any(),
        min_rate: 0,
    })
    .unwrap();
    let handle = research::start(
        CancellationToken::new(),
        vec![bus.receiver("pending_research").await.unwrap()],
        bus.sender("completed_research").await.unwrap(),
        Arc::new(research::reference::ReferenceAnalyser::new()),
        media,
        ResearcherSettings {
            once: true,
            ..ResearcherSettings::default()
        },
    );
    handle.done.await.unwrap();
    let results = bus.receiver("completed_research").await.unwrap();
    let got = results.receive(10, Duration::from_secs(1)).await.unwrap();
    assert_eq!(got.len(), 1);
    let result: serde_json::Value = serde_json::from_slice(got[0].body()).unwrap();
    result["failure"]
        .as_str()
        .unwrap_or_else(|| panic!("not a failure: {result}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_clip_of_media_known_to_fail_fails_without_a_download() {
    let served = Arc::new(Mutex::new(Served::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .fallback(axum::routing::get(media))
        .with_state(served.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let bodies = |path: &str| *served.lock().unwrap().bodies.get(path).unwrap_or(&0);

    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a.wav"),
        dir.path().join("b.wav"),
        dir.path().join("c.wav"),
    );
    clip_wav(&a, 1);
    clip_wav(&b, 2);
    clip_wav(&c, 3);
    let bad = format!("{base}/bad.mp3");

    // The first clip: downloaded, and failed for the episode's reason.
    let first = research_one(dir.path(), item(&bad, "clip a", &a)).await;
    assert!(first.starts_with("the episode"), "{first}");
    assert_eq!(bodies("/bad.mp3"), 1);
    // Another episode's download evicts it from the cache, as a busy cache does.
    research_one(dir.path(), item(&format!("{base}/other.mp3"), "clip a", &a)).await;

    // A new clip: the same reason at once, and no body sent.
    let second = research_one(dir.path(), item(&bad, "clip b", &b)).await;
    assert_eq!(second, first);
    assert_eq!(bodies("/bad.mp3"), 1, "known-bad media downloaded again");

    // A failed pair asked for again (retry-failed): fetched and tried afresh.
    research_one(dir.path(), item(&bad, "clip a", &a)).await;
    assert_eq!(bodies("/bad.mp3"), 2);

    // Changed media (a new ETag): fetched again for a new clip.
    research_one(dir.path(), item(&bad, "clip b", &b)).await;
    assert_eq!(bodies("/bad.mp3"), 2, "unchanged, known-bad again");
    served
        .lock()
        .unwrap()
        .etags
        .insert("/bad.mp3".into(), "\"v2\"".into());
    research_one(dir.path(), item(&bad, "clip c", &c)).await;
    assert_eq!(bodies("/bad.mp3"), 3);
}
