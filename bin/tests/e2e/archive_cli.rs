//! `archivist archive` end to end, through the built binary, on a directory archive the test
//! fills itself (crate `archive`): two episodes of the datastore (one with two versions) and
//! one with a hostile title; `versions` (table and JSON), `verify` (all whole, then a copy
//! damaged on disk: named, exit 1, the file kept), `space`, `export` (checked files, a feed
//! that parses and names each episode, a second export that copies nothing, a hostile title
//! kept inside the folder), `choose` (the chosen version changes, the episode's pairs are
//! researchable again per `status`), and no `--media-archive` (exit 2).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use archive::{episode_key, DirArchive, MediaArchive, Version};
use chrono::{TimeZone, Utc};
use sha2::{Digest, Sha256};

use crate::common::archivist;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A file name as the feed's relative URLs carry it.
fn encoded(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What the test put in the archive and the datastore.
struct Fixture {
    dir: tempfile::TempDir,
    media: PathBuf,
    /// Episode 1's one version.
    one: String,
    /// Episode 2's versions, the first kept (chosen) and the second.
    two_first: String,
    two_second: String,
    /// The hostile episode's one version.
    hostile: String,
}

impl Fixture {
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("ARCHIVIST_MEDIA_ARCHIVE", self.media.display().to_string())]
    }

    fn run(&self, args: &[&str]) -> crate::common::Run {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        archivist(self.dir.path(), args, &env)
    }

    fn archive(&self) -> DirArchive {
        DirArchive::new(&self.media).unwrap()
    }
}

/// Keeps `bytes` as a version of (`title`, `aired`) fetched from `uri`.
async fn keep(
    archive: &DirArchive,
    scratch: &Path,
    title: &str,
    aired: chrono::DateTime<Utc>,
    uri: &str,
    bytes: &[u8],
    media_type: &str,
) -> String {
    let sha = sha256(bytes);
    let file = scratch.join(&sha);
    std::fs::write(&file, bytes).unwrap();
    archive.keep(&sha, &file).await.unwrap();
    archive
        .record(
            &episode_key(title, &aired),
            title,
            aired,
            Version {
                sha256: sha.clone(),
                size: bytes.len() as u64,
                media_uri: uri.to_string(),
                etag: Some(format!("\"{}\"", &sha[..6])),
                last_modified: None,
                media_type: Some(media_type.to_string()),
                kept_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
                also_from: Vec::new(),
            },
        )
        .await
        .unwrap();
    sha
}

/// Episodes 1 and 2 and clips 0 and 1 in the datastore (`archivist.sqlite` in the test's
/// folder), every pair researched; the archive with episode 1 (one version), episode 2 (two)
/// and an episode titled `../../etc/passwd` that only the archive knows.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    archivist(dir.path(), &["migrate"], &[]).expect_code(0);
    let url = format!("sqlite://{}", dir.path().join("archivist.sqlite").display());
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let (e1, e2) = (
        datastore::testing::episode(1),
        datastore::testing::episode(2),
    );
    let (one, two_first, two_second, hostile) = block_on(async {
        let store = datastore::connect(&url).await.unwrap();
        store
            .upsert_episodes(&[e1.clone(), e2.clone()])
            .await
            .unwrap();
        let clips = [datastore::testing::clip(0), datastore::testing::clip(1)];
        store.upsert_clips(&clips).await.unwrap();
        let lease = uuid::Uuid::new_v4();
        let mut results = Vec::new();
        for e in [&e1, &e2] {
            for c in &clips {
                results.push(datastore::testing::result(lease, e, c, &[1_000]));
            }
        }
        store.record_results(&results).await.unwrap();

        let archive = DirArchive::new(&media).unwrap();
        let one = keep(
            &archive,
            &scratch,
            &e1.title,
            e1.date_aired,
            &e1.media_uri,
            &[1u8; 3000],
            "mp3",
        )
        .await;
        let two_first = keep(
            &archive,
            &scratch,
            &e2.title,
            e2.date_aired,
            &e2.media_uri,
            &[2u8; 4000],
            "mp3",
        )
        .await;
        // The show stitched another ad in: the same URI, another file.
        let two_second = keep(
            &archive,
            &scratch,
            &e2.title,
            e2.date_aired,
            &e2.media_uri,
            &[3u8; 5000],
            "mp3",
        )
        .await;
        let hostile = keep(
            &archive,
            &scratch,
            "../../etc/passwd",
            Utc.with_ymd_and_hms(2024, 2, 1, 0, 0, 0).unwrap(),
            "https://media.example.invalid/evil.mp3",
            b"ID3 not really audio",
            "../../sh",
        )
        .await;
        (one, two_first, two_second, hostile)
    });
    Fixture {
        dir,
        media,
        one,
        two_first,
        two_second,
        hostile,
    }
}

