//! `archivist token create|list|revoke`: the API's bearer tokens (`serve --api`). A new token
//! is printed once, on standard output; only its hash is kept in the datastore.

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use datastore::TokenScope;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;

/// `token --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist token create --scope researcher --name gpu-box   # prints the token, once\n  \
        archivist token create --scope researcher --max-researchers 2\n  \
        archivist token list --json\n  \
        archivist token revoke gpu-box";

/// Options of `token`.
#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    pub(crate) action: TokenAction,
}

/// What to do with tokens.
#[derive(Debug, Subcommand)]
pub(crate) enum TokenAction {
    /// Make a new token and print it on standard output, one line: it is shown this once
    Create {
        /// What it may do: curator (send episodes and clips), researcher (take work, send
        /// results), reader (status, matches; the pages of `serve --api`)
        #[arg(long, value_parser = parse_scope)]
        scope: TokenScope,
        /// Its name, for `token list` and `token revoke` (default: the scope and a random
        /// suffix)
        #[arg(long)]
        name: Option<String>,
        /// The most researchers a researcher token counts as for the work-assignment rule,
        /// however many it runs or names
        #[arg(
            long,
            default_value_t = datastore::DEFAULT_MAX_RESEARCHERS,
            value_parser = clap::value_parser!(u32).range(1..=100_000)
        )]
        max_researchers: u32,
    },
    /// List the tokens in force: name, scope, created, last used (never the token)
    List {
        /// One JSON object a line (`name`, `scope`, `created`, `last_used`,
        /// `max_researchers`)
        #[arg(long)]
        json: bool,
    },
    /// Revoke the token named NAME: requests carrying it are refused from now on, its long
    /// polls end and the work items it holds are given back
    Revoke {
        /// The token's name
        name: String,
    },
}

fn parse_scope(s: &str) -> Result<TokenScope, String> {
    s.parse()
}

/// Runs `token …`.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &TokenArgs,
) -> anyhow::Result<()> {
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::Migrate,
    )
    .await?;
    let Some(access) = store.api_access() else {
        return Err(crate::values::usage("this datastore keeps no API tokens"));
    };
    let mut out = std::io::stdout().lock();
    match &args.action {
        TokenAction::Create {
            scope,
            name,
            max_researchers,
        } => {
            let issued = api::tokens::issue(
                access,
                name.clone(),
                *scope,
                *max_researchers,
                chrono::Utc::now(),
            )
            .await;
            let (name, secret) = match issued {
                Ok(issued) => issued,
                Err(api::ApiError::Usage(why)) => return Err(crate::values::usage(why)),
                Err(api::ApiError::DataStore(datastore::DataStoreError::Conflict(why))) => {
                    return Err(crate::values::usage(why))
                }
                Err(e) => return Err(anyhow::Error::new(e).context("cannot create the token")),
            };
            tracing::info!(%name, %scope, "token created (shown once, on standard output)");
            writeln!(out, "{secret}")?;
        }
        TokenAction::List { json } => {
            let tokens = access.tokens().await.context("cannot list the tokens")?;
            for t in &tokens {
                if *json {
                    serde_json::to_writer(&mut out, t)?;
                    writeln!(out)?;
                } else {
                    let last = t
                        .last_used
                        .map_or_else(|| "never".to_string(), |t| t.to_rfc3339());
                    let most = if t.scope == TokenScope::Researcher {
                        format!("\tat most {} researchers", t.max_researchers)
                    } else {
                        String::new()
                    };
                    writeln!(
                        out,
                        "{}\t{}\tcreated {}\tlast used {last}{most}",
                        t.name,
                        t.scope,
                        t.created.to_rfc3339()
                    )?;
                }
            }
        }
        TokenAction::Revoke { name } => {
            if !access
                .revoke_token(name)
                .await
                .context("cannot revoke the token")?
            {
                return Err(crate::values::usage(format!("no token named {name:?}")));
            }
            tracing::info!(%name, "token revoked");
            writeln!(out, "token {name:?} revoked")?;
        }
    }
    out.flush()?;
    Ok(())
}
