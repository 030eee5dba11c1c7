//! The one error type of the analyser.

use std::io;
use std::path::PathBuf;

/// What went wrong while analysing a file. Every variant names the file.
///
/// A clip's error fails that clip only ([`crate::ClipOutcome::Failed`]); an episode's error
/// fails the whole call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The file has no bytes at all.
    #[error("{}: empty file", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// No container format recognised: the file is not audio (or not in a supported format).
    #[error("{}: not audio: {reason}", path.display())]
    NotAudio {
        /// The file.
        path: PathBuf,
        /// What the format probe said.
        reason: String,
    },
    /// A container was found but its codec is not one the analyser decodes.
    #[error("{}: unsupported codec: {reason}", path.display())]
    UnsupportedCodec {
        /// The file.
        path: PathBuf,
        /// The codec problem.
        reason: String,
    },
    /// The stream could not be decoded.
    #[error("{}: undecodable {codec} audio: {reason}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The codec, as symphonia names it (`mp3`, `aac`, …).
        codec: String,
        /// The codec problem.
        reason: String,
    },
    /// The stream's parameters are outside what audio uses (a sample rate outside
    /// [`crate::params::MIN_SAMPLE_RATE`]–[`crate::params::MAX_SAMPLE_RATE`], more than
    /// [`crate::params::MAX_CHANNELS`] channels): refused before anything is sized from them.
    #[error("{}: not audio: {reason}", path.display())]
    OutOfBounds {
        /// The file.
        path: PathBuf,
        /// Which parameter, its value and the bounds.
        reason: String,
    },
    /// The decoding library panicked on the file (a crafted or damaged header it does not
    /// check): caught, and the failure of this file alone.
    #[error("{}: undecodable: {stage} failed on malformed input: {message}", path.display())]
    DecoderPanic {
        /// The file.
        path: PathBuf,
        /// Where: `the format probe`, `the mp3 decoder`, …
        stage: String,
        /// The panic's message.
        message: String,
    },
    /// The file decoded to no samples at all.
    #[error("{}: no audio in the {codec} stream", path.display())]
    NoAudio {
        /// The file.
        path: PathBuf,
        /// The codec.
        codec: String,
    },
    /// A clip longer than [`crate::Params::max_clip_seconds`]: clips are held whole.
    #[error("{}: clip of {seconds:.0} s is longer than the {max:.0} s a clip may last", path.display())]
    ClipTooLong {
        /// The file.
        path: PathBuf,
        /// Its duration.
        seconds: f64,
        /// The limit.
        max: f64,
    },
}

impl Error {
    /// Whether trying again later could succeed (a passing I/O condition) rather than the
    /// media being bad for good. Exhaustive on purpose: a new variant forces the decision.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            Error::Empty { .. }
            | Error::NotAudio { .. }
            | Error::UnsupportedCodec { .. }
            | Error::Decode { .. }
            | Error::NoAudio { .. }
            | Error::OutOfBounds { .. }
            | Error::DecoderPanic { .. }
            | Error::ClipTooLong { .. } => false,
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            Error::Io { path, .. }
            | Error::Empty { path }
            | Error::NotAudio { path, .. }
            | Error::UnsupportedCodec { path, .. }
            | Error::Decode { path, .. }
            | Error::NoAudio { path, .. }
            | Error::OutOfBounds { path, .. }
            | Error::DecoderPanic { path, .. }
            | Error::ClipTooLong { path, .. } => path,
        }
    }
}
