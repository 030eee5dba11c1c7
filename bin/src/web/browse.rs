//! `/clips`, `/clips/{id}`, `/episodes`, `/episodes/{id}`: the archive for people, read from
//! the datastore's [`Browse`] capability. Server-rendered HTML (maud escapes every value), no
//! script, phone-first like the status page; a GET form searches titles (`?q=`), and a "next
//! page" link carries the datastore's opaque cursor (`?cursor=`).
//!
//! A clip's page plays each moment it was found: an `<audio>` player per offset, whose source
//! is the episode's media with a media fragment (`#t=SECONDS`) starting [`LEAD_IN_SECONDS`]
//! before the clip. Only `http`, `https` and `file` URIs become a source or a link; anything
//! else (`javascript:`, `data:`) is shown as text.
//!
//! With a media archive, a player whose result was measured on a kept copy (its
//! `episode_media_sha256`) plays that copy from `/media/{sha256}` instead, so that the moment
//! shown is the moment heard whatever the show's host serves today; the page says which
//! version it plays, and that others are kept where they are.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use datastore::{
    Browse, ClipPage, ClipSummary, DataStoreError, EpisodePage, EpisodeSummary, ListQuery, Page,
    TimelineEntry,
};
use maud::{html, Markup};

use super::app::{App, CHECK_TIMEOUT};
use super::archive_view::{self, Plays};
use super::layout::{self, Nav};

/// Rows on a page of the HTML listings (and the JSON's default).
pub(super) const PAGE_ROWS: u32 = 50;
/// How long before a clip's offset its player starts: the moment in context.
pub(super) const LEAD_IN_SECONDS: i64 = 3;

/// The query string's `q`, `cursor` and `limit`.
#[derive(Debug, Default)]
pub(super) struct Params {
    pub(super) q: Option<String>,
    pub(super) cursor: Option<String>,
    pub(super) limit: Option<String>,
}

impl Params {
    /// Reads the query string (form-encoded); unknown keys are ignored, the last of a
    /// repeated key wins, and an empty value is none.
    pub(super) fn parse(raw: Option<String>) -> Self {
        let mut params = Params::default();
        for (key, value) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            let value = Some(value.into_owned()).filter(|v| !v.trim().is_empty());
            match &*key {
                "q" => params.q = value,
                "cursor" => params.cursor = value,
                "limit" => params.limit = value,
                _ => {}
            }
        }
        params
    }

    /// The datastore's query, `limit` rows unless the query string asks for another number.
    pub(super) fn query(&self, limit: u32) -> Result<ListQuery, Refusal> {
        let limit = match &self.limit {
            None => limit,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=datastore::MAX_PAGE).contains(l))
                .ok_or_else(|| {
                    Refusal::BadRequest(format!(
                        "limit must be a number from 1 to {}",
                        datastore::MAX_PAGE
                    ))
                })?,
        };
        Ok(ListQuery {
            search: self.q.clone(),
            cursor: self.cursor.clone(),
            limit,
        })
    }
}

/// Why a page is not shown.
#[derive(Debug)]
pub(super) enum Refusal {
    /// 400: a cursor or limit that is not one.
    BadRequest(String),
    /// 404: no such clip or episode (or not a number).
    NotFound(String),
    /// 503: the datastore could not answer now (credentials masked), or cannot browse.
    Unavailable(String),
}

impl Refusal {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refusal::NotFound(_) => StatusCode::NOT_FOUND,
            Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub(super) fn why(&self) -> &str {
        match self {
            Refusal::BadRequest(w) | Refusal::NotFound(w) | Refusal::Unavailable(w) => w,
        }
    }
}

/// The datastore's [`Browse`] capability, or why there is none.
pub(super) fn browser(app: &App) -> Result<&dyn Browse, Refusal> {
    app.sources
        .store
        .browse()
        .ok_or_else(|| Refusal::Unavailable("this datastore cannot list the archive".to_string()))
}

