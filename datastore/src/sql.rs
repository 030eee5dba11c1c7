//! What the two SQL adapters share: the logic that is the same whatever the dialect, written
//! once over [`Dialect`], which each adapter implements with its own SQL.
//!
//! - [`StoreRow`]: reading a column as the domain wants it (a time, a list of offsets, an
//!   episode's counter), each dialect as it stores it; then one copy of every row mapping.
//! - The browse pages ([`list_clips`], [`list_episodes`], [`clip_page`], [`episode_page`]):
//!   built with a [`QueryBuilder`] from the dialect's fragments, every value bound.
//! - Completions read with their matches, and announced on the database bus
//!   ([`read_completions`], [`announce_in`]).
//! - The checks of an upsert's batch ([`Curated`], [`newest`], [`batch_uri_conflict`]).
//!
//! What differs in flow stays in each adapter: its transactions and locking (Postgres: READ
//! COMMITTED with row locks and retries; SQLite: one writer at a time), lease selection,
//! recording, and the upsert's statements.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Database, QueryBuilder};
use uuid::Uuid;

use crate::browse;
use crate::{
    ClipInfo, ClipMatch, ClipPage, ClipSummary, CompletionId, EpisodeCompletion, EpisodeInfo,
    EpisodePage, EpisodeSummary, FailedPair, FailureReason, LeaseState, LeaseSummary, ListQuery,
    Match, Occurrence, Page, Result, Status, TimelineEntry, FAILED_SHOWN,
};

/// A row of either dialect, read as the domain wants it. Each dialect stores some values its
/// own way (SQLite: times as INTEGER microseconds, offsets as JSON text; Postgres: TIMESTAMPTZ,
/// `int8[]`, INT4 counters), and says here how to read them back.
pub(crate) trait StoreRow: sqlx::Row {
    /// A text column.
    fn text<I: ColumnIndex<Self>>(&self, at: I) -> Result<String>;
    /// A 64-bit integer column (ids, durations, `count(*)`).
    fn int<I: ColumnIndex<Self>>(&self, at: I) -> Result<i64>;
    /// A priority.
    fn priority<I: ColumnIndex<Self>>(&self, at: I) -> Result<i32>;
    /// One of an episode's stored counters (`researched_count`, …).
    fn counter<I: ColumnIndex<Self>>(&self, at: I) -> Result<i64>;
    /// A boolean column.
    fn flag<I: ColumnIndex<Self>>(&self, at: I) -> Result<bool>;
    /// A UUID column.
    fn uuid<I: ColumnIndex<Self>>(&self, at: I) -> Result<Uuid>;
    /// A stored time.
    fn time<I: ColumnIndex<Self>>(&self, at: I) -> Result<DateTime<Utc>>;
    /// A result's stored offsets, as stored (unsorted).
    fn offsets<I: ColumnIndex<Self>>(&self, at: I) -> Result<Vec<i64>>;
    /// A nullable column of match scores (`clip_match_scores`).
    fn scores<I: ColumnIndex<Self>>(&self, at: I) -> Result<Option<Vec<f64>>>;
    /// A nullable 32-bit integer column (`findable_from_db`).
    fn opt_int32<I: ColumnIndex<Self>>(&self, at: I) -> Result<Option<i32>>;
}

/// The [`StoreRow`] methods whose values every dialect stores as sqlx decodes them, for a
/// dialect's `impl StoreRow`.
macro_rules! decoded_columns {
    () => {
        fn text<I: sqlx::ColumnIndex<Self>>(&self, at: I) -> Result<String> {
            Ok(self.try_get(at)?)
        }
        fn int<I: sqlx::ColumnIndex<Self>>(&self, at: I) -> Result<i64> {
            Ok(self.try_get(at)?)
        }
        fn priority<I: sqlx::ColumnIndex<Self>>(&self, at: I) -> Result<i32> {
            Ok(self.try_get(at)?)
        }
        fn flag<I: sqlx::ColumnIndex<Self>>(&self, at: I) -> Result<bool> {
            Ok(self.try_get(at)?)
        }
        fn uuid<I: sqlx::ColumnIndex<Self>>(&self, at: I) -> Result<Uuid> {
            Ok(self.try_get(at)?)
        }
        fn opt_int32<I: sqlx::ColumnIndex<Self>>(&self, at: I) -> Result<Option<i32>> {
            Ok(self.try_get(at)?)
        }
    };
}
pub(crate) use decoded_columns;

