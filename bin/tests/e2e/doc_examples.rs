//! The README's and the book's shell examples, run as written.
//!
//! - The README's two commands (its first block): `cargo run -p archivist-cli -- demo` is run
//!   (with `cargo run -p archivist-cli --` standing for this test's build of the binary, so
//!   that nothing is built again), and must end with the demo's exactly-once check passing.
//!   `scripts/test.sh`, the whole suite, is this test's own caller and is not run again: the
//!   test checks that the script exists, is executable, parses (`bash -n`, which runs
//!   nothing), and is what CI (`.ci/run`) runs.
//! - Every fenced block whose info string is `sh test` (mdBook and GitHub show it as `sh`):
//!   run whole with `bash -euo pipefail`, the blocks of one file in order in one working
//!   directory, with `archivist` (this build) first on PATH and HOME, the XDG directories
//!   and TMPDIR inside the test's temporary directory. The README's blocks run where its
//!   demo ran, as a newcomer following it would. A block that starts a server in the
//!   background waits for it itself, with a bounded loop on what it needs.
//! - *Try it on the demo's show* (README): the matches it prints must be the ones the demo
//!   recorded for the same episodes and clips, within a millisecond.
//!
//! Each script runs in a process group of its own, killed when it ends: what a failed block
//! left running goes with it, and a block that passed must have left nothing. A test stops
//! its scripts by [`DEADLINE`], before nextest would end the test itself (10 minutes for this
//! binary in `.config/nextest.toml`), which would leave the scripts' groups running.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest a test's scripts may take together (the demo takes ~15 s, the show's block
/// ~5 s; each bounds its own waits).
const DEADLINE: Duration = Duration::from_secs(480);

/// Offsets found from the same audio by the same analyser: equal, but for rounding.
const TOLERANCE_NS: i64 = 1_000_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// A fenced block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// The file (relative to the repository) and the line of its opening fence.
    at: String,
    info: String,
    text: String,
}

impl Block {
    /// Marked to be run: its info string is `sh test` (or `sh,test`).
    fn runnable(&self) -> bool {
        let words: Vec<&str> = self
            .info
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .collect();
        words == ["sh", "test"]
    }
}

fn blocks(relative: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join(relative)).unwrap();
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in text.lines().enumerate() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => found.push(block),
            (Some(info), None) => {
                open = Some(Block {
                    at: format!("{relative}:{}", n + 1),
                    info: info.trim().to_string(),
                    text: String::new(),
                })
            }
            (None, Some(mut block)) => {
                block.text.push_str(line);
                block.text.push('\n');
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "{relative}: a fence is not closed");
    found
}

/// A temporary home for the examples: `bin/` (first on PATH), `home/`, `work/`.
struct Sandbox {
    dir: tempfile::TempDir,
    deadline: Instant,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        for sub in ["bin", "home", "tmp", "work"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_archivist"), bin.join("archivist")).unwrap();
        // The README runs the binary with `cargo run -p archivist-cli -- …`: here that is the
        // binary this test was built with. Any other cargo command is refused.
        let cargo = bin.join("cargo");
        std::fs::write(
            &cargo,
            "#!/usr/bin/env bash\n\
             if [ \"$#\" -ge 4 ] && [ \"$1 $2 $3 $4\" = 'run -p archivist-cli --' ]; then\n  \
               shift 4; exec archivist \"$@\"\n\
             fi\n\
             echo \"doc_examples: only 'cargo run -p archivist-cli -- …' runs here, not: cargo $*\" >&2\n\
             exit 97\n",
        )
        .unwrap();
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        Sandbox {
            dir,
            deadline: Instant::now() + DEADLINE,
        }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// Runs `script` with `bash -euo pipefail` in `work/` (or `cwd`), its outputs in files;
    /// kills whatever it leaves running. Returns (exit code, stdout, stderr).
    fn run(&self, name: &str, script: &str, cwd: &Path) -> (Option<i32>, String, String) {
        let file = self.path(&format!("{name}.sh"));
        std::fs::write(&file, on_free_ports(script)).unwrap();
        let out = self.path(&format!("{name}.stdout"));
        let err = self.path(&format!("{name}.stderr"));
        let home = self.path("home");
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("bash")
            .args(["-euo", "pipefail"])
            .arg(&file)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("TMPDIR", self.path("tmp"))
            .env("LANG", "C.UTF-8")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let group = child.id();
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait().unwrap();
            let _ = tx.send(());
            status
        });
        let left_for_it = self.deadline.saturating_duration_since(Instant::now());
        let in_time = rx.recv_timeout(left_for_it).is_ok();
        // A block that passed stopped what it started: nothing of its group is left.
        let left = in_time
            && Command::new("kill")
                .args(["-0", "--", &format!("-{group}")])
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success();
        // Whatever is left of the group: servers a failed block did not stop (none when
        // it passed), or the whole block when it overran.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .stderr(Stdio::null())
            .status();
        let status = waiter.join().unwrap();
        let stdout = std::fs::read_to_string(&out).unwrap();
        let stderr = std::fs::read_to_string(&err).unwrap();
        assert!(
            in_time,
            "{name} did not finish within the test's {DEADLINE:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
        assert!(
            !(left && status.success()),
            "{name} exited 0 but left processes running (killed now)\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
        (status.code(), stdout, stderr)
    }

    /// Runs a marked block; panics with its outputs (and the logs it wrote) unless it exits 0.
    fn run_block(&self, name: &str, block: &Block, cwd: &Path) -> String {
        let (code, stdout, stderr) = self.run(name, &block.text, cwd);
        if code != Some(0) {
            panic!(
                "{} exited with {code:?}\n--- the block\n{}--- stdout\n{stdout}\n--- stderr\n{stderr}\n{}",
                block.at,
                block.text,
                logs(cwd)
            );
        }
        stdout
    }
}

/// The docs' fixed ports (8000 for the served show, 9898 for the status page and metrics), as
/// a newcomer types them, moved to free ones: another test, or another program of the
/// machine's, may hold those ports while this one runs.
fn on_free_ports(script: &str) -> String {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap()
    };
    let (show, page) = (free(), free());
    script
        .replace(":8000", &format!(":{show}"))
        .replace(" 8000 ", &format!(" {show} "))
        .replace(":9898", &format!(":{page}"))
}

