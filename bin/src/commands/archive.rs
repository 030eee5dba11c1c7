//! `archivist archive`: operates a media archive (crate `archive`): lists each episode's kept
//! versions, checks every kept copy against its SHA-256, shows the space used, exports the
//! chosen copies as a folder of episodes with an RSS feed of them, and chooses the version an
//! episode is answered for (its pairs then researched again).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use archive::{episode_key, EpisodeVersions, MediaArchive, Version};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::values::{usage, MediaArchiveArgs};

/// `archive --help`'s long description.
pub(crate) const ABOUT: &str = "The media archive (--media-archive, ARCHIVIST_MEDIA_ARCHIVE: a \
directory, or s3://bucket/prefix): each episode's media as fetched from the show, kept once \
and named by its SHA-256, and the versions kept of each episode (a show that stitches ads into \
each download serves another file each time), one of them chosen: the one research reads and \
answers for, the first kept until an operator chooses another.\n\n\
`archive versions` lists each episode's versions and which is chosen. `archive verify` reads \
every kept copy and checks it against its SHA-256, names each damaged or missing one, and \
keeps the report for the status page; it never deletes anything. `archive space` shows the \
copies, bytes, episodes and versions. `archive export DIR` copies each episode's chosen copy \
into DIR (checked against its SHA-256) with a readable name, and writes DIR/feed.xml, an RSS \
feed of them for a podcast app; exporting again copies only what is missing. `archive choose` \
makes another recorded version the one answered for, and forgets the episode's results in the \
datastore (DATABASE_URL) so that its pairs are researched again on that version.";

/// `archive --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
    archivist archive --media-archive ./archivist-media versions\n  \
    ARCHIVIST_MEDIA_ARCHIVE=s3://my-bucket/media archivist archive verify\n  \
    archivist archive versions --episode 'Episode 4012: The Archive' --json\n  \
    archivist archive space --json\n  \
    archivist archive export ~/Podcasts/my-show --base-url https://example.com/my-show/\n  \
    archivist archive choose --episode 'Episode 4012: The Archive' --version 3f2a9c01\n\n\
Exit codes: 0 done (verify: every copy whole); 1 verify or export found a damaged or missing \
copy (each named; nothing deleted), or the archive or datastore could not be read; 2 bad usage \
(no --media-archive, an episode or version not in the archive, an archive that cannot be used \
as given).";

/// Options of `archive`.
#[derive(Debug, Args)]
pub(crate) struct ArchiveArgs {
    #[command(flatten)]
    pub(crate) archive: MediaArchiveArgs,
    #[command(subcommand)]
    pub(crate) action: Action,
}

/// What to do with the archive.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Each episode the archive knows, its versions, and which one is chosen
    #[command(visible_alias = "list")]
    Versions {
        /// Only the episodes with this title (any air date)
        #[arg(long)]
        episode: Option<String>,
        /// One JSON object an episode: `key`, `title`, `date_aired`, `chosen`, `versions`
        #[arg(long)]
        json: bool,
    },
    /// Read every kept copy and check it against its SHA-256 (never deletes)
    Verify {
        /// One JSON object a copy: `sha256`, `size`, `damage` (null when whole), `episodes`
        #[arg(long)]
        json: bool,
    },
    /// The copies, bytes, episodes and versions the archive holds
    Space {
        /// One JSON object
        #[arg(long)]
        json: bool,
    },
    /// Copy each episode's chosen copy into DIR, with DIR/feed.xml, an RSS feed of them
    Export {
        /// The folder (created if missing)
        dir: PathBuf,
        /// Where DIR will be served: the feed's enclosures are absolute URLs under it
        /// [default: relative to the feed]
        #[arg(long, value_name = "URL")]
        base_url: Option<url::Url>,
        /// The feed's title
        #[arg(long, default_value = "archivist: the archive's episodes")]
        title: String,
        /// One JSON object: what was copied
        #[arg(long)]
        json: bool,
    },
    /// Make a recorded version the one answered for, and research the episode again on it
    // `--version` names the episode's version here, not archivist's.
    #[command(disable_version_flag = true)]
    Choose {
        /// The episode's title
        #[arg(long)]
        episode: String,
        /// When it aired (RFC 3339), when two episodes have its title
        #[arg(long, value_name = "RFC3339")]
        aired: Option<DateTime<Utc>>,
        /// The version's SHA-256, or a prefix of it that names one version (as `archive
        /// versions` shows it)
        #[arg(long, value_name = "SHA256")]
        version: String,
    },
}

