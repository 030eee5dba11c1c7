//! The print store conformance suite: one set of cases, written once, run against every
//! adapter.
//!
//! An adapter's test file provides an `async fn() -> Fresh`: a new, empty store, with a
//! [`Raw`] way past it to what it keeps (to damage a print as a disk or a careless hand
//! would), and invokes [`print_store_conformance_tests!`](crate::print_store_conformance_tests):
//!
//! ```ignore
//! async fn fresh() -> Fresh {
//!     let dir = tempfile::tempdir().unwrap().keep();
//!     let store = Arc::new(DirStore::new(&dir, u64::MAX).unwrap());
//!     Fresh { store: store.clone(), raw: Arc::new(DirRaw(store)) }
//! }
//! prints::print_store_conformance_tests!(fresh);
//! ```
//!
//! That generates a module `print_store_conformance` with one `#[tokio::test]` per case (the
//! calling crate needs `tokio` with `macros` and `rt-multi-thread`). Nothing sleeps: the
//! concurrent cases run their writers and readers to the end and check what each saw.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{envelope, print_key, PrintStore, StoreError};

/// A fresh store for one case.
pub struct Fresh {
    /// The store, empty.
    pub store: Arc<dyn PrintStore>,
    /// What it keeps, reached past it.
    pub raw: Arc<dyn Raw>,
}

/// The bytes a store keeps for a key (the envelope included), read and written past the
/// store.
#[async_trait]
pub trait Raw: Send + Sync {
    /// What is kept under `key`.
    async fn read(&self, key: &str) -> Vec<u8>;
    /// Replaces what is kept under `key` with `bytes`.
    async fn write(&self, key: &str, bytes: Vec<u8>);
}

/// Generates one `#[tokio::test]` per conformance case, in a module
/// `print_store_conformance` (or the module named first). `$fresh` is a path to an
/// `async fn() -> prints::testing::Fresh`. See [`crate::testing`].
#[macro_export]
macro_rules! print_store_conformance_tests {
    ($fresh:path) => {
        $crate::print_store_conformance_tests!(print_store_conformance, $fresh);
    };
    ($module:ident, $fresh:path) => {
        $crate::print_store_conformance_tests!(@cases $module, $fresh;
            round_trip,
            missing_is_none,
            bad_keys_refused,
            atomic_replace,
            concurrent_writers,
            truncated_rejected,
            corrupt_rejected,
            foreign_object_rejected,
            list_and_remove,
            check_finds_the_damaged,
            check_is_not_a_use,
        );
    };
    (@cases $module:ident, $fresh:path; $($case:ident),* $(,)?) => {
        /// The print store conformance suite (`prints::testing`) for this adapter.
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

/// A key unique to this run.
pub fn unique_key(what: &str) -> String {
    print_key(&format!("test://{what}/{:016x}", rand::random::<u64>()))
}

/// `n` bytes that are not all alike, different for each `seed`.
pub fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A print comes back byte for byte: an empty one, a small one, one of a megabyte.
pub async fn round_trip<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    for (i, n) in [0usize, 1, 1000, 1 << 20].into_iter().enumerate() {
        let key = unique_key("round_trip");
        let print = payload(n, i as u8);
        store.put(&key, &print).await.unwrap();
        assert_eq!(store.get(&key).await.unwrap(), Some(print), "{n} bytes");
    }
}

/// A key nothing was put under has no print.
pub async fn missing_is_none<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    assert_eq!(store.get(&unique_key("missing")).await.unwrap(), None);
    assert!(!store.remove(&unique_key("missing")).await.unwrap());
}

/// What is not a key names nothing: refused before the store is touched.
pub async fn bad_keys_refused<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    for bad in ["../../etc/passwd", "", "ABC", "a/b"] {
        assert!(
            matches!(store.put(bad, b"x").await, Err(StoreError::BadKey(_))),
            "{bad}"
        );
        assert!(
            matches!(store.get(bad).await, Err(StoreError::BadKey(_))),
            "{bad}"
        );
        assert!(
            matches!(store.remove(bad).await, Err(StoreError::BadKey(_))),
            "{bad}"
        );
    }
}

/// A print replaced while others read it: every read sees the old print or the new one,
/// whole, never an error or a mix.
pub async fn atomic_replace<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    let key = unique_key("atomic_replace");
    let (old, new) = (payload(300_000, 1), payload(200_000, 2));
    store.put(&key, &old).await.unwrap();
    let writer = {
        let (store, key, old, new) = (store.clone(), key.clone(), old.clone(), new.clone());
        tokio::spawn(async move {
            for i in 0..10 {
                let print = if i % 2 == 0 { &new } else { &old };
                store.put(&key, print).await.unwrap();
            }
            store.put(&key, &new).await.unwrap();
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (store, key, old, new) = (store.clone(), key.clone(), old.clone(), new.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let got = store.get(&key).await.unwrap().expect("a print");
                    assert!(got == old || got == new, "a mix of {} bytes", got.len());
                }
            })
        })
        .collect();
    writer.await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(new), "the last write");
}

