//! The clip curator: one `ClipInfo` per audio file, sent when new or changed (its size,
//! content or address; a file only touched is hashed again and found unchanged).
//!
//! Folders are walked recursively, in name order (so that which of two same-titled files is
//! kept does not depend on the file system); hidden entries are skipped and symbolic links
//! to folders are not followed (no loops); a link named like an audio file that leads to no
//! file (dangling, or a loop of links) is skipped with its reason. Each path given is one
//! unit: its new and changed clips are sent, then recorded in the state file.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use archivist::messages::{self, ClipInfo, MAX_DESCRIPTION, MAX_SHORT_TEXT};
use chrono::{DateTime, Utc};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::state::{self, ClipsState, SentClip};
use crate::{cut, fingerprint, CurateError, Sink, Skipped};

/// The audio files taken, by extension, with the `media_type` sent.
const CLIP_EXTENSIONS: &[(&str, &str)] = &[
    ("mp3", "mp3"),
    ("m4a", "m4a"),
    ("aac", "aac"),
    ("ogg", "ogg"),
    ("oga", "ogg"),
    ("flac", "flac"),
    ("wav", "wav"),
];

/// Extensions of audio files found but not taken, with why: the analyser could not read them.
const REFUSED_EXTENSIONS: &[(&str, &str)] = &[("opus", crate::parse::OPUS_REASON)];

/// Folders deeper than this are not walked (a bind mount into itself, a pathological tree).
const MAX_DEPTH: usize = 64;

/// Skipped files named one by one in a path's report, at most (the rest are counted).
pub const MAX_NAMED_SKIPS: usize = 50;

/// Characters left as they are in a path segment under a base URL: the unreserved ones.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The clip curator's settings. [`ClipSettings::new`] gives the defaults of `archivist
/// curate clips`; change the fields that differ.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClipSettings {
    /// Audio files, or folders (walked recursively), in the order they are read.
    pub paths: Vec<PathBuf>,
    /// Address the files under this URL (http, https or file) instead of as `file://` URLs:
    /// a file's path relative to the folder given (for a file given by itself: its name),
    /// percent-encoded, is appended to it. For a folder served to researchers on other
    /// machines.
    pub base_url: Option<String>,
    /// The priority of the clips sent (higher is more urgent). Default 0.
    pub priority: i32,
    /// The state file: what was sent per file (size, modification time, content hash).
    pub state_file: PathBuf,
}

impl ClipSettings {
    /// The defaults for `paths`, remembered in `state_file`.
    pub fn new(paths: Vec<PathBuf>, state_file: impl Into<PathBuf>) -> ClipSettings {
        ClipSettings {
            paths,
            base_url: None,
            priority: 0,
            state_file: state_file.into(),
        }
    }
}

/// What one pass did with one path given.
#[derive(Debug, Default, Clone, Serialize)]
#[non_exhaustive]
pub struct PathReport {
    /// The path as given.
    pub path: String,
    /// Audio files found under it.
    pub files_found: usize,
    /// Clips sent (or, in a dry run, written).
    pub sent: usize,
    /// Clips sent before and unchanged since.
    pub unchanged: usize,
    /// Files skipped, all of them.
    #[serde(rename = "skipped")]
    pub skipped_count: usize,
    /// The first [`MAX_NAMED_SKIPS`] files skipped, each with why.
    #[serde(rename = "skipped_files")]
    pub skipped: Vec<Skipped>,
    /// What a person should know (a file that keeps the title it was sent under).
    pub notes: Vec<String>,
    /// Each clip sent (or, in a dry run, written), with how findable it is.
    pub clips: Vec<CuratedClip>,
    /// Why the path failed (it cannot be read, or is no audio file we take), if it did.
    pub error: Option<String>,
}

