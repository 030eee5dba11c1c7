//! Browsing the archive: clips and episodes listed, searched by title and paged, and each one's
//! page (where a clip occurs; what was found in an episode and what is left to research).
//!
//! An optional capability ([`DataStore::browse`](crate::DataStore::browse)), apart from the
//! trait the archivists use, so that a datastore wrapper (a test's, say) need not implement it.
//! Every method only reads.
//!
//! Paging is by key, not by offset: a page's [`Page::next_cursor`] holds the sort key of its
//! last row, and the next page starts after it, so a row added meanwhile neither repeats a row
//! nor hides one, and a deep page costs what the first does. Cursors are opaque: only the
//! datastore that made one reads it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{ClipInfo, DataStoreError, EpisodeInfo, Result};

/// What a listing asks for.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Words that must each begin a word of the title (any case); empty or none: every row.
    pub search: Option<String>,
    /// Where the page starts: a [`Page::next_cursor`] of the same listing (and the same
    /// search); none: the first page.
    pub cursor: Option<String>,
    /// The most rows on the page: at least 1, at most [`MAX_PAGE`].
    pub limit: u32,
}

/// The most rows a page may ask for: a page is read in one statement.
pub const MAX_PAGE: u32 = 500;

/// A page of rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The rows, in the listing's order.
    pub items: Vec<T>,
    /// Where the next page starts; none when this one is the last.
    pub next_cursor: Option<String>,
}

/// A clip as listed: how often it was found, and its research.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClipSummary {
    /// The datastore's id of the clip (its page's address); stable for the clip's life.
    pub id: i64,
    /// The clip.
    pub clip: ClipInfo,
    /// Times it was found: every offset in every episode, the listing's order, most first.
    pub occurrences: u64,
    /// Episodes it was found in (matched pairs).
    pub episodes: u64,
    /// Its pairs recorded as failed.
    pub failed_pairs: u64,
    /// Its pairs in all: the number of episodes.
    pub total_pairs: u64,
    /// How findable it is, as its researchers last predicted it; absent until one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findability: Option<crate::Findability>,
}

/// An episode as listed, with its research.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeSummary {
    /// The datastore's id of the episode (its page's address); stable for the episode's life.
    pub id: i64,
    /// The episode.
    pub episode: EpisodeInfo,
    /// Its pairs researched successfully.
    pub researched_pairs: u64,
    /// Its pairs recorded as failed.
    pub failed_pairs: u64,
    /// Its researched pairs where the clip was found.
    pub matched_pairs: u64,
    /// Its pairs in all: the number of clips.
    pub total_pairs: u64,
}

/// An episode a clip was found in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Occurrence {
    /// The episode's id.
    pub episode_id: i64,
    /// The episode.
    pub episode: EpisodeInfo,
    /// Where the clip occurs, in nanoseconds from the episode's start, ascending.
    pub clip_offsets_ns: Vec<i64>,
    /// How sure the analyser was of each offset, from 0 to 1, in the order of
    /// `clip_offsets_ns`; absent when it gave no scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_match_scores: Option<Vec<f64>>,
    /// When the research was done.
    pub research_date: DateTime<Utc>,
    /// The SHA-256 of the episode's media the offsets were measured on (the result's
    /// `episode_hash`), where the result named one: see [`crate::Match::episode_media_sha256`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_media_sha256: Option<String>,
}

/// A clip's page: the clip and a page of the episodes it occurs in, latest aired first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipPage {
    /// The clip, as listed.
    pub summary: ClipSummary,
    /// The episodes it occurs in.
    pub occurrences: Page<Occurrence>,
}

/// One moment of an episode's timeline: a clip found at an offset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// Nanoseconds from the episode's start.
    pub offset_ns: i64,
    /// The clip's id.
    pub clip_id: i64,
    /// The clip's title.
    pub clip_title: String,
    /// The clip's length in nanoseconds, as its researcher measured it.
    pub clip_duration_ns: i64,
    /// How sure the analyser was of this occurrence, from 0 to 1; absent when it gave no
    /// score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_match_score: Option<f64>,
    /// The SHA-256 of the episode's media this offset was measured on (its result's
    /// `episode_hash`), where the result named one: see
    /// [`crate::Match::episode_media_sha256`]. Results of one episode may name different
    /// versions of its media.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_media_sha256: Option<String>,
}

/// A failed pair of an episode, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedPair {
    /// The clip's id.
    pub clip_id: i64,
    /// The clip's title.
    pub clip_title: String,
    /// Why the research failed, as the researcher said.
    pub reason: String,
}

/// An episode's page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodePage {
    /// The episode, as listed.
    pub summary: EpisodeSummary,
    /// Every clip found in it, once per offset, in the order they occur (ties: clip title).
    pub timeline: Vec<TimelineEntry>,
    /// The episode's length in nanoseconds as its researchers measured it (the longest their
    /// matched results give); none before a clip was found in it.
    pub duration_ns: Option<i64>,
    /// Pairs under a lease not expired at the time asked.
    pub leased_pairs: u64,
    /// Pairs neither researched, nor failed, nor leased.
    pub unresearched_pairs: u64,
    /// The failed pairs, by clip title, at most [`FAILED_SHOWN`] (`summary.failed_pairs`
    /// counts them all).
    pub failed: Vec<FailedPair>,
}

/// The most failed pairs an [`EpisodePage`] lists.
pub const FAILED_SHOWN: u32 = 100;

