//! Decoding: a media file to a stream of mono `f32` sample chunks at the file's own rate,
//! one packet at a time (symphonia's format reader yields packets, its decoder turns each
//! into a buffer), with the file's SHA-256 computed from the bytes as they are read.
//!
//! Gapless trimming is on: an MP3's encoder delay and padding (LAME/Xing header) and an Ogg
//! stream's pre-skip are removed by symphonia, so sample 0 is the first sample the encoder
//! was given. Without it every offset in an MP3 would be late by ~1,100 samples (25 ms).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use sha2::{Digest, Sha256};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{
    self as codecs, CodecRegistry, CodecType, DecoderOptions, CODEC_TYPE_NULL,
};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use crate::error::Error;
use crate::guard;
use crate::mkv;
use crate::mp3;
use crate::mp4;
use crate::ogg;
use crate::params::Params;
use crate::params::{MAX_CHANNELS, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};
use crate::print::CodecSpec;
use crate::print_record::{PacketLog, Recent};
use crate::resample::Resampler;
use crate::wav;

/// Consecutive undecodable packets after which a stream is declared undecodable: a few bad
/// packets (a damaged frame, a truncated last one) are skipped, a stream of garbage is not.
const MAX_CONSECUTIVE_DECODE_ERRORS: usize = 64;

/// The priming samples of an AAC stream without a container to say (raw ADTS): one frame,
/// as ffmpeg's and FDK's AAC encoders put.
const ADTS_PRIMING: u64 = 1_024;

/// Frames ahead of where it is expected a packet of a stitched MP3 is looked for.
const RESYNC_FRAMES: u64 = 8;

/// The codecs the analyser decodes: symphonia's, and Opus through libopus.
static CODECS: LazyLock<CodecRegistry> = LazyLock::new(|| {
    let mut registry = CodecRegistry::new();
    symphonia::default::register_enabled_codecs(&mut registry);
    registry.register_all::<symphonia_adapter_libopus::OpusDecoder>();
    registry
});

/// The codec registry every decoder of the analyser is made from.
pub(crate) fn codecs() -> &'static CodecRegistry {
    &CODECS
}

/// A codec's name in words, for one no decoder here knows (symphonia prints its number).
fn codec_name(codec: CodecType) -> String {
    let known = [
        (codecs::CODEC_TYPE_ALAC, "alac (apple lossless)"),
        (codecs::CODEC_TYPE_WAVPACK, "wavpack"),
        (codecs::CODEC_TYPE_MONKEYS_AUDIO, "monkey's audio"),
        (codecs::CODEC_TYPE_TTA, "tta"),
        (codecs::CODEC_TYPE_EAC3, "e-ac-3 (dolby digital plus)"),
        (codecs::CODEC_TYPE_AC4, "ac-4"),
        (codecs::CODEC_TYPE_DCA, "dts"),
        (codecs::CODEC_TYPE_WMA, "wma"),
        (codecs::CODEC_TYPE_SPEEX, "speex"),
        (codecs::CODEC_TYPE_MUSEPACK, "musepack"),
        (codecs::CODEC_TYPE_ATRAC1, "atrac1"),
        (codecs::CODEC_TYPE_ATRAC3, "atrac3"),
        (codecs::CODEC_TYPE_ATRAC3PLUS, "atrac3plus"),
        (codecs::CODEC_TYPE_ATRAC9, "atrac9"),
        (codecs::CODEC_TYPE_ADPCM_G722, "g.722 adpcm"),
        (codecs::CODEC_TYPE_ADPCM_G726, "g.726 adpcm"),
        (codecs::CODEC_TYPE_ADPCM_G726LE, "g.726 adpcm"),
        (codecs::CODEC_TYPE_OPUS, "opus"),
    ];
    known.iter().find(|(c, _)| *c == codec).map_or_else(
        || format!("an unknown codec (symphonia's {codec})"),
        |(_, n)| (*n).to_owned(),
    )
}