/// Runs `read` within [`CHECK_TIMEOUT`], its error in words with credentials masked.
pub(super) async fn within<T>(
    app: &App,
    what: &str,
    read: impl std::future::Future<Output = datastore::Result<T>>,
) -> Result<T, Refusal> {
    match tokio::time::timeout(CHECK_TIMEOUT, read).await {
        Ok(Ok(v)) => Ok(v),
        // The only invalid input a listing takes from a visitor is its cursor (the limit is
        // checked before): say so rather than echo the datastore's words.
        Ok(Err(DataStoreError::Invalid(_))) => Err(Refusal::BadRequest(
            "the cursor is not one of this listing's: start again from the first page".to_string(),
        )),
        Ok(Err(e)) => Err(Refusal::Unavailable(
            app.sources.redactor.apply(&format!("{what}: {e}")),
        )),
        Err(_) => Err(Refusal::Unavailable(format!(
            "{what}: no answer within {}",
            humantime::format_duration(CHECK_TIMEOUT)
        ))),
    }
}

/// An id from the path: a clip's or an episode's.
pub(super) fn id(text: &str, what: &str) -> Result<i64, Refusal> {
    text.parse()
        .map_err(|_| Refusal::NotFound(format!("there is no {what} {text:?}")))
}

/// `uri` if a browser may be pointed at it: `http`, `https` or `file` (a curator's own
/// files); never `javascript:` or `data:`, which would run or show what a curator wrote.
pub(super) fn safe_media(uri: &str) -> Option<url::Url> {
    let url = url::Url::parse(uri).ok()?;
    matches!(url.scheme(), "http" | "https" | "file").then_some(url)
}

/// The source of a player starting [`LEAD_IN_SECONDS`] before `offset_ns` (not before the
/// start): `uri` with the media fragment `#t=SECONDS` in place of any fragment it had.
pub(super) fn source_at(uri: &str, offset_ns: i64) -> Option<String> {
    let mut url = safe_media(uri)?;
    let start = start_seconds(offset_ns);
    url.set_fragment(Some(&format!("t={start}")));
    Some(url.into())
}

/// Where a player starts for the moment `offset_ns`: [`LEAD_IN_SECONDS`] before it, not
/// before the start, in whole seconds.
fn start_seconds(offset_ns: i64) -> i64 {
    (offset_ns.div_euclid(1_000_000_000) - LEAD_IN_SECONDS).max(0)
}

/// The source of a player for the moment `offset_ns`: the kept copy `plays` where there is
/// one (`/media/{sha256}#t=SECONDS`), else the show's media `uri` ([`source_at`]).
pub(super) fn player_source(plays: Option<&Plays>, uri: &str, offset_ns: i64) -> Option<String> {
    match plays {
        Some(p) => Some(format!(
            "/media/{}#t={}",
            p.sha256,
            start_seconds(offset_ns)
        )),
        None => source_at(uri, offset_ns),
    }
}

/// What the pages play for a result measured on `sha256` of `episode`: its kept copy where
/// the server has an archive that keeps it.
async fn plays(app: &App, episode: &datastore::EpisodeInfo, sha256: Option<&str>) -> Option<Plays> {
    app.archive
        .as_ref()?
        .plays(&episode.title, &episode.date_aired, sha256)
        .await
}

/// Which version a player plays, in words: the kept copy (its short SHA-256) and how many
/// versions of the episode are kept, or the show's media.
fn version_note(plays: Option<&Plays>, archive: bool) -> Markup {
    html! {
        @match plays {
            Some(p) => {
                "Plays the kept copy " code.sha256 title=(p.sha256) { (p.short()) }
                @if p.version_count() > 1 {
                    ", one of " (p.version_count()) " versions of this episode kept"
                    @if p.versions.as_ref().is_some_and(|v| v.chosen != p.sha256) {
                        " (not the one research now answers for)"
                    }
                }
                "."
            },
            None if archive => "Plays the show's media: the archive keeps no copy this was measured on.",
            None => {},
        }
    }
}