/// Reading the archive for people: listings with title search and pages. See the module
/// documentation. Every method reads only.
#[async_trait]
pub trait Browse: Send + Sync {
    /// Clips whose titles match `query.search`, most occurrences first (ties: title). Reads
    /// the matched and the failed results (partial indexes), not the results at large.
    async fn list_clips(&self, query: &ListQuery) -> Result<Page<ClipSummary>>;

    /// Episodes whose titles match `query.search`, latest aired first (ties: newest id).
    async fn list_episodes(&self, query: &ListQuery) -> Result<Page<EpisodeSummary>>;

    /// The clip with id `id` and a page of the episodes it occurs in, latest aired first;
    /// `None` when there is no such clip. `page.search` is ignored.
    async fn clip_page(&self, id: i64, page: &ListQuery) -> Result<Option<ClipPage>>;

    /// The episode with id `id`, its timeline, and its pairs left, leased (judged at `now`)
    /// and failed; `None` when there is no such episode.
    async fn episode_page(&self, id: i64, now: DateTime<Utc>) -> Result<Option<EpisodePage>>;
}

/// The words of a search: runs of letters and digits, lower-cased, at most 8 (a title search
/// needs no more; each is one more index probe). Everything else separates words, so no input
/// reaches a full-text query's syntax.
pub fn search_words(search: Option<&str>) -> Vec<String> {
    search
        .unwrap_or("")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(8)
        .map(str::to_lowercase)
        .collect()
}

/// Checks a page size.
pub(crate) fn page_limit(query: &ListQuery) -> Result<i64> {
    if query.limit == 0 || query.limit > MAX_PAGE {
        return Err(DataStoreError::Invalid(format!(
            "a page holds 1 to {MAX_PAGE} rows, not {}",
            query.limit
        )));
    }
    Ok(i64::from(query.limit))
}

/// The key of a listing's last row, as a cursor: hex of its JSON, so that it is one opaque
/// token in a URL. `kind` names the listing, so that one listing's cursor is refused by another.
pub(crate) fn encode_cursor(kind: &str, key: &(i64, i64, String)) -> String {
    let json = serde_json::json!([kind, key.0, key.1, key.2]).to_string();
    json.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The key in a cursor made by [`encode_cursor`] for `kind`; a cursor that is not one is
/// [`DataStoreError::Invalid`].
pub(crate) fn decode_cursor(
    kind: &str,
    cursor: Option<&str>,
) -> Result<Option<(i64, i64, String)>> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let invalid = || DataStoreError::Invalid("not a cursor of this listing".to_string());
    if cursor.len() % 2 != 0 || cursor.len() > 4096 {
        return Err(invalid());
    }
    let bytes = (0..cursor.len())
        .step_by(2)
        .map(|i| {
            cursor
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(invalid)?;
    let (k, a, b, c): (String, i64, i64, String) =
        serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if k != kind {
        return Err(invalid());
    }
    Ok(Some((a, b, c)))
}

/// Keeps `limit` of `rows` (read one more than that, to know whether a page follows) and the
/// cursor after the last kept.
pub(crate) fn paged<T>(
    mut rows: Vec<T>,
    limit: i64,
    kind: &str,
    key: impl Fn(&T) -> (i64, i64, String),
) -> Page<T> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = if more {
        rows.last().map(|r| encode_cursor(kind, &key(r)))
    } else {
        None
    };
    Page {
        items: rows,
        next_cursor,
    }
}

/// A timeline in the order the clips occur (ties: clip title, then id).
pub(crate) fn sort_timeline(timeline: &mut [TimelineEntry]) {
    timeline.sort_by(|a, b| {
        (a.offset_ns, &a.clip_title, a.clip_id).cmp(&(b.offset_ns, &b.clip_title, b.clip_id))
    });
}

/// An episode's page from what both adapters read.
pub(crate) fn episode_page(
    summary: EpisodeSummary,
    timeline: Vec<TimelineEntry>,
    leased: i64,
    duration_ns: Option<i64>,
    failed: Vec<FailedPair>,
) -> EpisodePage {
    let leased_pairs = count(leased);
    let unresearched_pairs = summary
        .total_pairs
        .saturating_sub(summary.researched_pairs + summary.failed_pairs + leased_pairs);
    EpisodePage {
        summary,
        timeline,
        duration_ns: duration_ns.filter(|&ns| ns > 0),
        leased_pairs,
        unresearched_pairs,
        failed,
    }
}

/// `n` from the database as a count.
pub(crate) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_words_keep_letters_and_digits_only() {
        assert_eq!(
            search_words(Some("  Épisode 4012: the 'Archive' & <b>")),
            vec!["épisode", "4012", "the", "archive", "b"]
        );
        assert!(search_words(Some(" :*'\" ")).is_empty());
        assert!(search_words(None).is_empty());
    }

    #[test]
    fn cursors_round_trip_and_refuse_others() {
        let key = (7, -3, "a \"title\"\n".to_string());
        let c = encode_cursor("clips", &key);
        assert_eq!(decode_cursor("clips", Some(&c)).ok(), Some(Some(key)));
        assert!(decode_cursor("episodes", Some(&c)).is_err());
        assert!(decode_cursor("clips", Some("zz")).is_err());
        assert!(decode_cursor("clips", Some("abc")).is_err());
        assert!(decode_cursor("clips", Some("é")).is_err());
        assert_eq!(decode_cursor("clips", None).ok(), Some(None));
    }
}