/// A file being decoded, packet by packet. Holds one packet's samples at a time.
pub struct Decoder {
    path: PathBuf,
    format: Box<dyn FormatReader>,
    decoder: Box<dyn symphonia::core::codecs::Decoder>,
    track_id: u32,
    codec: String,
    sample_rate: u32,
    /// Total frames, when the container says (for progress only).
    n_frames: Option<u64>,
    frames_decoded: u64,
    interleaved: Option<SampleBuffer<f32>>,
    /// Frames still to drop from the start (an MP4 edit list's encoder delay).
    skip: u64,
    mono: Vec<f32>,
    hash: Arc<Mutex<HashState>>,
    len: u64,
    /// The reader or decoder panicked (see `guard.rs`): never called again.
    broken: bool,
    /// Printing: the packet table being recorded, and the track's codec parameters.
    log: Option<(PacketLog, CodecSpec)>,
    /// An MP3 of several segments (ads stitched in): how each is decoded (`mp3.rs`).
    segments: Option<Segments>,
}

/// Decoding an MP3 of several segments: each trimmed by its own LAME tag, a new decoder where
/// the format changes, and a segment at another rate resampled to the first one's.
struct Segments {
    layout: mp3::Layout,
    /// The next packet's index among the audio frames.
    next: u64,
    /// The segment of the last packet.
    current: usize,
    /// The format the decoder was made for.
    format: Option<mp3::Header>,
    /// The current segment's rate converted to the stream's (first segment's) rate.
    resampler: Option<Resampler>,
    /// Samples of the stream not yet given out (a resampler's tail at a segment's end).
    pending: Vec<f32>,
    /// A segment after the first has begun: the print's packets from here are not decoded
    /// alone (a window there is decoded by a full analysis instead).
    changed: bool,
    /// The end of the stream was reached and the last samples given out.
    ended: bool,
}

impl Decoder {
    /// Opens `path` and finds its first audio track.
    pub fn open(path: &Path) -> Result<Decoder, Error> {
        Decoder::open_with(path, false)
    }

    /// [`Decoder::open`], also recording where each packet lies in the file (an episode
    /// print's packet table, see `print_record.rs`).
    pub(crate) fn open_printing(path: &Path) -> Result<Decoder, Error> {
        Decoder::open_with(path, true)
    }

