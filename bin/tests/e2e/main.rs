//! The `archivist` binary's end-to-end tests, one module per command or concern, in one test
//! binary: each file used to be a test target of its own, and every one of them compiled the
//! shared helpers (`common/`) and linked the whole stack again (33 links of a binary that holds
//! sqlx, both AWS SDKs, lapin and reqwest). Run one module with
//! `cargo nextest run -p archivist-cli --test e2e analyse::` (or `cargo test -p archivist-cli
//! --test e2e analyse::`).

mod common;

mod analyse;
mod announce_e2e;
mod api_gateway;
mod api_remote;
mod api_tls;
mod archive_cli;
mod archive_pages;
mod browse_pages;
mod cli;
mod curate_e2e;
mod database_bus_e2e;
mod database_faults;
mod demo;
mod doc_examples;
mod hostile_input_e2e;
mod idle_logs;
mod kill_storm;
mod layering;
mod media_addresses;
mod media_archive;
mod metrics;
mod pages_sign_in;
mod postgres_tls;
mod print_research;
mod prints_e2e;
mod rabbitmq_e2e;
mod redrive;
mod reference_research;
mod remote;
mod remote_archive;
mod remote_reader;
mod research_e2e;
mod research_failures;
mod secrets_everywhere;
mod shutdown;
mod signals;
mod sqlite_faults;
mod sqs_e2e;
mod status_page;
mod your_own_show;
