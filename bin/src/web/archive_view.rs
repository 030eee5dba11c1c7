//! The media archive as the server shows it ([`ArchiveView`]): which copies a page may play,
//! the versions of each episode, a copy's media type, and the archive's figures for the status
//! page, each read cheaply. A large archive on S3 costs a request per object listed, and the
//! status page reloads itself every few seconds: so every answer is kept for
//! [`FRESH_FOR`] (a copy once kept is kept for good: that answer is kept longer), and the
//! figures are counted in the background, the last ones shown meanwhile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use archive::{episode_key, EpisodeVersions, MediaArchive, VerifyReport};
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::watch;

/// How long one read of the archive may take while a request waits (the pages' own bound,
/// `app::CHECK_TIMEOUT`: this file is below `app.rs`, which holds the view).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer read from the archive is used before it is read again.
pub(super) const FRESH_FOR: Duration = Duration::from_secs(60);
/// The longest the figures may take to count (a large archive on S3) before the count is
/// given up and tried again at the next look.
const COUNT_TIMEOUT: Duration = Duration::from_secs(600);
/// Entries kept in each of the caches; past it, a cache starts again empty.
const CACHE_ENTRIES: usize = 20_000;
/// Episodes with more than one version listed by the figures (all are counted).
const CHANGED_SHOWN: usize = 20;
/// Failures of the last check listed by the figures (all are counted).
const FAILURES_SHOWN: usize = 20;

/// The archive's figures, as the status page and `/api/status` show them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ArchiveFigures {
    /// The archive, as it names itself (never a secret).
    pub(crate) archive: String,
    /// When they were counted.
    pub(crate) counted_at: DateTime<Utc>,
    /// Copies kept.
    pub(crate) copies: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Episodes the archive knows.
    pub(crate) episodes: u64,
    /// Versions recorded, over every episode.
    pub(crate) versions: u64,
    /// Episodes with more than one version kept.
    pub(crate) episodes_with_versions: u64,
    /// The first of them, latest aired first.
    pub(crate) changed: Vec<ChangedEpisode>,
    /// The last `archive verify`, if one was made.
    pub(crate) last_verify: Option<VerifySummary>,
}

/// An episode with more than one version kept.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChangedEpisode {
    pub(crate) title: String,
    pub(crate) date_aired: DateTime<Utc>,
    pub(crate) versions: u64,
    /// The SHA-256 of the version answered for.
    pub(crate) chosen: String,
}

/// The last `archive verify`, as shown.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VerifySummary {
    pub(crate) checked_at: DateTime<Utc>,
    pub(crate) copies: u64,
    pub(crate) bytes: u64,
    /// Copies that failed.
    pub(crate) failed: u64,
    /// The first of them, with why.
    pub(crate) failures: Vec<VerifyFailure>,
}

/// A copy the last check found damaged.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VerifyFailure {
    pub(crate) sha256: String,
    pub(crate) why: String,
}

/// An episode's versions as read, and when (none: the archive knows no such episode).
type ReadVersions = (Instant, Option<Arc<EpisodeVersions>>);

/// The last count: when it ended, and what it found or why it could not.
type Count = Option<(Instant, Result<Arc<ArchiveFigures>, String>)>;

/// The archive, as the server reads it (see the module's documentation).
pub(crate) struct ArchiveView {
    archive: Arc<dyn MediaArchive>,
    /// Copies known to be kept (for good: copies are never removed).
    kept: Mutex<HashSet<String>>,
    /// Copies found missing, and when.
    missing: Mutex<HashMap<String, Instant>>,
    /// Each episode's versions by key, and when they were read.
    versions: Mutex<HashMap<String, ReadVersions>>,
    /// Each version's media type (`mp3`), as recorded, by SHA-256.
    types: Mutex<HashMap<String, String>>,
    /// The copies the last check found damaged, and when the report was read.
    damaged: Mutex<Option<(Instant, Arc<HashSet<String>>)>>,
    /// The figures, counted in the background.
    count: watch::Sender<Count>,
    counting: std::sync::atomic::AtomicBool,
    /// The archive's name, its error texts masked with it.
    redactor: crate::panic_hook::Redactor,
}

impl std::fmt::Debug for ArchiveView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveView")
            .field("archive", &self.archive.describe())
            .finish_non_exhaustive()
    }
}

/// Inserts into a cache, starting it again when it is full.
fn bounded<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>, key: K, value: V) {
    if map.len() >= CACHE_ENTRIES {
        map.clear();
    }
    map.insert(key, value);
}

impl ArchiveView {
    /// A view of `archive`; `redactor` masks credentials in the error texts shown.
    pub(crate) fn new(
        archive: Arc<dyn MediaArchive>,
        redactor: crate::panic_hook::Redactor,
    ) -> Self {
        ArchiveView {
            archive,
            kept: Mutex::default(),
            missing: Mutex::default(),
            versions: Mutex::default(),
            types: Mutex::default(),
            damaged: Mutex::default(),
            count: watch::Sender::new(None),
            counting: std::sync::atomic::AtomicBool::new(false),
            redactor,
        }
    }