/// An offset as `h:mm:ss` (whole seconds, rounded down).
pub(super) fn hms(ns: i64) -> String {
    let s = ns.max(0) / 1_000_000_000;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn day(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d").to_string()
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A link to `path` with the query string `pairs` (form-encoded; empty values left out).
fn link(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v {
            query.append_pair(k, v);
        }
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

/// A browsing page: the shared layout, `body` as its main part.
fn layout(title: &str, nav: Option<Nav>, body: Markup) -> Markup {
    layout::page(title, nav, None, html! { main { (body) } })
}

fn refused(refusal: &Refusal) -> Response {
    let title = match refusal {
        Refusal::BadRequest(_) => "Not a page of this listing",
        Refusal::NotFound(_) => "Not found",
        Refusal::Unavailable(_) => "Not available now",
    };
    let body = layout(
        title,
        None,
        html! { h1 { (title) } p.why { (refusal.why()) } },
    );
    (refusal.status(), body).into_response()
}

fn respond(page: Result<Markup, Refusal>) -> Response {
    match page {
        Ok(markup) => markup.into_response(),
        Err(refusal) => refused(&refusal),
    }
}

fn search_form(action: &str, q: Option<&str>, what: &str) -> Markup {
    html! {
        form method="get" action=(action) role="search" {
            label for="q" { "Search " (what) " by title" }
            input #q type="search" name="q" value=(q.unwrap_or("")) placeholder="words of the title";
            button type="submit" { "Search" }
        }
    }
}

fn next_link<T>(path: &str, q: Option<&str>, page: &Page<T>) -> Markup {
    html! {
        @if let Some(cursor) = &page.next_cursor {
            p { a rel="next" href=(link(path, &[("q", q), ("cursor", Some(cursor))])) { "Next page" } }
        }
    }
}

/// Researched, failed and left of `total`, in words and as a bar.
fn progress(researched: u64, failed: u64, total: u64) -> Markup {
    let done = researched + failed;
    let percent = if total == 0 {
        0.0
    } else {
        100.0 * done as f64 / total as f64
    };
    html! {
        (researched) " researched, " (failed) " failed, of " (total)
        " (" (format!("{percent:.0}")) "% done)"
        progress value=(done) max=(total.max(1)) { (format!("{percent:.0}%")) }
    }
}

/// A player for the moment `offset_ns` of the kept copy `plays`, or of `uri` without one, or
/// why there is none.
fn player(plays: Option<&Plays>, uri: &str, offset_ns: i64) -> Markup {
    html! {
        @match player_source(plays, uri, offset_ns) {
            Some(src) => audio controls preload="none" {
                source src=(src);
                a href=(src) { "Play from " (hms(offset_ns)) }
            },
            None => span.why { "Not playable here: the media URI is not http(s) or file." },
        }
    }
}

// ------------------------------------------------------------------------------------ pages

/// `/clips`: clips by occurrences, searchable.
pub(super) async fn clips(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw);
    respond(clips_page(&app, &params).await)
}

async fn clips_page(app: &App, params: &Params) -> Result<Markup, Refusal> {
    let query = params.query(PAGE_ROWS)?;
    let page = within(app, "the clips", browser(app)?.list_clips(&query)).await?;
    let q = params.q.as_deref();
    Ok(layout(
        "Clips",
        Some(Nav::Clips),
        html! {
            h1 { "Clips" }
            (search_form("/clips", q, "clips"))
            @if let Some(q) = q { p { "Clips whose titles have words beginning with " em { (q) } ":" } }
            @if page.items.is_empty() {
                p { "No clip found." }
            } @else {
                div.card.scroll { table #clips {
                    caption { "Most occurrences first" }
                    thead { tr { th { "clip" } th.n { "found (times)" } th.n { "in episodes" } th.n { "failed" } th.n { "pairs" } } }
                    tbody {
                        @for c in &page.items { (clip_row(c)) }
                    }
                } }
            }
            (next_link("/clips", q, &page))
            p { "As JSON: " a href=(link("/api/clips", &[("q", q), ("cursor", params.cursor.as_deref())])) { "/api/clips" } }
        },
    ))
}

/// How findable a clip is, for a person: "findable from +6 dB over its background", or
/// that no researcher has predicted it yet.
fn findability(f: Option<datastore::Findability>) -> String {
    match f {
        Some(f) => analysis::findability::describe(f.from_db),
        None => "not predicted yet (its researchers predict it when they look for it)".to_owned(),
    }
}

fn clip_row(c: &ClipSummary) -> Markup {
    html! {
        tr {
            td { a href=(format!("/clips/{}", c.id)) { (c.clip.title) } }
            td.n { (c.occurrences) }
            td.n { (c.episodes) }
            td.n { (c.failed_pairs) }
            td.n { (c.total_pairs) }
        }
    }
}

/// `/episodes`: episodes, latest aired first, searchable.
pub(super) async fn episodes(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw);
    respond(episodes_page(&app, &params).await)
}