#[test]
fn without_an_archive_it_is_bad_usage() {
    let dir = tempfile::tempdir().unwrap();
    let run = archivist(dir.path(), &["archive", "versions"], &[]).expect_code(2);
    assert!(
        run.stderr.contains("--media-archive") && run.stderr.contains("ARCHIVIST_MEDIA_ARCHIVE"),
        "{}",
        run.stderr
    );
    let run = archivist(
        dir.path(),
        &["archive", "--media-archive", "ftp://x/y", "space"],
        &[],
    )
    .expect_code(2);
    assert!(run.stderr.contains("--media-archive"), "{}", run.stderr);
}

#[test]
fn versions_as_a_table_and_json() {
    let f = fixture();
    let table = f.run(&["archive", "versions"]).expect_code(0);
    for sha in [&f.one, &f.two_first, &f.two_second, &f.hostile] {
        assert!(table.stdout.contains(&sha[..12]), "{}", table.stdout);
    }
    assert!(table.stdout.contains("Episode 2") && table.stdout.contains("chosen"));
    assert!(table
        .stdout
        .contains("https://media.example.invalid/episodes/2.mp3"));

    let lines = f
        .run(&["archive", "versions", "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let two = lines.iter().find(|l| l["title"] == "Episode 2").unwrap();
    assert_eq!(two["chosen"], f.two_first.as_str());
    assert_eq!(two["versions"].as_array().unwrap().len(), 2);
    assert_eq!(two["versions"][1]["sha256"], f.two_second.as_str());
    assert_eq!(two["versions"][1]["size"], 5000);
    assert_eq!(
        two["key"],
        episode_key("Episode 2", &datastore::testing::episode(2).date_aired).as_str()
    );

    let only = f
        .run(&["archive", "list", "--episode", "Episode 1", "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["chosen"], f.one.as_str());
}

#[test]
fn verify_reports_a_damaged_copy_and_keeps_it() {
    let f = fixture();
    let whole = f.run(&["archive", "verify"]).expect_code(0);
    assert!(
        whole
            .stderr
            .contains("4 copies, 12020 bytes checked: 4 whole, 0 damaged"),
        "{}",
        whole.stderr
    );
    let report = block_on(f.archive().report()).unwrap().unwrap();
    assert_eq!((report.copies, report.failed.len()), (4, 0));

    // One byte of episode 2's second version changed on disk.
    let path = f.archive().local_path(&f.two_second).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();

    let damaged = f.run(&["archive", "verify"]).expect_code(1);
    assert!(damaged.stdout.contains(&f.two_second), "{}", damaged.stdout);
    assert!(damaged.stdout.contains("Episode 2"), "{}", damaged.stdout);
    assert!(!damaged.stdout.contains(&f.one), "{}", damaged.stdout);
    assert!(
        damaged.stderr.contains("3 whole, 1 damaged"),
        "{}",
        damaged.stderr
    );
    assert!(
        damaged.stderr.contains("nothing was deleted"),
        "{}",
        damaged.stderr
    );
    assert!(path.exists(), "a damaged copy is never deleted");
    let report = block_on(f.archive().report()).unwrap().unwrap();
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].0, f.two_second);

    let lines = f
        .run(&["archive", "verify", "--json"])
        .expect_code(1)
        .json_lines();
    assert_eq!(lines.len(), 4);
    let bad = lines
        .iter()
        .find(|l| l["sha256"] == f.two_second.as_str())
        .unwrap();
    assert!(bad["damage"].is_string());
    assert_eq!(bad["episodes"][0], "Episode 2");
    assert!(lines
        .iter()
        .filter(|l| l["sha256"] != f.two_second.as_str())
        .all(|l| l["damage"].is_null()));
}

#[test]
fn space_counts_copies_bytes_episodes_and_versions() {
    let f = fixture();
    let space = f
        .run(&["archive", "space", "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(space.len(), 1);
    let s = &space[0];
    assert_eq!(s["copies"], 4);
    assert_eq!(s["bytes"], 3000 + 4000 + 5000 + 20);
    assert_eq!(s["episodes"], 3);
    assert_eq!(s["versions"], 4);
    assert_eq!(s["chosen_bytes"], 3000 + 4000 + 20);
    assert_eq!(s["unrecorded_copies"], 0);
    assert!(s["last_verified"].is_null());
    let table = f.run(&["archive", "space"]).expect_code(0);
    assert!(
        table.stdout.contains("copies") && table.stdout.contains("12020"),
        "{}",
        table.stdout
    );
    f.run(&["archive", "verify"]).expect_code(0);
    let s = &f
        .run(&["archive", "space", "--json"])
        .expect_code(0)
        .json_lines()[0];
    assert!(s["last_verified"].is_string());
    assert_eq!(s["last_verify_failed"], 0);
}

#[test]
fn export_copies_the_chosen_copies_with_a_feed() {
    let f = fixture();
    let out = f.dir.path().join("out");
    let out_arg = out.display().to_string();
    let first = f
        .run(&["archive", "export", &out_arg, "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(first[0]["episodes"], 3);
    assert_eq!(first[0]["copied"], 3);
    assert_eq!(first[0]["already"], 0);

    // Only direct children of the folder: the three files and the feed.
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            assert!(e.file_type().unwrap().is_file());
            e.file_name().into_string().unwrap()
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.contains(&"feed.xml".to_string()));
    assert!(!f.dir.path().join("etc").exists());
    assert!(!out.join("..").join("etc").exists());
    for (sha, date) in [
        (&f.one, "2024-01-02"),
        (&f.two_first, "2024-01-03"),
        (&f.hostile, "2024-02-01"),
    ] {
        let name = names
            .iter()
            .find(|n| n.contains(&sha[..8]))
            .unwrap_or_else(|| panic!("{sha} not exported: {names:?}"));
        assert!(name.starts_with(date), "{name}");
        assert!(!name.contains('/') && !name.contains(".."), "{name}");
        assert_eq!(sha256(&std::fs::read(out.join(name)).unwrap()), **sha);
    }
    assert!(!names.iter().any(|n| n.contains(&f.two_second[..8])));
    let hostile = names.iter().find(|n| n.contains(&f.hostile[..8])).unwrap();
    assert!(hostile.ends_with(".sh"), "{hostile}");

    // The feed: RSS that a feed reader reads, one item an episode, each enclosure a file.
    let xml = std::fs::read(out.join("feed.xml")).unwrap();
    let feed = feed_rs::parser::Builder::new()
        .base_uri(Some("file:///export/"))
        .build()
        .parse(xml.as_slice())
        .unwrap();
    assert_eq!(feed.entries.len(), 3);
    let mut titles: Vec<String> = feed
        .entries
        .iter()
        .map(|e| e.title.as_ref().unwrap().content.clone())
        .collect();
    titles.sort();
    assert_eq!(titles, ["../../etc/passwd", "Episode 1", "Episode 2"]);
    for entry in &feed.entries {
        assert!(entry.published.is_some());
        let media = &entry.media[0].content[0];
        let url = media.url.as_ref().unwrap().to_string();
        assert!(
            names
                .iter()
                .any(|n| url == format!("file:///export/{}", encoded(n))),
            "{url}"
        );
        assert!(media.size.unwrap() > 0);
    }

    // Again: nothing copied. With a base URL, the enclosures are absolute under it.
    let again = f
        .run(&[
            "archive",
            "export",
            &out_arg,
            "--json",
            "--base-url",
            "https://example.com/show",
        ])
        .expect_code(0)
        .json_lines();
    assert_eq!(again[0]["copied"], 0);
    assert_eq!(again[0]["already"], 3);
    let xml = std::fs::read_to_string(out.join("feed.xml")).unwrap();
    assert!(
        xml.contains("url=\"https://example.com/show/2024-01-02%20Episode%201%20%5B"),
        "{xml}"
    );
    assert!(xml.contains("<title>../../etc/passwd</title>"), "{xml}");

    // A file removed is copied again, and only it.
    let one = names.iter().find(|n| n.contains(&f.one[..8])).unwrap();
    std::fs::remove_file(out.join(one)).unwrap();
    let third = f
        .run(&["archive", "export", &out_arg, "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(
        (third[0]["copied"].as_u64(), third[0]["already"].as_u64()),
        (Some(1), Some(2))
    );
}

#[test]
fn choose_makes_another_version_answered_and_researched_again() {
    let f = fixture();
    let status = |f: &Fixture| f.run(&["status", "--json"]).expect_code(0).json_lines()[0].clone();
    assert_eq!(status(&f)["researched_pairs"], 4);

    // A version the episode does not have, an episode the archive does not hold: bad usage.
    f.run(&[
        "archive",
        "choose",
        "--episode",
        "Episode 2",
        "--version",
        &f.one[..10],
    ])
    .expect_code(2);
    f.run(&[
        "archive",
        "choose",
        "--episode",
        "Episode 9",
        "--version",
        &f.one[..10],
    ])
    .expect_code(2);

    let chose = f
        .run(&[
            "archive",
            "choose",
            "--episode",
            "Episode 2",
            "--version",
            &f.two_second[..10],
        ])
        .expect_code(0);
    assert!(
        chose.stdout.contains("2 result(s) forgotten"),
        "{}",
        chose.stdout
    );
    let lines = f
        .run(&["archive", "versions", "--episode", "Episode 2", "--json"])
        .expect_code(0)
        .json_lines();
    assert_eq!(lines[0]["chosen"], f.two_second.as_str());
    // Episode 2's two pairs are researchable again; episode 1's stay researched.
    let s = status(&f);
    assert_eq!(s["researched_pairs"], 2);
    assert_eq!(s["research_pairs"], 4);
    assert_eq!(s["matched_pairs"], 2);
    let matches = f.run(&["matches"]).expect_code(0).json_lines();
    assert!(matches.iter().all(|m| m["episode_title"] == "Episode 1"));
}
