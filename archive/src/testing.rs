//! The media archive conformance suite: one set of cases, written once, run against every
//! adapter.
//!
//! An adapter's test file provides an `async fn() -> Fresh`: a new, empty archive, with a
//! [`Damage`] way past it to the bytes it keeps (to damage a copy as a disk or a careless hand
//! would), and invokes
//! [`media_archive_conformance_tests!`](crate::media_archive_conformance_tests):
//!
//! ```ignore
//! async fn fresh() -> Fresh {
//!     let dir = tempfile::tempdir().unwrap().keep();
//!     let archive = DirArchive::new(&dir).unwrap();
//!     Fresh { archive: Arc::new(archive.clone()), damage: Arc::new(DirDamage(archive)) }
//! }
//! archive::media_archive_conformance_tests!(fresh);
//! ```
//!
//! That generates a module `media_archive_conformance` with one `#[tokio::test]` per case
//! (the calling crate needs `tokio` with `macros` and `rt-multi-thread`). Nothing sleeps: the
//! concurrent case runs its writers to the end and checks what is left.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use sha2::{Digest, Sha256};

use crate::{
    episode_key, ArchiveError, CopyInfo, EpisodeVersions, Kept, MediaArchive, VerifyReport,
    Version, MAX_READ,
};

/// A fresh archive for one case.
pub struct Fresh {
    /// The archive, empty.
    pub archive: Arc<dyn MediaArchive>,
    /// Its copies' bytes, reached past it.
    pub damage: Arc<dyn Damage>,
}

/// The bytes an archive keeps for a copy, read and written past the archive: how the suite
/// damages a copy after it was kept.
#[async_trait]
pub trait Damage: Send + Sync {
    /// The bytes kept under `sha256`, or `None` when there are none.
    async fn read(&self, sha256: &str) -> Option<Vec<u8>>;
    /// Replaces the bytes kept under `sha256` with `bytes`.
    async fn write(&self, sha256: &str, bytes: Vec<u8>);
}

/// Generates one `#[tokio::test]` per conformance case, in a module
/// `media_archive_conformance` (or the module named first). `$fresh` is a path to an
/// `async fn() -> archive::testing::Fresh`. See [`crate::testing`].
#[macro_export]
macro_rules! media_archive_conformance_tests {
    ($fresh:path) => {
        $crate::media_archive_conformance_tests!(media_archive_conformance, $fresh);
    };
    ($module:ident, $fresh:path) => {
        $crate::media_archive_conformance_tests!(@cases $module, $fresh;
            keep_and_read_back,
            keep_longer_than_a_read,
            keep_twice_is_already,
            mismatch_keeps_nothing,
            bad_ranges_refused,
            missing_is_not_found,
            bad_keys_refused,
            damaged_copy_found_never_deleted,
            record_versions,
            choose_a_version,
            concurrent_records_lose_none,
            episodes_listed,
            report_round_trip,
            copies_listed,
        );
    };
    (@cases $module:ident, $fresh:path; $($case:ident),* $(,)?) => {
        /// The media archive conformance suite (`archive::testing`) for this adapter.
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    $crate::testing::$case($fresh).await;
                }
            )*
        }
    };
}

/// `n` bytes that are not all alike (nor repeating every 256), different for each `seed`.
pub fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

/// The SHA-256 of `bytes`, as the archive names copies.
pub fn sha256_of(bytes: &[u8]) -> String {
    crate::store::hex(&Sha256::digest(bytes))
}

/// Writes `bytes` to a new file `name` in `dir`.
pub fn file_with(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// An airing time for the cases' episodes.
pub fn aired() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 12, 31, 6, 0, 0).unwrap()
}

/// A version of `bytes`, fetched from `media_uri`.
pub fn version_of(bytes: &[u8], media_uri: &str) -> Version {
    Version {
        sha256: sha256_of(bytes),
        size: bytes.len() as u64,
        media_uri: media_uri.to_string(),
        etag: Some("\"abc\"".into()),
        last_modified: Some("Wed, 31 Dec 2025 06:00:00 GMT".into()),
        media_type: Some("mp3".into()),
        kept_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
    }
}