/// Runs `archive`.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &ArchiveArgs,
) -> anyhow::Result<()> {
    let Some(archive) = connect::media_archive(&args.archive).await? else {
        return Err(usage(
            "no media archive: give --media-archive (ARCHIVIST_MEDIA_ARCHIVE), a directory or \
             s3://bucket/prefix",
        ));
    };
    let described = archive.describe();
    let work = async {
        match &args.action {
            Action::Versions { episode, json } => {
                versions(archive.as_ref(), episode.as_deref(), *json).await
            }
            Action::Verify { json } => verify(archive.as_ref(), *json).await,
            Action::Space { json } => space(archive.as_ref(), *json).await,
            Action::Export {
                dir,
                base_url,
                title,
                json,
            } => {
                export(
                    archive.as_ref(),
                    &Export {
                        dir,
                        base_url: base_url.as_ref(),
                        title,
                        json: *json,
                    },
                )
                .await
            }
            Action::Choose {
                episode,
                aired,
                version,
            } => choose(config, token, &archive, episode, *aired, version).await,
        }
    };
    tokio::select! {
        done = work => done.with_context(|| format!("media archive {described}")),
        () = token.cancelled() => anyhow::bail!("interrupted"),
    }
}

/// Every episode of the archive, latest aired first (ties: title).
async fn episodes(archive: &dyn MediaArchive) -> anyhow::Result<Vec<EpisodeVersions>> {
    let mut episodes = archive.episodes().await?;
    episodes.sort_by(|a, b| {
        b.date_aired
            .cmp(&a.date_aired)
            .then_with(|| a.title.cmp(&b.title))
    });
    Ok(episodes)
}

/// The first digits of a SHA-256, as tables show it.
fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}

fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A table without borders, as the other commands print them.
fn table(header: Vec<&str>) -> Table {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header);
    table
}

/// An episode as `versions --json` prints it.
#[derive(Debug, Serialize)]
struct EpisodeLine<'a> {
    key: String,
    #[serde(flatten)]
    episode: &'a EpisodeVersions,
}

async fn versions(
    archive: &dyn MediaArchive,
    title: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let episodes: Vec<EpisodeVersions> = episodes(archive)
        .await?
        .into_iter()
        .filter(|e| title.is_none_or(|t| e.title == t))
        .collect();
    let mut out = std::io::stdout().lock();
    if json {
        for episode in &episodes {
            let line = EpisodeLine {
                key: episode_key(&episode.title, &episode.date_aired),
                episode,
            };
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
        }
        return Ok(());
    }
    if episodes.is_empty() {
        match title {
            Some(t) => writeln!(out, "no episode {t:?} in {}", archive.describe())?,
            None => writeln!(out, "no episodes in {}", archive.describe())?,
        }
        return Ok(());
    }
    let mut t = table(vec![
        "episode",
        "aired",
        "version",
        "size",
        "kept at",
        "chosen",
        "media_uri",
        "etag",
    ]);
    for episode in &episodes {
        for (i, v) in episode.versions.iter().enumerate() {
            let (name, aired) = if i == 0 {
                (episode.title.clone(), rfc3339(&episode.date_aired))
            } else {
                (String::new(), String::new())
            };
            t.add_row(vec![
                name,
                aired,
                short(&v.sha256).to_string(),
                v.size.to_string(),
                rfc3339(&v.kept_at),
                if v.sha256 == episode.chosen {
                    "chosen".to_string()
                } else {
                    String::new()
                },
                v.media_uri.clone(),
                v.etag.clone().unwrap_or_default(),
            ]);
        }
    }
    writeln!(out, "{t}")?;
    Ok(())
}

