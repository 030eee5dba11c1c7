//! `archivist demo`: the whole pipeline in one process with built-in curators and
//! researchers (`demo/`), ending with a summary.

use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::values::{parse_duration, MediaArchiveArgs};

/// `demo --help`'s description.
pub(crate) const ABOUT: &str = "The whole pipeline in one process: built-in curators send a month \
of a daily show's episodes and a dozen clips (and two poison messages), with their audio \
synthesised into files beside the datastore (archivist-demo-media/ for archivist.sqlite) and the \
truth of where each clip was put; built-in researchers (`research`'s runtime) run the reference \
analyser on it, one of them stalling mid-item on purpose so that its lease expires and its work \
is taken over, keeping each episode in a media archive (--media-archive, by default \
archivist-media/ in the working directory) and researching the kept copy; and the four \
archivists run as in production. Ends with a summary: the \
analyser's recall, false matches and offset error against the truth, and a check that every \
research pair was researched exactly once (exit 0 only then), and what the media archive \
holds.\n\n\
The datastore is DATABASE_URL, by default archivist.sqlite in the working directory; it must \
be new or empty (a demo never mixes with real data), and the results stay there to explore \
with `status`, `matches` and the status page (`serve`). The lease is 5s, so that the stalled \
item's work comes back quickly, unless --lease-duration is \
given on the command line (ARCHIVIST_LEASE_DURATION, meant for production runs, is ignored).";

/// `demo --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist demo                              # in ./archivist.sqlite, then: archivist status\n  \
        archivist demo --json | jq .matched_pairs\n  \
        DATABASE_URL=sqlite://try.sqlite archivist demo   # somewhere else (new or empty)";

/// Options of `demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Print the summary as one JSON object instead of text
    #[arg(long)]
    pub(crate) json: bool,
    /// Research slots of the built-in researcher (one item's analyser stalls on purpose)
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub(crate) researcher_tasks: u32,
    /// Give up if the pipeline has not finished within this long
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// The media archive the researchers keep the episodes in [default: archivist-media, in
    /// the working directory]
    #[command(flatten)]
    pub(crate) archive: MediaArchiveArgs,
}

/// Runs the demo.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &DemoArgs,
) -> anyhow::Result<()> {
    let settings = crate::demo::Settings {
        json: args.json,
        researcher_tasks: args.researcher_tasks,
        timeout: args.timeout,
        media_archive: args.archive.media_archive.clone(),
    };
    crate::demo::run(config, token, &settings).await
}
