//! `research --exec CMD [ARGS…]`: the analyser as a child process per work item.
//!
//! The child gets the item on standard input (then end of file), writes the protocol's lines
//! on standard output, and anything on standard error goes to the log (a line at a time, with
//! the lease). It runs in a process group of its own, so that stopping it (SIGTERM, then
//! SIGKILL after the grace period) also stops what a shell script started.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use super::analyser::{Analyser, Ending, Run};
use super::protocol::MAX_LINE_BYTES;

/// The exit code that asks for the item to be tried again later (sysexits' EX_TEMPFAIL).
pub(crate) const EXIT_TRY_LATER: i32 = 75;

/// Runs `program` with `args` per work item.
pub(crate) struct ExecAnalyser {
    program: String,
    args: Vec<String>,
    /// Between SIGTERM and SIGKILL.
    grace: Duration,
}

impl ExecAnalyser {
    pub(crate) fn new(command: &[String], grace: Duration) -> anyhow::Result<Self> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| crate::config::usage("--exec needs a command"))?;
        Ok(ExecAnalyser {
            program: program.clone(),
            args: args.to_vec(),
            grace,
        })
    }
}

#[async_trait]
impl Analyser for ExecAnalyser {
    async fn start(&self, input: Vec<u8>, lease: &str) -> anyhow::Result<Box<dyn Run>> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start the analyser {:?}", self.program))?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .context("the analyser's standard output")?;
        if let Some(mut stdin) = stdin {
            // A child that exits without reading all of it is its own business: its exit
            // code says how it went.
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            });
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(log_stderr(stderr, lease.to_string()));
        }
        Ok(Box::new(ExecRun {
            child,
            stdout: BufReader::new(stdout),
            buffer: Vec::new(),
            grace: self.grace,
        }))
    }

    fn describe(&self) -> String {
        format!("exec {}", self.program)
    }
}

/// Standard error, a line at a time, to the log.
async fn log_stderr(stderr: impl AsyncRead + Unpin, lease: String) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(lease = %lease, "analyser: {}", super::protocol::truncate(&line, 2000));
    }
}

struct ExecRun {
    child: Child,
    stdout: BufReader<ChildStdout>,
    /// The line read so far (kept across cancelled calls).
    buffer: Vec<u8>,
    grace: Duration,
}

#[async_trait]
impl Run for ExecRun {
    async fn next_line(&mut self) -> anyhow::Result<Option<String>> {
        loop {
            let available = self
                .stdout
                .fill_buf()
                .await
                .context("reading the analyser's output")?;
            if available.is_empty() {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                // A last line without its newline still counts.
                return Ok(Some(take_line(&mut self.buffer)?));
            }
            if let Some(end) = available.iter().position(|&b| b == b'\n') {
                self.buffer.extend_from_slice(&available[..end]);
                self.stdout.consume(end + 1);
                check_length(self.buffer.len())?;
                return Ok(Some(take_line(&mut self.buffer)?));
            }
            let n = available.len();
            self.buffer.extend_from_slice(available);
            self.stdout.consume(n);
            check_length(self.buffer.len())?;
        }
    }

    async fn finish(mut self: Box<Self>) -> Ending {
        match self.child.wait().await {
            Ok(status) => match status.code() {
                Some(0) => Ending::Done,
                Some(EXIT_TRY_LATER) => {
                    Ending::TryLater(format!("the analyser exited with {EXIT_TRY_LATER}"))
                }
                Some(code) => Ending::Failed(format!("the analyser exited with code {code}")),
                None => {
                    use std::os::unix::process::ExitStatusExt;
                    Ending::Failed(format!(
                        "the analyser was killed by signal {}",
                        status.signal().unwrap_or(0)
                    ))
                }
            },
            Err(e) => Ending::Failed(format!("cannot wait for the analyser: {e}")),
        }
    }

    async fn stop(mut self: Box<Self>) {
        let group = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw);
        let Some(group) = group else {
            // Exited already.
            let _ = self.child.wait().await;
            return;
        };
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
        match tokio::time::timeout(self.grace, self.child.wait()).await {
            Ok(_) => {
                // What the group's other members still run goes too.
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            Err(_) => {
                tracing::warn!(
                    grace = %humantime::format_duration(self.grace),
                    "the analyser did not stop on SIGTERM: SIGKILL"
                );
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                let _ = self.child.wait().await;
            }
        }
    }
}

fn check_length(len: usize) -> anyhow::Result<()> {
    if len > MAX_LINE_BYTES {
        anyhow::bail!("the analyser wrote a line longer than {MAX_LINE_BYTES} bytes");
    }
    Ok(())
}

fn take_line(buffer: &mut Vec<u8>) -> anyhow::Result<String> {
    let bytes = std::mem::take(buffer);
    let mut line = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("the analyser wrote a line that is not UTF-8"))?;
    if line.ends_with('\r') {
        line.pop();
    }
    Ok(line)
}
