//! `archivist completions SHELL`: a shell completion script on standard output. It needs no
//! configuration: `main` answers it before anything is read or checked.

use std::io::Write;

use clap::Args;

/// `completions --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist completions bash > ~/.local/share/bash-completion/completions/archivist\n  \
        archivist completions zsh > \"${fpath[1]}/_archivist\"\n  \
        archivist completions fish > ~/.config/fish/completions/archivist.fish";

/// Options of `completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// Prints the completion script of `command` for `args.shell`.
pub(crate) fn print(args: &CompletionsArgs, mut command: clap::Command) -> std::io::Result<()> {
    // Into memory first: clap_complete panics on a failed write (`… | head`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "archivist", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).and_then(|()| out.flush())
}