async fn episodes_page(app: &App, params: &Params) -> Result<Markup, Refusal> {
    let query = params.query(PAGE_ROWS)?;
    let page = within(app, "the episodes", browser(app)?.list_episodes(&query)).await?;
    let q = params.q.as_deref();
    Ok(layout(
        "Episodes",
        Some(Nav::Episodes),
        html! {
            h1 { "Episodes" }
            (search_form("/episodes", q, "episodes"))
            @if let Some(q) = q { p { "Episodes whose titles have words beginning with " em { (q) } ":" } }
            @if page.items.is_empty() {
                p { "No episode found." }
            } @else {
                div.card.scroll { table #episodes {
                    caption { "Latest aired first" }
                    thead { tr { th { "aired" } th { "episode" } th.n { "matches" } th { "research" } } }
                    tbody {
                        @for e in &page.items { (episode_row(e)) }
                    }
                } }
            }
            (next_link("/episodes", q, &page))
            p { "As JSON: " a href=(link("/api/episodes", &[("q", q), ("cursor", params.cursor.as_deref())])) { "/api/episodes" } }
        },
    ))
}

fn episode_row(e: &EpisodeSummary) -> Markup {
    html! {
        tr {
            td.n { time datetime=(rfc3339(e.episode.date_aired)) { (day(e.episode.date_aired)) } }
            td { a href=(format!("/episodes/{}", e.id)) { (e.episode.title) } }
            td.n { (e.matched_pairs) }
            td { (progress(e.researched_pairs, e.failed_pairs, e.total_pairs)) }
        }
    }
}

/// `/clips/{id}`: every episode the clip occurs in, latest aired first, a player per moment.
pub(super) async fn clip(
    State(app): State<Arc<App>>,
    Path(id_text): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw);
    respond(clip_page(&app, &id_text, &params).await)
}

