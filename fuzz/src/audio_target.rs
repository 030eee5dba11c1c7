//! What the audio fuzz target does with one input file, shared with the test that replays its
//! corpus and every saved crash (`analysis/tests/fuzz_replay.rs`): the reference analyser's
//! whole path, the file analysed as an episode against itself as a clip (decoding, the bounds
//! on rate and channels, resampling, fingerprinting, the scan). It must not panic (a panic
//! inside the decoding library is caught and is that file's error), and a failure names the
//! file and says why. Bounded memory and time are checked by whoever runs it (a memory limit
//! and a deadline on the process).

use std::path::Path;

use analysis::{Analyser, ClipInput, ClipOutcome, Error, Params};

/// Analyses the file at `path` against itself. Returns what happened as a class (the error's
/// words with the path and numbers taken out, or `analysed`): the mutation fuzzer keeps an
/// input that gives a class it has not seen.
pub(crate) fn analyse_file(path: &Path) -> String {
    let analyser = Analyser::new(Params::default());
    match analyser.analyse(path, &[ClipInput::new(path)]) {
        Ok(report) => match report.clips.first() {
            Some(ClipOutcome::Found(_)) => "analysed".to_owned(),
            Some(ClipOutcome::Failed(e)) => format!("clip: {}", class(path, e)),
            None => unreachable!("one outcome per clip"),
        },
        Err(e) => format!("episode: {}", class(path, &e)),
    }
}

/// Checks that `e` names the file and says why; its words without the path and numbers.
fn class(path: &Path, e: &Error) -> String {
    assert_eq!(e.path(), path, "an error names the file: {e}");
    let text = e.to_string();
    let why = text.replace(&path.display().to_string(), "");
    assert!(
        why.trim_start_matches(':').trim().len() > 3,
        "an error says why: {e}"
    );
    why.chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect()
}

/// A panic hook that stays quiet for the panics the analyser catches (inside its decoding
/// library: they are that file's error) and prints the others as the default hook does.
pub(crate) fn quiet_for_caught_decoder_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !analysis::catching_decoder_panic() {
            default(info);
        }
    }));
}
