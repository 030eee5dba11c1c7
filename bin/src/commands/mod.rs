//! The subcommands, one file per subcommand or group, and the dispatch between them.

pub(crate) mod analyse;
pub(crate) mod archivists;
pub(crate) mod curate;
mod matches;
mod migrate;
mod queues;
mod receive;
mod redrive;
pub(crate) mod research;
pub(crate) mod retry_failed;
mod send;
mod serve;
pub(crate) mod status;

use tokio_util::sync::CancellationToken;

use crate::cli::Command;
use crate::config::Config;

/// Runs `command`. An error carrying a [`crate::values::UsageError`] exits 2, any other 1.
pub(crate) async fn dispatch(
    command: Command,
    config: Config,
    token: CancellationToken,
) -> anyhow::Result<()> {
    match command {
        Command::Migrate => migrate::run(&config, &token).await,
        Command::Episodes(args) => archivists::episodes(&config, token, args.once).await,
        Command::Clips(args) => archivists::clips(&config, token, args.once).await,
        Command::PendingResearch(args) => {
            archivists::pending_research(&config, token, args.every).await
        }
        Command::CompletedResearch(args) => {
            archivists::completed_research(&config, token, args.every).await
        }
        Command::Run(args) => archivists::run(&config, token, args.every).await,
        Command::Demo(args) => crate::demo::run(&config, token, &args).await,
        Command::Send(args) => send::run(&config, &token, &args).await,
        Command::Receive(args) => receive::run(&config, &token, &args).await,
        Command::Redrive(args) => redrive::run(&config, &token, &args).await,
        Command::Status(args) => status::run(&config, &token, args.json).await,
        Command::Matches(args) => matches::run(&config, &token, &args).await,
        Command::Queues(args) => queues::run(&config, &token, args.json, args.update).await,
        Command::Serve(args) => serve::run(&config, &token, args.addr).await,
        Command::Curate(args) => curate::run(&config, token, args).await,
        Command::Analyse(args) => analyse::run(&args, &token).await,
        Command::RetryFailed(args) => retry_failed::run(&config, &token, &args).await,
        Command::Research(args) => research::run(&config, token, args).await,
        // Answered in main, before the configuration is read.
        Command::Completions(_) => Ok(()),
    }
}