    fn open_with(path: &Path, printing: bool) -> Result<Decoder, Error> {
        let io_err = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        if len == 0 {
            return Err(Error::Empty {
                path: path.to_owned(),
            });
        }
        // Header values symphonia trusts before it checks them, read here first.
        if let Some((rate, channels)) = wav::format(path) {
            check_bounds(path, Some(rate), Some(usize::from(channels)))?;
        }
        mp4::check_tables(path)
            .and_then(|()| ogg::check_comment(path))
            .and_then(|()| mkv::check_sizes(path))
            .map_err(|reason| Error::OutOfBounds {
                path: path.to_owned(),
                reason,
            })?;
        let hash = Arc::new(Mutex::new(HashState {
            recent: printing.then(Recent::default),
            ..HashState::default()
        }));
        let source = HashingSource {
            file,
            pos: 0,
            len,
            hash: Arc::clone(&hash),
            patches: wav::length_patches(path),
        };
        let stream = MediaSourceStream::new(Box::new(source), Default::default());
        let mut hint = Hint::new();
        if let Some(ext) = path.extension().and_then(|e| e.to_str()) {
            hint.with_extension(ext);
        }
        let format_options = FormatOptions {
            enable_gapless: true,
            ..Default::default()
        };
        let probed = guard::catch(|| {
            symphonia::default::get_probe().format(
                &hint,
                stream,
                &format_options,
                &MetadataOptions::default(),
            )
        })
        .map_err(|message| panicked(path, "the format probe", message))?
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
                reason: describe(&other),
            },
        })?;
        let format = probed.format;
        let track = format
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .ok_or_else(|| Error::NotAudio {
                path: path.to_owned(),
                reason: "no audio track in the container".into(),
            })?;
        let params = &track.codec_params;
        // Before anything is sized from them (the decoder's buffers, the resampler's kernel).
        let channels = params
            .channels
            .map(|c| c.count())
            .or_else(|| params.channel_layout.map(|l| l.into_channels().count()));
        check_bounds(path, params.sample_rate, channels)?;
        let codecs = codecs();
        let codec = codecs
            .get_codec(params.codec)
            .map(|d| d.short_name.to_owned())
            .unwrap_or_else(|| codec_name(params.codec));
        let decoder = guard::catch(|| codecs.make(params, &DecoderOptions::default()))
            .map_err(|message| panicked(path, &format!("the {codec} decoder"), message))?
            .map_err(|e| Error::UnsupportedCodec {
                path: path.to_owned(),
                reason: if codecs.get_codec(params.codec).is_none() {
                    format!("{codec}, which the analyser does not decode (it decodes mp3, aac, vorbis, opus, flac and pcm)")
                } else {
                    format!("{codec}: {}", describe(&e))
                },
            })?;
        let sample_rate = track.codec_params.sample_rate.unwrap_or(0);
        let n_frames = track.codec_params.n_frames;
        let track_id = track.id;
        let log = printing.then(|| (PacketLog::default(), CodecSpec::of(&track.codec_params)));
        let mpeg = [
            codecs::CODEC_TYPE_MP3,
            codecs::CODEC_TYPE_MP2,
            codecs::CODEC_TYPE_MP1,
        ]
        .contains(&params.codec);
        let segments = mpeg.then(|| mp3::layout(path)).flatten().map(|layout| {
            tracing::debug!(file = %path.display(), segments = layout.segments.len(), "an mp3 of several segments (ads stitched in)");
            Segments {
                layout,
                next: 0,
                current: 0,
                format: None,
                resampler: None,
                pending: Vec::new(),
                changed: false,
                ended: false,
            }
        });
        // Symphonia trims MP3 and Ogg itself (gapless); MP4 keeps it in an edit list.
        let skip = if mp4::is_mp4(path) {
            mp4::priming_samples(path, sample_rate).unwrap_or(0)
        } else if params.codec == codecs::CODEC_TYPE_AAC {
            // Raw ADTS has no edit list: the encoder's priming is the one AAC encoders put
            // (ffmpeg's and FDK's 1,024 samples), or every offset is 23 ms late.
            ADTS_PRIMING
        } else {
            0
        };
        if skip > 0 {
            tracing::debug!(file = %path.display(), skip, "skipping the encoder delay of the edit list");
        }
        Ok(Decoder {
            skip,
            path: path.to_owned(),
            format,
            decoder,
            track_id,
            codec,
            sample_rate,
            n_frames,
            frames_decoded: 0,
            interleaved: None,
            mono: Vec::new(),
            hash,
            len,
            broken: false,
            log,
            segments,
        })
    }

    /// The codec's short name (`mp3`, `aac`, `vorbis`, `flac`, `pcm_s16le`…).
    pub fn codec(&self) -> &str {
        &self.codec
    }

    /// The sample rate of the decoded samples (Hz); known for certain after the first chunk.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Frames (samples per channel) decoded so far.
    pub fn frames_decoded(&self) -> u64 {
        self.frames_decoded
    }

    /// Total frames, if the container says.
    pub fn total_frames(&self) -> Option<u64> {
        self.n_frames
    }

    /// Decodes the next packet: its samples, mixed down to mono, are then [`Decoder::chunk`];
    /// `false` at the end of the stream. A few undecodable packets are skipped (logged); a
    /// run of them is an error.
    pub fn advance(&mut self) -> Result<bool, Error> {
        Ok(self.next_chunk()?.is_some())
    }

    /// The samples of the packet last decoded by [`Decoder::advance`] (mono).
    pub fn chunk(&self) -> &[f32] {
        &self.mono
    }

    /// The next packet's samples, mixed down to mono; `None` at the end of the stream.
    /// A few undecodable packets are skipped (logged); a run of them is an error.
    pub fn next_chunk(&mut self) -> Result<Option<&[f32]>, Error> {
        if self.broken {
            return Err(panicked(
                &self.path,
                "the decoder",
                "it panicked before".into(),
            ));
        }
        let mut consecutive_errors = 0;
        loop {
            let next = guard::catch(|| self.format.next_packet());
            let packet = match next {
                Err(message) => return Err(self.broke("the format reader", message)),
                Ok(Ok(p)) => p,
                // The end of the stream (a truncated file ends the same way).
                Ok(Err(SymphoniaError::IoError(e))) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return self.end();
                }
                // A chained Ogg stream changed its parameters: what came before is analysed.
                Ok(Err(SymphoniaError::ResetRequired)) => return self.end(),
                Ok(Err(SymphoniaError::IoError(source))) => {
                    return Err(Error::Io {
                        path: self.path.clone(),
                        source,
                    })
                }
                Ok(Err(e)) => {
                    if self.frames_decoded > 0 {
                        tracing::warn!(file = %self.path.display(), error = %e, "stream damaged, analysing what came before");
                        return self.end();
                    }
                    return Err(self.decode_error(&e));
                }
            };
            if packet.track_id() != self.track_id {
                continue;
            }
            let mut packet = packet;
            if self.segments.is_some() {
                self.segment_packet(&mut packet)?;
            }
            let decoder = &mut self.decoder;
            let decoded = match guard::catch(|| decoder.decode(&packet).map(|_| ())) {
                Ok(Ok(())) => self.decoder.last_decoded(),
                Err(message) => {
                    let stage = format!("the {} decoder", self.codec);
                    return Err(self.broke(&stage, message));
                }
                Ok(Err(SymphoniaError::DecodeError(e))) => {
                    note(
                        &mut self.log,
                        &self.hash,
                        &packet,
                        0,
                        0,
                        self.segments.as_ref().is_some_and(|s| s.changed),
                    );
                    consecutive_errors += 1;
                    tracing::debug!(file = %self.path.display(), error = e, "skipping an undecodable packet");
                    if consecutive_errors >= MAX_CONSECUTIVE_DECODE_ERRORS {
                        return Err(self.decode_error(&SymphoniaError::DecodeError(e)));
                    }
                    continue;
                }
                Ok(Err(SymphoniaError::IoError(e))) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return self.end();
                }
                Ok(Err(e)) => return Err(self.decode_error(&e)),
            };
            consecutive_errors = 0;
            let spec = *decoded.spec();
            let frames = decoded.frames();
            if frames == 0 {
                note(
                    &mut self.log,
                    &self.hash,
                    &packet,
                    0,
                    0,
                    self.segments.as_ref().is_some_and(|s| s.changed),
                );
                continue;
            }
            // The container may not have said (or said otherwise): what the codec says is
            // checked too, before the buffer below is sized from it.
            check_bounds(&self.path, Some(spec.rate), Some(spec.channels.count()))?;
            if self.sample_rate == 0 {
                self.sample_rate = spec.rate;
            }
            let channels = spec.channels.count().max(1);
            let buffer = match &mut self.interleaved {
                Some(b) if b.capacity() >= decoded.capacity() * channels => b,
                slot => slot.insert(SampleBuffer::new(decoded.capacity() as u64, spec)),
            };
            buffer.copy_interleaved_ref(decoded);
            let skip = self.skip.min(frames as u64) as usize;
            self.skip -= skip as u64;
            let samples = &buffer.samples()[skip * channels..];
            let frames = frames - skip;
            let mut mono = std::mem::take(&mut self.mono);
            mono.clear();
            if channels == 1 {
                mono.extend_from_slice(&samples[..frames]);
            } else {
                let scale = 1.0 / channels as f32;
                mono.extend(
                    samples
                        .chunks_exact(channels)
                        .take(frames)
                        .map(|f| f.iter().sum::<f32>() * scale),
                );
            }
            if let Some(seg) = &mut self.segments {
                // The segment's samples at the stream's rate, after what an earlier one left.
                let mut out = std::mem::take(&mut seg.pending);
                match &mut seg.resampler {
                    Some(r) => r.process(&mono, &mut out),
                    None => out.extend_from_slice(&mono),
                }
                mono.clear();
                seg.pending = mono;
                mono = out;
                let changed = seg.changed;
                note(
                    &mut self.log,
                    &self.hash,
                    &packet,
                    skip as u32,
                    mono.len() as u32,
                    changed,
                );
            } else {
                note(
                    &mut self.log,
                    &self.hash,
                    &packet,
                    skip as u32,
                    frames as u32,
                    false,
                );
            }
            self.mono = mono;
            if self.mono.is_empty() {
                continue;
            }
            self.frames_decoded += self.mono.len() as u64;
            return Ok(Some(&self.mono));
        }
    }

    /// Printing: the packet table recorded and the codec's parameters.
    pub(crate) fn take_packet_log(&mut self) -> Option<(PacketLog, CodecSpec)> {
        self.log.take()
    }

    fn end(&mut self) -> Result<Option<&[f32]>, Error> {
        // An MP3 of several segments: the last segment's resampler's tail.
        if let Some(seg) = &mut self.segments {
            if !seg.ended {
                seg.ended = true;
                let mut out = std::mem::take(&mut seg.pending);
                if let Some(mut r) = seg.resampler.take() {
                    r.finish(&mut out);
                }
                if !out.is_empty() {
                    if let Some((log, _)) = &mut self.log {
                        log.add_to_last(out.len() as u32);
                    }
                    self.frames_decoded += out.len() as u64;
                    self.mono = out;
                    return Ok(Some(&self.mono));
                }
            }
        }
        if self.frames_decoded == 0 || self.sample_rate == 0 {
            return Err(Error::NoAudio {
                path: self.path.clone(),
                codec: self.codec.clone(),
            });
        }
        Ok(None)
    }

    /// An MP3 of several segments: the packet's trimming by its segment's tag (in place of the
    /// reader's, made from the first segment's tag for the whole file), and a new decoder
    /// and resampler where a segment of another format begins.
    fn segment_packet(
        &mut self,
        packet: &mut symphonia::core::formats::Packet,
    ) -> Result<(), Error> {
        let Some(seg) = &mut self.segments else {
            return Ok(());
        };
        let k = seg.next;
        seg.next += 1;
        let word = packet
            .data
            .get(..4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let header = word.and_then(mp3::Header::parse);
        // The reader may have skipped a frame the walk took (junk that looked like one):
        // the packet is looked for a few frames on.
        let at = (k..k + RESYNC_FRAMES)
            .find(|&j| word.is_some() && seg.layout.headers.get(j as usize).copied() == word);
        let (Some(header), Some(k)) = (header, at) else {
            if !seg.changed {
                // Nothing trimmed or converted yet by segment: decoded as one stream.
                tracing::debug!(file = %self.path.display(), frame = k, "the mp3's frames are not where the walk found them: decoded as one stream");
                self.segments = None;
                return Ok(());
            }
            return Err(Error::Decode {
                path: self.path.clone(),
                codec: self.codec.clone(),
                reason: format!(
                    "frame {k} of this mp3 of {} segments is not where its walk found it",
                    seg.layout.segments.len()
                ),
            });
        };
        seg.next = k + 1;
        let s = seg.layout.segment_of(k);
        if s != seg.current {
            seg.current = s;
            seg.changed = true;
            if let Some(mut r) = seg.resampler.take() {
                r.finish(&mut seg.pending);
            }
            if header.rate != self.sample_rate {
                seg.resampler = Some(Resampler::new(
                    header.rate,
                    self.sample_rate,
                    &Params::default(),
                ));
            }
        }
        if seg.format.is_some_and(|f| !f.same_format(&header)) {
            check_bounds(&self.path, Some(header.rate), Some(header.channels))?;
            let mut params = symphonia::core::codecs::CodecParameters::new();
            params
                .for_codec(self.decoder.codec_params().codec)
                .with_sample_rate(header.rate)
                .with_channels(if header.channels == 1 {
                    symphonia::core::audio::Channels::FRONT_LEFT
                } else {
                    symphonia::core::audio::Channels::FRONT_LEFT
                        | symphonia::core::audio::Channels::FRONT_RIGHT
                });
            let path = &self.path;
            self.decoder = guard::catch(|| codecs().make(&params, &DecoderOptions::default()))
                .map_err(|message| panicked(path, "the mp3 decoder", message))?
                .map_err(|e| Error::Decode {
                    path: path.clone(),
                    codec: self.codec.clone(),
                    reason: describe(&e),
                })?;
            self.interleaved = None;
        }
        seg.format = Some(header);
        // The trimming of symphonia's `trim_packet`, by this segment's own tag.
        let segment = &seg.layout.segments[s];
        let dur = header.samples();
        let ts = (k - segment.first) * dur;
        let delay = u64::from(segment.delay);
        let trim_start = delay.saturating_sub(ts).min(dur);
        let start = ts.saturating_sub(delay);
        let kept = dur - trim_start;
        let trim_end = segment
            .keep
            .map_or(0, |keep| (start + kept).saturating_sub(keep).min(kept));
        packet.trim_start = trim_start as u32;
        packet.trim_end = trim_end as u32;
        Ok(())
    }

    /// A panic in the reader or decoder: the file's error, and they are not called again.
    fn broke(&mut self, stage: &str, message: String) -> Error {
        self.broken = true;
        panicked(&self.path, stage, message)
    }

    fn decode_error(&self, e: &SymphoniaError) -> Error {
        Error::Decode {
            path: self.path.clone(),
            codec: self.codec.clone(),
            reason: describe(e),
        }
    }

    /// The file's SHA-256 (lower-case hex). Bytes the decoder skipped over (or never read,
    /// after a stream ended early) are read now, so this is the hash of the whole file.
    pub fn finish_hash(self) -> Result<String, Error> {
        let mut state = self.hash.lock().unwrap_or_else(PoisonError::into_inner);
        let io_err = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        if state.hashed_to < self.len {
            let mut file = File::open(&self.path).map_err(io_err)?;
            file.seek(SeekFrom::Start(state.hashed_to))
                .map_err(io_err)?;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = file.read(&mut buf).map_err(io_err)?;
                if n == 0 {
                    break;
                }
                state.hasher.update(&buf[..n]);
                state.hashed_to += n as u64;
            }
        }
        let digest = std::mem::take(&mut state.hasher).finalize();
        Ok(hex(&digest))
    }
}