/// Keeps `bytes` (written to a file in `dir` first), checking it is new.
async fn keep_new(archive: &dyn MediaArchive, dir: &Path, bytes: &[u8]) -> String {
    let sha256 = sha256_of(bytes);
    let file = file_with(dir, &format!("{sha256}.in"), bytes);
    assert_eq!(archive.keep(&sha256, &file).await.unwrap(), Kept::New);
    sha256
}

/// Reads the copy `sha256` back every way the archive gives it, checking it is `bytes`.
async fn assert_holds(archive: &dyn MediaArchive, dir: &Path, sha256: &str, bytes: &[u8]) {
    let n = bytes.len() as u64;
    assert_eq!(archive.size(sha256).await.unwrap(), Some(n));
    let whole = n.min(MAX_READ);
    assert_eq!(
        archive.read(sha256, 0..whole).await.unwrap(),
        &bytes[..whole as usize]
    );
    let (a, b) = (n / 3, n - n / 4);
    assert_eq!(
        archive.read(sha256, a..b).await.unwrap(),
        &bytes[a as usize..b as usize],
        "{a}..{b} of {n}"
    );
    for at in [0, n / 2, n] {
        assert_eq!(
            archive.read(sha256, at..at).await.unwrap(),
            Vec::<u8>::new()
        );
    }
    if n > 0 {
        assert_eq!(
            archive.read(sha256, n - 1..n).await.unwrap(),
            &bytes[bytes.len() - 1..]
        );
    }
    let dest = dir.join(format!("{sha256}.out"));
    assert_eq!(archive.copy_to(sha256, &dest).await.unwrap(), n);
    assert!(
        std::fs::read(&dest).unwrap() == bytes,
        "copy_to of {n} bytes"
    );
    if let Some(path) = archive.local_path(sha256) {
        assert!(std::fs::read(&path).unwrap() == bytes, "the local copy");
    }
    assert_eq!(archive.verify(sha256).await.unwrap(), None);
}

/// A kept copy comes back byte for byte (its size, ranges, whole to a file, its local file
/// when there is one): an empty one, a small one, one of a few megabytes.
pub async fn keep_and_read_back<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    for (i, n) in [0usize, 1, 1000, 3 << 20].into_iter().enumerate() {
        let bytes = payload(n, i as u8);
        let sha256 = keep_new(archive.as_ref(), dir.path(), &bytes).await;
        assert_holds(archive.as_ref(), dir.path(), &sha256, &bytes).await;
    }
}

/// A copy longer than one read ([`MAX_READ`], and than an S3 part): kept whole, read in
/// ranges of up to [`MAX_READ`] (one byte more is [`ArchiveError::BadRange`]), copied whole.
pub async fn keep_longer_than_a_read<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload(MAX_READ as usize + (1 << 20) + 7, 9);
    let n = bytes.len() as u64;
    let sha256 = keep_new(archive.as_ref(), dir.path(), &bytes).await;
    assert_holds(archive.as_ref(), dir.path(), &sha256, &bytes).await;
    let tail = n - MAX_READ;
    assert!(archive.read(&sha256, tail..n).await.unwrap() == bytes[tail as usize..]);
    for range in [0..MAX_READ + 1, tail - 1..n] {
        match archive.read(&sha256, range.clone()).await {
            Err(ArchiveError::BadRange {
                sha256: s,
                size,
                start,
                end,
            }) => {
                assert_eq!((s.as_str(), size), (sha256.as_str(), n));
                assert_eq!(start..end, range);
            }
            other => panic!("{range:?}: {:?}", other.map(|b| b.len())),
        }
    }
    let file = file_with(dir.path(), "again", &bytes);
    assert_eq!(archive.keep(&sha256, &file).await.unwrap(), Kept::Already);
}

