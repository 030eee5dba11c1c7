//! The command line: the top-level [`Cli`] (the global options of `config.rs` and one
//! [`Command`]), the dispatch to each subcommand's file in `commands/`, and which global
//! options each subcommand's `--help` lists.
//!
//! Each subcommand's own options, help texts and wiring are in `commands/<subcommand>.rs`;
//! the global options, read as plain strings and checked with their variable's name, in
//! `config.rs`.

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::commands::{
    analyse, archive, clips, completed_research, completions, demo, episodes, matches, migrate,
    pending_research, prints, queues, receive, redrive, retry_failed, run, send, serve, status,
    token,
};
use crate::config::{Config, GlobalArgs};

/// The archivist: stores curated episodes and clips, hands research work to researchers a
/// lease at a time, and records what they find.
#[derive(Debug, Parser)]
#[command(name = "archivist", version, propagate_version = true)]
#[command(
    after_help = "Exit codes: 0 finished (poison messages set aside included), \
1 fatal error (datastore or bus unreachable after retries), 2 bad usage or configuration.\n\
Logs go to standard error (filter with RUST_LOG, default info); standard output carries only \
the command's output."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the datastore's schema, then exit
    Migrate,
    /// The episodes archivist: store curated episodes (long-running)
    Episodes(episodes::IngestArgs),
    /// The clips archivist: store curated clips (long-running)
    Clips(clips::IngestArgs),
    /// One work-assignment run: lease work and publish it to researchers, then exit (for cron)
    #[command(after_help = pending_research::EXAMPLES)]
    PendingResearch(pending_research::RepeatArgs),
    /// Drain the completed-research queue: record results, renew or end leases, then exit
    CompletedResearch(completed_research::RepeatArgs),
    /// All four archivists in one long-running process
    #[command(after_help = run::EXAMPLES)]
    Run(run::RunArgs),
    /// The whole pipeline with built-in curators and researchers, its queues in the datastore's
    /// database (ARCHIVIST_BUS=memory: inside the process), ending with a summary; the results
    /// stay in the datastore
    #[command(long_about = demo::ABOUT)]
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::DemoArgs),
    /// Publish each line of standard input (JSON) as one message to QUEUE
    // Not wrapped: an example message is one line, to be copied whole.
    #[command(after_help = send::EXAMPLES, term_width = 0)]
    Send(send::SendArgs),
    /// Take messages off QUEUE, print each body as one line, and acknowledge them
    #[command(after_help = receive::EXAMPLES)]
    Receive(receive::ReceiveArgs),
    /// Move QUEUE's dead letters back onto it (after the fault that set them aside is
    /// fixed), and say how many
    #[command(after_help = redrive::EXAMPLES)]
    Redrive(redrive::RedriveArgs),
    /// Counts of episodes, clips, pairs, researched pairs, matches, leases and queue depths
    #[command(after_help = status::EXAMPLES)]
    Status(status::StatusArgs),
    /// Recorded matches as JSON lines (episode, clip, offsets)
    #[command(after_help = matches::EXAMPLES)]
    Matches(matches::MatchesArgs),
    /// Create the queues and their dead-letter queues if missing, and show their depths
    Queues(queues::QueuesArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell
    #[command(after_help = completions::EXAMPLES)]
    Completions(completions::CompletionsArgs),
    /// Serve the status page, its JSON (/api/…), metrics and health checks on --addr until
    /// SIGINT/SIGTERM; reads only
    #[command(after_help = serve::EXAMPLES)]
    Serve(serve::ServeArgs),
    /// Curators: send one EpisodeInfo per audio item of podcast feeds (`curate feed URL…`),
    /// one ClipInfo per audio file (`curate clips PATH…`), each only when new or changed
    Curate(crate::commands::curate::CurateArgs),
    /// Where each clip occurs in an episode, found from the audio by the reference analyser
    /// (local files or URLs; no datastore, no bus)
    #[command(long_about = analyse::ABOUT)]
    #[command(after_help = analyse::EXAMPLES)]
    Analyse(analyse::AnalyseArgs),
    /// Make failed research pairs researchable again (all, or of --episode and/or --clip)
    #[command(after_help = retry_failed::EXAMPLES)]
    RetryFailed(retry_failed::RetryFailedArgs),
    /// A researcher: take work items off pending_research, fetch their media, run an analyser
    /// on each and send one result per clip to completed_research (long-running)
    #[command(long_about = crate::commands::research::ABOUT)]
    #[command(after_help = crate::commands::research::EXAMPLES)]
    Research(crate::commands::research::ResearchArgs),
    /// The API's bearer tokens (serve --api): create (printed once), list, revoke
    #[command(after_help = token::EXAMPLES)]
    Token(token::TokenArgs),
    /// List, check and remove the episode prints of a print store (--print-store)
    #[command(long_about = prints::ABOUT)]
    #[command(after_help = prints::EXAMPLES)]
    Prints(prints::PrintsArgs),
    /// The media archive (--media-archive): each episode's kept versions, verify every copy,
    /// the space used, export as a folder with an RSS feed, choose the version answered for
    #[command(long_about = archive::ABOUT)]
    #[command(after_help = archive::EXAMPLES)]
    Archive(archive::ArchiveArgs),
}