    /// The archive itself.
    pub(crate) fn archive(&self) -> &Arc<dyn MediaArchive> {
        &self.archive
    }

    fn say(&self, what: &str, e: impl std::fmt::Display) -> String {
        self.redactor.apply(&format!("{what}: {e}"))
    }

    /// The versions of the episode (`title`, `date_aired`), as the archive recorded them;
    /// `None` when it knows none, or cannot be read now (said in the log).
    pub(crate) async fn versions(
        &self,
        title: &str,
        date_aired: &DateTime<Utc>,
    ) -> Option<Arc<EpisodeVersions>> {
        let key = episode_key(title, date_aired);
        if let Ok(cache) = self.versions.lock() {
            if let Some((at, found)) = cache.get(&key) {
                if at.elapsed() < FRESH_FOR {
                    return found.clone();
                }
            }
        }
        let found = match tokio::time::timeout(CHECK_TIMEOUT, self.archive.versions(&key)).await {
            Ok(Ok(found)) => found.map(Arc::new),
            Ok(Err(e)) => {
                tracing::debug!("{}", self.say("the episode's versions not read", e));
                return None;
            }
            Err(_) => {
                tracing::debug!("the episode's versions not read in time");
                return None;
            }
        };
        if let Some(found) = &found {
            self.learn_types(found);
        }
        if let Ok(mut cache) = self.versions.lock() {
            bounded(&mut cache, key, (Instant::now(), found.clone()));
        }
        found
    }

    fn learn_types(&self, episode: &EpisodeVersions) {
        if let Ok(mut types) = self.types.lock() {
            for v in &episode.versions {
                if let Some(t) = &v.media_type {
                    bounded(&mut types, v.sha256.clone(), t.clone());
                }
            }
        }
    }

    /// The media type (`mp3`) recorded for the copy `sha256`, where a page or the figures
    /// read it.
    pub(crate) fn media_type(&self, sha256: &str) -> Option<String> {
        self.types.lock().ok()?.get(sha256).cloned()
    }

    /// The copies the last `archive verify` found damaged (read again after [`FRESH_FOR`]);
    /// empty when there was no check or the report cannot be read now.
    pub(crate) async fn damaged(&self) -> Arc<HashSet<String>> {
        if let Ok(cache) = self.damaged.lock() {
            if let Some((at, set)) = &*cache {
                if at.elapsed() < FRESH_FOR {
                    return set.clone();
                }
            }
        }
        let set = match tokio::time::timeout(CHECK_TIMEOUT, self.archive.report()).await {
            Ok(Ok(report)) => Arc::new(
                report
                    .map(|r| {
                        r.failed
                            .into_iter()
                            .map(|(sha, _)| sha)
                            .collect::<HashSet<_>>()
                    })
                    .unwrap_or_default(),
            ),
            Ok(Err(e)) => {
                tracing::debug!("{}", self.say("the last check's report not read", e));
                return Arc::default();
            }
            Err(_) => return Arc::default(),
        };
        if let Ok(mut cache) = self.damaged.lock() {
            *cache = Some((Instant::now(), set.clone()));
        }
        set
    }

    /// Whether a copy is kept under `sha256` (a SHA-256), found by `versions` (the episode's,
    /// already read) or asked of the archive. Not kept when the archive cannot say now.
    pub(crate) async fn kept(&self, sha256: &str, versions: Option<&EpisodeVersions>) -> bool {
        if archive::check_key(sha256).is_err() {
            return false;
        }
        if versions.is_some_and(|e| e.versions.iter().any(|v| v.sha256 == sha256)) {
            return true;
        }
        if self.kept.lock().is_ok_and(|k| k.contains(sha256)) {
            return true;
        }
        if let Ok(missing) = self.missing.lock() {
            if missing
                .get(sha256)
                .is_some_and(|at| at.elapsed() < FRESH_FOR)
            {
                return false;
            }
        }
        match tokio::time::timeout(CHECK_TIMEOUT, self.archive.size(sha256)).await {
            Ok(Ok(Some(_))) => {
                if let Ok(mut kept) = self.kept.lock() {
                    if kept.len() >= CACHE_ENTRIES {
                        kept.clear();
                    }
                    kept.insert(sha256.to_string());
                }
                true
            }
            Ok(Ok(None)) => {
                if let Ok(mut missing) = self.missing.lock() {
                    bounded(&mut missing, sha256.to_string(), Instant::now());
                }
                false
            }
            Ok(Err(e)) => {
                tracing::debug!("{}", self.say("a copy not looked up", e));
                false
            }
            Err(_) => false,
        }
    }

