//! `archivist retry-failed`: makes failed research pairs researchable again (the contract's
//! *Failed research*), all of them or those of an episode title and/or a clip title.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;

/// `retry-failed --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist status                            # failed pairs and their common reasons\n  \
        archivist retry-failed --episode 'Episode 4012: The Archive'\n  \
        archivist retry-failed --json               # every failed pair";

/// Options of `retry-failed`.
#[derive(Debug, Args)]
pub(crate) struct RetryFailedArgs {
    /// Only the failed pairs of episodes with this title (any air date)
    #[arg(long)]
    pub(crate) episode: Option<String>,
    /// Only the failed pairs of the clip with this title
    #[arg(long)]
    pub(crate) clip: Option<String>,
    /// Print one JSON object (`retried`, `episode`, `clip`) instead of a sentence
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Serialize)]
struct Summary<'a> {
    /// Failed pairs made researchable again.
    retried: u64,
    episode: Option<&'a str>,
    clip: Option<&'a str>,
}

/// Forgets the failed pairs asked for; the next work-assignment runs lease them again.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &RetryFailedArgs,
) -> anyhow::Result<()> {
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::Migrate,
    )
    .await?;
    let episode = args.episode.as_deref();
    let clip = args.clip.as_deref();
    let retried = store
        .retry_failed(episode, clip)
        .await
        .context("cannot retry the failed pairs")?;
    tracing::info!(
        retried,
        episode,
        clip,
        "failed pairs made researchable again"
    );
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(
            &mut out,
            &Summary {
                retried,
                episode,
                clip,
            },
        )?;
        writeln!(out)?;
    } else {
        let scope = match (episode, clip) {
            (None, None) => String::new(),
            (Some(e), None) => format!(" of episode {e:?}"),
            (None, Some(c)) => format!(" of clip {c:?}"),
            (Some(e), Some(c)) => format!(" of episode {e:?} and clip {c:?}"),
        };
        writeln!(
            out,
            "{retried} failed pair(s){scope} made researchable again; the next \
             pending-research run leases them"
        )?;
    }
    out.flush()?;
    Ok(())
}
