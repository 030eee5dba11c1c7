//! [`ExecAnalyser`] (`archivist research --exec CMD [ARGS…]`): the analyser as a child process
//! per work item.
//!
//! The child gets the item on standard input (then end of file), writes the protocol's lines
//! on standard output, and anything on standard error goes to the log: read as bytes, a line
//! at a time (`\n` or `\r` ends one, so a progress bar's updates are lines too), shown
//! lossily when it is not UTF-8, cut at [`STDERR_LINE_BYTES`], and read to the end whatever
//! it holds, so that the pipe never closes under a child that still writes. The last line
//! goes into the reason of a failed run.
//!
//! It runs in a process group of its own, so that stopping it (SIGTERM, then SIGKILL after
//! the grace period) also stops what a shell script started. Every way of giving up on a run
//! stops the group: [`Run::stop`], a failed exit (what it left behind goes with it), and
//! dropping the run unfinished (SIGKILL to the group: a task aborted at the shutdown timeout,
//! a future dropped by a timeout).

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::analyser::{Analyser, BoxError, Ending, Run};
use crate::protocol::MAX_LINE_BYTES;

/// The exit code that asks for the item to be tried again later (sysexits' EX_TEMPFAIL).
pub const EXIT_TRY_LATER: i32 = 75;
/// The longest line of standard error logged; the rest of a longer one is read and dropped.
pub const STDERR_LINE_BYTES: usize = 4096;
/// After the child exited, how long its standard error may take to reach its end (a child
/// of its own may hold it open): its last line goes into the reason of a failure.
const STDERR_TAIL_WAIT: Duration = Duration::from_millis(500);

/// Runs `program` with `args` per work item.
#[derive(Debug, Clone)]
pub struct ExecAnalyser {
    program: String,
    args: Vec<String>,
    /// Between SIGTERM and SIGKILL.
    grace: Duration,
}

impl ExecAnalyser {
    /// Runs `program` (looked up in `PATH` unless it is a path) with `args`; a run that is
    /// stopped gets SIGTERM, then SIGKILL after `grace` (`--kill-grace`).
    pub fn new(program: impl Into<String>, args: Vec<String>, grace: Duration) -> Self {
        ExecAnalyser {
            program: program.into(),
            args,
            grace,
        }
    }
}

#[async_trait]
impl Analyser for ExecAnalyser {
    async fn start(&self, input: Vec<u8>, lease: &str) -> Result<Box<dyn Run>, BoxError> {
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the analyser {:?}: {e}", self.program))?;
        // From here on, dropping the run (an error below included) stops the whole group.
        let mut group = GroupGuard::new(child);
        let child = &mut group.child;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or("the analyser's standard output")?;
        if let Some(mut stdin) = stdin {
            // A child that exits without reading all of it is its own business: its exit
            // code says how it went.
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            });
        }
        let last_words = Arc::new(Mutex::new(None));
        let stderr = child
            .stderr
            .take()
            .map(|stderr| tokio::spawn(log_stderr(stderr, lease.to_string(), last_words.clone())));
        Ok(Box::new(ExecRun {
            group,
            stdout: BufReader::new(stdout),
            buffer: Vec::new(),
            grace: self.grace,
            stderr,
            last_words,
        }))
    }

    fn describe(&self) -> String {
        format!("exec {}", self.program)
    }
}

/// Standard error, a line at a time, to the log; the last line kept in `last_words`.
async fn log_stderr(
    stderr: impl AsyncRead + Unpin,
    lease: String,
    last_words: Arc<Mutex<Option<String>>>,
) {
    let mut reader = BufReader::new(stderr);
    let mut lines = StderrLines::new(STDERR_LINE_BYTES);
    // Ends at the end of the pipe (every writer closed it) or on a read error (none is
    // expected from a pipe).
    while let Ok(Some(line)) = lines.next(&mut reader).await {
        tracing::info!(lease = %lease, "analyser: {line}");
        *last_words.lock().unwrap_or_else(PoisonError::into_inner) = Some(line);
    }
}

/// Splits a byte stream into lines at `\n` and `\r`, each cut at `cap` bytes (the rest of a
/// longer line is read and dropped), shown lossily where it is not UTF-8. Never holds more
/// than `cap` bytes, however long a line runs.
struct StderrLines {
    line: Vec<u8>,
    cap: usize,
    /// Inside a line already cut: bytes are dropped up to its end.
    cutting: bool,
}

impl StderrLines {
    fn new(cap: usize) -> Self {
        StderrLines {
            line: Vec::with_capacity(cap),
            cap,
            cutting: false,
        }
    }

    /// The next non-empty line; `None` at the end of the stream. A line longer than the cap
    /// is returned when it reaches the cap, and the rest of it dropped as it comes.
    async fn next(
        &mut self,
        reader: &mut (impl AsyncBufReadExt + Unpin),
    ) -> std::io::Result<Option<String>> {
        loop {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                self.cutting = false;
                if self.line.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(self.take(false)));
            }
            let end = available.iter().position(|&b| b == b'\n' || b == b'\r');
            let part = &available[..end.unwrap_or(available.len())];
            let used = end.map_or(available.len(), |e| e + 1);
            let mut cut = false;
            if !self.cutting {
                let room = self.cap - self.line.len();
                self.line.extend_from_slice(&part[..part.len().min(room)]);
                cut = part.len() > room;
            }
            reader.consume(used);
            if cut {
                // The rest of this line is dropped up to its end (unless it ends here).
                self.cutting = end.is_none();
                return Ok(Some(self.take(true)));
            }
            if end.is_some() {
                self.cutting = false;
                if !self.line.is_empty() {
                    return Ok(Some(self.take(false)));
                }
            }
        }
    }

    fn take(&mut self, cut: bool) -> String {
        let text = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        if cut {
            format!("{text}… (cut at {} bytes)", self.cap)
        } else {
            text
        }
    }
}