/// A checked copy, as `verify --json` prints it.
#[derive(Debug, Serialize)]
struct CheckedLine {
    sha256: String,
    size: u64,
    damage: Option<String>,
    /// The titles of the episodes it is a version of.
    episodes: Vec<String>,
}

async fn verify(archive: &dyn MediaArchive, json: bool) -> anyhow::Result<()> {
    let mut copies = archive.copies().await?;
    copies.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    // Which episodes each copy is a version of, to name them beside a damaged copy.
    let mut of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in archive.episodes().await? {
        for v in &e.versions {
            of.entry(v.sha256.clone())
                .or_default()
                .push(e.title.clone());
        }
    }
    let mut lines = Vec::with_capacity(copies.len());
    let mut bytes = 0u64;
    for copy in &copies {
        bytes = bytes.saturating_add(copy.size);
        let damage = archive.verify(&copy.sha256).await?;
        lines.push(CheckedLine {
            sha256: copy.sha256.clone(),
            size: copy.size,
            damage,
            episodes: of.get(&copy.sha256).cloned().unwrap_or_default(),
        });
    }
    // A version recorded for an episode whose copy is not kept is as lost as a damaged one.
    let kept: HashSet<&str> = copies.iter().map(|c| c.sha256.as_str()).collect();
    for (sha256, titles) in &of {
        if !kept.contains(sha256.as_str()) {
            lines.push(CheckedLine {
                sha256: sha256.clone(),
                size: 0,
                damage: Some("missing: recorded as a version but not kept".to_string()),
                episodes: titles.clone(),
            });
        }
    }
    let failed: Vec<(String, String)> = lines
        .iter()
        .filter_map(|l| Some((l.sha256.clone(), l.damage.clone()?)))
        .collect();
    archive
        .put_report(&archive::VerifyReport {
            checked_at: Utc::now(),
            copies: copies.len() as u64,
            bytes,
            failed: failed.clone(),
        })
        .await
        .context("cannot keep the report")?;
    let mut out = std::io::stdout().lock();
    if json {
        for line in &lines {
            serde_json::to_writer(&mut out, line)?;
            out.write_all(b"\n")?;
        }
    } else if !failed.is_empty() {
        let mut t = table(vec!["damaged", "size", "episodes", "why"]);
        for line in lines.iter().filter(|l| l.damage.is_some()) {
            t.add_row(vec![
                line.sha256.clone(),
                line.size.to_string(),
                line.episodes.join("; "),
                line.damage.clone().unwrap_or_default(),
            ]);
        }
        writeln!(out, "{t}")?;
    }
    out.flush()?;
    let whole = lines.len() - failed.len();
    eprintln!(
        "{} copies, {bytes} bytes checked: {whole} whole, {} damaged or missing",
        copies.len(),
        failed.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        let named: Vec<&str> = failed.iter().map(|(s, _)| short(s)).collect();
        Err(anyhow!(
            "{} of the archive's copies are damaged or missing ({}); nothing was deleted",
            failed.len(),
            named.join(", ")
        ))
    }
}

/// What `archive space` shows.
#[derive(Debug, Serialize)]
struct Space {
    archive: String,
    /// Copies kept.
    copies: u64,
    /// Their bytes.
    bytes: u64,
    /// Episodes with at least one version.
    episodes: u64,
    /// Versions recorded, over all episodes.
    versions: u64,
    /// The bytes of the chosen versions only (what an export copies).
    chosen_bytes: u64,
    /// Copies no episode names as a version (kept while recording failed, say).
    unrecorded_copies: u64,
    /// When `archive verify` last ran, and what it found damaged.
    last_verified: Option<DateTime<Utc>>,
    last_verify_failed: Option<u64>,
}

