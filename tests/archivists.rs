//! The four archivists against the in-memory bus and an SQLite datastore in a temporary
//! directory: happy paths, poison, passing and lasting datastore failures, cancellation,
//! work assignment, result recording, and whole-pipeline round trips.
//!
//! Nothing here sleeps to wait for work: every run is awaited through its done channel, and
//! fault injection (failing stores and senders, a receiver that reports when it waits) is done
//! with the wrappers in `archivists/common.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "archivists/common.rs"]
mod common;
#[path = "archivists/completed.rs"]
mod completed;
#[path = "archivists/ingest.rs"]
mod ingest;
#[path = "archivists/pending.rs"]
mod pending;
#[path = "archivists/round_trip.rs"]
mod round_trip;