/// Decodes a whole (short) file into memory: the clip path. Returns the mono samples, their
/// rate and the file's hash.
pub fn decode_all(path: &Path) -> Result<(Vec<f32>, u32, String), Error> {
    decode_at_most(path, f64::INFINITY)
}

/// [`decode_all`], failing with [`Error::ClipTooLong`] as soon as the file has given more than
/// `max_seconds` of audio: a clip is held whole, so its length bounds memory, and a long file
/// passed as a clip is refused after `max_seconds`, not after all of it is in memory.
pub fn decode_at_most(path: &Path, max_seconds: f64) -> Result<(Vec<f32>, u32, String), Error> {
    let mut decoder = Decoder::open(path)?;
    let mut samples = Vec::new();
    while decoder.advance()? {
        samples.extend_from_slice(decoder.chunk());
        let seconds = decoder.frames_decoded() as f64 / f64::from(decoder.sample_rate().max(1));
        if seconds > max_seconds {
            return Err(Error::ClipTooLong {
                path: path.to_owned(),
                seconds,
                max: max_seconds,
            });
        }
    }
    let rate = decoder.sample_rate();
    let hash = decoder.finish_hash()?;
    Ok((samples, rate, hash))
}

/// The SHA-256 of a file, read once (lower-case hex).
pub fn hash_file(path: &Path) -> Result<String, Error> {
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(io_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses a sample rate or channel count outside what audio uses (`params.rs`); `None`
/// (not said) passes, to be checked on the first decoded buffer.
fn check_bounds(path: &Path, rate: Option<u32>, channels: Option<usize>) -> Result<(), Error> {
    let out = |reason: String| {
        Err(Error::OutOfBounds {
            path: path.to_owned(),
            reason,
        })
    };
    if let Some(rate) = rate {
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
            return out(format!(
                "sample rate {rate} Hz is outside {MIN_SAMPLE_RATE}–{MAX_SAMPLE_RATE} Hz"
            ));
        }
    }
    if let Some(channels) = channels {
        if channels == 0 || channels > MAX_CHANNELS {
            return out(format!(
                "{channels} channels is outside 1–{MAX_CHANNELS} channels"
            ));
        }
    }
    Ok(())
}

/// The error for a panic in the decoding library (caught, see `guard.rs`).
fn panicked(path: &Path, stage: &str, message: String) -> Error {
    tracing::warn!(file = %path.display(), stage, message, "the decoding library panicked on this file; it fails alone");
    Error::DecoderPanic {
        path: path.to_owned(),
        stage: stage.to_owned(),
        message,
    }
}

/// Symphonia's messages, lower-case and without its module prefixes.
fn describe(e: &SymphoniaError) -> String {
    match e {
        SymphoniaError::IoError(e) => e.to_string(),
        SymphoniaError::DecodeError(m) => format!("malformed stream: {m}"),
        SymphoniaError::SeekError(_) => "seek failed".into(),
        SymphoniaError::Unsupported(m) => {
            let m = m.rsplit(": ").next().unwrap_or(m);
            format!("unsupported: {m}")
        }
        SymphoniaError::LimitError(m) => format!("limit exceeded: {m}"),
        SymphoniaError::ResetRequired => "stream parameters changed".into(),
    }
    .to_lowercase()
}

/// Printing: where the packet lies in the file, the frames dropped from its start and the
/// frames it added; or, `unindexed`, that it cannot be decoded alone.
fn note(
    log: &mut Option<(PacketLog, CodecSpec)>,
    hash: &Mutex<HashState>,
    packet: &symphonia::core::formats::Packet,
    drop: u32,
    out: u32,
    unindexed: bool,
) {
    if let Some((log, _)) = log {
        if unindexed {
            log.unindexed(out);
            return;
        }
        let state = hash.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(recent) = &state.recent {
            let trim = (packet.trim_start, packet.trim_end);
            log.packet(recent, &packet.data, trim, drop, out);
        }
    }
}

/// The hash of the bytes read so far: a prefix of the file, extended as reads reach its end.
#[derive(Default)]
struct HashState {
    hasher: Sha256,
    hashed_to: u64,
    /// Printing: the bytes read lately, where packets are looked for.
    recent: Option<Recent>,
}

/// The file as symphonia reads it, hashing bytes read in order. A reader that seeks (MP4
/// with its index at the end) leaves a gap, filled by [`Decoder::finish_hash`].
struct HashingSource {
    file: File,
    pos: u64,
    len: u64,
    hash: Arc<Mutex<HashState>>,
    /// Header bytes shown to symphonia in place of the file's (`wav::length_patches`); the
    /// hash is of the file's own.
    patches: Vec<(u64, [u8; 4])>,
}

impl Read for HashingSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        let end = self.pos + n as u64;
        let mut state = self.hash.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(recent) = &mut state.recent {
            recent.record(self.pos, &buf[..n]);
        }
        if self.pos <= state.hashed_to && end > state.hashed_to {
            let skip = (state.hashed_to - self.pos) as usize;
            state.hasher.update(&buf[skip..n]);
            state.hashed_to = end;
        }
        drop(state);
        for (at, value) in &self.patches {
            for (k, &b) in value.iter().enumerate() {
                let q = at + k as u64;
                if q >= self.pos && q < end {
                    buf[(q - self.pos) as usize] = b;
                }
            }
        }
        self.pos = end;
        Ok(n)
    }
}