/// A clip sent, and how findable it is: the level above its background from which the
/// analyser finds it, predicted from the clip alone ([`analysis::findability`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct CuratedClip {
    /// The clip's title.
    pub title: String,
    /// Its file.
    pub file: String,
    /// The lowest level over its background (dB: 12, 6, 0, -6 or -12) from which it is
    /// found; `null` when it is not found even at +12 dB, and when it could not be predicted
    /// (`findability` then says why).
    pub findable_from_db: Option<i32>,
    /// The same for a person: "findable from +6 dB over its background", or why it could not
    /// be predicted (the file cannot be decoded: the researchers will report it too).
    pub findability: String,
    /// What explains it, and the levels tried, when predicted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub findability_detail: Option<FindabilityDetail>,
}

/// The features behind a clip's findability (see [`analysis::findability::Findability`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FindabilityDetail {
    /// Landmarks per second of the clip.
    pub landmarks_per_s: f32,
    /// The share of its energy in the analysed band (94 Hz to 3.75 kHz), 0 to 1.
    pub in_band: f32,
    /// How steady its spectrum is from frame to frame, 0 to 1 (a held tone near 1).
    pub steadiness: f32,
    /// Each level tried (dB), and whether it was found there (in every synthetic
    /// background), in the order of the levels, loudest first.
    pub found: Vec<LevelFound>,
}

/// Whether a clip was found at one level.
#[derive(Debug, Clone, Serialize)]
pub struct LevelFound {
    /// The clip's level over its background (dB).
    pub db: i32,
    /// Whether it was found there.
    pub found: bool,
}

impl CuratedClip {
    /// The clip at `file`, titled `title`: its findability predicted (a clip that cannot be
    /// decoded says so).
    pub fn predict(title: String, file: &Path) -> CuratedClip {
        use analysis::findability;
        match findability::of_file(file, &analysis::Params::default()) {
            Ok(f) => CuratedClip {
                title,
                file: file.display().to_string(),
                findable_from_db: f.from_db,
                findability: f.describe(),
                findability_detail: Some(FindabilityDetail {
                    landmarks_per_s: f.landmarks_per_s,
                    in_band: f.in_band,
                    steadiness: f.steadiness,
                    found: findability::LEVELS_DB
                        .iter()
                        .zip(f.found)
                        .filter_map(|(&db, found)| Some(LevelFound { db, found: found? }))
                        .collect(),
                }),
            },
            Err(e) => CuratedClip {
                title,
                file: file.display().to_string(),
                findable_from_db: None,
                findability: format!("not predicted: {e}"),
                findability_detail: None,
            },
        }
    }
}

impl PathReport {
    fn skip(&mut self, item: String, reason: String) {
        self.skipped_count += 1;
        if self.skipped.len() < MAX_NAMED_SKIPS {
            self.skipped.push(Skipped { item, reason });
        }
    }
}

/// What one pass over the paths did. Serialized, it is the summary object of `archivist
/// curate clips --json`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ClipsPass {
    /// Whether the sink was a dry run's.
    pub dry_run: bool,
    /// Each path read, in order (all of them, unless the pass was cancelled).
    pub paths: Vec<PathReport>,
    /// Clips sent, all paths together.
    pub sent: usize,
    /// Paths that failed.
    pub failed: usize,
}

impl ClipsPass {
    /// Each path that failed, with its reason: `/srv/clips (cannot read it: …)`.
    pub fn failures(&self) -> Vec<String> {
        self.paths
            .iter()
            .filter_map(|r| Some(format!("{} ({})", r.path, r.error.as_ref()?)))
            .collect()
    }
}

/// The clip curator: its paths, its base URL, its state.
#[derive(Debug)]
pub struct ClipCurator {
    paths: Vec<PathBuf>,
    base: Option<Url>,
    priority: i32,
    state_file: PathBuf,
    state: ClipsState,
}

impl ClipCurator {
    /// Checks the base URL (a bad one is [`CurateError::Setting`]) and reads the state file
    /// (an unreadable one is [`CurateError::BadState`]).
    pub fn new(settings: ClipSettings) -> Result<ClipCurator, CurateError> {
        let base = settings
            .base_url
            .as_deref()
            .map(check_base_url)
            .transpose()?;
        let state: ClipsState = state::load(&settings.state_file)?;
        Ok(ClipCurator {
            paths: settings.paths,
            base,
            priority: settings.priority,
            state_file: settings.state_file,
            state,
        })
    }