/// The `*.log` files a block wrote (in `dir` and one level down), for a failure's message.
fn logs(dir: &Path) -> String {
    let mut found = String::new();
    let mut dirs = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "log") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                found.push_str(&format!("--- {}\n{text}\n", p.display()));
            }
        }
    }
    found
}

/// The commands of a block, one a line, without their comments.
fn commands(block: &Block) -> Vec<String> {
    block
        .text
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `archivist matches` (JSON lines) in `dir`: (episode title, clip title) to offsets.
fn matches(sandbox: &Sandbox, dir: &Path) -> BTreeMap<(String, String), Vec<i64>> {
    let (code, stdout, stderr) = sandbox.run("matches", "archivist matches\n", dir);
    assert_eq!(
        code,
        Some(0),
        "archivist matches in {}: {stderr}",
        dir.display()
    );
    stdout
        .lines()
        .map(|l| {
            let m: Value = serde_json::from_str(l).unwrap();
            let offsets = m["clip_offsets_ns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_i64().unwrap())
                .collect();
            (
                (
                    m["episode_title"].as_str().unwrap().to_string(),
                    m["clip_title"].as_str().unwrap().to_string(),
                ),
                offsets,
            )
        })
        .collect()
}

/// A title reduced to its letters and digits, lower case: the demo's clip `Let's Get Into
/// It` and its file `lets-get-into-it.wav` (titled by its name) agree on `letsgetintoit`.
fn key(title: &str) -> String {
    title
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Checks *Try it on the demo's show*: it ran in `show` (`work/my-show`), on episodes of the
/// demo that ran in `work`. What it printed and recorded must be what the demo recorded for
/// those episodes.
fn check_the_demo_show(sandbox: &Sandbox, printed: &str, work: &Path, show: &Path) {
    let feed = std::fs::read_to_string(show.join("site/show.xml")).unwrap();
    // The feed's episodes, `Episode 3985`…: the demo's are `Episode 3985: The …`.
    let served: Vec<String> = feed
        .split("<title>")
        .skip(1)
        .map(|t| t.split("</title>").next().unwrap().to_string())
        .filter(|t| t.starts_with("Episode "))
        .collect();
    assert!(!served.is_empty(), "no episodes in the feed:\n{feed}");

    let demo: BTreeMap<(String, String), Vec<i64>> = matches(sandbox, work)
        .into_iter()
        .filter_map(|((episode, clip), offsets)| {
            let short = episode.split(':').next().unwrap().to_string();
            served
                .contains(&short)
                .then(|| ((short, key(&clip)), offsets))
        })
        .collect();
    let ours: BTreeMap<(String, String), Vec<i64>> = matches(sandbox, show)
        .into_iter()
        .map(|((episode, clip), offsets)| ((episode, key(&clip)), offsets))
        .collect();
    assert!(
        demo.len() >= served.len(),
        "the demo matched too little in {served:?} to compare with: {demo:?}"
    );
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        demo.keys().collect::<Vec<_>>(),
        "the show's matched pairs against the demo's"
    );
    for (pair, want) in &demo {
        let got = &ours[pair];
        assert_eq!(got.len(), want.len(), "{pair:?}: {got:?} against {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= TOLERANCE_NS,
                "{pair:?}: {got:?} against {want:?}"
            );
        }
    }

    // The table the block printed: one row per matched pair, `| aired  Episode N  clip  at |`.
    let rows: Vec<(String, String)> = printed
        .lines()
        .filter_map(|l| l.trim().strip_prefix('|')?.strip_suffix('|'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 5 && w[1] == "Episode" && w[0].starts_with("20"))
        .map(|w| (format!("Episode {}", w[2]), key(w[3])))
        .collect();
    let mut printed_pairs = rows.clone();
    printed_pairs.sort();
    printed_pairs.dedup();
    assert_eq!(
        printed_pairs.len(),
        rows.len(),
        "a pair printed twice:\n{printed}"
    );
    assert_eq!(
        printed_pairs.iter().collect::<Vec<_>>(),
        demo.keys().collect::<Vec<_>>(),
        "the table printed:\n{printed}"
    );
}

#[test]
fn the_readme_commands_and_its_examples_run_as_written() {
    let sandbox = Sandbox::new();
    let work = sandbox.path("work");
    let readme = blocks("README.md");

    // The two commands at the top.
    let top = readme
        .iter()
        .find(|b| b.info == "sh")
        .expect("the README's first block");
    let top_commands = commands(top);
    assert!(
        top_commands.iter().any(|c| c.contains(" demo"))
            && top_commands.iter().any(|c| c == "scripts/test.sh"),
        "{}: the demo and the test command, found {top_commands:?}",
        top.at
    );
    for command in &top_commands {
        if command.starts_with("cargo run -p archivist-cli -- ") {
            let (code, stdout, stderr) = sandbox.run("top", &format!("{command}\n"), &work);
            assert_eq!(
                code,
                Some(0),
                "{command}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
            );
            assert!(
                stdout.lines().any(|l| l.trim_start().starts_with("check")
                    && l.contains("OK: every pair was researched exactly once")),
                "{command}: no passed check in its summary\n{stdout}"
            );
        } else if command == "scripts/test.sh" {
            // Not run: this test is part of what it runs.
            let script = repo().join(command);
            let mode = std::fs::metadata(&script)
                .unwrap_or_else(|e| panic!("{command}: {e}"))
                .permissions()
                .mode();
            assert!(mode & 0o111 != 0, "{command} is not executable");
            let parsed = Command::new("bash")
                .arg("-n")
                .arg(&script)
                .output()
                .unwrap();
            assert!(
                parsed.status.success(),
                "bash -n {command}: {}",
                String::from_utf8_lossy(&parsed.stderr)
            );
            let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
            assert!(
                ci.lines().any(|l| l.trim() == format!("exec {command}")),
                ".ci/run does not run {command}:\n{ci}"
            );
        } else {
            panic!("{}: no check for {command:?}: add one here", top.at);
        }
    }

    // The marked blocks, in order, where the demo ran.
    let marked: Vec<&Block> = readme.iter().filter(|b| b.runnable()).collect();
    let mut show = None;
    for (i, block) in marked.iter().enumerate() {
        let stdout = sandbox.run_block(&format!("readme-{i}"), block, &work);
        if block.text.contains("mkdir my-show") {
            show = Some(stdout);
        }
    }
    let printed = show.expect("the README's *Try it on the demo's show*, marked `sh test`");
    check_the_demo_show(&sandbox, &printed, &work, &work.join("my-show"));
}

#[test]
fn the_books_marked_examples_run_as_written() {
    let chapters = repo().join("docs/src");
    let mut names: Vec<String> = std::fs::read_dir(&chapters)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    for name in names {
        let marked: Vec<Block> = blocks(&format!("docs/src/{name}"))
            .into_iter()
            .filter(Block::runnable)
            .collect();
        if marked.is_empty() {
            continue;
        }
        let sandbox = Sandbox::new();
        let work = sandbox.path("work");
        for (i, block) in marked.iter().enumerate() {
            sandbox.run_block(&format!("{name}-{i}"), block, &work);
        }
    }
}

#[test]
fn blocks_are_found_with_their_info_strings() {
    let readme = blocks("README.md");
    assert!(readme.iter().any(|b| b.info == "sh"));
    let marked = Block {
        at: String::new(),
        info: "sh test".into(),
        text: String::new(),
    };
    assert!(marked.runnable());
    let plain = Block {
        info: "sh".into(),
        ..marked
    };
    assert!(!plain.runnable());
}