impl Command {
    /// Runs the subcommand. An error carrying a [`crate::values::UsageError`] exits 2, any
    /// other 1.
    pub(crate) async fn run(self, config: Config, token: CancellationToken) -> anyhow::Result<()> {
        match self {
            Command::Migrate => migrate::run(&config, &token).await,
            Command::Episodes(args) => episodes::run(&config, token, &args).await,
            Command::Clips(args) => clips::run(&config, token, &args).await,
            Command::PendingResearch(args) => pending_research::run(&config, token, &args).await,
            Command::CompletedResearch(args) => {
                completed_research::run(&config, token, &args).await
            }
            Command::Run(args) => run::run(&config, token, &args).await,
            Command::Demo(args) => demo::run(&config, token, &args).await,
            Command::Send(args) => send::run(&config, &token, &args).await,
            Command::Receive(args) => receive::run(&config, &token, &args).await,
            Command::Redrive(args) => redrive::run(&config, &token, &args).await,
            Command::Status(args) => status::run(&config, &token, &args).await,
            Command::Matches(args) => matches::run(&config, &token, &args).await,
            Command::Queues(args) => queues::run(&config, &token, &args).await,
            Command::Serve(args) => serve::run(&config, &token, &args).await,
            Command::Curate(args) => crate::commands::curate::run(&config, token, args).await,
            Command::Analyse(args) => analyse::run(&args, &token).await,
            Command::RetryFailed(args) => retry_failed::run(&config, &token, &args).await,
            Command::Research(args) => crate::commands::research::run(&config, token, args).await,
            Command::Token(args) => token::run(&config, &token, &args).await,
            Command::Prints(args) => prints::run(&args, &token).await,
            Command::Archive(args) => archive::run(&config, &token, &args).await,
            // Answered in main, before the configuration is read.
            Command::Completions(_) => Ok(()),
        }
    }
}

/// The configuration options each subcommand reads, by argument id: its `--help` lists only
/// these (the others are accepted, and ignored, so that one environment serves every command).
const USED_OPTIONS: &[(&str, &[&[&str]])] = &[
    ("migrate", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    (
        "episodes",
        &[
            DATASTORE,
            BUS,
            &["episodes_queue"],
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "clips",
        &[
            DATASTORE,
            BUS,
            &["clips_queue"],
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "pending-research",
        &[
            DATASTORE,
            BUS,
            &["pending_research_queue", "completed_research_queue"],
            LEASING,
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "completed-research",
        &[
            DATASTORE,
            BUS,
            &["completed_research_queue", "announce_queue"],
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "run",
        &[
            DATASTORE, BUS, QUEUES, LEASING, CONNECT, SHUTDOWN, METRICS, LOGS,
        ],
    ),
    (
        "demo",
        &[
            DATASTORE,
            BUS,
            QUEUES,
            &["lease_duration", "max_clips"],
            CONNECT,
            SHUTDOWN,
            LOGS,
        ],
    ),
    ("send", &[DATASTORE, BUS, CONNECT, LOGS]),
    ("receive", &[DATASTORE, BUS, CONNECT, LOGS]),
    ("redrive", &[DATASTORE, BUS, CONNECT, RETRY, LOGS]),
    ("status", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    ("matches", &[DATASTORE, CONNECT, LOGS]),
    ("queues", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    ("completions", &[]),
    ("serve", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    ("curate", crate::commands::curate::USED_OPTIONS),
    ("analyse", &[LOGS]),
    ("prints", &[LOGS]),
    ("archive", &[DATASTORE, CONNECT, LOGS]),
    ("retry-failed", &[DATASTORE, CONNECT, LOGS]),
    ("token", &[DATASTORE, CONNECT, LOGS]),
    (
        "research",
        &[
            DATASTORE,
            BUS,
            &["pending_research_queue", "completed_research_queue"],
            CONNECT,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
];
const DATASTORE: &[&str] = &["database_url"];
/// Subcommands that never create a datastore (a missing SQLite file is an error).
const READ_ONLY: &[&str] = &[
    "status", "matches", "serve", "send", "receive", "redrive", "archive",
];
const BUS: &[&str] = &["bus", "bus_url", "max_receives"];
const QUEUES: &[&str] = &[
    "episodes_queue",
    "clips_queue",
    "pending_research_queue",
    "completed_research_queue",
    "announce_queue",
];
const LEASING: &[&str] = &[
    "researchers",
    "lease_duration",
    "max_clips",
    "max_results_waiting",
    "start_jitter",
];
const CONNECT: &[&str] = &["connect_timeout"];
const SHUTDOWN: &[&str] = &["shutdown_timeout"];
const RETRY: &[&str] = &["retry_budget"];
const METRICS: &[&str] = &["metrics_addr"];
const LOGS: &[&str] = &["log_format"];

/// The command line, with each subcommand's help listing only the options it reads.
pub(crate) fn command() -> clap::Command {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    for (sub, groups) in USED_OPTIONS {
        let used: Vec<&str> = groups.iter().flat_map(|g| g.iter().copied()).collect();
        cmd = cmd.mut_subcommand(*sub, |mut c| {
            // A subcommand's own copy of a global option wins over the propagated one: a
            // hidden copy keeps it accepted (and read, with its variable) but out of --help;
            // global, so that it reaches nested subcommands (`curate feed`) too.
            for a in globals
                .iter()
                .filter(|a| !used.contains(&a.get_id().as_str()))
            {
                c = c.arg(a.clone().global(true).hide(true));
            }
            // Subcommands that never create the datastore say so.
            if READ_ONLY.contains(sub) {
                if let Some(a) = globals.iter().find(|a| a.get_id() == "database_url") {
                    c = c.arg(a.clone().global(false).help(
                        "The datastore: sqlite://PATH (an existing file: `archivist migrate` \
                         creates it) or postgres://USER@HOST/DB [default: \
                         sqlite://archivist.sqlite, in the working directory]",
                    ));
                }
            }
            c
        });
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
