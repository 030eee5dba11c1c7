//! Replays the audio fuzz corpus (`fuzz/corpus/audio/`: valid seeds of every container the
//! analyser reads, the crafted header cases, and what the fuzzer kept) and every saved crash
//! (`fuzz/crashes/audio/`, kept once fixed) through the fuzz target's own code
//! (`fuzz/src/audio_target.rs`): each file is analysed, or refused with a reason naming it;
//! never a panic. The replay runs in a child process (this test, again) under an address-space
//! limit and a deadline: an allocation sized from a header aborts it, a loop without end
//! outlives the deadline. `fuzz/audio.sh` runs the fuzzer itself; what it found and is not
//! fixed yet waits in `fuzz/crashes/audio-open/`, not replayed.
//!
//! The print fuzz corpus likewise (`fuzz/corpus/print/`: prints the analyser made of small
//! episodes, with their media; the forged prints of issue 46; what the fuzzer kept) and its
//! saved crashes (`fuzz/crashes/print/`), through `fuzz/src/print_target.rs`: each print is
//! read and, if it is, a pass from it runs against the corpus's clip; never a panic, an abort
//! or an allocation sized from the print. `fuzz/print.sh` runs that fuzzer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/src/audio_target.rs"]
mod audio_target;
#[path = "../../fuzz/src/print_target.rs"]
mod print_target;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use analysis::{Analyser, ClipInput, ClipOutcome, EpisodePrint, Params};

/// Set in the child that does the replay.
const CHILD: &str = "ANALYSIS_FUZZ_REPLAY_CHILD";
/// The child's address space (KiB): the analyser of a short file needs tens of MB; a rate
/// of 4,294,967,295 Hz once sized a resampler table of gigabytes from it.
const ADDRESS_SPACE_KIB: u64 = 1 << 20;
/// A generous bound for the whole replay (a few seconds on a loaded two-core machine): it
/// catches a loop without end, it measures nothing.
const DEADLINE: Duration = Duration::from_secs(300);
/// The containers the corpus must have seeds for.
const EXTENSIONS: [&str; 6] = ["wav", "mp3", "aac", "m4a", "ogg", "flac"];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(fuzz_dir().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !name.starts_with('.') && name != "README.txt"
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_audio_fuzz_corpus_and_every_saved_crash_replay_in_bounded_memory_and_time() {
    in_child(
        "the_audio_fuzz_corpus_and_every_saved_crash_replay_in_bounded_memory_and_time",
        replay,
    );
}

#[test]
fn the_print_fuzz_corpus_and_every_saved_crash_replay_in_bounded_memory_and_time() {
    in_child(
        "the_print_fuzz_corpus_and_every_saved_crash_replay_in_bounded_memory_and_time",
        replay_prints,
    );
}

/// Runs `replay` in a child process (this test, again) under the address-space limit and
/// the deadline.
fn in_child(test: &str, replay: fn()) {
    if std::env::var_os(CHILD).is_some() {
        replay();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = err.read_to_string(&mut text);
        let _ = tx.send((child.wait().unwrap(), text));
    });
    let Ok((status, text)) = rx.recv_timeout(DEADLINE) else {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("the replay was still running after {DEADLINE:?}");
    };
    println!("{text}");
    assert!(
        status.success(),
        "the replay failed ({status}; killed by the memory limit if aborted):\n{text}"
    );
}

/// In the child: every print of the corpus and every saved crash, then the forged prints'
/// reasons.
fn replay_prints() {
    audio_target::quiet_for_caught_decoder_panics();
    let is_input = |p: &PathBuf| p.extension().is_some_and(|x| x == "pcase");
    let corpus: Vec<PathBuf> = files("corpus/print").into_iter().filter(is_input).collect();
    let crashes = files("crashes/print");
    let clip = fuzz_dir().join("corpus/print/clip.wav");
    let mut seeds = 0;
    for path in corpus.iter().chain(&crashes) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let input = std::fs::read(path).unwrap();
        let Ok(class) = std::panic::catch_unwind(|| print_target::pass(&input, &clip)) else {
            panic!("{} panics", path.display());
        };
        if name.starts_with("seed-") {
            seeds += 1;
            assert_eq!(class, "passed: 1 found", "{name}: a seed finds the clip");
        }
        println!("{name}: {class}");
    }
    assert!(seeds >= 2, "the seeds are there");
    println!(
        "replayed without a panic: {} in fuzz/corpus/print, {} in fuzz/crashes/print",
        corpus.len(),
        crashes.len()
    );
    // The forged prints of issue 46, refused with the value and the bound.
    let params = print_target::params();
    for (name, words) in [
        (
            "crafted-rate-max.pcase",
            "sample rate 4294967295 Hz is outside 1000–384000 Hz",
        ),
        (
            "crafted-pcm-frames-per-packet.pcase",
            "frames per packet of 1099511627776 frames is over 65536",
        ),
        ("crafted-peak-jump.pcase", "is past its episode's end"),
        (
            "crafted-anchor-overflow.pcase",
            "peak at frame 4294967295 is past its episode's end",
        ),
    ] {
        let input = std::fs::read(fuzz_dir().join("corpus/print").join(name)).unwrap();
        let (print, _) = print_target::split(&input).unwrap();
        let e = EpisodePrint::from_bytes(print, &params).unwrap_err();
        assert!(e.to_string().contains(words), "{name}: {e}");
    }
}

/// In the child: every file, then the named cases' reasons.
fn replay() {
    audio_target::quiet_for_caught_decoder_panics();
    let corpus = files("corpus/audio");
    let crashes = files("crashes/audio");
    for ext in EXTENSIONS {
        assert!(
            corpus.iter().any(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("seed-") && name.ends_with(&format!(".{ext}"))
            }),
            "a seed for .{ext}"
        );
    }
    for path in corpus.iter().chain(&crashes) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let outcome = std::panic::catch_unwind(|| audio_target::analyse_file(path));
        let Ok(class) = outcome else {
            panic!("{} panics", path.display());
        };
        if name.starts_with("seed-") {
            assert_eq!(class, "analysed", "{name}: a seed is valid audio");
        }
        println!("{name}: {class}");
    }
    println!(
        "replayed without a panic: {} in fuzz/corpus/audio, {} in fuzz/crashes/audio",
        corpus.len(),
        crashes.len()
    );
    // The header cases of the issue, refused with the value and the bounds.
    let dir = fuzz_dir().join("corpus/audio");
    for (name, words) in [
        (
            "crafted-mono16-rate-0.wav",
            "not audio: sample rate 0 Hz is outside 1000–384000 Hz",
        ),
        (
            "crafted-mono16-rate-max.wav",
            "not audio: sample rate 4294967295 Hz is outside 1000–384000 Hz",
        ),
        (
            "crafted-mono16-channels-20.wav",
            "not audio: 20 channels is outside 1–16 channels",
        ),
    ] {
        let path = dir.join(name);
        let analyser = Analyser::new(Params::default());
        let e = analyser.analyse(&path, &[]).unwrap_err();
        assert!(e.to_string().contains(words), "{name}: {e}");
        // As a clip, it fails alone: the episode and another clip are analysed.
        let good = dir.join("seed-mono16.wav");
        let report = analyser
            .analyse(&good, &[ClipInput::new(&path), ClipInput::new(&good)])
            .unwrap();
        let ClipOutcome::Failed(e) = &report.clips[0] else {
            panic!("{name} analysed as a clip");
        };
        assert!(e.to_string().contains(words), "{name}: {e}");
        assert!(matches!(report.clips[1], ClipOutcome::Found(_)));
    }
}