impl Seek for HashingSource {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = self.file.seek(to)?;
        let mut state = self.hash.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(recent) = &mut state.recent {
            recent.seeked(self.pos);
        }
        Ok(self.pos)
    }
}

impl MediaSource for HashingSource {
    fn is_seekable(&self) -> bool {
        true
    }

    fn byte_len(&self) -> Option<u64> {
        Some(self.len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::process::Command;

    /// A stereo 16-bit WAV of `frames` frames: left a ramp of small integers, right its
    /// negative plus one (their mean is 0.5 / 32,768 on every frame).
    fn stereo_wav(path: &Path, rate: u32, frames: u32) {
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(path, spec).unwrap();
        for i in 0..frames {
            let v = (i % 1_000) as i16;
            w.write_sample(v).unwrap();
            w.write_sample(1 - v).unwrap();
        }
        w.finalize().unwrap();
    }

    fn ffmpeg(input: &Path, output: &Path, args: &[&str]) {
        let status = Command::new("ffmpeg")
            .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
            .arg(input)
            .args(args)
            .arg(output)
            .status()
            .expect("ffmpeg is needed for these tests: run scripts/test.sh");
        assert!(status.success(), "ffmpeg failed for {}", output.display());
    }

    #[test]
    fn a_stereo_wav_is_every_frame_mixed_to_mono_at_its_rate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stereo.wav");
        stereo_wav(&path, 48_000, 123_457);
        let (samples, rate, hash) = decode_all(&path).unwrap();
        assert_eq!(rate, 48_000);
        assert_eq!(samples.len(), 123_457);
        let mean = 0.5 / 32_768.0;
        assert!(samples.iter().all(|s| (s - mean).abs() < 1e-6));
        assert_eq!(hash, hash_file(&path).unwrap());
        assert_eq!(hash.len(), 64);
    }

    #[test]
    fn flac_decodes_to_the_samples_it_was_made_from() {
        let dir = tempfile::tempdir().unwrap();
        let wav = dir.path().join("tone.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 44_100,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&wav, spec).unwrap();
        let original: Vec<i16> = (0..100_003)
            .map(|i| ((i * 37) % 20_000 - 10_000) as i16)
            .collect();
        for &s in &original {
            w.write_sample(s).unwrap();
        }
        w.finalize().unwrap();
        let flac = dir.path().join("tone.flac");
        ffmpeg(&wav, &flac, &["-c:a", "flac"]);
        let mut d = Decoder::open(&flac).unwrap();
        assert_eq!(d.codec(), "flac");
        assert_eq!(d.total_frames(), Some(100_003));
        let mut samples = Vec::new();
        while let Some(chunk) = d.next_chunk().unwrap() {
            samples.extend_from_slice(chunk);
        }
        assert_eq!(d.sample_rate(), 44_100);
        assert_eq!(d.frames_decoded(), 100_003);
        // Lossless: every sample back exactly.
        assert!(samples
            .iter()
            .zip(&original)
            .all(|(&a, &b)| (a * 32_768.0).round() as i16 == b));
        assert_eq!(d.finish_hash().unwrap(), hash_file(&flac).unwrap());
    }

    #[test]
    fn an_mp3_is_trimmed_to_the_length_it_was_made_from() {
        let dir = tempfile::tempdir().unwrap();
        let wav = dir.path().join("noise.wav");
        // An odd length, so the last frame is padded; 5,678 samples ≠ a multiple of 1,152.
        let frames = 44_100 * 3 + 5_678;
        let mut rng = crate::synth::Rng::new(3);
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 44_100,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&wav, spec).unwrap();
        for _ in 0..frames {
            w.write_sample((rng.signed() * 8_000.0) as i16).unwrap();
        }
        w.finalize().unwrap();
        for (name, args) in [
            ("cbr.mp3", &["-c:a", "libmp3lame", "-b:a", "64k"][..]),
            ("vbr.mp3", &["-c:a", "libmp3lame", "-q:a", "4"][..]),
        ] {
            let mp3 = dir.path().join(name);
            ffmpeg(&wav, &mp3, args);
            let (samples, rate, _) = decode_all(&mp3).unwrap();
            assert_eq!(rate, 44_100);
            // The encoder delay (~1,105 samples) and the last frame's padding are gone (exactly,
            // with this ffmpeg): without the trimming this would be off by more than a frame.
            assert!(
                samples.len().abs_diff(frames as usize) <= 1_152,
                "{name}: {} samples for {frames}",
                samples.len()
            );
        }
    }

    #[test]
    fn a_file_that_is_not_audio_is_named_and_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("page.ogg");
        std::fs::write(&path, "<html>not found</html>\n".repeat(50)).unwrap();
        let Err(e) = Decoder::open(&path) else {
            panic!("decoded html");
        };
        assert!(matches!(e, Error::NotAudio { .. }), "{e}");
        assert!(e.to_string().contains("page.ogg"), "{e}");
        assert!(!e.is_retryable());
    }
}