async fn clip_page(app: &App, id_text: &str, params: &Params) -> Result<Markup, Refusal> {
    let id = id(id_text, "clip")?;
    let query = params.query(PAGE_ROWS)?;
    let page: ClipPage = within(app, "the clip", browser(app)?.clip_page(id, &query))
        .await?
        .ok_or_else(|| Refusal::NotFound(format!("there is no clip {id}")))?;
    let playing: Vec<Option<Plays>> = futures::future::join_all(
        page.occurrences
            .items
            .iter()
            .map(|o| plays(app, &o.episode, o.episode_media_sha256.as_deref())),
    )
    .await;
    let archive = app.archive.is_some();
    let c = &page.summary;
    Ok(layout(
        &c.clip.title,
        Some(Nav::Clips),
        html! {
            h1 { "Clip: " (c.clip.title) }
            dl.facts {
                dt { "Found" } dd #occurrences { (c.occurrences) " times, in " (c.episodes) " episodes" }
                dt { "Failed" } dd { (c.failed_pairs) " pairs" }
                dt { "Episodes" } dd { (c.total_pairs) }
                dt { "Findable" } dd #findability { (findability(c.findability)) }
                dt { "Curated by" } dd { (c.clip.curator_information) }
                dt { "Description" } dd { (c.clip.description) }
                dt { "Media" } dd { (media(&c.clip.media_uri)) }
            }
            h2 { "Where it occurs" }
            @if page.occurrences.items.is_empty() {
                p { "Not found in any episode researched so far." }
            }
            @for (o, p) in page.occurrences.items.iter().zip(&playing) {
                section.occurrence {
                    h3 {
                        a href=(format!("/episodes/{}", o.episode_id)) { (o.episode.title) }
                        " (aired " time datetime=(rfc3339(o.episode.date_aired)) { (day(o.episode.date_aired)) } ")"
                    }
                    @if archive { p.version { (version_note(p.as_ref(), archive)) } }
                    ol.moments {
                        @for (i, &ns) in o.clip_offsets_ns.iter().enumerate() {
                            li {
                                "at " strong { (hms(ns)) } " "
                                (score(o.clip_match_scores.as_ref().and_then(|s| s.get(i)).copied()))
                                (player(p.as_ref(), &o.episode.media_uri, ns))
                            }
                        }
                    }
                }
            }
            (next_link(&format!("/clips/{id}"), None, &page.occurrences))
            p { "As JSON: " a href=(format!("/api/clips/{id}")) { "/api/clips/" (id) } }
        },
    ))
}

/// How sure the analyser was of one occurrence, as people read it (`score 0.97`), for judging
/// a weak match by ear; nothing where it gave no score.
fn score(score: Option<f64>) -> Markup {
    html! {
        @if let Some(s) = score {
            span.score title="How sure the analyser is of this occurrence, from 0 to 1" {
                "score " (format!("{s:.2}"))
            }
            " "
        }
    }
}

/// A media URI: a link where it is safe to follow, else text.
fn media(uri: &str) -> Markup {
    html! {
        @match safe_media(uri) {
            Some(url) => a href=(url.as_str()) { code { (uri) } },
            None => span { code { (uri) } " (not linked: not http(s) or file)" },
        }
    }
}

/// The episode as a bar, each occurrence a marker at its offset (as wide as the clip, and at
/// least a few pixels) that plays the episode from there, or, where the media cannot be played
/// here, leads to the moment in the list below. The bar is as long as the episode as its
/// researchers measured it (or, failing that, up to the end of its last clip).
fn timeline_picture(
    uri: &str,
    duration_ns: Option<i64>,
    timeline: &[TimelineEntry],
    playing: &[Option<&Plays>],
) -> Markup {
    let end_of_last = timeline
        .iter()
        .map(|t| t.offset_ns.saturating_add(t.clip_duration_ns.max(0)))
        .max()
        .unwrap_or(0);
    let total = duration_ns.unwrap_or(0).max(end_of_last).max(1) as f64;
    let percent = |ns: i64| (100.0 * ns.max(0) as f64 / total).min(100.0);
    html! {
        figure.timeline #timeline-picture {
            div.bar role="group" aria-label=(format!("The episode, {} long, with {} occurrences", hms(total as i64), timeline.len())) {
                @for (i, t) in timeline.iter().enumerate() {
                    @let left = percent(t.offset_ns);
                    @let width = percent(t.clip_duration_ns).min(100.0 - left);
                    @let href = player_source(playing.get(i).copied().flatten(), uri, t.offset_ns).unwrap_or_else(|| format!("#moment-{}", i + 1));
                    @let label = match t.clip_match_score {
                        Some(m) => format!("{} at {} (score {m:.2})", t.clip_title, hms(t.offset_ns)),
                        None => format!("{} at {}", t.clip_title, hms(t.offset_ns)),
                    };
                    a.marker href=(href) style=(format!("left:{left:.4}%;width:{width:.4}%"))
                        title=(label) aria-label=(label) data-offset-ns=(t.offset_ns) {}
                }
            }
            div.scale { span { "0:00:00" } span { (hms(total as i64)) } }
            figcaption { "Each mark is a clip found at that moment; choose one to play the episode from there." }
        }
    }
}