/// Keeping what is kept already writes nothing and says so; it is listed once.
pub async fn keep_twice_is_already<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload(5000, 1);
    let sha256 = keep_new(archive.as_ref(), dir.path(), &bytes).await;
    let file = file_with(dir.path(), "second", &bytes);
    assert_eq!(archive.keep(&sha256, &file).await.unwrap(), Kept::Already);
    assert_eq!(
        archive.copies().await.unwrap(),
        vec![CopyInfo {
            sha256: sha256.clone(),
            size: 5000
        }]
    );
    assert_holds(archive.as_ref(), dir.path(), &sha256, &bytes).await;
}

/// A file that does not hash to the SHA-256 it is kept under is refused
/// ([`ArchiveError::Mismatch`], naming both) and nothing is left: no copy under either name,
/// none listed. A small file and one of several S3 parts.
pub async fn mismatch_keeps_nothing<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    for (i, n) in [1000usize, (9 << 20) + 3].into_iter().enumerate() {
        let bytes = payload(n, 2 + i as u8);
        let found = sha256_of(&bytes);
        let claimed = sha256_of(b"something else");
        let file = file_with(dir.path(), &format!("mismatch{i}"), &bytes);
        match archive.keep(&claimed, &file).await {
            Err(ArchiveError::Mismatch {
                expected,
                found: got,
            }) => assert_eq!((expected, got), (claimed.clone(), found.clone())),
            other => panic!("{n} bytes: {other:?}"),
        }
        for sha256 in [&claimed, &found] {
            assert_eq!(archive.size(sha256).await.unwrap(), None);
            assert!(matches!(
                archive.read(sha256, 0..1).await,
                Err(ArchiveError::NotFound(_))
            ));
            assert_eq!(archive.local_path(sha256), None);
        }
        assert_eq!(archive.copies().await.unwrap(), vec![]);
    }
}

/// A range not within the copy (reversed, past its end, starting past its end) is
/// [`ArchiveError::BadRange`] with the copy's length; ranges within it are read.
pub async fn bad_ranges_refused<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload(1000, 3);
    let sha256 = keep_new(archive.as_ref(), dir.path(), &bytes).await;
    #[allow(clippy::reversed_empty_ranges)]
    let bad = [
        5..3,
        0..1001,
        999..1001,
        1000..1001,
        1001..1001,
        2000..3000,
        0..MAX_READ + 1,
        u64::MAX - 1..u64::MAX,
    ];
    for range in bad {
        match archive.read(&sha256, range.clone()).await {
            Err(ArchiveError::BadRange { size, .. }) => assert_eq!(size, 1000, "{range:?}"),
            other => panic!("{range:?}: {other:?}"),
        }
    }
    assert_eq!(
        archive.read(&sha256, 990..1000).await.unwrap(),
        &bytes[990..]
    );
}

