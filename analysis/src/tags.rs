//! A media file's tags — its title, artist and album — read from the container's metadata
//! without decoding any audio: symphonia's probe reads what comes before the stream (an MP3's
//! ID3v2 frames, `TIT2`/`TPE1`/`TALB`), and the format reader what the container holds
//! (FLAC's and Ogg's Vorbis comments, `TITLE`/`ARTIST`/`ALBUM`; an MP4's `ilst`, `©nam`/`©ART`/
//! `©alb`; a WAV's RIFF `INFO` chunk, `INAM`/`IART`/`IPRD`). Symphonia maps each of these to
//! the same standard keys, so one lookup serves every format.
//!
//! Curators name clips by their title tag (`archivist curate clips`), falling back to the
//! file name: a file named `jingle-final-v2.mp3` is often tagged with the name people use.
//!
//! Cost: the probe reads the file's head (and, for an MP4, its `moov` box, wherever it is);
//! no packet is decoded, so a tag read is milliseconds whatever the file's length. Cover art
//! is read into memory within symphonia's default limit and dropped.

use std::fs::File;
use std::io;
use std::path::Path;

use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::{MetadataOptions, MetadataRevision, StandardTagKey};
use symphonia::core::probe::Hint;

use crate::error::Error;

/// Tag values longer than this many characters are cut: a tag is a name, not a document, and
/// a hostile file must not make a curator hold megabytes per clip.
const MAX_TAG_CHARS: usize = 1_024;

/// What a file's tags say about it; each is `None` when absent or blank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tags {
    /// The title (`TIT2`, `TITLE`, `©nam`, `INAM`).
    pub title: Option<String>,
    /// The artist (`TPE1`, `ARTIST`, `©ART`, `IART`).
    pub artist: Option<String>,
    /// The album (`TALB`, `ALBUM`, `©alb`, `IPRD`).
    pub album: Option<String>,
}

impl Tags {
    /// The artist and album as one line (`Artist — Album`, or whichever there is), for a
    /// description; `None` when there is neither.
    pub fn artist_and_album(&self) -> Option<String> {
        match (&self.artist, &self.album) {
            (Some(a), Some(b)) => Some(format!("{a} — {b}")),
            (Some(a), None) => Some(a.clone()),
            (None, Some(b)) => Some(b.clone()),
            (None, None) => None,
        }
    }
}

