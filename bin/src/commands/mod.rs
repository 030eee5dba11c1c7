//! The subcommands, one file each: its options (clap), its help texts and its wiring. `cli.rs`
//! names them in its `Command` and dispatches to them; no file here imports another.

pub(crate) mod analyse;
pub(crate) mod archive;
pub(crate) mod clips;
pub(crate) mod completed_research;
pub(crate) mod completions;
pub(crate) mod curate;
pub(crate) mod demo;
pub(crate) mod episodes;
pub(crate) mod matches;
pub(crate) mod migrate;
pub(crate) mod pending_research;
pub(crate) mod prints;
pub(crate) mod queues;
pub(crate) mod receive;
pub(crate) mod redrive;
pub(crate) mod research;
pub(crate) mod retry_failed;
pub(crate) mod run;
pub(crate) mod send;
pub(crate) mod serve;
pub(crate) mod status;
pub(crate) mod token;