/// The connection of dialect `D`'s database.
pub(crate) type Conn<D> = <<D as Dialect>::DB as Database>::Connection;

/// Which unannounced completions [`read_completions`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which<'a> {
    /// The oldest, at most this many.
    All(u32),
    /// The oldest nobody holds (not claimed, or claimed until no later than this time), at
    /// most this many, for announcing them in the caller's transaction (Postgres: locked,
    /// those another announcer has locked skipped).
    ToAnnounce(u32, DateTime<Utc>),
    /// Those of these episodes.
    Claimed(&'a [i64]),
}

/// What the shared logic asks of a dialect: its SQL where it differs, how it binds the values
/// it stores its own way, and how it runs a statement. Every fragment is a constant; every
/// value is bound.
#[async_trait]
pub(crate) trait Dialect: Send + Sync {
    /// The sqlx database.
    type DB: Database<Row = Self::Row>;
    /// Its row.
    type Row: StoreRow;

    /// A result `r`'s `matched` as the dialect's partial indexes of matches spell it.
    const MATCHED: &'static str;
    /// The occurrences among matched results `r`: the sum of their offsets' counts, as an
    /// INT8.
    const OCCURRENCES: &'static str;
    /// Narrows the clips listing to titles matching the bound search, up to the search (the
    /// statement closes the parenthesis).
    const CLIP_SEARCH: &'static str;
    /// Narrows the episodes listing likewise (after a `WHERE`, so beginning `AND`).
    const EPISODE_SEARCH: &'static str;

