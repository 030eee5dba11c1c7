//! The directory archive: the conformance suite, then what is particular to it (paths outside
//! the directory never touched, no temporary files left, restarts, `open` by path or URL).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use archive::testing::{aired, file_with, payload, sha256_of, version_of, Damage, Fresh};
use archive::{episode_key, ArchiveError, DirArchive, Kept, MediaArchive};
use async_trait::async_trait;

struct DirDamage(DirArchive);

impl DirDamage {
    fn path(&self, sha256: &str) -> PathBuf {
        self.0.dir().join("media").join(&sha256[..2]).join(sha256)
    }
}

#[async_trait]
impl Damage for DirDamage {
    async fn read(&self, sha256: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(sha256)).ok()
    }
    async fn write(&self, sha256: &str, bytes: Vec<u8>) {
        std::fs::write(self.path(sha256), bytes).unwrap()
    }
}

/// An archive in a directory of its own (removed by the OS's temporary cleaning, not here:
/// the cases' tasks may outlive a guard).
async fn fresh() -> Fresh {
    let dir = tempfile::tempdir().unwrap().keep();
    let archive = DirArchive::new(&dir).unwrap();
    Fresh {
        archive: Arc::new(archive.clone()),
        damage: Arc::new(DirDamage(archive)),
    }
}

archive::media_archive_conformance_tests!(fresh);

/// Every file under `dir`, with its bytes, sorted.
fn tree(dir: &std::path::Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

/// Keys that climb out of the archive's directory (`../x`, an absolute path) reach no file:
/// the files beside the archive and in it are as they were, none made or removed.
#[tokio::test]
async fn traversal_touches_no_file() {
    let root = tempfile::tempdir().unwrap();
    let archive = DirArchive::new(root.path().join("archive")).unwrap();
    let bytes = payload(100, 1);
    let file = file_with(root.path(), "x", &bytes);
    std::fs::write(root.path().join("archive").join("x"), b"beside").unwrap();
    std::fs::write(root.path().join("archive/media/x"), b"in media").unwrap();
    let before = tree(root.path());
    let good = sha256_of(&bytes);
    let key = episode_key("t", &aired());
    for bad in [
        "../x",
        "../../x",
        "../../../x",
        "x",
        "..",
        ".",
        "/x",
        "media/../x",
    ] {
        let refused = |r: Result<(), ArchiveError>| {
            assert!(matches!(r, Err(ArchiveError::BadKey(_))), "{bad:?}: {r:?}")
        };
        refused(archive.keep(bad, &file).await.map(drop));
        refused(archive.size(bad).await.map(drop));
        refused(archive.read(bad, 0..1).await.map(drop));
        refused(archive.verify(bad).await.map(drop));
        refused(
            archive
                .copy_to(bad, &root.path().join("out"))
                .await
                .map(drop),
        );
        refused(archive.versions(bad).await.map(drop));
        let version = version_of(&bytes, "https://example.invalid/x");
        refused(archive.record(bad, "t", aired(), version).await.map(drop));
        refused(archive.choose(bad, &good).await.map(drop));
        refused(archive.choose(&key, bad).await.map(drop));
        assert_eq!(archive.local_path(bad), None);
    }
    let after: Vec<_> = tree(root.path())
        .into_iter()
        .filter(|(p, _)| !p.ends_with("episodes/.lock"))
        .collect();
    assert_eq!(after, before);
}

/// A refused keep (its file hashing to another SHA-256) leaves no temporary file behind, nor
/// does a kept one.
#[tokio::test]
async fn no_temporary_files_left() {
    let root = tempfile::tempdir().unwrap();
    let archive = DirArchive::new(root.path().join("archive")).unwrap();
    let bytes = payload(10_000, 2);
    let file = file_with(root.path(), "in", &bytes);
    assert!(matches!(
        archive.keep(&sha256_of(b"other"), &file).await,
        Err(ArchiveError::Mismatch { .. })
    ));
    assert_eq!(
        archive.keep(&sha256_of(&bytes), &file).await.unwrap(),
        Kept::New
    );
    let key = episode_key("t", &aired());
    archive
        .record(&key, "t", aired(), version_of(&bytes, "u"))
        .await
        .unwrap();
    let names: Vec<String> = tree(&root.path().join("archive"))
        .into_iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".lock")
        .collect();
    assert_eq!(names, Vec::<String>::new());
}

/// What an archive kept outlives its process: an archive opened again on the directory (by
/// path, or by a `file://` URL through `archive::open`) finds the copies, the episodes and the
/// report; files that are not the archive's are left alone and not listed.
#[tokio::test]
async fn kept_across_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("archive");
    let bytes = payload(1000, 3);
    let sha256 = sha256_of(&bytes);
    let key = episode_key("kept", &aired());
    {
        let archive = DirArchive::new(&dir).unwrap();
        let file = file_with(root.path(), "in", &bytes);
        archive.keep(&sha256, &file).await.unwrap();
        archive
            .record(&key, "kept", aired(), version_of(&bytes, "u"))
            .await
            .unwrap();
    }
    std::fs::write(
        dir.join("media").join(&sha256[..2]).join("notes.txt"),
        b"mine",
    )
    .unwrap();
    std::fs::write(dir.join("episodes").join("notes.json"), b"{}").unwrap();
    std::fs::create_dir_all(dir.join("media/zz")).unwrap();
    for opened in [
        archive::open(dir.to_str().unwrap()).await.unwrap(),
        archive::open(&format!("file://{}", dir.display()))
            .await
            .unwrap(),
    ] {
        assert_eq!(opened.describe(), dir.display().to_string());
        assert_eq!(opened.read(&sha256, 0..1000).await.unwrap(), bytes);
        assert_eq!(opened.copies().await.unwrap().len(), 1);
        let episodes = opened.episodes().await.unwrap();
        assert_eq!(episodes.len(), 1);
        assert_eq!(episodes[0].chosen, sha256);
        assert_eq!(
            opened.local_path(&sha256),
            Some(dir.join("media").join(&sha256[..2]).join(&sha256))
        );
    }
    assert!(dir.join("episodes/notes.json").exists());
}

/// `open` refuses what is no archive: nothing, another scheme.
#[tokio::test]
async fn open_refuses_what_is_no_archive() {
    for given in ["", "  ", "http://example.invalid/archive", "ftp://x/y"] {
        assert!(
            matches!(archive::open(given).await, Err(ArchiveError::Config { .. })),
            "{given:?}"
        );
    }
}