/// The analyser's process group, killed (SIGKILL) when this is dropped unless [`disarm`]ed:
/// a run given up on, however that happened, leaves nothing of the analyser running.
///
/// [`disarm`]: GroupGuard::disarm
struct GroupGuard {
    child: Child,
    group: Option<rustix::process::Pid>,
}

impl GroupGuard {
    fn new(child: Child) -> Self {
        // The child leads its group (`process_group(0)`): the group's id is its pid.
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw);
        GroupGuard { child, group }
    }

    fn kill(&self, signal: rustix::process::Signal) {
        if let Some(group) = self.group {
            let _ = rustix::process::kill_process_group(group, signal);
        }
    }

    /// The group is left alone from now on.
    fn disarm(&mut self) {
        self.group = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill(rustix::process::Signal::KILL);
    }
}

struct ExecRun {
    group: GroupGuard,
    stdout: BufReader<ChildStdout>,
    /// The line read so far (kept across cancelled calls).
    buffer: Vec<u8>,
    grace: Duration,
    /// The task logging standard error, and the last line it logged.
    stderr: Option<JoinHandle<()>>,
    last_words: Arc<Mutex<Option<String>>>,
}

impl ExecRun {
    /// The last line on standard error, once it ended (or after [`STDERR_TAIL_WAIT`]).
    async fn last_words(&mut self) -> Option<String> {
        if let Some(task) = self.stderr.take() {
            let _ = tokio::time::timeout(STDERR_TAIL_WAIT, task).await;
        }
        self.last_words
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[async_trait]
impl Run for ExecRun {
    async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
        loop {
            let available = self
                .stdout
                .fill_buf()
                .await
                .map_err(|e| format!("reading the analyser's output: {e}"))?;
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

    async fn finish(&mut self) -> Ending {
        let status = match self.group.child.wait().await {
            Ok(status) => status,
            Err(e) => return Ending::Failed(format!("cannot wait for the analyser: {e}")),
        };
        let failed = match status.code() {
            Some(0) => None,
            Some(EXIT_TRY_LATER) => {
                self.group.disarm();
                return Ending::TryLater(format!("the analyser exited with {EXIT_TRY_LATER}"));
            }
            Some(code) => Some(format!("the analyser exited with code {code}")),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Some(format!(
                    "the analyser was killed by signal {}",
                    status.signal().unwrap_or(0)
                ))
            }
        };
        let Some(why) = failed else {
            // It ended as it meant to: what it left running is its own business.
            self.group.disarm();
            return Ending::Done;
        };
        // What it left running goes with it.
        self.group.kill(rustix::process::Signal::KILL);
        self.group.disarm();
        match self.last_words().await {
            Some(words) => Ending::Failed(format!(
                "{why}; its last line on standard error: {}",
                crate::protocol::truncate(&words, 500)
            )),
            None => Ending::Failed(why),
        }
    }

    async fn stop(mut self: Box<Self>) {
        if self.group.group.is_none() {
            // Exited already.
            let _ = self.group.child.wait().await;
            return;
        }
        self.group.kill(rustix::process::Signal::TERM);
        if tokio::time::timeout(self.grace, self.group.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                grace = %humantime::format_duration(self.grace),
                "the analyser did not stop on SIGTERM: SIGKILL"
            );
            self.group.kill(rustix::process::Signal::KILL);
            let _ = self.group.child.wait().await;
        }
        // What the group's other members still run goes too (dropping the guard).
    }
}

fn check_length(len: usize) -> Result<(), BoxError> {
    if len > MAX_LINE_BYTES {
        return Err(format!("the analyser wrote a line longer than {MAX_LINE_BYTES} bytes").into());
    }
    Ok(())
}

fn take_line(buffer: &mut Vec<u8>) -> Result<String, BoxError> {
    let bytes = std::mem::take(buffer);
    let mut line =
        String::from_utf8(bytes).map_err(|_| "the analyser wrote a line that is not UTF-8")?;
    if line.ends_with('\r') {
        line.pop();
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// Every line `StderrLines` finds in `bytes`, checking after each that it holds no more
    /// than the cap.
    async fn lines_of(bytes: &[u8], cap: usize) -> Vec<String> {
        let mut reader = BufReader::with_capacity(8192, bytes);
        let mut lines = StderrLines::new(cap);
        let mut out = Vec::new();
        while let Some(line) = lines.next(&mut reader).await.unwrap() {
            assert!(
                lines.line.capacity() <= cap,
                "the buffer grew to {}",
                lines.line.capacity()
            );
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn a_mebibyte_without_a_newline_is_cut_and_the_next_line_still_read() {
        let mut bytes = vec![b'x'; 1 << 20];
        bytes.extend_from_slice(b"\nnext\n");
        let lines = lines_of(&bytes, STDERR_LINE_BYTES).await;
        assert_eq!(
            lines.len(),
            2,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(
            lines[0],
            format!(
                "{}… (cut at {STDERR_LINE_BYTES} bytes)",
                "x".repeat(STDERR_LINE_BYTES)
            )
        );
        assert_eq!(lines[1], "next");
    }

    #[tokio::test]
    async fn latin_1_and_carriage_returns_are_lines_shown_lossily() {
        let lines = lines_of(b"title: caf\xe9\r\n 10%\r 50%\r100%\nlast words", 64).await;
        assert_eq!(
            lines,
            ["title: caf\u{FFFD}", " 10%", " 50%", "100%", "last words"]
        );
    }
}
