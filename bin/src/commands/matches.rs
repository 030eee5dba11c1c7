//! `archivist matches`: recorded matches as JSON lines.

use std::io::Write;

use anyhow::Context;
use datastore::MatchFilter;
use tokio_util::sync::CancellationToken;

use crate::cli::MatchesArgs;
use crate::config::Config;
use crate::connect;

/// Prints one JSON object a line: `episode_title`, `episode_date_aired`, `clip_title`,
/// `clip_offsets_ns`, `research_date`.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &MatchesArgs,
) -> anyhow::Result<()> {
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    let filter = MatchFilter {
        clip_title: args.clip.clone(),
        episode_title: args.episode.clone(),
        limit: args.limit,
    };
    let matches = store
        .matches(&filter)
        .await
        .context("cannot read the matches")?;
    let mut out = std::io::stdout().lock();
    for m in &matches {
        serde_json::to_writer(&mut out, m)?;
        writeln!(out)?;
    }
    out.flush()?;
    tracing::debug!(count = matches.len(), "matches listed");
    Ok(())
}