async fn space(archive: &dyn MediaArchive, json: bool) -> anyhow::Result<()> {
    let copies = archive.copies().await?;
    let episodes = archive.episodes().await?;
    let report = archive.report().await?;
    let sizes: BTreeMap<&str, u64> = copies.iter().map(|c| (c.sha256.as_str(), c.size)).collect();
    let named: HashSet<&str> = episodes
        .iter()
        .flat_map(|e| e.versions.iter().map(|v| v.sha256.as_str()))
        .collect();
    let space = Space {
        archive: archive.describe(),
        copies: copies.len() as u64,
        bytes: copies.iter().map(|c| c.size).sum(),
        episodes: episodes.len() as u64,
        versions: episodes.iter().map(|e| e.versions.len() as u64).sum(),
        chosen_bytes: episodes
            .iter()
            .filter_map(|e| sizes.get(e.chosen.as_str()))
            .sum(),
        unrecorded_copies: copies
            .iter()
            .filter(|c| !named.contains(c.sha256.as_str()))
            .count() as u64,
        last_verified: report.as_ref().map(|r| r.checked_at),
        last_verify_failed: report.as_ref().map(|r| r.failed.len() as u64),
    };
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &space)?;
        writeln!(out)?;
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    let mut row = |name: &str, value: String| {
        t.add_row(vec![name.to_string(), value]);
    };
    row("archive", space.archive.clone());
    row("copies", space.copies.to_string());
    row(
        "bytes",
        format!("{} ({})", space.bytes, human_bytes(space.bytes)),
    );
    row("episodes", space.episodes.to_string());
    row("versions", space.versions.to_string());
    row(
        "chosen versions' bytes",
        format!(
            "{} ({})",
            space.chosen_bytes,
            human_bytes(space.chosen_bytes)
        ),
    );
    row("copies of no episode", space.unrecorded_copies.to_string());
    row(
        "last verified",
        match &report {
            Some(r) => format!(
                "{} ({} damaged or missing)",
                rfc3339(&r.checked_at),
                r.failed.len()
            ),
            None => "never (archivist archive verify)".to_string(),
        },
    );
    writeln!(out, "{t}")?;
    Ok(())
}

/// Bytes in powers of 1000, for people.
fn human_bytes(n: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// What `archive export` was asked.
struct Export<'a> {
    dir: &'a Path,
    base_url: Option<&'a url::Url>,
    title: &'a str,
    json: bool,
}

/// An episode's file in an export.
struct Exported {
    title: String,
    date_aired: DateTime<Utc>,
    sha256: String,
    file: String,
    size: u64,
    mime: &'static str,
}

/// What `archive export --json` prints.
#[derive(Debug, Serialize)]
struct ExportSummary {
    dir: String,
    feed: String,
    /// Episodes in the feed.
    episodes: u64,
    /// Files copied by this export.
    copied: u64,
    /// Their bytes.
    bytes_copied: u64,
    /// Files an earlier export left there, whole.
    already: u64,
    /// Episodes left out: their chosen copy is damaged or missing.
    failed: Vec<String>,
}

async fn export(archive: &dyn MediaArchive, how: &Export<'_>) -> anyhow::Result<()> {
    let dir = how.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut episodes = episodes(archive).await?;
    // Oldest first, as files and a feed are read.
    episodes.reverse();
    let mut exported = Vec::new();
    let mut failed = Vec::new();
    let (mut copied, mut bytes_copied, mut already) = (0u64, 0u64, 0u64);
    for episode in &episodes {
        let Some(version) = episode.chosen() else {
            failed.push(format!(
                "{:?}: its chosen version {} is not among its versions",
                episode.title,
                short(&episode.chosen)
            ));
            continue;
        };
        // The name's digits come from the archive's own checked key, never as given.
        let sha256 = archive::check_key(&version.sha256)?.to_string();
        let ext = match version.media_type.as_deref().and_then(extension) {
            Some(ext) => ext,
            None => sniff(archive, version).await,
        };
        let file = file_name(&episode.title, &episode.date_aired, &sha256, &ext);
        let path = dir.join(&file);
        let there = std::fs::metadata(&path)
            .map(|m| m.is_file() && m.len() == version.size)
            .unwrap_or(false);
        if there {
            already += 1;
        } else {
            match copy_in(archive, &sha256, dir, &path).await {
                Ok(n) => {
                    copied += 1;
                    bytes_copied += n;
                }
                Err(e @ archive::ArchiveError::Damaged { .. })
                | Err(e @ archive::ArchiveError::NotFound(_)) => {
                    failed.push(format!("{:?}: {e}", episode.title));
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        exported.push(Exported {
            title: episode.title.clone(),
            date_aired: episode.date_aired,
            sha256,
            mime: mime(&ext),
            file,
            size: version.size,
        });
    }
    let feed = dir.join("feed.xml");
    let xml = feed_xml(how.title, how.base_url, &exported);
    write_atomic(dir, &feed, xml.as_bytes())
        .with_context(|| format!("cannot write {}", feed.display()))?;
    let summary = ExportSummary {
        dir: dir.display().to_string(),
        feed: feed.display().to_string(),
        episodes: exported.len() as u64,
        copied,
        bytes_copied,
        already,
        failed: failed.clone(),
    };
    let mut out = std::io::stdout().lock();
    if how.json {
        serde_json::to_writer(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "exported {} episodes to {}: {copied} copied ({}), {already} already there; \
             the feed is {}",
            exported.len(),
            dir.display(),
            human_bytes(bytes_copied),
            feed.display()
        )?;
    }
    out.flush()?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "{} episodes left out of the export, their copy damaged or missing (nothing was \
             deleted): {}",
            failed.len(),
            failed.join("; ")
        ))
    }
}