/// `/episodes/{id}`: the clips found in the episode in the order they occur, and its work left.
pub(super) async fn episode(State(app): State<Arc<App>>, Path(id_text): Path<String>) -> Response {
    respond(episode_page(&app, &id_text).await)
}

async fn episode_page(app: &App, id_text: &str) -> Result<Markup, Refusal> {
    let id = id(id_text, "episode")?;
    let now = Utc::now();
    let page: EpisodePage = within(app, "the episode", browser(app)?.episode_page(id, now))
        .await?
        .ok_or_else(|| Refusal::NotFound(format!("there is no episode {id}")))?;
    let e = &page.summary;
    // What each moment plays: the copy its result was measured on, looked up once per copy.
    let mut measured_on: Vec<&str> = page
        .timeline
        .iter()
        .filter_map(|t| t.episode_media_sha256.as_deref())
        .collect();
    measured_on.sort_unstable();
    measured_on.dedup();
    let kept: Vec<Option<Plays>> = futures::future::join_all(
        measured_on
            .iter()
            .map(|sha| plays(app, &e.episode, Some(sha))),
    )
    .await;
    let playing: Vec<Option<&Plays>> = page
        .timeline
        .iter()
        .map(|t| {
            let sha = t.episode_media_sha256.as_deref()?;
            let at = measured_on.binary_search(&sha).ok()?;
            kept.get(at)?.as_ref()
        })
        .collect();
    let archive = app.archive.as_ref();
    let versions = match archive {
        Some(view) => view.versions(&e.episode.title, &e.episode.date_aired).await,
        None => None,
    };
    let played: Vec<&Plays> = kept.iter().flatten().collect();
    Ok(layout(
        &e.episode.title,
        Some(Nav::Episodes),
        html! {
            h1 { "Episode: " (e.episode.title) }
            dl.facts {
                dt { "Aired" } dd { time datetime=(rfc3339(e.episode.date_aired)) { (day(e.episode.date_aired)) } }
                dt { "Curated by" } dd { (e.episode.curator_information) }
                dt { "Description" } dd { (e.episode.description) }
                dt { "Media" } dd { (media(&e.episode.media_uri)) }
                @if archive.is_some() {
                    dt { "Plays" } dd #plays {
                        @match played.as_slice() {
                            [] => "The show's media: the archive keeps no copy these moments were measured on.",
                            [one] => { "The kept copy " code.sha256 title=(one.sha256) { (one.short()) } "." },
                            many => {
                                (many.len()) " kept copies, each moment the one it was measured on: "
                                @for (i, p) in many.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    code.sha256 title=(p.sha256) { (p.short()) }
                                }
                                "."
                            },
                        }
                    }
                    @if let Some(v) = versions.as_ref().filter(|v| v.versions.len() > 1) {
                        dt { "Versions kept" } dd #versions {
                            (v.versions.len()) " versions of its media are kept: "
                            @for (i, version) in v.versions.iter().enumerate() {
                                @if i > 0 { ", " }
                                code.sha256 title=(version.sha256) { (archive_view::short(&version.sha256)) }
                                " (" (version.size) " bytes, kept " (day(version.kept_at))
                                @if version.sha256 == v.chosen { ", answered for" }
                                ")"
                            }
                            ". " code { "archivist archive" } " lists them and chooses which one research answers for."
                        }
                    }
                }
            }
            section #research-work {
                h2 { "Research" }
                p #research { (progress(e.researched_pairs, e.failed_pairs, e.total_pairs)) }
                dl.tiles {
                    div { dt { "Clips found" } dd.n #matched { (e.matched_pairs) } }
                    div { dt { "Pairs under lease" } dd.n #leased { (page.leased_pairs) } }
                    div { dt { "Pairs still to research" } dd.n #unresearched { (page.unresearched_pairs) } }
                    div { dt { "Failed pairs" } dd.n #failed { (e.failed_pairs) } }
                }
            }
            section #timeline-section {
                h2 { "Timeline" }
                @if page.timeline.is_empty() {
                    p { "No clip found in it so far." }
                } @else {
                    (timeline_picture(&e.episode.media_uri, page.duration_ns, &page.timeline, &playing))
                    ol.moments #timeline {
                        @for (i, t) in page.timeline.iter().enumerate() {
                            li id=(format!("moment-{}", i + 1)) {
                                strong { (hms(t.offset_ns)) } " "
                                a href=(format!("/clips/{}", t.clip_id)) { (t.clip_title) } " "
                                (score(t.clip_match_score))
                                @if played.len() > 1 {
                                    @if let Some(p) = playing.get(i).copied().flatten() {
                                        span.version { "copy " code.sha256 { (p.short()) } " " }
                                    }
                                }
                                (player(playing.get(i).copied().flatten(), &e.episode.media_uri, t.offset_ns))
                            }
                        }
                    }
                }
            }
            @if !page.failed.is_empty() {
                section #failed-pairs {
                    h2 { "Failed pairs" }
                    @if (page.failed.len() as u64) < e.failed_pairs {
                        p { "The first " (page.failed.len()) " of " (e.failed_pairs) ", by clip title." }
                    }
                    div.scroll { table #failures {
                        thead { tr { th { "clip" } th { "reason" } } }
                        tbody {
                            @for f in &page.failed {
                                tr { td { a href=(format!("/clips/{}", f.clip_id)) { (f.clip_title) } } td { (f.reason) } }
                            }
                        }
                    } }
                    p { code { "archivist retry-failed --episode TITLE" } " makes them researchable again." }
                }
            }
            p { "As JSON: " a href=(format!("/api/episodes/{id}")) { "/api/episodes/" (id) } }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_start_a_little_before_the_moment() {
        assert_eq!(
            source_at("https://e.invalid/a.mp3", 120_000_000_000).as_deref(),
            Some("https://e.invalid/a.mp3#t=117")
        );
        assert_eq!(
            source_at("https://e.invalid/a.mp3#old", 1_500_000_000).as_deref(),
            Some("https://e.invalid/a.mp3#t=0")
        );
        assert_eq!(
            source_at("file:///srv/show/4012.mp3", 3_725_900_000_000).as_deref(),
            Some("file:///srv/show/4012.mp3#t=3722")
        );
        for bad in [
            "javascript:alert(1)",
            "JAVASCRIPT:alert(1)",
            "data:audio/mp3;base64,AAAA",
            "/relative.mp3",
            "vbscript:x",
            "",
        ] {
            assert_eq!(source_at(bad, 0), None, "{bad}");
            assert!(safe_media(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn offsets_read_as_hours_minutes_seconds() {
        assert_eq!(hms(0), "0:00:00");
        assert_eq!(hms(3_723_999_000_000), "1:02:03");
        assert_eq!(hms(-5), "0:00:00");
    }

    #[test]
    fn query_strings_are_read_and_limits_checked() {
        let p = Params::parse(Some("q=the+archive&cursor=abc&x=1&limit=".into()));
        assert_eq!(p.q.as_deref(), Some("the archive"));
        assert_eq!(p.cursor.as_deref(), Some("abc"));
        assert_eq!(p.query(50).map(|q| q.limit).ok(), Some(50));
        let p = Params::parse(Some("limit=0".into()));
        assert!(p.query(50).is_err());
        let p = Params::parse(Some("limit=7&q=".into()));
        assert_eq!(
            p.query(50).map(|q| (q.limit, q.search)).ok(),
            Some((7, None))
        );
        assert_eq!(
            link("/clips", &[("q", Some("a&b c")), ("cursor", None)]),
            "/clips?q=a%26b+c"
        );
    }
}
