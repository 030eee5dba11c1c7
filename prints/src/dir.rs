//! [`DirStore`]: prints as files in a directory.
//!
//! Each print is `<key>.print`. A write goes to a temporary file in the same directory
//! (`.<key>.<random>.tmp`), is flushed to disk, then renamed over `<key>.print`: a reader opens
//! the old file or the new one, never half of one, and of two writers the last rename wins.
//! A reader that opened a print keeps reading it whole even if it is replaced or evicted
//! meanwhile.
//!
//! *Last used* is the file's modification time: set when the print is written, and set again
//! (to the time of the read) each time it is read, except by a check (`prints check`), which
//! is not a use. (Access times are not used: most file
//! systems are mounted `relatime` or `noatime`, which do not keep them.) After each write, if
//! the prints together take more than the store's bound, the least recently used are removed
//! until they fit, never the one just written. Temporary files a crashed writer left are
//! removed then too, once an hour old.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::envelope;
use crate::store::{check_key, PrintInfo, PrintStore, StoreError};

/// The extension of a print's file.
const EXTENSION: &str = "print";
/// The extension of a write under way.
const TEMPORARY: &str = "tmp";
/// How old an abandoned temporary file must be before it is removed.
const STALE: Duration = Duration::from_secs(3600);

/// Prints as files in a directory, with a size bound (see the module's documentation).
#[derive(Debug, Clone)]
pub struct DirStore {
    dir: PathBuf,
    max_bytes: u64,
}

impl DirStore {
    /// The store in `dir` (created if missing, made absolute), keeping at most `max_bytes`
    /// of prints (the least recently used evicted past that).
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Result<DirStore, StoreError> {
        let given: PathBuf = dir.into();
        let config = |why: String| StoreError::Config {
            store: given.display().to_string(),
            why,
        };
        let dir = std::path::absolute(&given).map_err(|e| config(e.to_string()))?;
        std::fs::create_dir_all(&dir).map_err(|e| config(format!("cannot create it: {e}")))?;
        std::fs::read_dir(&dir).map_err(|e| config(format!("cannot read it: {e}")))?;
        Ok(DirStore { dir, max_bytes })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds (or would hold) the print under `key`.
    pub fn path_of(&self, key: &str) -> Result<PathBuf, StoreError> {
        Ok(self.dir.join(format!("{}.{EXTENSION}", check_key(key)?)))
    }

    fn unavailable(&self, what: &str, e: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable {
            store: self.describe(),
            why: format!("{what}: {e}"),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(DirStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(me))
            .await
            .map_err(|e| self.unavailable("stopped", e))?
    }

    fn put_now(&self, key: &str, print: &[u8]) -> Result<(), StoreError> {
        let path = self.path_of(key)?;
        let tmp = self.dir.join(format!(
            ".{key}.{}.{TEMPORARY}",
            uuid::Uuid::new_v4().simple()
        ));
        let written = (|| {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            file.write_all(&envelope::wrap(print))?;
            file.sync_all()?;
            // Precise, not the file system's coarse clock: the order of eviction.
            file.set_modified(SystemTime::now())?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.unavailable(&format!("cannot write {}", path.display()), e));
        }
        self.evict(key);
        Ok(())
    }

    /// The print under `key`; a use (its last-used time set to now) when `use_it`.
    fn get_now(&self, key: &str, use_it: bool) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path_of(key)?;
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.unavailable(&format!("cannot read {}", path.display()), e)),
        };
        let mut stored = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut stored)
            .map_err(|e| self.unavailable(&format!("cannot read {}", path.display()), e))?;
        // Last used: now (see the module's documentation); not for a check.
        if use_it {
            let _ = file.set_modified(SystemTime::now());
        }
        match envelope::unwrap(&stored) {
            Ok(payload) => Ok(Some(payload.to_vec())),
            Err(why) => Err(StoreError::Damaged {
                key: key.to_string(),
                why,
            }),
        }
    }

    fn list_now(&self) -> Result<Vec<PrintInfo>, StoreError> {
        let listing = std::fs::read_dir(&self.dir)
            .map_err(|e| self.unavailable("cannot list the directory", e))?;
        let mut out = Vec::new();
        for item in listing.flatten() {
            let path = item.path();
            let Some(key) = key_of(&path) else {
                continue;
            };
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            out.push(PrintInfo {
                key,
                size: meta.len(),
                used: meta.modified().ok().map(DateTime::<Utc>::from),
            });
        }
        Ok(out)
    }

    fn remove_now(&self, key: &str) -> Result<bool, StoreError> {
        let path = self.path_of(key)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.unavailable(&format!("cannot remove {}", path.display()), e)),
        }
    }

    /// Removes the least recently used prints (never `keep`) until the rest fit the bound,
    /// and temporary files abandoned long ago.
    fn evict(&self, keep: &str) {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut prints = Vec::new();
        let mut total = 0u64;
        for item in listing.flatten() {
            let path = item.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if path.extension().is_some_and(|x| x == TEMPORARY) {
                let stale = now.duration_since(modified).is_ok_and(|age| age >= STALE);
                if stale {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            let Some(key) = key_of(&path) else {
                continue;
            };
            if meta.is_file() {
                total += meta.len();
                if key != keep {
                    prints.push((modified, meta.len(), path));
                }
            }
        }
        if total <= self.max_bytes {
            return;
        }
        prints.sort();
        for (_, size, path) in prints {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(size);
                tracing::debug!(print = %path.display(), "evicted from the print store (least recently used)");
            }
        }
    }
}

/// The key of a print's file name, if `path` is one.
fn key_of(path: &Path) -> Option<String> {
    if path.extension()? != EXTENSION {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    check_key(stem).ok().map(str::to_string)
}

#[async_trait]
impl PrintStore for DirStore {
    async fn put(&self, key: &str, print: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        let (key, print) = (key.to_string(), print.to_vec());
        self.blocking(move |me| me.put_now(&key, &print)).await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let key = key.to_string();
        self.blocking(move |me| me.get_now(&key, true)).await
    }

    async fn inspect(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let key = key.to_string();
        self.blocking(move |me| me.get_now(&key, false)).await
    }

    async fn list(&self) -> Result<Vec<PrintInfo>, StoreError> {
        self.blocking(|me| me.list_now()).await
    }

    async fn remove(&self, key: &str) -> Result<bool, StoreError> {
        check_key(key)?;
        let key = key.to_string();
        self.blocking(move |me| me.remove_now(&key)).await
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}
