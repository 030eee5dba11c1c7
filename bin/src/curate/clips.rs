//! `archivist curate clips PATH…`: one `ClipInfo` per audio file, sent when new or changed
//! (its size, content or address; a file only touched is hashed again and found unchanged).
//!
//! Folders are walked recursively, in name order (so that which of two same-titled files is
//! kept does not depend on the file system); hidden entries are skipped and symbolic links
//! to folders are not followed (no loops); a link named like an audio file that leads to no
//! file (dangling, or a loop of links) is skipped with its reason. Each path given is one unit: its new and changed
//! clips are sent, then recorded in the state file.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use archivist::messages::{self, ClipInfo, MAX_DESCRIPTION, MAX_SHORT_TEXT};
use chrono::{DateTime, Utc};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::parse::Skipped;
use super::state::{self, ClipsState, SentClip};
use super::{cut, fingerprint, say, ClipsArgs, Sink};
use crate::config::Config;
use crate::values::usage;

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
const REFUSED_EXTENSIONS: &[(&str, &str)] = &[("opus", super::parse::OPUS_REASON)];

/// Folders deeper than this are not walked (a bind mount into itself, a pathological tree).
const MAX_DEPTH: usize = 64;

/// Skipped files named one by one in the reports, at most.
const MAX_NAMED_SKIPS: usize = 50;

/// Characters left as they are in a path segment under `--base-url`: the unreserved ones.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A clip's title and description, from its file: the title tag (ID3v2 `TIT2`, Vorbis
/// `TITLE`, MP4 `©nam`, RIFF `INAM`), else the file name without its extension; the artist
/// and album tags as the description. A file whose tags cannot be read (not audio, or in a
/// format the analyser does not read) is named by its file name: the researchers report
/// what is wrong with it, per pair.
pub(crate) fn title_and_description(path: &Path) -> (Option<String>, String) {
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

/// What one path gave.
#[derive(Debug, Default)]
struct PathReport {
    path: String,
    files_found: usize,
    sent: usize,
    unchanged: usize,
    skipped: Vec<Skipped>,
    skipped_count: usize,
    notes: Vec<String>,
    error: Option<String>,
}

impl PathReport {
    fn skip(&mut self, item: String, reason: String) {
        self.skipped_count += 1;
        if self.skipped.len() < MAX_NAMED_SKIPS {
            self.skipped.push(Skipped { item, reason });
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "path": self.path,
            "files_found": self.files_found,
            "sent": self.sent,
            "unchanged": self.unchanged,
            "skipped": self.skipped_count,
            "skipped_files": self.skipped,
            "notes": self.notes,
            "error": self.error,
        })
    }

    fn say(&self, dry_run: bool) {
        let sent = if dry_run { "would be sent" } else { "sent" };
        match &self.error {
            Some(e) => say(&format!("clips {}: FAILED: {e}", self.path)),
            None => say(&format!(
                "clips {}: {} audio files, {} {sent}, {} unchanged, {} skipped",
                self.path, self.files_found, self.sent, self.unchanged, self.skipped_count
            )),
        }
        for note in &self.notes {
            say(&format!("  note: {note}"));
        }
        for s in &self.skipped {
            say(&format!("  skipped {}: {}", s.item, s.reason));
        }
        if self.skipped_count > self.skipped.len() {
            say(&format!(
                "  and {} more skipped",
                self.skipped_count - self.skipped.len()
            ));
        }
    }
}

/// Runs `curate clips`.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: ClipsArgs,
) -> anyhow::Result<()> {
    let base = args.base_url.as_deref().map(check_base_url).transpose()?;
    let mut state: ClipsState = state::load(&args.state)?;
    let sink = Sink::open(
        config,
        &token,
        &config.queues.clips,
        args.dry_run,
        false,
        "curate clips",
    )
    .await?;
    let now = Utc::now();
    // Clips are identified by title: a file sent before keeps its title while it exists;
    // among new files, the first one of this run (paths in the order given) takes it.
    let mut titles: HashMap<String, PathBuf> = state
        .clips
        .iter()
        .filter(|(path, c)| !c.title.is_empty() && Path::new(path).exists())
        .map(|(path, c)| (c.title.clone(), PathBuf::from(path)))
        .collect();
    let mut failed = Vec::new();
    let mut reports = Vec::new();
    for given in &args.paths {
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
            .map_err(|e| anyhow!("walking {} stopped: {e}", given.display()))?;
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
                    base.as_ref(),
                    &state,
                    &mut titles,
                    args.priority,
                    now,
                    &mut report,
                )
                .await?;
                sink.deliver(&token, &bodies).await.map_err(|e| {
                    e.context(format!(
                        "clips {}: {} clips not sent (they will be at the next run)",
                        given.display(),
                        bodies.len()
                    ))
                })?;
                report.sent = bodies.len();
                if !args.dry_run {
                    state.clips.extend(records);
                    state::save(&args.state, &state)?;
                }
            }
        }
        if let Some(e) = &report.error {
            failed.push(format!("{} ({e})", given.display()));
        }
        if !args.json {
            report.say(args.dry_run);
        }
        reports.push(report);
    }
    if args.json {
        let sent: usize = reports.iter().map(|r| r.sent).sum();
        super::print_json(&json!({
            "dry_run": args.dry_run,
            "paths": reports.iter().map(PathReport::json).collect::<Vec<_>>(),
            "sent": sent,
            "failed": failed.len(),
        }))?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "{} of {} paths failed: {}",
            failed.len(),
            args.paths.len(),
            failed.join("; ")
        ))
    }
}

/// `--base-url`: an http(s) or file URL, taken as a folder (a missing final `/` is added).
fn check_base_url(given: &str) -> anyhow::Result<Url> {
    let mut url = Url::parse(given.trim()).map_err(|e| {
        usage(format!(
            "--base-url {given:?} is not a URL ({e}): expected e.g. https://media.example.org/clips/"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https" | "file") {
        return Err(usage(format!(
            "--base-url {given:?}: expected an http://, https:// or file:// URL"
        )));
    }
    // Anything after the path: a query or a fragment.
    if !url[url::Position::AfterPath..].is_empty() {
        return Err(usage(format!(
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
) -> anyhow::Result<(Vec<Vec<u8>>, Vec<(String, SentClip)>)> {
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
                match read.await.context("hashing stopped")? {
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
}