    /// What was sent so far, as the state file has it.
    pub fn state(&self) -> &ClipsState {
        &self.state
    }

    /// One pass over every path: each is walked, its new and changed clips sent to `sink`,
    /// and recorded in the state file (unless `sink` is a dry run's); `on_path` gets each
    /// path's report as soon as it is done. A path that fails is reported, and the pass goes
    /// on. Stops between two paths once `token` is cancelled.
    ///
    /// An error is a failure of the curator itself (the sink, the state file): the paths
    /// reported so far are recorded, the one in hand is not.
    pub async fn pass(
        &mut self,
        sink: &Sink,
        token: &CancellationToken,
        mut on_path: impl FnMut(&PathReport),
    ) -> Result<ClipsPass, CurateError> {
        let dry_run = sink.is_dry_run();
        let now = Utc::now();
        // Clips are identified by title: a file sent before keeps its title while it exists;
        // among new files, the first one of this pass (paths in the order given) takes it.
        let mut titles: HashMap<String, PathBuf> = self
            .state
            .clips
            .iter()
            .filter(|(path, c)| !c.title.is_empty() && Path::new(path).exists())
            .map(|(path, c)| (c.title.clone(), PathBuf::from(path)))
            .collect();
        let mut reports = Vec::new();
        for given in &self.paths {
            if token.is_cancelled() {
                break;
            }
            let mut report = PathReport {
                path: given.display().to_string(),
                ..PathReport::default()
            };
            let root = given.clone();
            let walked = tokio::task::spawn_blocking(move || walk(&root))
                .await
                .map_err(|source| CurateError::Stopped {
                    what: format!("walking {}", given.display()),
                    source,
                })?;
            match walked {
                Err(e) => {
                    report.error = Some(e);
                }
                Ok((files, problems)) => {
                    for (item, reason) in problems {
                        report.skip(item, reason);
                    }
                    report.files_found = files.len();
                    let (bodies, records) = clips(
                        files,
                        self.base.as_ref(),
                        &self.state,
                        &mut titles,
                        self.priority,
                        now,
                        &mut report,
                    )
                    .await?;
                    sink.deliver(token, &bodies).await.map_err(|e| {
                        e.into_error(
                            format!("clips {}", given.display()),
                            bodies.len(),
                            "clips",
                            "run",
                        )
                    })?;
                    report.sent = bodies.len();
                    if !dry_run {
                        self.state.clips.extend(records);
                        state::save(&self.state_file, &self.state)?;
                    }
                }
            }
            on_path(&report);
            reports.push(report);
        }
        Ok(ClipsPass {
            dry_run,
            sent: reports.iter().map(|r| r.sent).sum(),
            failed: reports.iter().filter(|r| r.error.is_some()).count(),
            paths: reports,
        })
    }
}

/// A clip's title and description, from its file: the title tag (ID3v2 `TIT2`, Vorbis
/// `TITLE`, MP4 `©nam`, RIFF `INAM`), else the file name without its extension; the artist
/// and album tags as the description. A file whose tags cannot be read (not audio, or in a
/// format the analyser does not read) is named by its file name: the researchers report
/// what is wrong with it, per pair.
fn title_and_description(path: &Path) -> (Option<String>, String) {
    let tags = match analysis::read_tags(path) {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(file = %path.display(), error = %e, "no tags read: titled by its file name");
            analysis::Tags::default()
        }
    };
    let description = tags.artist_and_album().unwrap_or_default();
    (tags.title.or_else(|| file_title(path)), description)
}

/// The file name without its extension, if it is usable as a title.
fn file_title(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?.trim();
    (!stem.is_empty()).then(|| stem.to_string())
}

/// Why a file of this extension is found but not taken, if it is one of those.
fn refused(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    REFUSED_EXTENSIONS
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, why)| *why)
}

/// The `media_type` of a clip file, if it is audio we take.
fn clip_media_type(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    CLIP_EXTENSIONS
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, t)| *t)
}

/// A file found: its absolute path, and its path relative to the folder given (for a file
/// given by itself, its name), as `/`-separated segments.
#[derive(Debug)]
struct Found {
    path: PathBuf,
    relative: Vec<String>,
}