    /// The title search, bound after [`CLIP_SEARCH`](Self::CLIP_SEARCH) or
    /// [`EPISODE_SEARCH`](Self::EPISODE_SEARCH), for `words` ([`browse::search_words`]).
    fn search_query(words: &[String]) -> String;
    /// Binds an integer.
    fn push_int(q: &mut QueryBuilder<'_, Self::DB>, value: i64);
    /// Binds a text.
    fn push_text(q: &mut QueryBuilder<'_, Self::DB>, value: String);
    /// Binds a time as the dialect stores it.
    fn push_time(q: &mut QueryBuilder<'_, Self::DB>, value: DateTime<Utc>);
    /// Binds a cursor's time (unix microseconds) as the dialect stores times.
    fn push_cursor_time(q: &mut QueryBuilder<'_, Self::DB>, micros: i64) -> Result<()>;

    /// Runs the statement built in `q`: every row.
    async fn fetch_all(
        conn: &mut Conn<Self>,
        q: &mut QueryBuilder<'_, Self::DB>,
    ) -> Result<Vec<Self::Row>>;
    /// Runs the statement built in `q`: its first row, if any.
    async fn fetch_optional(
        conn: &mut Conn<Self>,
        q: &mut QueryBuilder<'_, Self::DB>,
    ) -> Result<Option<Self::Row>>;

    /// The completions `which` names, oldest first, with the columns
    /// [`read_completions`] reads.
    async fn completion_rows(conn: &mut Conn<Self>, which: Which<'_>) -> Result<Vec<Self::Row>>;
    /// The matched results of the episodes `ids` (`episode_id`, `clip_offsets_ns` and the
    /// clip's columns), through the partial index of matches.
    async fn completion_matches(conn: &mut Conn<Self>, ids: &[i64]) -> Result<Vec<Self::Row>>;
    /// Lets go of announced completions, unless their episode completed again since.
    async fn completions_announced_in(conn: &mut Conn<Self>, ids: &[CompletionId]) -> Result<u64>;
    /// Sends `bodies` on the database bus's queue `queue` in the caller's transaction.
    async fn send_in(conn: &mut Conn<Self>, queue: &str, bodies: Vec<Vec<u8>>) -> Result<()>;
}

// ------------------------------------------------------------------------------------ rows

/// An episode from its columns (by name).
pub(crate) fn episode_from_row<R: StoreRow>(row: &R) -> Result<EpisodeInfo>
where
    for<'a> &'a str: ColumnIndex<R>,
{
    Ok(EpisodeInfo {
        initial_date_curated: row.time("initial_date_curated")?,
        last_date_curated: row.time("last_date_curated")?,
        curator_information: row.text("curator_information")?,
        date_aired: row.time("date_aired")?,
        title: row.text("title")?,
        description: row.text("description")?,
        media_uri: row.text("media_uri")?,
        media_type: row.text("media_type")?,
        priority: row.priority("priority")?,
    })
}

/// A clip from its columns (by name).
pub(crate) fn clip_from_row<R: StoreRow>(row: &R) -> Result<ClipInfo>
where
    for<'a> &'a str: ColumnIndex<R>,
{
    Ok(ClipInfo {
        initial_date_curated: row.time("initial_date_curated")?,
        last_date_curated: row.time("last_date_curated")?,
        curator_information: row.text("curator_information")?,
        title: row.text("title")?,
        description: row.text("description")?,
        media_uri: row.text("media_uri")?,
        media_type: row.text("media_type")?,
        priority: row.priority("priority")?,
    })
}

/// A match from a row of (episode title, aired, clip title, offsets, research date, scores,
/// episode hash).
pub(crate) fn match_from_row<R: StoreRow>(row: &R) -> Result<Match>
where
    usize: ColumnIndex<R>,
{
    Ok(Match {
        episode_title: row.text(0)?,
        episode_date_aired: row.time(1)?,
        clip_title: row.text(2)?,
        clip_offsets_ns: row.offsets(3)?,
        clip_match_scores: row.scores(5)?,
        research_date: row.time(4)?,
        episode_media_sha256: crate::model::media_sha256(row.text(6)?),
    })
}

/// The counts of `status`, from a row of (episodes, clips, researched, matched, active
/// leases, expired leases, leased pairs, leases awaiting late results, failed).
pub(crate) fn status_from_row<R: StoreRow>(row: &R) -> Result<Status>
where
    usize: ColumnIndex<R>,
{
    let count = |i: usize| -> Result<u64> { Ok(browse::count(row.int(i)?)) };
    let (episodes, clips) = (count(0)?, count(1)?);
    Ok(Status {
        episodes,
        clips,
        research_pairs: episodes.saturating_mul(clips),
        researched_pairs: count(2)?,
        matched_pairs: count(3)?,
        active_leases: count(4)?,
        expired_leases: count(5)?,
        leased_pairs: count(6)?,
        awaiting_late_results: count(7)?,
        failed_pairs: count(8)?,
    })
}

/// A lease as listed, judged at `now`, from a row of (id, episode title, aired, created,
/// expires, held pairs, revoked).
pub(crate) fn lease_summary_from_row<R: StoreRow>(
    row: &R,
    now: DateTime<Utc>,
) -> Result<LeaseSummary>
where
    usize: ColumnIndex<R>,
{
    let expires_at = row.time(4)?;
    Ok(LeaseSummary {
        id: row.uuid(0)?,
        episode_title: row.text(1)?,
        episode_date_aired: row.time(2)?,
        created_at: row.time(3)?,
        expires_at,
        held_pairs: browse::count(row.int(5)?),
        state: LeaseState::at(expires_at, row.flag(6)?, now),
    })
}

/// A failure reason from a row of (reason, pairs).
pub(crate) fn failure_reason_from_row<R: StoreRow>(row: &R) -> Result<FailureReason>
where
    usize: ColumnIndex<R>,
{
    Ok(FailureReason {
        reason: row.text(0)?,
        pairs: browse::count(row.int(1)?),
    })
}

/// The columns of a clip row, for [`clip_from_row`] (and its id).
const CLIP_COLUMNS: &str = "c.id, c.title, c.initial_date_curated, c.last_date_curated, \
     c.curator_information, c.description, c.media_uri, c.media_type, c.priority";

/// The columns of an episode row, for [`episode_from_row`] (and its id).
pub(crate) const EPISODE_COLUMNS: &str = "e.id, e.title, e.date_aired, e.initial_date_curated, \
     e.last_date_curated, e.curator_information, e.description, e.media_uri, e.media_type, \
     e.priority";

/// The episodes with their counters, as [`episode_summary_from_row`] reads them, up to the
/// `WHERE`.
const EPISODE_SUMMARY: &str = "SELECT e.id, e.title, e.date_aired, e.initial_date_curated, \
     e.last_date_curated, e.curator_information, e.description, e.media_uri, e.media_type, \
     e.priority, e.researched_count, e.failed_count, e.matched_count, \
     (SELECT count(*) FROM clips) AS total_pairs \
     FROM episodes e";

fn episode_summary_from_row<R: StoreRow>(row: &R) -> Result<EpisodeSummary>
where
    for<'a> &'a str: ColumnIndex<R>,
{
    let researched = row.counter("researched_count")?;
    let failed = row.counter("failed_count")?;
    Ok(EpisodeSummary {
        id: row.int("id")?,
        episode: episode_from_row(row)?,
        researched_pairs: browse::count(researched - failed),
        failed_pairs: browse::count(failed),
        matched_pairs: browse::count(row.counter("matched_count")?),
        total_pairs: browse::count(row.int("total_pairs")?),
    })
}

fn clip_summary_from_row<R: StoreRow>(row: &R) -> Result<ClipSummary>
where
    for<'a> &'a str: ColumnIndex<R>,
{
    Ok(ClipSummary {
        id: row.int("id")?,
        clip: clip_from_row(row)?,
        occurrences: browse::count(row.int("occurrences")?),
        episodes: browse::count(row.int("episodes")?),
        failed_pairs: browse::count(row.int("failed_pairs")?),
        total_pairs: browse::count(row.int("total_pairs")?),
        findability: crate::Findability::from_stored(row.opt_int32("findable_from_db")?),
    })
}

// ------------------------------------------------------------------------------------ browsing

/// [`Browse::list_clips`](crate::Browse::list_clips) on `conn`.
pub(crate) async fn list_clips<D: Dialect>(
    conn: &mut Conn<D>,
    query: &ListQuery,
) -> Result<Page<ClipSummary>>
where
    for<'a> &'a str: ColumnIndex<D::Row>,
{
    let limit = browse::page_limit(query)?;
    let after = browse::decode_cursor("clips", query.cursor.as_deref())?;
    let words = browse::search_words(query.search.as_deref());
    // Occurrences and failures are counted from the partial indexes on matched and failed
    // results: a few rows per clip, never the results at large.
    let mut q = QueryBuilder::<D::DB>::new("SELECT * FROM (SELECT ");
    q.push(CLIP_COLUMNS)
        .push(
            ", c.findable_from_db, COALESCE(o.n, 0) AS occurrences, COALESCE(o.e, 0) AS episodes, \
             COALESCE(f.n, 0) AS failed_pairs, \
             (SELECT count(*) FROM episodes) AS total_pairs \
             FROM clips c \
             LEFT JOIN (SELECT r.clip_id, ",
        )
        .push(D::OCCURRENCES)
        .push(" AS n, count(*) AS e FROM research_results r WHERE ")
        .push(D::MATCHED)
        .push(
            " GROUP BY r.clip_id) o ON o.clip_id = c.id \
             LEFT JOIN (SELECT clip_id, count(*) AS n FROM research_results \
                        WHERE failure IS NOT NULL GROUP BY clip_id) f ON f.clip_id = c.id",
        );
    if !words.is_empty() {
        q.push(D::CLIP_SEARCH);
        D::push_text(&mut q, D::search_query(&words));
        q.push(")");
    }
    q.push(") AS listed WHERE true");
    if let Some((occurrences, _, title)) = after {
        q.push(" AND (occurrences < ");
        D::push_int(&mut q, occurrences);
        q.push(" OR (occurrences = ");
        D::push_int(&mut q, occurrences);
        q.push(" AND title > ");
        D::push_text(&mut q, title);
        q.push("))");
    }
    q.push(" ORDER BY occurrences DESC, title LIMIT ");
    D::push_int(&mut q, limit + 1);
    let rows = D::fetch_all(conn, &mut q).await?;
    let items = rows
        .iter()
        .map(clip_summary_from_row)
        .collect::<Result<Vec<_>>>()?;
    Ok(browse::paged(items, limit, "clips", |c| {
        (
            i64::try_from(c.occurrences).unwrap_or(i64::MAX),
            0,
            c.clip.title.clone(),
        )
    }))
}

/// `q` narrowed to rows of episodes before the cursor's (aired, id), walking `episodes_aired`.
fn push_before<D: Dialect>(q: &mut QueryBuilder<'_, D::DB>, aired: i64, id: i64) -> Result<()> {
    q.push(" AND (e.date_aired, e.id) < (");
    D::push_cursor_time(q, aired)?;
    q.push(", ");
    D::push_int(q, id);
    q.push(")");
    Ok(())
}

/// [`Browse::list_episodes`](crate::Browse::list_episodes) on `conn`.
pub(crate) async fn list_episodes<D: Dialect>(
    conn: &mut Conn<D>,
    query: &ListQuery,
) -> Result<Page<EpisodeSummary>>
where
    for<'a> &'a str: ColumnIndex<D::Row>,
{
    let limit = browse::page_limit(query)?;
    let after = browse::decode_cursor("episodes", query.cursor.as_deref())?;
    let words = browse::search_words(query.search.as_deref());
    let mut q = QueryBuilder::<D::DB>::new(EPISODE_SUMMARY);
    q.push(" WHERE true");
    if !words.is_empty() {
        q.push(D::EPISODE_SEARCH);
        D::push_text(&mut q, D::search_query(&words));
        q.push(")");
    }
    if let Some((aired, id, _)) = after {
        push_before::<D>(&mut q, aired, id)?;
    }
    q.push(" ORDER BY e.date_aired DESC, e.id DESC LIMIT ");
    D::push_int(&mut q, limit + 1);
    let rows = D::fetch_all(conn, &mut q).await?;
    let items = rows
        .iter()
        .map(episode_summary_from_row)
        .collect::<Result<Vec<_>>>()?;
    Ok(browse::paged(items, limit, "episodes", |e| {
        (e.episode.date_aired.timestamp_micros(), e.id, String::new())
    }))
}

/// [`Browse::clip_page`](crate::Browse::clip_page) on `conn`, in the caller's read
/// transaction (so that the counts and the page agree).
pub(crate) async fn clip_page<D: Dialect>(
    conn: &mut Conn<D>,
    id: i64,
    page: &ListQuery,
) -> Result<Option<ClipPage>>
where
    for<'a> &'a str: ColumnIndex<D::Row>,
{
    let limit = browse::page_limit(page)?;
    let after = browse::decode_cursor("occurrences", page.cursor.as_deref())?;
    let mut q = QueryBuilder::<D::DB>::new("SELECT ");
    q.push(CLIP_COLUMNS)
        .push(", c.findable_from_db, (SELECT COALESCE(")
        .push(D::OCCURRENCES)
        .push(", 0) FROM research_results r WHERE r.clip_id = c.id AND ")
        .push(D::MATCHED)
        .push(
            ") AS occurrences, \
             (SELECT count(*) FROM research_results r WHERE r.clip_id = c.id AND ",
        )
        .push(D::MATCHED)
        .push(
            ") AS episodes, \
             (SELECT count(*) FROM research_results \
              WHERE clip_id = c.id AND failure IS NOT NULL) AS failed_pairs, \
             (SELECT count(*) FROM episodes) AS total_pairs \
             FROM clips c WHERE c.id = ",
        );
    D::push_int(&mut q, id);
    let Some(row) = D::fetch_optional(conn, &mut q).await? else {
        return Ok(None);
    };
    let summary = clip_summary_from_row(&row)?;
    // The clip's matches only (research_results_matched_clip).
    let mut q = QueryBuilder::<D::DB>::new("SELECT ");
    q.push(EPISODE_COLUMNS)
        .push(
            ", r.clip_offsets_ns, r.clip_match_scores, r.research_date, r.episode_hash \
             FROM research_results r JOIN episodes e ON e.id = r.episode_id \
             WHERE ",
        )
        .push(D::MATCHED)
        .push(" AND r.clip_id = ");
    D::push_int(&mut q, id);
    if let Some((aired, episode_id, _)) = after {
        push_before::<D>(&mut q, aired, episode_id)?;
    }
    q.push(" ORDER BY e.date_aired DESC, e.id DESC LIMIT ");
    D::push_int(&mut q, limit + 1);
    let rows = D::fetch_all(conn, &mut q).await?;
    let items = rows
        .iter()
        .map(|row| {
            let mut clip_offsets_ns = row.offsets("clip_offsets_ns")?;
            let mut clip_match_scores = row.scores("clip_match_scores")?;
            crate::model::sort_scored(&mut clip_offsets_ns, &mut clip_match_scores);
            Ok(Occurrence {
                episode_id: row.int("id")?,
                episode: episode_from_row(row)?,
                clip_offsets_ns,
                clip_match_scores,
                research_date: row.time("research_date")?,
                episode_media_sha256: crate::model::media_sha256(row.text("episode_hash")?),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(ClipPage {
        summary,
        occurrences: browse::paged(items, limit, "occurrences", |o| {
            (
                o.episode.date_aired.timestamp_micros(),
                o.episode_id,
                String::new(),
            )
        }),
    }))
}

/// [`Browse::episode_page`](crate::Browse::episode_page) on `conn`, in the caller's read
/// transaction.
pub(crate) async fn episode_page<D: Dialect>(
    conn: &mut Conn<D>,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<EpisodePage>>
where
    for<'a> &'a str: ColumnIndex<D::Row>,
    usize: ColumnIndex<D::Row>,
{
    let mut q = QueryBuilder::<D::DB>::new(EPISODE_SUMMARY);
    q.push(" WHERE e.id = ");
    D::push_int(&mut q, id);
    let Some(row) = D::fetch_optional(conn, &mut q).await? else {
        return Ok(None);
    };
    let summary = episode_summary_from_row(&row)?;
    // The episode's matches (research_results_matched_episode).
    let mut q = QueryBuilder::<D::DB>::new(
        "SELECT r.clip_id, c.title, r.clip_offsets_ns, r.clip_duration_ns, \
         r.episode_duration_ns, r.clip_match_scores, r.episode_hash \
         FROM research_results r JOIN clips c ON c.id = r.clip_id \
         WHERE r.episode_id = ",
    );
    D::push_int(&mut q, id);
    q.push(" AND ").push(D::MATCHED);
    let found = D::fetch_all(conn, &mut q).await?;
    let mut timeline = Vec::new();
    let mut duration_ns = None;
    for row in &found {
        let clip_id = row.int(0)?;
        let clip_title = row.text(1)?;
        let clip_duration_ns = row.int(3)?;
        duration_ns = duration_ns.max(Some(row.int(4)?));
        let offsets = row.offsets(2)?;
        // Scores pair with the offsets by position; ones that do not (never recorded so) are
        // not shown.
        let scores = row.scores(5)?.filter(|s| s.len() == offsets.len());
        let episode_media_sha256 = crate::model::media_sha256(row.text(6)?);
        timeline.extend(
            offsets
                .into_iter()
                .enumerate()
                .map(|(i, offset_ns)| TimelineEntry {
                    offset_ns,
                    clip_id,
                    clip_title: clip_title.clone(),
                    clip_duration_ns,
                    clip_match_score: scores.as_ref().and_then(|s| s.get(i).copied()),
                    episode_media_sha256: episode_media_sha256.clone(),
                }),
        );
    }
    browse::sort_timeline(&mut timeline);
    // Its leased pairs: the primary key of leased_pairs starts with the episode.
    let mut q = QueryBuilder::<D::DB>::new(
        "SELECT count(*) FROM leased_pairs p JOIN leases l ON l.id = p.lease_id \
         WHERE p.episode_id = ",
    );
    D::push_int(&mut q, id);
    q.push(" AND l.expires_at > ");
    D::push_time(&mut q, now);
    let leased = match D::fetch_optional(conn, &mut q).await? {
        Some(row) => row.int(0)?,
        None => 0,
    };
    // Its failures (research_results_failed_episode).
    let mut q = QueryBuilder::<D::DB>::new(
        "SELECT r.clip_id, c.title, r.failure \
         FROM research_results r JOIN clips c ON c.id = r.clip_id \
         WHERE r.episode_id = ",
    );
    D::push_int(&mut q, id);
    q.push(" AND r.failure IS NOT NULL ORDER BY c.title LIMIT ");
    D::push_int(&mut q, i64::from(FAILED_SHOWN));
    let failed = D::fetch_all(conn, &mut q)
        .await?
        .iter()
        .map(|row| {
            Ok(FailedPair {
                clip_id: row.int(0)?,
                clip_title: row.text(1)?,
                reason: row.text(2)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(browse::episode_page(
        summary,
        timeline,
        leased,
        duration_ns,
        failed,
    )))
}

// ------------------------------------------------------------------------------------ completions

/// Unannounced completions (`which`), oldest first, with their episodes, counts and matches,
/// read on `conn` (in the announcing or claiming transaction when announcing).
pub(crate) async fn read_completions<D: Dialect>(
    conn: &mut Conn<D>,
    which: Which<'_>,
) -> Result<Vec<EpisodeCompletion>>
where
    for<'a> &'a str: ColumnIndex<D::Row>,
{
    let rows = D::completion_rows(conn, which).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids = rows
        .iter()
        .map(|r| r.int("episode_id"))
        .collect::<Result<Vec<_>>>()?;
    let mut matches: HashMap<i64, Vec<ClipMatch>> = HashMap::new();
    for row in &D::completion_matches(conn, &ids).await? {
        matches
            .entry(row.int("episode_id")?)
            .or_default()
            .push(ClipMatch {
                clip: clip_from_row(row)?,
                clip_offsets_ns: row.offsets("clip_offsets_ns")?,
            });
    }
    rows.iter()
        .map(|row| {
            let episode_id = row.int("episode_id")?;
            let mut found = matches.remove(&episode_id).unwrap_or_default();
            crate::model::sort_matches(&mut found);
            Ok(EpisodeCompletion {
                id: CompletionId {
                    episode_id,
                    completions: row.int("completions")?,
                },
                episode: episode_from_row(row)?,
                completed_at: row.time("completed_at")?,
                clips_researched: browse::count(row.int("researched")?),
                clips_matched: browse::count(row.int("matched")?),
                clips_failed: browse::count(row.int("failed")?),
                matches: found,
            })
        })
        .collect()
}

/// Publishes up to `limit` unannounced completions nobody holds, each as `encode(completion)`
/// on the bus queue `queue`, and lets go of them, in the caller's transaction; returns how
/// many. [`TransactionalBus::announce_completions`](crate::TransactionalBus::announce_completions)
/// once the caller has checked the bus and begun the transaction.
pub(crate) async fn announce_in<D: Dialect>(
    conn: &mut Conn<D>,
    limit: u32,
    queue: &str,
    encode: &crate::EncodeCompletion,
) -> Result<u64>
where
    for<'a> &'a str: ColumnIndex<D::Row>,
{
    let found = read_completions::<D>(conn, Which::ToAnnounce(limit, Utc::now())).await?;
    if found.is_empty() {
        return Ok(0);
    }
    let bodies: Vec<Vec<u8>> = found.iter().map(encode).collect();
    D::send_in(conn, queue, bodies).await?;
    let ids: Vec<CompletionId> = found.iter().map(|c| c.id).collect();
    D::completions_announced_in(conn, &ids).await?;
    Ok(found.len() as u64)
}

// ------------------------------------------------------------------------------------ upserts

/// What the upsert's checks read of an episode or a clip, in either dialect.
pub(crate) trait Curated: Sync {
    /// The item's kind in messages, as `episode`.
    const KIND: &'static str;
    /// The table, also the kind in the plural.
    const TABLE: &'static str;
    /// Its `media_uri`, unique among its kind.
    fn media_uri(&self) -> &str;
    /// When it was first curated.
    fn initial_date_curated(&self) -> DateTime<Utc>;
    /// When it was last curated: of two curations of one item, the newer wins.
    fn last_date_curated(&self) -> DateTime<Utc>;
    /// Last curated before first curated: only an item already stored may be so.
    fn is_suspect(&self) -> bool {
        self.last_date_curated() < self.initial_date_curated()
    }
}

/// [`Curated`] for a domain type with the fields of a curation.
macro_rules! curated {
    ($item:ty, $kind:literal, $table:literal) => {
        impl Curated for $item {
            const KIND: &'static str = $kind;
            const TABLE: &'static str = $table;
            fn media_uri(&self) -> &str {
                &self.media_uri
            }
            fn initial_date_curated(&self) -> DateTime<Utc> {
                self.initial_date_curated
            }
            fn last_date_curated(&self) -> DateTime<Utc> {
                self.last_date_curated
            }
        }
    };
}
curated!(EpisodeInfo, "episode", "episodes");
curated!(ClipInfo, "clip", "clips");

/// Per identity (`key`) in `items`, the position of its newest curation (`curated`), and of
/// equally new ones the later.
pub(crate) fn newest<'a, T, K: Eq + std::hash::Hash, C: Ord>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
    curated: impl Fn(&'a T) -> C,
) -> HashMap<K, usize> {
    let mut newest: HashMap<K, usize> = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let slot = newest.entry(key(item)).or_insert(i);
        if curated(&items[*slot]) <= curated(item) {
            *slot = i;
        }
    }
    newest
}

/// Two different identities of one batch claiming the same `media_uri`.
pub(crate) fn batch_uri_conflict<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
    uri: impl Fn(&'a T) -> &'a str,
) -> Option<&'a str> {
    let mut seen: HashMap<&str, K> = HashMap::new();
    for item in items {
        let k = key(item);
        if let Some(other) = seen.get(uri(item)) {
            if *other != k {
                return Some(uri(item));
            }
        } else {
            seen.insert(uri(item), k);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_curation_wins_and_ties_go_to_the_later() {
        // (identity, curated)
        let items = [("b", 1), ("a", 2), ("b", 3), ("a", 1), ("c", 5), ("c", 5)];
        let mut kept: Vec<(&str, usize)> = newest(&items, |i| i.0, |i| i.1).into_iter().collect();
        kept.sort();
        assert_eq!(kept, vec![("a", 1), ("b", 2), ("c", 5)]);
    }

    #[test]
    fn uri_claimed_twice_in_a_batch_is_found() {
        let items = [("a", "u1"), ("b", "u2"), ("a", "u1"), ("c", "u2")];
        assert_eq!(batch_uri_conflict(&items, |i| i.0, |i| i.1), Some("u2"));
        assert_eq!(batch_uri_conflict(&items[..3], |i| i.0, |i| i.1), None);
    }
}
