//! The media archive: each episode's media fetched from the show once, checked, and kept by
//! its SHA-256, so that every later pass (research, refinement ranges, prints, players) reads
//! the copy whose offsets were measured, whatever the show's host does later.
//!
//! A [`MediaArchive`] is a directory ([`DirArchive`]) or an S3 prefix ([`S3Archive`],
//! `s3://bucket/prefix`). It holds two things:
//!
//! - **copies**, each named by its SHA-256 and checked against it when it is kept and when it
//!   is read whole ([`MediaArchive::keep`], [`MediaArchive::copy_to`],
//!   [`MediaArchive::verify`]); ranges are read without a check ([`MediaArchive::read`]);
//! - **episodes**, each under its [key](episode_key) (from its title and airing date, not its
//!   URI): the [versions](Version) kept of its media and the one research answers for
//!   ([`EpisodeVersions`]).
//!
//! Nothing is ever removed by the archive: a damaged copy is reported, never deleted.
//!
//! # Layout (the same on disk and on S3, under the directory or the prefix)
//!
//! - `media/<first two digits>/<sha256>`: a copy, its bytes as fetched.
//! - `episodes/<key>.json`: an episode's [`EpisodeVersions`].
//! - `verify.json`: the last [`VerifyReport`].
//!
//! # Files
//!
//! - `store.rs`: [`MediaArchive`], [`ArchiveError`], [`CopyInfo`], [`Kept`], [`VerifyReport`].
//! - `versions.rs`: [`Version`], [`EpisodeVersions`], [`episode_key`].
//! - `dir.rs`: [`DirArchive`].
//! - `s3.rs`: [`S3Archive`] through `aws-sdk-s3`.
//! - `open.rs`: [`open`], from what a user gives (`--media-archive`,
//!   `ARCHIVIST_MEDIA_ARCHIVE`).
//! - `testing.rs` (feature `test-utils`): the conformance suite every adapter passes.

mod dir;
mod open;
mod s3;
mod store;
#[cfg(feature = "test-utils")]
pub mod testing;
mod versions;

pub use dir::DirArchive;
pub use open::open;
pub use s3::S3Archive;
pub use store::{check_key, ArchiveError, CopyInfo, Kept, MediaArchive, VerifyReport, MAX_READ};
pub use versions::{episode_key, EpisodeVersions, Version};
