//! [`PrintStore`] and what it answers with.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// What went wrong in a print store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The print under `key` is there but damaged or cut short: its envelope does not hold
    /// (a wrong length, a wrong checksum, not a print at all). Nothing was returned.
    #[error("the print {key} is damaged: {why}")]
    Damaged {
        /// The print's key.
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// Not a print key (64 lowercase hexadecimal digits, see [`print_key`]).
    #[error("not a print key: {0:?} (64 lowercase hexadecimal digits)")]
    BadKey(String),
    /// The store cannot be used as given (a bad URL, a directory that cannot be made).
    #[error("print store {store}: {why}")]
    Config {
        /// The store as given.
        store: String,
        /// What is wrong.
        why: String,
    },
    /// Reading or writing the store failed (a disk error, S3 unreachable or refusing);
    /// trying again later may work.
    #[error("print store {store}: {why}")]
    Unavailable {
        /// The store, as [`PrintStore::describe`] names it.
        store: String,
        /// What happened, without secrets.
        why: String,
    },
}

/// One print of a store, as [`PrintStore::list`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrintInfo {
    /// Its key (see [`print_key`]).
    pub key: String,
    /// The bytes it takes in the store (the envelope included).
    pub size: u64,
    /// When it was last written, or (the directory store) last read: the order of eviction.
    pub used: Option<DateTime<Utc>>,
}

/// One print of a store, as [`PrintStore::check`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The print.
    pub info: PrintInfo,
    /// `None` when it is whole; else what is wrong with it.
    pub damage: Option<String>,
}

/// Where episode prints are kept. Implementations: [`crate::DirStore`], [`crate::S3Store`].
#[async_trait]
pub trait PrintStore: Send + Sync + std::fmt::Debug {
    /// Keeps `print` under `key`, replacing what was there. Atomic: a reader sees the old
    /// print or the new one, whole; of two writers at once, the last whole write wins.
    async fn put(&self, key: &str, print: &[u8]) -> Result<(), StoreError>;

    /// The print under `key` as it was put, checked; `None` if there is none;
    /// [`StoreError::Damaged`] if it is damaged or cut short.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Every print of the store, in no particular order.
    async fn list(&self) -> Result<Vec<PrintInfo>, StoreError>;

    /// Removes the print under `key`; whether there was one.
    async fn remove(&self, key: &str) -> Result<bool, StoreError>;

    /// The print under `key`, read and checked as [`PrintStore::get`] does, without counting
    /// as a use: its last-used time (the order of eviction) stays as it was. By default
    /// [`PrintStore::get`], for a store whose reads are not uses (S3: last used is when it
    /// was written); a store that counts reads as uses overrides it.
    async fn inspect(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(key).await
    }

    /// Every print of the store, each read and checked against its envelope. Checking is not
    /// using: no print's last-used time changes ([`PrintStore::inspect`]).
    async fn check(&self) -> Result<Vec<Checked>, StoreError> {
        let mut out = Vec::new();
        for info in self.list().await? {
            let damage = match self.inspect(&info.key).await {
                Ok(_) => None,
                Err(StoreError::Damaged { why, .. }) => Some(why),
                Err(e) => return Err(e),
            };
            out.push(Checked { info, damage });
        }
        Ok(out)
    }

    /// Names the store in logs and messages (never a secret), as `s3://bucket/prefix` or a
    /// directory.
    fn describe(&self) -> String;
}

/// The key of the print of the episode whose media is at `media_uri`: the SHA-256 of the URI
/// as given, in lowercase hexadecimal (64 digits). The same media URI gives the same key on
/// every researcher; whether the media there is still what was printed is the print's to say.
pub fn print_key(media_uri: &str) -> String {
    hex(&Sha256::digest(media_uri.as_bytes()))
}

/// `key` if it is a print key (64 lowercase hexadecimal digits), else [`StoreError::BadKey`]:
/// what names a file or an object is never anything else.
pub fn check_key(key: &str) -> Result<&str, StoreError> {
    let ok = key.len() == 64
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(key)
    } else {
        Err(StoreError::BadKey(key.chars().take(80).collect()))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_the_uri_hash() {
        let key = print_key("https://example.com/4012.mp3");
        assert_eq!(key.len(), 64);
        assert_eq!(check_key(&key).unwrap(), key);
        assert_ne!(key, print_key("https://example.com/4013.mp3"));
        assert_eq!(
            print_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        for bad in [
            "",
            "../x",
            &key.to_uppercase(),
            &key[1..],
            &format!("{key}0"),
        ] {
            assert!(
                matches!(check_key(bad), Err(StoreError::BadKey(_))),
                "{bad}"
            );
        }
    }
}
