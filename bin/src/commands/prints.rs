//! `archivist prints`: lists, checks and removes the episode prints of a print store (crate
//! `prints`); a table, or one JSON object a line with `--json`.

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::connect;
use crate::values::{usage, PrintStoreArgs};

/// `prints --help`'s long description.
pub(crate) const ABOUT: &str = "The episode prints of a print store (--print-store, \
ARCHIVIST_PRINT_STORE: a directory, or s3://bucket/prefix; by default the directory \
researchers use, under the user's cache directory). A print is what the reference analyser \
keeps of an episode so that a later clip is found in it without downloading and decoding \
the episode again; it is named by its key, the SHA-256 of the episode's media URI.\n\n\
`prints list` shows each print's key, size and when it was last used (the directory store: \
written or read; S3: written). `prints check` reads every print and checks it against its \
checksum; `--remove-damaged` removes those that fail (a researcher would not use them \
anyway). `prints remove` removes prints by key, by the episode's media URI (--uri), or \
all of them (--all): researchers print those episodes again when next they research them.";

/// `prints --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
    archivist prints list\n  \
    archivist prints list --json | jq -s 'map(.size) | add'\n  \
    archivist prints --print-store s3://my-bucket/prints check --remove-damaged\n  \
    archivist prints remove --uri https://example.com/4012.mp3\n\n\
Exit codes: 0 done (damaged prints found are counted, not an error), 1 the store could not \
be read, 2 bad usage (a key that is not one, a store that cannot be used as given).";

/// Options of `prints`.
#[derive(Debug, Args)]
pub(crate) struct PrintsArgs {
    #[command(flatten)]
    pub(crate) store: PrintStoreArgs,
    #[command(subcommand)]
    pub(crate) action: Action,
}

/// What to do with the prints.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Each print's key, size and when it was last used
    List {
        /// One JSON object a line: `key`, `size`, `used`
        #[arg(long)]
        json: bool,
    },
    /// Read every print and check it against its checksum
    Check {
        /// One JSON object a line: `key`, `size`, `used`, `damage` (null when whole)
        #[arg(long)]
        json: bool,
        /// Remove the damaged prints
        #[arg(long)]
        remove_damaged: bool,
    },
    /// Remove prints: by key, by the episode's media URI, or all
    Remove {
        /// Keys of the prints to remove (as `prints list` shows them)
        #[arg(conflicts_with = "all")]
        keys: Vec<String>,
        /// The media URI of an episode whose print to remove; repeat it for more
        #[arg(long = "uri", value_name = "MEDIA_URI", conflicts_with = "all")]
        uris: Vec<String>,
        /// Remove every print of the store
        #[arg(long)]
        all: bool,
    },
}

/// One print, as the JSON lines show it.
#[derive(Debug, Serialize)]
struct Line {
    key: String,
    size: u64,
    used: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    damage: Option<Option<String>>,
}

/// Runs `prints`.
pub(crate) async fn run(args: &PrintsArgs, token: &CancellationToken) -> anyhow::Result<()> {
    let Some(store) = connect::print_store(&args.store, true).await? else {
        return Err(usage("no print store"));
    };
    let work = async {
        match &args.action {
            Action::List { json } => {
                let mut prints = store.list().await?;
                prints.sort_by(|a, b| b.used.cmp(&a.used).then(a.key.cmp(&b.key)));
                let lines: Vec<Line> = prints
                    .into_iter()
                    .map(|p| Line {
                        key: p.key,
                        size: p.size,
                        used: p.used,
                        damage: None,
                    })
                    .collect();
                show(&lines, *json, &store.describe())
            }
            Action::Check {
                json,
                remove_damaged,
            } => {
                let mut checked = store.check().await?;
                checked.sort_by(|a, b| a.info.key.cmp(&b.info.key));
                let damaged = checked.iter().filter(|c| c.damage.is_some()).count();
                if *remove_damaged {
                    for c in checked.iter().filter(|c| c.damage.is_some()) {
                        store.remove(&c.info.key).await?;
                    }
                }
                let lines: Vec<Line> = checked
                    .into_iter()
                    .map(|c| Line {
                        key: c.info.key,
                        size: c.info.size,
                        used: c.info.used,
                        damage: Some(c.damage),
                    })
                    .collect();
                show(&lines, *json, &store.describe())?;
                let whole = lines.len() - damaged;
                let removed = if *remove_damaged { ", removed" } else { "" };
                eprintln!("{whole} whole, {damaged} damaged{removed}");
                Ok(())
            }
            Action::Remove { keys, uris, all } => {
                let mut targets: Vec<String> = Vec::new();
                for key in keys {
                    let key = ::prints::check_key(key).map_err(|e| usage(e.to_string()))?;
                    targets.push(key.to_string());
                }
                targets.extend(uris.iter().map(|uri| ::prints::print_key(uri)));
                if *all {
                    targets.extend(store.list().await?.into_iter().map(|p| p.key));
                } else if targets.is_empty() {
                    return Err(usage(
                        "name the prints to remove: KEY…, --uri MEDIA_URI, or --all",
                    ));
                }
                let mut removed = 0;
                for key in &targets {
                    if store.remove(key).await? {
                        removed += 1;
                    } else {
                        eprintln!("no print {key}");
                    }
                }
                eprintln!("removed {removed} print(s) from {}", store.describe());
                Ok(())
            }
        }
    };
    tokio::select! {
        done = work => done.with_context(|| format!("print store {}", store.describe())),
        () = token.cancelled() => anyhow::bail!("interrupted"),
    }
}

/// The lines as a table, or JSON lines.
fn show(lines: &[Line], json: bool, store: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        for line in lines {
            serde_json::to_writer(&mut out, line)?;
            out.write_all(b"\n")?;
        }
        return Ok(());
    }
    if lines.is_empty() {
        writeln!(out, "no prints in {store}")?;
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    let checked = lines.iter().any(|l| l.damage.is_some());
    let mut header = vec!["key", "size", "used"];
    if checked {
        header.push("check");
    }
    table.set_header(header);
    for line in lines {
        let mut row = vec![
            line.key.clone(),
            line.size.to_string(),
            line.used
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default(),
        ];
        if let Some(damage) = &line.damage {
            row.push(damage.clone().unwrap_or_else(|| "ok".into()));
        }
        table.add_row(row);
    }
    writeln!(out, "{table}")?;
    Ok(())
}
