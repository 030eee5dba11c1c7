//! The archivists' tests (against the in-memory bus, SQLite and Postgres), the hostile-input
//! corpus and the fuzzers' findings through them, and the repository's own checks (the book's
//! links, parameterised SQL, the metrics' counts), in one test binary: one module a concern
//! (`cargo test -p archivist --all-features --test suite`; one module: `... archivists::`).

mod archivists;
mod book_links;
mod fuzz_replay;
mod hostile_input;
mod message_properties;
mod metrics_counts;
mod sql_is_parameterised;
