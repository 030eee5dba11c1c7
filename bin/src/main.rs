//! The `archivist` command: parses the configuration, builds the bus and datastore adapters,
//! runs the chosen subcommand, and turns its outcome into the exit code of the contract.
//!
//! # Layout
//!
//! The files stand on floors, top first; each imports only from the floors below it (or,
//! inside `web/` and `demo/`, from its own folder, never in a circle). `tests/layering.rs`
//! holds the list and checks it.
//!
//! 1. `main.rs`: parses the command line, builds the configuration, starts the runtime and
//!    the chosen subcommand, and turns its outcome into the exit code of the contract.
//! 2. `cli.rs`: the top-level command line: the `Command` enum (one variant per subcommand)
//!    and its dispatch, and which global options each subcommand's `--help` lists.
//! 3. `commands/`: one file per subcommand: its options, help texts and wiring (connect the
//!    adapters, start the libraries, print). No file there imports another. `research.rs`
//!    wires the researcher runtime (crate `research`), `curate.rs` the curators (crate
//!    `curate`).
//! 4. `demo/`: the built-in curators (`curators.rs`, `clips.rs`, `audio.rs`) and researchers
//!    of `demo`, progress and summary.
//! 5. `archivists.rs`: the archivists' wiring, one copy for their five subcommands and the
//!    demo: shared options, the bus and datastore they open, spawning, the wait;
//!    `researcher.rs`: the researcher's, for `research` and the demo.
//! 6. `web/`: the HTTP server: the status page and its JSON API (`serve`, `run`), Prometheus
//!    `/metrics`, `/healthz`, `/readyz` (`--metrics-addr`).
//! 7. `connect.rs`: opening the datastore (with retries) and the bus; `tasks.rs`: waiting for
//!    archivists, repeating runs, supervising tasks until shutdown; `logging.rs`: logs on
//!    standard error; `signals.rs`: SIGINT/SIGTERM cancel the token; `depths.rs`: queue
//!    depths as `status`, `queues` and the status page show them.
//! 8. `config.rs`: the global options (each with its variable) and their checked
//!    configuration; `panic_hook.rs`: a panic printed as an error, credentials masked.
//! 9. `values.rs`: option values (durations, sizes, addresses), [`values::UsageError`] (exit
//!    code 2) and error words: imports nothing of the binary.

mod archivists;
mod cli;
mod commands;
mod config;
mod connect;
mod demo;
mod depths;
mod logging;
mod panic_hook;
mod researcher;
mod signals;
mod tasks;
mod values;
mod web;

use std::io::Write;
use std::process::ExitCode;

use clap::FromArgMatches;
use tokio_util::sync::CancellationToken;

use crate::cli::Cli;
use crate::config::Config;
use crate::values::{describe, UsageError};

/// Bad usage or configuration.
const EXIT_USAGE: u8 = 2;
/// A fatal error: the datastore or bus unreachable after retries, a failed run.
const EXIT_FATAL: u8 = 1;

fn main() -> ExitCode {
    // clap prints its own usage errors and exits with 2, help and version with 0.
    let matches = cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Completions need no configuration: print them before anything is read or checked.
    if let cli::Command::Completions(args) = &cli.command {
        return match commands::completions::print(args, cli::command()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&anyhow::Error::new(e)),
        };
    }
    panic_hook::install(&[
        cli.global.database_url.as_deref(),
        cli.global.bus_url.as_deref(),
    ]);
    if let Err(e) = logging::init(
        matches!(cli.command, cli::Command::Demo(_)),
        &cli.global.log_format,
    ) {
        return fail(&anyhow::Error::new(e));
    }
    let config = match Config::from_args(&cli.global) {
        Ok(mut c) => {
            // The demo takes a lease length from its own command line only: one exported
            // for production runs would stall it.
            c.lease_on_command_line = matches.value_source("lease_duration")
                == Some(clap::parser::ValueSource::CommandLine);
            c
        }
        Err(e) => return fail(&anyhow::Error::new(e)),
    };
    // Test-only: a bug that formats the whole configuration into a panic, the worst case the
    // panic hook must mask.
    #[cfg(feature = "fail-points")]
    if std::env::var("ARCHIVIST_FAIL_POINT").is_ok_and(|p| p == "panic") {
        #[allow(clippy::panic)]
        {
            panic!("fail point panic: {config:?}");
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    let outcome = runtime.block_on(async {
        let token = CancellationToken::new();
        signals::spawn(token.clone())?;
        // Test builds only (feature `fail-points`): a paused process goes on once signalled.
        messagebus::fail_point::resume_pauses_on(&token);
        cli.command.run(config, token).await
    });
    // Tasks still blocked on the bus after the shutdown timeout must not hold up the exit.
    runtime.shutdown_background();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Prints the error on standard error and picks the exit code.
fn fail(error: &anyhow::Error) -> ExitCode {
    // `archivist matches | head`: the reader has all it wanted.
    let broken_pipe = error.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    // A closed standard error ends the process quietly: there is nobody to tell.
    // The prefix clap uses for its own errors, so that every error reads alike.
    let _ = writeln!(std::io::stderr(), "error: {}", describe(error));
    // A token the API server refused is configuration: another token is the fix.
    if error.downcast_ref::<UsageError>().is_some() || values::refused_token(error) {
        ExitCode::from(EXIT_USAGE)
    } else {
        ExitCode::from(EXIT_FATAL)
    }
}
