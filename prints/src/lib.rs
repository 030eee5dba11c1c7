//! Where researchers keep episode prints: a [`PrintStore`], in a directory ([`DirStore`], the
//! default: under the user's cache directory, kept across restarts) or on S3 ([`S3Store`],
//! `s3://bucket/prefix`, shared by every researcher of a fleet).
//!
//! A print (what crate `analysis` keeps of an episode so that a later clip is found in it
//! without its audio) is opaque bytes here. The store wraps each in an envelope of its own
//! ([`envelope`]): a magic string, the payload's length and its SHA-256. A print that was
//! damaged or cut short where it is kept is reported as such ([`StoreError::Damaged`]) by
//! [`PrintStore::get`], never returned.
//!
//! Prints are named by a [key](print_key): the SHA-256 (lowercase hex) of the episode's media
//! URI, so that every researcher finds the print of an episode under the same name.
//!
//! What every store promises (the conformance suite, [`testing`] with the feature
//! `test-utils`, checks each adapter):
//!
//! - [`put`](PrintStore::put) is atomic: a reader sees the old print or the new one, whole,
//!   never half of one; two writers at once are harmless (the last whole write wins).
//! - [`get`](PrintStore::get) returns the payload as it was put, checked against its
//!   envelope, or `None` when there is none.
//! - [`list`](PrintStore::list), [`remove`](PrintStore::remove), [`check`](PrintStore::check).
//!
//! [`open`] makes a store from what a user gives (`--print-store`, `ARCHIVIST_PRINT_STORE`):
//! `s3://bucket/prefix`, a `file://` URL or a path.
//!
//! # Layout
//!
//! - `store.rs`: [`PrintStore`], [`PrintInfo`], [`Checked`], [`StoreError`], [`print_key`].
//! - `envelope.rs`: [`envelope::wrap`], [`envelope::unwrap`].
//! - `dir.rs`: [`DirStore`]: temporary file and rename; a size bound with eviction of the
//!   least recently used.
//! - `s3.rs`: [`S3Store`] through `aws-sdk-s3`.
//! - `open.rs`: [`open`], [`StoreOptions`], [`default_dir`].
//! - `testing.rs` (feature `test-utils`): the conformance suite.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = prints::open(&dir.path().display().to_string(), &prints::StoreOptions::default()).await?;
//! let key = prints::print_key("https://example.com/4012.mp3");
//! assert_eq!(store.get(&key).await?, None);
//! store.put(&key, b"the print").await?;
//! assert_eq!(store.get(&key).await?.as_deref(), Some(&b"the print"[..]));
//! assert_eq!(store.list().await?.len(), 1);
//! assert!(store.remove(&key).await?);
//! # Ok(())
//! # }
//! ```

mod dir;
pub mod envelope;
mod open;
mod s3;
mod store;
#[cfg(feature = "test-utils")]
pub mod testing;

pub use dir::DirStore;
pub use open::{default_dir, open, StoreOptions, DEFAULT_MAX_BYTES};
pub use s3::S3Store;
pub use store::{check_key, print_key, Checked, PrintInfo, PrintStore, StoreError};
