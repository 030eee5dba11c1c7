//! The directory store: the conformance suite, then what is particular to it (the size bound
//! and eviction of the least recently used, abandoned temporary files, restarts).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use prints::testing::{payload, unique_key, Fresh, Raw};
use prints::{envelope, DirStore, PrintStore};

struct DirRaw(DirStore);

#[async_trait]
impl Raw for DirRaw {
    async fn read(&self, key: &str) -> Vec<u8> {
        std::fs::read(self.0.path_of(key).unwrap()).unwrap()
    }
    async fn write(&self, key: &str, bytes: Vec<u8>) {
        std::fs::write(self.0.path_of(key).unwrap(), bytes).unwrap()
    }
}

/// A store in a directory of its own (removed by the OS's temporary cleaning, not here: the
/// cases' tasks may outlive a guard).
async fn fresh() -> Fresh {
    let dir = tempfile::tempdir().unwrap().keep();
    let store = DirStore::new(&dir, u64::MAX).unwrap();
    Fresh {
        store: Arc::new(store.clone()),
        raw: Arc::new(DirRaw(store)),
    }
}

prints::print_store_conformance_tests!(fresh);

const PRINT: usize = 1000;
const STORED: u64 = (PRINT + envelope::HEADER) as u64;

/// Past its bound, the store removes the prints least recently used (read counts as use),
/// never the one just written.
#[tokio::test]
async fn the_least_recently_used_are_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path(), 3 * STORED).unwrap();
    let keys: Vec<String> = (0..4).map(|_| unique_key("lru")).collect();
    for key in &keys[..3] {
        store.put(key, &payload(PRINT, 1)).await.unwrap();
    }
    // The oldest written is read: the second is now the least recently used.
    assert!(store.get(&keys[0]).await.unwrap().is_some());
    store.put(&keys[3], &payload(PRINT, 2)).await.unwrap();
    let there = |k: &String| std::fs::metadata(store.path_of(k).unwrap()).is_ok();
    assert!(there(&keys[0]), "read lately: kept");
    assert!(!there(&keys[1]), "least recently used: evicted");
    assert!(there(&keys[2]) && there(&keys[3]));
    assert_eq!(store.get(&keys[1]).await.unwrap(), None);
    let total: u64 = store.list().await.unwrap().iter().map(|p| p.size).sum();
    assert!(total <= 3 * STORED, "{total}");
}

/// A print larger than the whole bound is kept (it was just written), the others go.
#[tokio::test]
async fn a_print_over_the_bound_is_kept_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path(), STORED).unwrap();
    let (small, big) = (unique_key("small"), unique_key("big"));
    store.put(&small, &payload(PRINT, 1)).await.unwrap();
    store.put(&big, &payload(3 * PRINT, 2)).await.unwrap();
    assert_eq!(store.get(&small).await.unwrap(), None);
    assert_eq!(store.get(&big).await.unwrap(), Some(payload(3 * PRINT, 2)));
}

/// A crashed writer's temporary file goes once it is an hour old; a fresh one (a write under
/// way) stays; neither is ever listed.
#[tokio::test]
async fn abandoned_writes_are_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path(), u64::MAX).unwrap();
    let key = unique_key("tmp");
    let (old, young) = (
        dir.path().join(format!(".{key}.old.tmp")),
        dir.path().join(format!(".{key}.young.tmp")),
    );
    std::fs::write(&old, b"half").unwrap();
    std::fs::write(&young, b"half").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();
    store.put(&key, b"whole").await.unwrap();
    assert!(!old.exists());
    assert!(young.exists());
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key);
}

/// Prints outlive the store's process: a store opened again on the directory finds them;
/// files that are not prints are left alone and not listed.
#[tokio::test]
async fn prints_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key = unique_key("restart");
    DirStore::new(dir.path(), u64::MAX)
        .unwrap()
        .put(&key, b"kept")
        .await
        .unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let again = DirStore::new(dir.path(), 1).unwrap();
    assert_eq!(
        again.get(&key).await.unwrap().as_deref(),
        Some(&b"kept"[..])
    );
    assert_eq!(again.list().await.unwrap().len(), 1);
    again.put(&unique_key("other"), b"x").await.unwrap();
    assert!(dir.path().join("notes.txt").exists());
}

/// `prints check` reads every print but does not use it: the least recently used before a
/// check is still the one evicted after it (a check once set every print's last-used time
/// to the time of the check, in key order, which emptied the order of eviction).
#[tokio::test]
async fn a_check_keeps_the_order_of_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path(), 3 * STORED).unwrap();
    let keys: Vec<String> = (0..4).map(|_| unique_key("check_lru")).collect();
    // Written long ago, the first the least recently used: a second apart, from 2020 on.
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800);
    for (i, key) in keys[..3].iter().enumerate() {
        store.put(key, &payload(PRINT, i as u8)).await.unwrap();
        std::fs::File::options()
            .write(true)
            .open(store.path_of(key).unwrap())
            .unwrap()
            .set_modified(epoch + Duration::from_secs(i as u64))
            .unwrap();
    }
    let used = |listed: Vec<prints::PrintInfo>| {
        keys[..3]
            .iter()
            .map(|k| listed.iter().find(|p| &p.key == k).unwrap().used)
            .collect::<Vec<_>>()
    };
    let before = used(store.list().await.unwrap());
    let checked = store.check().await.unwrap();
    assert_eq!(checked.len(), 3);
    assert!(checked.iter().all(|c| c.damage.is_none()));
    assert_eq!(used(store.list().await.unwrap()), before, "last used");
    // A read is still a use.
    assert!(store.get(&keys[0]).await.unwrap().is_some());
    store.put(&keys[3], &payload(PRINT, 9)).await.unwrap();
    let there = |k: &String| std::fs::metadata(store.path_of(k).unwrap()).is_ok();
    assert!(there(&keys[0]), "read: kept");
    assert!(!there(&keys[1]), "least recently used: evicted");
    assert!(there(&keys[2]) && there(&keys[3]));
}