/// Reads the tags of the file at `path` without decoding its audio.
///
/// A file without tags gives `Tags::default()`. An error: the file cannot be read, or is not
/// in a container format the analyser knows (MP3, AAC/M4A, Ogg, FLAC, WAV).
pub fn read_tags(path: &Path) -> Result<Tags, Error> {
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    if file.metadata().map_err(io_err)?.len() == 0 {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    let stream = MediaSourceStream::new(Box::new(file), Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = path.extension().and_then(|e| e.to_str()) {
        hint.with_extension(ext);
    }
    let mut probed = symphonia::default::get_probe()
        .format(
            &hint,
            stream,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(|e| match e {
            SymphoniaError::IoError(source) if source.kind() != io::ErrorKind::UnexpectedEof => {
                Error::Io {
                    path: path.to_owned(),
                    source,
                }
            }
            SymphoniaError::Unsupported(_) => Error::NotAudio {
                path: path.to_owned(),
                reason: "no known audio format found (MP3, AAC/M4A, Ogg Vorbis, FLAC, WAV)".into(),
            },
            other => Error::NotAudio {
                path: path.to_owned(),
                reason: other.to_string(),
            },
        })?;
    let mut tags = Tags::default();
    // The container's own tags first (they describe this stream), then what the probe found
    // before it (an ID3v2 tag in front of an MP3 stream is the only place an MP3's are).
    if let Some(rev) = probed.format.metadata().skip_to_latest() {
        fill(&mut tags, rev);
    }
    if let Some(mut log) = probed.metadata.get() {
        if let Some(rev) = log.skip_to_latest() {
            fill(&mut tags, rev);
        }
    }
    Ok(tags)
}

/// Fills what `tags` lacks from one metadata revision.
fn fill(tags: &mut Tags, rev: &MetadataRevision) {
    for tag in rev.tags() {
        let slot = match tag.std_key {
            Some(StandardTagKey::TrackTitle) => &mut tags.title,
            Some(StandardTagKey::Artist) => &mut tags.artist,
            Some(StandardTagKey::Album) => &mut tags.album,
            // Keys symphonia does not map, by their raw names (ID3v2.2's three letters).
            _ => match tag.key.to_ascii_uppercase().as_str() {
                "TT2" => &mut tags.title,
                "TP1" => &mut tags.artist,
                "TAL" => &mut tags.album,
                _ => continue,
            },
        };
        if slot.is_none() {
            *slot = clean(&tag.value.to_string());
        }
    }
}

/// A tag's value as one trimmed line of at most [`MAX_TAG_CHARS`] characters: control
/// characters (ID3's NUL separators, line breaks) become spaces, runs of blanks one space.
fn clean(value: &str) -> Option<String> {
    let spaced: String = value
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text: String = spaced
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_TAG_CHARS)
        .collect();
    let text = text.trim().to_string();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn values_are_one_clean_line() {
        assert_eq!(
            clean("  Intro\0Jingle\r\n(v2) ").as_deref(),
            Some("Intro Jingle (v2)")
        );
        assert_eq!(clean(" \0 "), None);
        assert_eq!(
            clean(&"x".repeat(5_000)).unwrap().chars().count(),
            MAX_TAG_CHARS
        );
    }

    #[test]
    fn artist_and_album() {
        let mut t = Tags::default();
        assert_eq!(t.artist_and_album(), None);
        t.artist = Some("A".into());
        assert_eq!(t.artist_and_album().as_deref(), Some("A"));
        t.album = Some("B".into());
        assert_eq!(t.artist_and_album().as_deref(), Some("A — B"));
    }

    /// One second of a tone at 8 kHz, as WAV.
    fn tone(path: &Path) {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(path, spec).unwrap();
        for i in 0..8_000 {
            let s = (i as f32 * 440.0 * std::f32::consts::TAU / 8_000.0).sin();
            w.write_sample((s * 10_000.0) as i16).unwrap();
        }
        w.finalize().unwrap();
    }

    /// `src` encoded to `dst` by ffmpeg with `metadata` (`key=value`) set.
    fn ffmpeg(src: &Path, dst: &Path, args: &[&str], metadata: &[&str]) {
        let mut cmd = std::process::Command::new("ffmpeg");
        cmd.args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
            .arg(src)
            .args(args);
        for m in metadata {
            cmd.args(["-metadata", m]);
        }
        let status = cmd
            .arg(dst)
            .status()
            .unwrap_or_else(|e| panic!("ffmpeg (scripts/test.sh installs it): {e}"));
        assert!(status.success(), "ffmpeg failed for {}", dst.display());
    }

    #[test]
    fn titles_of_files_tagged_by_ffmpeg_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let wav = dir.path().join("tone.wav");
        tone(&wav);
        let tagged = [
            "title=Intro Jingle — “Mk II”",
            "artist=The Archive Band",
            "album=Station Sounds",
        ];
        for (name, args) in [
            ("a.mp3", &["-c:a", "libmp3lame"][..]),
            ("a.flac", &[][..]),
            ("a.ogg", &["-c:a", "libvorbis"][..]),
            ("a.m4a", &["-c:a", "aac"][..]),
            ("a.wav", &[][..]),
        ] {
            let path = dir.path().join(name);
            ffmpeg(&wav, &path, args, &tagged);
            let tags = read_tags(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                tags.title.as_deref(),
                Some("Intro Jingle — “Mk II”"),
                "{name}: {tags:?}"
            );
            assert_eq!(
                tags.artist_and_album().as_deref(),
                Some("The Archive Band — Station Sounds"),
                "{name}: {tags:?}"
            );
            // Untagged: nothing, and no error.
            let bare = dir.path().join(format!("bare-{name}"));
            ffmpeg(&wav, &bare, args, &["title=", "encoder="]);
            let tags = read_tags(&bare).unwrap_or_else(|e| panic!("bare {name}: {e}"));
            assert_eq!(tags.title, None, "bare {name}: {tags:?}");
        }
    }

    #[test]
    fn not_audio_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.mp3");
        std::fs::write(&path, b"this is no audio at all, just words").unwrap();
        let e = read_tags(&path).unwrap_err();
        assert!(e.to_string().contains("notes.mp3"), "{e}");
        assert!(!e.is_retryable());
        let empty = dir.path().join("empty.wav");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(read_tags(&empty), Err(Error::Empty { .. })));
    }
}