/// The base URL (`--base-url`): an http(s) or file URL, taken as a folder (a missing final
/// `/` is added).
fn check_base_url(given: &str) -> Result<Url, CurateError> {
    let mut url = Url::parse(given.trim()).map_err(|e| {
        CurateError::Setting(format!(
            "--base-url {given:?} is not a URL ({e}): expected e.g. https://media.example.org/clips/"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https" | "file") {
        return Err(CurateError::Setting(format!(
            "--base-url {given:?}: expected an http://, https:// or file:// URL"
        )));
    }
    // Anything after the path: a query or a fragment.
    if !url[url::Position::AfterPath..].is_empty() {
        return Err(CurateError::Setting(format!(
            "--base-url {given:?}: a folder's address has no query or fragment"
        )));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The messages for the files of one path (new or changed, each checked), and what to record
/// once they are sent.
async fn clips(
    files: Vec<Found>,
    base: Option<&Url>,
    state: &ClipsState,
    titles: &mut HashMap<String, PathBuf>,
    priority: i32,
    now: DateTime<Utc>,
    report: &mut PathReport,
) -> Result<(Vec<Vec<u8>>, Vec<(String, SentClip)>), CurateError> {
    let mut bodies = Vec::new();
    let mut records = Vec::new();
    for found in files {
        let shown = found.path.display().to_string();
        let Some(key) = found.path.to_str().map(str::to_string) else {
            report.skip(shown, "its path is not UTF-8".into());
            continue;
        };
        let Some(media_type) = clip_media_type(&found.path) else {
            continue;
        };
        let media_uri = match media_uri(&found, base) {
            Ok(u) => u,
            Err(why) => {
                report.skip(shown, why);
                continue;
            }
        };
        let previous = state.clips.get(&key);
        let meta = match std::fs::metadata(&found.path) {
            Ok(m) => m,
            Err(e) => {
                report.skip(shown, format!("cannot read it: {e}"));
                continue;
            }
        };
        let size = meta.len();
        let modified_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        // Same size and time: the content (and so its tags) is taken as unchanged, without
        // reading it again.
        let (sha256, tag_title, description) = match previous {
            Some(p) if p.size == size && p.modified_ns == modified_ns && modified_ns != 0 => {
                (p.sha256.clone(), None, p.description.clone())
            }
            _ => {
                let path = found.path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    hash_file(&path).map(|h| (h, title_and_description(&path)))
                });
                let read = read.await.map_err(|source| CurateError::Stopped {
                    what: "hashing".into(),
                    source,
                })?;
                match read {
                    Ok((h, (title, description))) => (h, title, description),
                    Err(e) => {
                        report.skip(shown, format!("cannot read it: {e}"));
                        continue;
                    }
                }
            }
        };
        // Clips are identified by title: a file sent before keeps the title it was sent
        // under even when its tag changes, since a new title would be a second clip (and its
        // address, still the first one's, would make it poison).
        let title = match previous.filter(|p| !p.title.is_empty()) {
            Some(p) => {
                let retitled = tag_title.filter(|t| cut(t, MAX_SHORT_TEXT).0 != p.title);
                if let Some(t) = retitled.filter(|_| report.notes.len() < MAX_NAMED_SKIPS) {
                    report.notes.push(format!(
                        "{shown} is now titled {t:?} but keeps the title it was sent under, \
                         {:?} (clips are identified by title)",
                        p.title
                    ));
                }
                Some(p.title.clone())
            }
            None => tag_title.or_else(|| file_title(&found.path)),
        };
        let Some(title) = title else {
            report.skip(
                shown,
                "no title tag and no usable file name for a title".into(),
            );
            continue;
        };
        let (title, _) = cut(&title, MAX_SHORT_TEXT);
        if let Some(first) = titles.get(&title).filter(|p| **p != found.path) {
            report.skip(
                shown,
                format!(
                    "the same title {title:?} as {} (clips are identified by title): retitle or rename one",
                    first.display()
                ),
            );
            continue;
        }
        titles.insert(title.clone(), found.path.clone());
        let (description, _) = cut(&description, MAX_DESCRIPTION);
        let (curator, _) = cut("archivist curate clips", MAX_SHORT_TEXT);
        let priority_text = priority.to_string();
        let mut parts = vec![
            title.as_str(),
            media_uri.as_str(),
            media_type,
            &priority_text,
            curator.as_str(),
            sha256.as_str(),
        ];
        // Only when there is one: a clip without tags keeps the fingerprint it had before
        // descriptions were sent, and is not sent again for nothing.
        if !description.is_empty() {
            parts.push(description.as_str());
        }
        let print = fingerprint(&parts);
        let first_sent = previous.map_or(now, |p| p.first_sent);
        let record = SentClip {
            title: title.clone(),
            description: description.clone(),
            size,
            modified_ns,
            sha256,
            fingerprint: print.clone(),
            first_sent,
        };
        if previous.is_some_and(|p| p.fingerprint == print) {
            report.unchanged += 1;
            // Touched but the same: remember the new time, so it is not hashed again.
            records.push((key, record));
            continue;
        }
        let clip = ClipInfo {
            initial_date_curated: first_sent,
            last_date_curated: now.max(first_sent),
            curator_information: curator,
            title,
            description,
            media_uri,
            media_type: media_type.to_string(),
            priority,
        };
        let body = messages::encode(&clip);
        if let Err(e) = messages::decode::<ClipInfo>(&body) {
            report.skip(shown, format!("would be refused by the archivists: {e}"));
            continue;
        }
        bodies.push(body);
        records.push((key, record));
        let (path, title) = (found.path.clone(), clip.title.clone());
        let predicted = tokio::task::spawn_blocking(move || CuratedClip::predict(title, &path));
        report
            .clips
            .push(predicted.await.map_err(|source| CurateError::Stopped {
                what: "predicting findability".into(),
                source,
            })?);
    }
    Ok((bodies, records))
}

/// The clip's address: under `base` (its relative path percent-encoded), else `file://`.
fn media_uri(found: &Found, base: Option<&Url>) -> Result<String, String> {
    match base {
        Some(base) => {
            let relative: Vec<String> = found
                .relative
                .iter()
                .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
                .collect();
            base.join(&relative.join("/"))
                .map(|u| u.to_string())
                .map_err(|e| format!("no address under --base-url: {e}"))
        }
        None => Url::from_file_path(&found.path)
            .map(|u| u.to_string())
            .map_err(|()| "no file:// address for its path".to_string()),
    }
}

/// SHA-256 of a file's content, hex, read a block at a time.
fn hash_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The audio files under `given` (itself, if a file), sorted, and the entries that could not
/// be read (with why). An error: `given` itself cannot be read.
#[allow(clippy::type_complexity)]
fn walk(given: &Path) -> Result<(Vec<Found>, Vec<(String, String)>), String> {
    let root = given
        .canonicalize()
        .map_err(|e| format!("cannot read it: {e}"))?;
    let meta = std::fs::metadata(&root).map_err(|e| format!("cannot read it: {e}"))?;
    let mut files = Vec::new();
    let mut problems = Vec::new();
    if meta.is_file() {
        let name = root
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| "its name is not UTF-8".to_string())?;
        if let Some(why) = refused(&root) {
            return Err(why.to_string());
        }
        if clip_media_type(&root).is_none() {
            return Err(format!(
                "not an audio file we take (by extension: {})",
                CLIP_EXTENSIONS
                    .iter()
                    .map(|(e, _)| *e)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        files.push(Found {
            path: root,
            relative: vec![name],
        });
        return Ok((files, problems));
    }
    walk_dir(&root, &mut Vec::new(), 0, &mut files, &mut problems);
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok((files, problems))
}

fn walk_dir(
    dir: &Path,
    relative: &mut Vec<String>,
    depth: usize,
    files: &mut Vec<Found>,
    problems: &mut Vec<(String, String)>,
) {
    if depth > MAX_DEPTH {
        problems.push((
            dir.display().to_string(),
            format!("deeper than {MAX_DEPTH} folders: not walked"),
        ));
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            problems.push((dir.display().to_string(), format!("cannot read it: {e}")));
            return;
        }
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            problems.push((path.display().to_string(), "its name is not UTF-8".into()));
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            relative.push(name);
            walk_dir(&path, relative, depth + 1, files, problems);
            relative.pop();
            continue;
        }
        // A symbolic link to a file is taken; to a folder, not followed. One that leads
        // nowhere (dangling, or a loop) is said when its name is an audio file's.
        let is_file = if kind.is_symlink() {
            match std::fs::metadata(&path) {
                Ok(m) => m.is_file(),
                Err(e) => {
                    if clip_media_type(&path).is_some() {
                        problems.push((
                            path.display().to_string(),
                            format!("a symbolic link that leads to no file: {e}"),
                        ));
                    }
                    continue;
                }
            }
        } else {
            kind.is_file()
        };
        if let Some(why) = refused(&path).filter(|_| is_file) {
            problems.push((path.display().to_string(), why.to_string()));
            continue;
        }
        if is_file && clip_media_type(&path).is_some() {
            let mut rel = relative.clone();
            rel.push(name);
            files.push(Found {
                path,
                relative: rel,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn titles_and_types() {
        assert_eq!(
            file_title(Path::new("/a/Intro Jingle.mp3")).unwrap(),
            "Intro Jingle"
        );
        // No such file: no tags, the file name.
        assert_eq!(
            title_and_description(Path::new("/nowhere/Outro.flac")),
            (Some("Outro".to_string()), String::new())
        );
        assert_eq!(clip_media_type(Path::new("/a/x.opus")), None);
        assert!(refused(Path::new("/a/x.OPUS")).is_some());
        assert_eq!(clip_media_type(Path::new("/a/x.OGA")), Some("ogg"));
        assert_eq!(clip_media_type(Path::new("/a/x.txt")), None);
    }

    #[test]
    fn base_url_addresses() {
        let base = check_base_url("https://media.example/clips").unwrap();
        let found = Found {
            path: PathBuf::from("/srv/clips/a b/c#1.mp3"),
            relative: vec!["a b".into(), "c#1.mp3".into()],
        };
        assert_eq!(
            media_uri(&found, Some(&base)).unwrap(),
            "https://media.example/clips/a%20b/c%231.mp3"
        );
        assert_eq!(
            media_uri(&found, None).unwrap(),
            "file:///srv/clips/a%20b/c%231.mp3"
        );
        assert!(check_base_url("ftp://x/").is_err());
    }

    /// A writer whose bytes the test reads afterwards.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A dry run writes one checked `ClipInfo` line per file and records nothing; a path
    /// that cannot be read is reported alone.
    #[tokio::test]
    async fn a_dry_run_writes_lines_and_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("clips")).unwrap();
        std::fs::write(dir.path().join("clips/Intro.wav"), b"RIFF").unwrap();
        std::fs::write(dir.path().join("clips/notes.txt"), b"x").unwrap();
        let state = dir.path().join("clips.json");
        let settings = ClipSettings::new(
            vec![dir.path().join("clips"), dir.path().join("missing")],
            &state,
        );
        let mut curator = ClipCurator::new(settings).unwrap();
        let out = Shared::default();
        let sink = Sink::dry_run(out.clone());
        let mut seen = Vec::new();
        let pass = curator
            .pass(&sink, &CancellationToken::new(), |r| {
                seen.push(r.path.clone())
            })
            .await
            .unwrap();
        assert_eq!(seen.len(), 2);
        assert!(pass.dry_run);
        assert_eq!((pass.sent, pass.failed), (1, 1));
        assert!(
            pass.failures()[0].contains("missing"),
            "{:?}",
            pass.failures()
        );
        let lines = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let clip: ClipInfo = messages::decode(lines.trim_end().as_bytes()).unwrap();
        assert_eq!(clip.title, "Intro");
        assert!(clip.media_uri.starts_with("file:///"), "{}", clip.media_uri);
        assert!(!state.exists());
        assert!(curator.state().clips.is_empty());
    }
}