/// Copies the copy `sha256` to `path` through a temporary file in `dir` (checked against its
/// SHA-256 on the way), so that no half file ever carries an episode's name.
async fn copy_in(
    archive: &dyn MediaArchive,
    sha256: &str,
    dir: &Path,
    path: &Path,
) -> Result<u64, archive::ArchiveError> {
    let unavailable = |e: std::io::Error| archive::ArchiveError::Unavailable {
        archive: dir.display().to_string(),
        why: e.to_string(),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".archivist-export-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(unavailable)?;
    let n = archive.copy_to(sha256, tmp.path()).await?;
    tmp.persist(path).map_err(|e| unavailable(e.error))?;
    Ok(n)
}

/// Writes `bytes` to `path` through a temporary file in `dir` and a rename.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".archivist-export-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// An export's file name: the airing day, the title made safe, the version's first digits
/// (two versions or two episodes of one day and title never share a file), the extension:
/// `2025-12-31 Episode 4012 - The Archive [3f2a9c01].mp3`.
fn file_name(title: &str, aired: &DateTime<Utc>, sha256: &str, ext: &str) -> String {
    format!(
        "{} {} [{}].{ext}",
        aired.format("%Y-%m-%d"),
        safe_title(title),
        sha256.get(..8).unwrap_or(sha256)
    )
}

/// The longest title kept in a file name, in bytes (names are at most 255 on most file
/// systems).
const MAX_TITLE_BYTES: usize = 160;

/// `title` as part of a file name on any common file system: path separators, characters
/// Windows and macOS refuse (`<>:"|?*`), control characters and runs of dots become `_` or
/// are dropped, whitespace is one space, at most [`MAX_TITLE_BYTES`].
fn safe_title(title: &str) -> String {
    let mut out = String::with_capacity(title.len());
    for c in title.chars() {
        let c = match c {
            '/' | '\\' | '<' | '>' | ':' | '"' | '|' | '?' | '*' => '_',
            c if c.is_control() || c.is_whitespace() => ' ',
            c => c,
        };
        // No runs of dots (`..`), no runs of spaces.
        if (c == '.' || c == ' ') && out.ends_with(c) {
            continue;
        }
        if out.len() + c.len_utf8() > MAX_TITLE_BYTES {
            break;
        }
        out.push(c);
    }
    let trimmed = out.trim_matches(|c: char| c == ' ' || c == '.');
    if trimmed.is_empty() {
        "episode".to_string()
    } else {
        trimmed.to_string()
    }
}

/// An extension from a curated `media_type`: its letters and digits only, lowercase, at most
/// five; `None` when nothing is left.
fn extension(media_type: &str) -> Option<String> {
    // A MIME type names its format after the slash (`audio/mpeg`).
    let given = media_type.rsplit('/').next().unwrap_or(media_type);
    let ext: String = given
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let ext = match ext.as_str() {
        "mpeg" | "mpeg3" | "xmp3" => "mp3".to_string(),
        "mp4" | "xm4a" => "m4a".to_string(),
        "xwav" | "wave" => "wav".to_string(),
        "xflac" => "flac".to_string(),
        _ => ext,
    };
    (!ext.is_empty() && ext.len() <= 5).then_some(ext)
}

/// The extension the copy's first bytes say, for a version kept without a `media_type`.
async fn sniff(archive: &dyn MediaArchive, version: &Version) -> String {
    let head = archive
        .read(&version.sha256, 0..version.size.min(12))
        .await
        .unwrap_or_default();
    let ext = match head.as_slice() {
        [b'I', b'D', b'3', ..] => "mp3",
        [0xFF, b, ..] if b & 0xE0 == 0xE0 && b & 0x06 == 0 => "aac",
        [0xFF, b, ..] if b & 0xE0 == 0xE0 => "mp3",
        [b'f', b'L', b'a', b'C', ..] => "flac",
        [b'O', b'g', b'g', b'S', ..] => "ogg",
        [b'R', b'I', b'F', b'F', ..] => "wav",
        [0x1A, 0x45, 0xDF, 0xA3, ..] => "webm",
        [_, _, _, _, b'f', b't', b'y', b'p', ..] => "m4a",
        _ => "bin",
    };
    ext.to_string()
}

/// The MIME type of an extension, for the feed's enclosures.
fn mime(ext: &str) -> &'static str {
    match ext {
        "mp3" => "audio/mpeg",
        "m4a" | "mp4" => "audio/mp4",
        "aac" => "audio/aac",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "flac" => "audio/flac",
        "wav" => "audio/wav",
        "webm" => "audio/webm",
        _ => "application/octet-stream",
    }
}