/// What was never kept or recorded is not there: no size, [`ArchiveError::NotFound`] to read,
/// copy (and no file written) or verify, no episode, no report, nothing listed.
pub async fn missing_is_not_found<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let sha256 = sha256_of(b"never kept");
    assert_eq!(archive.size(&sha256).await.unwrap(), None);
    assert!(matches!(
        archive.read(&sha256, 0..1).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert!(matches!(
        archive.read(&sha256, 0..0).await,
        Err(ArchiveError::NotFound(_))
    ));
    let dest = dir.path().join("out");
    assert!(matches!(
        archive.copy_to(&sha256, &dest).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert!(!dest.exists(), "copy_to wrote a file for a missing copy");
    assert!(matches!(
        archive.verify(&sha256).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert_eq!(archive.local_path(&sha256), None);
    let key = episode_key("Never recorded", &aired());
    assert_eq!(archive.versions(&key).await.unwrap(), None);
    assert!(matches!(
        archive.choose(&key, &sha256).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert_eq!(archive.versions(&key).await.unwrap(), None);
    assert_eq!(archive.copies().await.unwrap(), vec![]);
    assert_eq!(archive.episodes().await.unwrap(), vec![]);
    assert_eq!(archive.report().await.unwrap(), None);
}

/// Names that are not a SHA-256 or an episode key (a path, a traversal, upper case, too
/// short, too long) are refused with [`ArchiveError::BadKey`] by every call, before anything
/// is read or written: no file is made, nothing is kept or recorded.
pub async fn bad_keys_refused<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload(100, 4);
    let good = sha256_of(&bytes);
    let file = file_with(dir.path(), "in", &bytes);
    let key = episode_key("Bad keys", &aired());
    let long = format!("{good}0");
    let bad = [
        "../x",
        "../../etc/passwd",
        "/etc/passwd",
        "",
        "ABC",
        &good[..63],
        &long,
        &good.to_uppercase(),
        &format!("../{}", &good[3..]),
        &format!("{}/..", &good[..61]),
        &format!("{}\0", &good[..63]),
    ];
    let refused = |what: &str, bad: &str, result: Result<(), ArchiveError>| match result {
        Err(ArchiveError::BadKey(_)) => {}
        other => panic!("{what}({bad:?}): {other:?}"),
    };
    for bad in bad {
        let dest = dir.path().join("out");
        refused("keep", bad, archive.keep(bad, &file).await.map(drop));
        refused("size", bad, archive.size(bad).await.map(drop));
        refused("read", bad, archive.read(bad, 0..1).await.map(drop));
        refused("copy_to", bad, archive.copy_to(bad, &dest).await.map(drop));
        assert!(!dest.exists(), "copy_to({bad:?}) wrote a file");
        refused("verify", bad, archive.verify(bad).await.map(drop));
        assert_eq!(archive.local_path(bad), None, "{bad:?}");
        refused("versions", bad, archive.versions(bad).await.map(drop));
        let version = version_of(&bytes, "https://example.invalid/a.mp3");
        refused(
            "record",
            bad,
            archive.record(bad, "t", aired(), version).await.map(drop),
        );
        let mut version = version_of(&bytes, "https://example.invalid/a.mp3");
        version.sha256 = bad.to_string();
        refused(
            "record (version)",
            bad,
            archive.record(&key, "t", aired(), version).await.map(drop),
        );
        refused("choose", bad, archive.choose(bad, &good).await.map(drop));
        refused(
            "choose (version)",
            bad,
            archive.choose(&key, bad).await.map(drop),
        );
    }
    assert_eq!(archive.copies().await.unwrap(), vec![]);
    assert_eq!(archive.episodes().await.unwrap(), vec![]);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("in")]);
    assert!(
        std::fs::read(&file).unwrap() == bytes,
        "the file given changed"
    );
}

/// A copy damaged after it was kept (a byte changed; cut short) is found by `verify` and by
/// `copy_to` ([`ArchiveError::Damaged`], and the file written is removed); the damaged copy
/// is never deleted or changed by either. A whole copy beside it verifies.
pub async fn damaged_copy_found_never_deleted<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, damage } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let good = payload(20_000, 5);
    let good_sha = keep_new(archive.as_ref(), dir.path(), &good).await;
    let bytes = payload(10_000, 6);
    let sha256 = keep_new(archive.as_ref(), dir.path(), &bytes).await;
    assert!(
        damage.read(&sha256).await.unwrap() == bytes,
        "kept as given"
    );
    let mut flipped = bytes.clone();
    flipped[4321] ^= 0x20;
    for damaged in [flipped, bytes[..9000].to_vec(), Vec::new()] {
        damage.write(&sha256, damaged.clone()).await;
        let why = archive.verify(&sha256).await.unwrap();
        assert!(why.is_some_and(|why| !why.is_empty()), "verify");
        let dest = dir.path().join("out");
        match archive.copy_to(&sha256, &dest).await {
            Err(ArchiveError::Damaged { sha256: s, why }) => {
                assert_eq!(s, sha256);
                assert!(!why.is_empty());
            }
            other => panic!("copy_to of a damaged copy: {other:?}"),
        }
        assert!(!dest.exists(), "the damaged copy's file was left");
        assert!(
            damage.read(&sha256).await.unwrap() == damaged,
            "the damaged copy was changed or deleted"
        );
        assert_eq!(
            archive.size(&sha256).await.unwrap(),
            Some(damaged.len() as u64)
        );
        let listed: Vec<_> = archive.copies().await.unwrap();
        assert!(listed.iter().any(|c| c.sha256 == sha256), "{listed:?}");
        assert_eq!(archive.verify(&good_sha).await.unwrap(), None);
    }
    assert!(damage.read(&good_sha).await.unwrap() == good);
}

/// `record`: the first version becomes the chosen one; the same SHA-256 again (even from
/// another URI) adds nothing; a second version is kept but not chosen. What it answers is what
/// `versions` reads afterwards.
pub async fn record_versions<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let (title, aired) = ("Episode 4012", aired());
    let key = episode_key(title, &aired);
    let v1 = version_of(&payload(100, 1), "https://example.invalid/4012.mp3");
    let first = archive
        .record(&key, title, aired, v1.clone())
        .await
        .unwrap();
    assert_eq!(
        first,
        EpisodeVersions {
            title: title.to_string(),
            date_aired: aired,
            chosen: v1.sha256.clone(),
            versions: vec![v1.clone()],
        }
    );
    assert_eq!(archive.versions(&key).await.unwrap().as_ref(), Some(&first));
    let mut same = v1.clone();
    same.media_uri = "https://mirror.example.invalid/4012.mp3".into();
    same.kept_at = Utc.with_ymd_and_hms(2026, 2, 1, 0, 0, 0).unwrap();
    let again = archive.record(&key, title, aired, same).await.unwrap();
    assert_eq!(again, first, "the same SHA-256 again");
    let v2 = version_of(&payload(200, 2), "https://example.invalid/4012-fixed.mp3");
    let second = archive
        .record(&key, title, aired, v2.clone())
        .await
        .unwrap();
    assert_eq!(second.chosen, v1.sha256, "a new version is not chosen");
    assert_eq!(second.versions, vec![v1.clone(), v2.clone()]);
    assert_eq!(second.chosen(), Some(&v1));
    assert_eq!(
        second.from_uri("https://example.invalid/4012-fixed.mp3"),
        Some(&v2)
    );
    assert_eq!(archive.versions(&key).await.unwrap(), Some(second));
}

/// `choose` makes a recorded version the chosen one (kept across reads);
/// [`ArchiveError::NotFound`] for a version not recorded or an episode not known, changing
/// nothing.
pub async fn choose_a_version<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let (title, aired) = ("Episode 7", aired());
    let key = episode_key(title, &aired);
    let v1 = version_of(&payload(100, 1), "https://example.invalid/7.mp3");
    let v2 = version_of(&payload(100, 2), "https://example.invalid/7b.mp3");
    archive
        .record(&key, title, aired, v1.clone())
        .await
        .unwrap();
    archive
        .record(&key, title, aired, v2.clone())
        .await
        .unwrap();
    let chosen = archive.choose(&key, &v2.sha256).await.unwrap();
    assert_eq!(chosen.chosen, v2.sha256);
    assert_eq!(chosen.versions, vec![v1.clone(), v2.clone()]);
    assert_eq!(archive.versions(&key).await.unwrap(), Some(chosen.clone()));
    assert_eq!(
        archive.choose(&key, &v2.sha256).await.unwrap(),
        chosen,
        "chosen again"
    );
    let unrecorded = sha256_of(b"not a version");
    assert!(matches!(
        archive.choose(&key, &unrecorded).await,
        Err(ArchiveError::NotFound(_))
    ));
    let unknown = episode_key("Episode 8", &aired);
    assert!(matches!(
        archive.choose(&unknown, &v1.sha256).await,
        Err(ArchiveError::NotFound(_))
    ));
    assert_eq!(archive.versions(&unknown).await.unwrap(), None);
    assert_eq!(archive.versions(&key).await.unwrap(), Some(chosen));
    let back = archive.choose(&key, &v1.sha256).await.unwrap();
    assert_eq!(back.chosen, v1.sha256);
    assert_eq!(archive.versions(&key).await.unwrap(), Some(back));
}

