//! End-to-end tests of the `archivist` binary across processes on the database bus, with no
//! bus configured at all (the default: queues in the datastore's own database): the pipeline
//! (`common::pipeline`) on an SQLite file and on a fresh Postgres database; work assignment
//! following the researchers the bus counts; and crashes (SIGKILL at a fail point inside the
//! transactions that lease and publish, record and acknowledge, store and acknowledge) that
//! leave nothing half done.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::pipeline::{pipeline, Scenario};
use common::PgDatabase;

#[test]
fn pipeline_across_processes_on_the_sqlite_bus() {
    let s = Scenario::database(None);
    pipeline(&s);
    assert!(s.path().join("archive.sqlite").exists());
}

#[test]
fn pipeline_across_processes_on_the_postgres_bus() {
    let db = PgDatabase::create();
    let s = Scenario::database(Some(&db.url));
    pipeline(&s);
}