/// `text` escaped for XML 1.0 content and attribute values; characters XML cannot carry at
/// all (controls but tab and line breaks, U+FFFE, U+FFFF) are left out.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// A file name as a relative URL: everything but unreserved characters percent-encoded.
fn url_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The RSS 2.0 feed of an export: one item per episode, its enclosure the file (relative to
/// the feed, or under `base_url`), newest first.
fn feed_xml(title: &str, base_url: Option<&url::Url>, files: &[Exported]) -> String {
    let base = base_url.map(|u| {
        let mut u = u.clone();
        if !u.path().ends_with('/') {
            let path = format!("{}/", u.path());
            u.set_path(&path);
        }
        u
    });
    let link = base.as_ref().map_or("./".to_string(), |u| u.to_string());
    let mut xml = String::new();
    xml.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str("<rss version=\"2.0\">\n<channel>\n");
    xml.push_str(&format!("  <title>{}</title>\n", xml_escape(title)));
    xml.push_str(&format!("  <link>{}</link>\n", xml_escape(&link)));
    xml.push_str(
        "  <description>The episodes kept in an archivist media archive, each the version \
         research answers for.</description>\n",
    );
    xml.push_str("  <generator>archivist archive export</generator>\n");
    for f in files.iter().rev() {
        let relative = url_path(&f.file);
        let url = match &base {
            Some(b) => b.join(&relative).map_or(relative, |u| u.to_string()),
            None => relative,
        };
        xml.push_str("  <item>\n");
        xml.push_str(&format!("    <title>{}</title>\n", xml_escape(&f.title)));
        xml.push_str(&format!(
            "    <pubDate>{}</pubDate>\n",
            f.date_aired.to_rfc2822()
        ));
        xml.push_str(&format!(
            "    <guid isPermaLink=\"false\">sha256:{}</guid>\n",
            f.sha256
        ));
        xml.push_str(&format!(
            "    <enclosure url=\"{}\" length=\"{}\" type=\"{}\"/>\n",
            xml_escape(&url),
            f.size,
            f.mime
        ));
        xml.push_str("  </item>\n");
    }
    xml.push_str("</channel>\n</rss>\n");
    xml
}

/// `archive choose`: the version chosen in the archive, then the episode's results forgotten
/// in the datastore so that its pairs are researched again, on that version.
async fn choose(
    config: &Config,
    token: &CancellationToken,
    archive: &Arc<dyn MediaArchive>,
    title: &str,
    aired: Option<DateTime<Utc>>,
    version: &str,
) -> anyhow::Result<()> {
    let named: Vec<EpisodeVersions> = archive
        .episodes()
        .await?
        .into_iter()
        .filter(|e| e.title == title && aired.is_none_or(|a| e.date_aired == a))
        .collect();
    let episode = match named.as_slice() {
        [] => {
            return Err(usage(format!(
                "the archive {} holds no episode {title:?}{} (see `archivist archive versions`)",
                archive.describe(),
                aired.map_or(String::new(), |a| format!(" aired {}", rfc3339(&a)))
            )))
        }
        [one] => one,
        several => {
            let dates: Vec<String> = several
                .iter()
                .map(|e| {
                    e.date_aired
                        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
                })
                .collect();
            return Err(usage(format!(
                "{} episodes are titled {title:?}: name one with --aired ({})",
                several.len(),
                dates.join(", ")
            )));
        }
    };
    let wanted = version.trim().to_ascii_lowercase();
    let matching: Vec<&Version> = episode
        .versions
        .iter()
        .filter(|v| !wanted.is_empty() && v.sha256.starts_with(&wanted))
        .collect();
    let chosen = match matching.as_slice() {
        [one] => *one,
        [] => {
            let known: Vec<&str> = episode.versions.iter().map(|v| short(&v.sha256)).collect();
            return Err(usage(format!(
                "episode {title:?} has no version {version:?} (its versions: {})",
                known.join(", ")
            )));
        }
        _ => {
            return Err(usage(format!(
                "{version:?} names {} versions of episode {title:?}: give more of the SHA-256",
                matching.len()
            )))
        }
    };
    let key = episode_key(&episode.title, &episode.date_aired);
    let was = episode.chosen.clone();
    archive.choose(&key, &chosen.sha256).await?;
    tracing::info!(episode = %title, version = %chosen.sha256, was = %was, "version chosen");
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    let forgot = store
        .forget_episode_results(&episode.title, episode.date_aired)
        .await
        .context("the version is chosen, but the episode's results could not be forgotten (run the same command again)")?;
    let mut out = std::io::stdout().lock();
    let from = if was == chosen.sha256 {
        "(it was already chosen)".to_string()
    } else {
        format!("(was {})", short(&was))
    };
    writeln!(
        out,
        "episode {title:?}: version {} ({} bytes, from {}) is chosen {from}",
        short(&chosen.sha256),
        chosen.size,
        chosen.media_uri
    )?;
    match forgot {
        Some(n) => writeln!(
            out,
            "{n} result(s) forgotten: the next pending-research run leases its pairs again, \
             researched on this version"
        )?,
        None => writeln!(
            out,
            "the datastore has no episode {title:?} aired {}: nothing to research again",
            rfc3339(&episode.date_aired)
        )?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_make_safe_file_names() {
        for hostile in [
            "../../etc/passwd",
            "..",
            ".",
            "a/b\\c",
            "\0\n\t",
            "CON:<>|?*\"",
            "...hidden",
        ] {
            let name = safe_title(hostile);
            assert!(!name.contains('/') && !name.contains('\\'), "{name:?}");
            assert!(!name.contains(".."), "{name:?}");
            assert!(!name.starts_with('.') && !name.is_empty(), "{name:?}");
            assert!(!name.chars().any(char::is_control), "{name:?}");
        }
        assert_eq!(
            safe_title("Episode 4012: The Archive"),
            "Episode 4012_ The Archive"
        );
        let long = "é".repeat(400);
        assert!(safe_title(&long).len() <= MAX_TITLE_BYTES);
    }

    #[test]
    fn extensions_are_letters_and_digits() {
        assert_eq!(extension("mp3").as_deref(), Some("mp3"));
        assert_eq!(extension("audio/mpeg").as_deref(), Some("mp3"));
        assert_eq!(extension("../x").as_deref(), Some("x"));
        assert_eq!(extension("/.."), None);
        assert_eq!(extension("averylongtype"), None);
    }

    #[test]
    fn xml_is_escaped_and_urls_encoded() {
        assert_eq!(xml_escape("a<b>&\"c'\u{1}"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(url_path("a b&c.mp3"), "a%20b%26c.mp3");
    }
}