/// Eight participants recording versions of one episode at once (each its own, and each
/// twice) lose none: every version is there once, and the one chosen is the first recorded,
/// the same for all.
pub async fn concurrent_records_lose_none<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    const WRITERS: usize = 8;
    let Fresh { archive, .. } = fresh().await;
    let (title, aired) = ("Episode 99", aired());
    let key = episode_key(title, &aired);
    let versions: Vec<Version> = (0..WRITERS)
        .map(|i| {
            version_of(
                &payload(100 + i, i as u8),
                &format!("https://example.invalid/99/{i}.mp3"),
            )
        })
        .collect();
    let start = Arc::new(tokio::sync::Barrier::new(WRITERS));
    let writers: Vec<_> = versions
        .iter()
        .cloned()
        .map(|version| {
            let (archive, key, start) = (archive.clone(), key.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut answers = Vec::new();
                for _ in 0..2 {
                    let answer = archive
                        .record(&key, title, aired, version.clone())
                        .await
                        .unwrap();
                    assert!(
                        answer.versions.iter().any(|v| v == &version),
                        "its own version missing from its answer"
                    );
                    answers.push(answer);
                }
                answers
            })
        })
        .collect();
    let mut chosen = BTreeSet::new();
    for w in writers {
        for answer in w.await.unwrap() {
            chosen.insert(answer.chosen);
        }
    }
    let known = archive.versions(&key).await.unwrap().unwrap();
    let kept: Vec<&str> = known.versions.iter().map(|v| v.sha256.as_str()).collect();
    let unique: BTreeSet<&str> = kept.iter().copied().collect();
    assert_eq!(kept.len(), unique.len(), "a version twice: {kept:?}");
    let expected: BTreeSet<&str> = versions.iter().map(|v| v.sha256.as_str()).collect();
    assert_eq!(unique, expected, "versions lost");
    assert_eq!(
        known.chosen, known.versions[0].sha256,
        "the first is chosen"
    );
    assert_eq!(chosen.into_iter().collect::<Vec<_>>(), vec![known.chosen]);
}