    /// What a page plays for a result measured on `sha256` of the episode (`title`,
    /// `date_aired`): the kept copy, unless the archive holds none under it or the last check
    /// found it damaged (then the page plays the show's media).
    pub(crate) async fn plays(
        &self,
        title: &str,
        date_aired: &DateTime<Utc>,
        sha256: Option<&str>,
    ) -> Option<Plays> {
        let sha256 = sha256?;
        let versions = self.versions(title, date_aired).await;
        if !self.kept(sha256, versions.as_deref()).await || self.damaged().await.contains(sha256) {
            return None;
        }
        Some(Plays {
            sha256: sha256.to_string(),
            versions,
        })
    }

    /// The figures: the last ones counted, counted again in the background once older than
    /// [`FRESH_FOR`]. The first look waits for the first count, within [`CHECK_TIMEOUT`].
    pub(crate) async fn figures(self: &Arc<Self>) -> Result<Arc<ArchiveFigures>, String> {
        let current = self.count.borrow().clone();
        let fresh = matches!(&current, Some((at, _)) if at.elapsed() < FRESH_FOR);
        if !fresh
            && !self
                .counting
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let me = self.clone();
            tokio::spawn(async move {
                let counted = match tokio::time::timeout(COUNT_TIMEOUT, me.count_now()).await {
                    Ok(Ok(figures)) => Ok(Arc::new(figures)),
                    Ok(Err(e)) => Err(me.say("the media archive", e)),
                    Err(_) => Err(format!(
                        "the media archive: not counted within {}",
                        humantime::format_duration(COUNT_TIMEOUT)
                    )),
                };
                me.count.send_replace(Some((Instant::now(), counted)));
                me.counting
                    .store(false, std::sync::atomic::Ordering::Release);
            });
        }
        if let Some((_, counted)) = current {
            return counted;
        }
        let mut changes = self.count.subscribe();
        let first =
            tokio::time::timeout(CHECK_TIMEOUT, changes.wait_for(|count| count.is_some())).await;
        match first {
            Ok(Ok(count)) => match &*count {
                Some((_, counted)) => counted.clone(),
                None => Err("the media archive is being counted".to_string()),
            },
            _ => Err(
                "the media archive is being counted: its figures show at the next reload"
                    .to_string(),
            ),
        }
    }

    /// Counts the figures now: every copy, every episode, the last check's report.
    async fn count_now(&self) -> Result<ArchiveFigures, archive::ArchiveError> {
        let copies = self.archive.copies().await?;
        let episodes = self.archive.episodes().await?;
        let report = self.archive.report().await?;
        for e in &episodes {
            self.learn_types(e);
        }
        let mut changed: Vec<&EpisodeVersions> =
            episodes.iter().filter(|e| e.versions.len() > 1).collect();
        changed.sort_by(|a, b| {
            b.date_aired
                .cmp(&a.date_aired)
                .then_with(|| a.title.cmp(&b.title))
        });
        if let Some(report) = &report {
            if let Ok(mut cache) = self.damaged.lock() {
                let set = report.failed.iter().map(|(sha, _)| sha.clone()).collect();
                *cache = Some((Instant::now(), Arc::new(set)));
            }
        }
        Ok(ArchiveFigures {
            archive: self.archive.describe(),
            counted_at: Utc::now(),
            copies: copies.len() as u64,
            bytes: copies.iter().map(|c| c.size).sum(),
            episodes: episodes.len() as u64,
            versions: episodes.iter().map(|e| e.versions.len() as u64).sum(),
            episodes_with_versions: changed.len() as u64,
            changed: changed
                .iter()
                .take(CHANGED_SHOWN)
                .map(|e| ChangedEpisode {
                    title: e.title.clone(),
                    date_aired: e.date_aired,
                    versions: e.versions.len() as u64,
                    chosen: e.chosen.clone(),
                })
                .collect(),
            last_verify: report.map(summary),
        })
    }
}

fn summary(report: VerifyReport) -> VerifySummary {
    VerifySummary {
        checked_at: report.checked_at,
        copies: report.copies,
        bytes: report.bytes,
        failed: report.failed.len() as u64,
        failures: report
            .failed
            .into_iter()
            .take(FAILURES_SHOWN)
            .map(|(sha256, why)| VerifyFailure { sha256, why })
            .collect(),
    }
}

/// What a page's player plays for one result: the kept copy it was measured on.
#[derive(Debug, Clone)]
pub(crate) struct Plays {
    /// The copy's SHA-256.
    pub(crate) sha256: String,
    /// The episode's versions, where the archive recorded them.
    pub(crate) versions: Option<Arc<EpisodeVersions>>,
}

impl Plays {
    /// The copy's SHA-256 as people read it: its first twelve digits.
    pub(crate) fn short(&self) -> &str {
        short(&self.sha256)
    }

    /// Versions kept of the episode (at least this one).
    pub(crate) fn version_count(&self) -> usize {
        self.versions
            .as_ref()
            .map_or(1, |v| v.versions.len().max(1))
    }
}

/// A SHA-256 as people read it: its first twelve digits.
pub(crate) fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}
