//! The four archivists against the in-memory bus and an SQLite datastore in a temporary
//! directory: happy paths, poison, passing and lasting datastore failures, cancellation,
//! work assignment, result recording, and whole-pipeline round trips.
//!
//! Nothing here sleeps to wait for work: every run is awaited through its done channel, and
//! fault injection (failing stores and senders, a receiver that reports when it waits) is done
//! with the wrappers in `archivists/common.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod completed;
mod ingest;
mod pending;
mod round_trip;