/// `episodes` lists every episode recorded, once, as `versions` reads it.
pub async fn episodes_listed<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let mut recorded = Vec::new();
    for i in 0..3u8 {
        let title = format!("Episode {i}");
        let aired = aired() + chrono::Duration::days(i64::from(i));
        let key = episode_key(&title, &aired);
        let version = version_of(&payload(50, i), &format!("https://example.invalid/{i}"));
        recorded.push(archive.record(&key, &title, aired, version).await.unwrap());
    }
    let mut listed = archive.episodes().await.unwrap();
    listed.sort_by(|a, b| a.title.cmp(&b.title));
    assert_eq!(listed, recorded);
}

/// The last check's report comes back as it was put; a later one replaces it.
pub async fn report_round_trip<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    assert_eq!(archive.report().await.unwrap(), None);
    let first = VerifyReport {
        checked_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
            + chrono::Duration::nanoseconds(123_456_789),
        copies: 3,
        bytes: 12_345,
        failed: vec![(sha256_of(b"bad"), "its 3 bytes hash to …".into())],
    };
    archive.put_report(&first).await.unwrap();
    assert_eq!(archive.report().await.unwrap().as_ref(), Some(&first));
    let second = VerifyReport {
        checked_at: Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap(),
        copies: 4,
        bytes: 20_000,
        failed: vec![],
    };
    archive.put_report(&second).await.unwrap();
    assert_eq!(archive.report().await.unwrap(), Some(second));
}

/// `copies` lists every kept copy once, with its length.
pub async fn copies_listed<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { archive, .. } = fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for (i, n) in [0usize, 10, 5000, 70_000].into_iter().enumerate() {
        let sha256 = keep_new(archive.as_ref(), dir.path(), &payload(n, i as u8)).await;
        expected.push(CopyInfo {
            sha256,
            size: n as u64,
        });
    }
    let mut listed = archive.copies().await.unwrap();
    listed.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    expected.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    assert_eq!(listed, expected);
}