/// Writers of one key at once (two researchers printing one episode): each write succeeds,
/// and what is left is one of them, whole.
pub async fn concurrent_writers<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    let key = unique_key("concurrent_writers");
    let prints: Vec<Vec<u8>> = (0..6)
        .map(|i| payload(50_000 + i * 1000, i as u8))
        .collect();
    let writers: Vec<_> = prints
        .iter()
        .cloned()
        .map(|print| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move { store.put(&key, &print).await })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let got = store.get(&key).await.unwrap().expect("a print");
    assert!(prints.contains(&got), "not one whole write");
    let listed: Vec<_> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.key == key)
        .collect();
    assert_eq!(listed.len(), 1, "one print under the key: {listed:?}");
}

/// A print cut short where it is kept is reported damaged, not returned.
pub async fn truncated_rejected<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, raw } = fresh().await;
    let key = unique_key("truncated");
    store.put(&key, &payload(10_000, 3)).await.unwrap();
    let stored = raw.read(&key).await;
    for cut in [stored.len() - 1, stored.len() / 2, 10, 0] {
        raw.write(&key, stored[..cut].to_vec()).await;
        match store.get(&key).await {
            Err(StoreError::Damaged { key: k, why }) => {
                assert_eq!(k, key);
                assert!(!why.is_empty());
            }
            other => panic!("cut to {cut} bytes: {other:?}"),
        }
    }
    // Put again, it is whole again.
    store.put(&key, b"again").await.unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().as_deref(),
        Some(&b"again"[..])
    );
}

/// A print with one bit flipped, anywhere, is reported damaged.
pub async fn corrupt_rejected<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, raw } = fresh().await;
    let key = unique_key("corrupt");
    store.put(&key, &payload(5_000, 4)).await.unwrap();
    let stored = raw.read(&key).await;
    for at in [0, 20, 30, envelope::HEADER, stored.len() - 1] {
        let mut flipped = stored.clone();
        flipped[at] ^= 0x10;
        raw.write(&key, flipped).await;
        assert!(
            matches!(store.get(&key).await, Err(StoreError::Damaged { .. })),
            "bit flipped at {at}"
        );
    }
}

/// Something under a print's name that is no print at all (its envelope missing) is
/// reported damaged.
pub async fn foreign_object_rejected<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, raw } = fresh().await;
    let key = unique_key("foreign");
    raw.write(&key, payload(1000, 5)).await;
    assert!(matches!(
        store.get(&key).await,
        Err(StoreError::Damaged { .. })
    ));
}

/// `list` shows each print once with its size; `remove` takes one away (saying whether it
/// was there), leaving the others.
pub async fn list_and_remove<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    let keys: Vec<String> = (0..3).map(|_| unique_key("list")).collect();
    for (i, key) in keys.iter().enumerate() {
        store.put(key, &payload(100 * (i + 1), 6)).await.unwrap();
    }
    let listed = store.list().await.unwrap();
    for (i, key) in keys.iter().enumerate() {
        let found: Vec<_> = listed.iter().filter(|p| &p.key == key).collect();
        assert_eq!(found.len(), 1, "{key} in {listed:?}");
        assert_eq!(found[0].size, (100 * (i + 1) + envelope::HEADER) as u64);
        assert!(found[0].used.is_some());
    }
    assert!(store.remove(&keys[1]).await.unwrap());
    assert!(!store.remove(&keys[1]).await.unwrap(), "removed already");
    assert_eq!(store.get(&keys[1]).await.unwrap(), None);
    let left: HashSet<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.key)
        .collect();
    assert!(left.contains(&keys[0]) && left.contains(&keys[2]));
    assert!(!left.contains(&keys[1]));
}

/// `check` reads every print and names the damaged ones.
pub async fn check_finds_the_damaged<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, raw } = fresh().await;
    let (good, bad) = (unique_key("good"), unique_key("bad"));
    store.put(&good, &payload(1000, 7)).await.unwrap();
    store.put(&bad, &payload(1000, 8)).await.unwrap();
    let stored = raw.read(&bad).await;
    raw.write(&bad, stored[..stored.len() - 3].to_vec()).await;
    let checked = store.check().await.unwrap();
    let of = |key: &str| {
        checked
            .iter()
            .find(|c| c.info.key == key)
            .unwrap_or_else(|| panic!("{key} not checked"))
    };
    assert_eq!(of(&good).damage, None);
    assert!(of(&bad).damage.is_some());
}

/// `check` reads every print, but is not a use: every print's last-used time (the order of
/// eviction) is what it was before.
pub async fn check_is_not_a_use<F, Fut>(fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fresh>,
{
    let Fresh { store, .. } = fresh().await;
    let keys: Vec<String> = (0..3).map(|_| unique_key("check_use")).collect();
    for (i, key) in keys.iter().enumerate() {
        store.put(key, &payload(500, i as u8)).await.unwrap();
    }
    let used = |listed: Vec<crate::PrintInfo>| {
        keys.iter()
            .map(|k| {
                listed
                    .iter()
                    .find(|p| &p.key == k)
                    .unwrap_or_else(|| panic!("{k} not listed"))
                    .used
            })
            .collect::<Vec<_>>()
    };
    let before = used(store.list().await.unwrap());
    let checked = store.check().await.unwrap();
    assert!(checked.iter().all(|c| c.damage.is_none()), "{checked:?}");
    let after = used(store.list().await.unwrap());
    assert_eq!(before, after, "last used after a check");
}
