//! What the print fuzz target does with one input, shared with the test that replays its
//! corpus and every saved crash (`analysis/tests/fuzz_replay.rs`): an episode print read from
//! untrusted bytes (anyone who can write the shared print store can plant one, and its
//! checksum has no key) and, when it is read, a pass from it against a small clip, with the
//! episode's media in memory. It must not panic; a refusal says why; memory and time stay
//! bounded (checked by whoever runs it: a memory limit and a deadline on the process).
//!
//! An input (`.pcase`) is a print and the media it was made from: the print's length (u32,
//! little-endian), the print, then the media's bytes. The clip is `clip.wav` beside the
//! corpus's seeds (the episodes of the seeds hold it, so a pass from an intact print finds it
//! and decodes stretches of the media).

use std::io;
use std::path::Path;

use analysis::{Analyser, ByteSource, ClipInput, ClipOutcome, EpisodePrint, Params};

/// The parameters of the pass: the analyser's, with fewer votes to make a candidate (not a
/// parameter the print depends on) so that more prints reach the decoding of stretches.
pub(crate) fn params() -> Params {
    Params {
        min_votes: 2,
        ..Params::default()
    }
}

/// An input's print and media, if it has the layout above.
pub(crate) fn split(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(input.get(..4)?.try_into().ok()?) as usize;
    let print = input.get(4..4usize.checked_add(len)?)?;
    Some((print, &input[4 + len..]))
}

/// An input made of `print` and `media`.
#[allow(dead_code)]
pub(crate) fn join(print: &[u8], media: &[u8]) -> Vec<u8> {
    let mut out = (print.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(print);
    out.extend_from_slice(media);
    out
}

/// Reads the input's print and runs a pass from it against `clip`. Returns what happened as
/// a class (the words of a refusal or failure, numbers taken out; or how many occurrences were
/// found): the mutation fuzzer keeps an input that gives a class it has not seen.
pub(crate) fn pass(input: &[u8], clip: &Path) -> String {
    let Some((print, media)) = split(input) else {
        return "not an input".to_owned();
    };
    let params = params();
    let print = match EpisodePrint::from_bytes(print, &params) {
        Ok(print) => print,
        Err(e) => return format!("refused: {}", words(&e.to_string())),
    };
    let analyser = Analyser::new(params);
    let mut source = Memory(media);
    match analyser.analyse_from_print(&print, &mut source, &[ClipInput::new(clip)]) {
        Ok(report) => match report.clips.first() {
            Some(ClipOutcome::Found(c)) => format!("passed: {} found", c.matches.len()),
            Some(ClipOutcome::Failed(e)) => format!("clip: {}", words(&e.to_string())),
            None => "passed: no clip".to_owned(),
        },
        Err(e) => {
            let text = e.to_string();
            assert!(text.len() > 10, "a failure says why: {text}");
            format!("failed: {}", words(&text))
        }
    }
}

/// Why a print was refused or failed, with numbers and the episode's hash taken out.
fn words(text: &str) -> String {
    let text = match (text.find("episode "), text.find(':')) {
        // `… episode <hash>: why`: the hash is the print's, not a class.
        (Some(at), Some(colon)) if at < colon => format!("{}{}", &text[..at], &text[colon..]),
        _ => text.to_owned(),
    };
    // The parameters' versions are hexadecimal: not a class each.
    let text = match text.find("other peak parameters") {
        Some(at) => text[..at + "other peak parameters".len()].to_owned(),
        None => text,
    };
    let mut out = String::new();
    for c in text.chars() {
        let c = if c.is_ascii_digit() { '#' } else { c };
        if !(c == '#' && out.ends_with('#')) {
            out.push(c);
        }
    }
    out
}

/// The media in memory, as the researcher's ranged reads give it.
struct Memory<'a>(&'a [u8]);

impl ByteSource for Memory<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&mut self, start: u64, len: usize) -> io::Result<Vec<u8>> {
        let from = usize::try_from(start)
            .unwrap_or(usize::MAX)
            .min(self.0.len());
        let to = from.saturating_add(len).min(self.0.len());
        Ok(self.0[from..to].to_vec())
    }
}
