//! The feed curator: one pass over the feeds at a time.
//!
//! Per feed: fetch (conditionally), parse, build one `EpisodeInfo` per audio item, check it
//! with the archivists' rules, send those new or changed since last sent, then record them
//! (and the feed's validators) in the state file. Feeds are read one after another, and the
//! cancellation token stops a pass between two feeds, never within one.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use archivist::messages::{self, EpisodeInfo, MAX_DESCRIPTION, MAX_SHORT_TEXT};
use chrono::{DateTime, Utc};
use net::address_policy::AddressPolicy;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::fetch::{FetchError, Fetched, Fetcher, Validators};
use crate::page::{Board, Outcome};
use crate::parse::{self, ParsedFeed};
use crate::state::{self, FeedState, FeedsState, SentEpisode};
use crate::{cut, fingerprint, shown_url, CurateError, Sink, Skipped};

/// Skipped items named one by one in a feed's report, at most (the rest are counted): a
/// broken 100,000-item feed must not drown the terminal.
pub const MAX_NAMED_SKIPS: usize = 50;

/// The feed curator's settings. [`FeedSettings::new`] gives the defaults of `archivist
/// curate feed`; change the fields that differ.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FeedSettings {
    /// The feeds' addresses (http:// or https://), in the order they are read; a repeat is
    /// read once.
    pub feeds: Vec<String>,
    /// The state file: what was sent per feed, and each feed's ETag and Last-Modified.
    pub state_file: PathBuf,
    /// The priority of the episodes sent (higher is more urgent). Default 0.
    pub priority: i32,
    /// How long one feed's request may take, body included. Default 30 s.
    pub timeout: Duration,
    /// The largest feed read, in bytes after decompression: a larger one fails without being
    /// parsed. Default 64 MiB.
    pub max_feed_size: u64,
    /// The most episodes taken from one feed: its newest (by publication date); the rest are
    /// counted as skipped. Default 10,000.
    pub max_items: usize,
    /// The longest Retry-After (of a 429 or 503) waited for within a pass; a longer one puts
    /// the feed off until then (kept in the state file), for a day at most (or this, if
    /// longer). Default 2 minutes.
    pub max_retry_wait: Duration,
    /// Where what a feed leads to (redirects, further pages) may connect. The feed's own
    /// address is fetched as given. Default: public addresses only.
    pub addresses: AddressPolicy,
}

impl FeedSettings {
    /// The defaults for `feeds`, remembered in `state_file`.
    pub fn new(feeds: Vec<String>, state_file: impl Into<PathBuf>) -> FeedSettings {
        FeedSettings {
            feeds,
            state_file: state_file.into(),
            priority: 0,
            timeout: Duration::from_secs(30),
            max_feed_size: 64 << 20,
            max_items: 10_000,
            max_retry_wait: Duration::from_secs(120),
            addresses: AddressPolicy::default(),
        }
    }
}

/// What one pass did with one feed. Addresses are shown masked: the password and the values
/// of query parameters that look like keys (a private feed's key is kept only in the state
/// file).
#[derive(Debug, Default, Clone, Serialize)]
#[non_exhaustive]
pub struct FeedReport {
    /// The feed's address as given.
    pub feed: String,
    /// Where it was fetched from (another after a permanent redirect).
    pub url: String,
    /// The feed's own title.
    pub title: Option<String>,
    /// Items in the feed (its pages included), all of them.
    pub items_found: usize,
    /// Episodes sent (or, in a dry run, written).
    pub sent: usize,
    /// Episodes sent before and unchanged since.
    pub unchanged: usize,
    /// Items skipped, all of them.
    #[serde(rename = "skipped")]
    pub skipped_count: usize,
    /// The first [`MAX_NAMED_SKIPS`] items skipped, each with why.
    #[serde(rename = "skipped_items")]
    pub skipped: Vec<Skipped>,
    /// What a person should know (an episode that keeps its first title, a title cut, a
    /// move, paging stopped).
    pub notes: Vec<String>,
    /// The server answered 304: nothing changed since the last read.
    pub not_modified: bool,
    /// The address the feed moved to for good (301/308) in this pass.
    pub moved_to: Option<String>,
    /// The feed is put off until then (its server's Retry-After): it was not asked.
    pub deferred_until: Option<DateTime<Utc>>,
    /// Why the feed failed, if it did.
    pub error: Option<String>,
    /// Stopped by the cancellation token mid-fetch: neither a poll nor an error of the
    /// feed's (its error says `interrupted`).
    #[serde(skip)]
    pub interrupted: bool,
}

impl FeedReport {
    fn skip(&mut self, skipped: Skipped) {
        self.skipped_count += 1;
        if self.skipped.len() < MAX_NAMED_SKIPS {
            self.skipped.push(skipped);
        }
    }
}

/// What one pass over the feeds did. Serialized, it is the summary object of `archivist
/// curate feed --json`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FeedsPass {
    /// Whether the sink was a dry run's.
    pub dry_run: bool,
    /// Each feed read, in order (all of them, unless the pass was cancelled).
    pub feeds: Vec<FeedReport>,
    /// Episodes sent, all feeds together.
    pub sent: usize,
    /// Feeds that failed.
    pub failed: usize,
}

impl FeedsPass {
    /// Each feed that failed, with its reason: `https://… (the server answered 404)`.
    pub fn failures(&self) -> Vec<String> {
        self.feeds
            .iter()
            .filter_map(|r| Some(format!("{} ({})", r.feed, r.error.as_ref()?)))
            .collect()
    }
}

/// The feed curator: its feeds, its state, its HTTP client.
#[derive(Debug)]
pub struct FeedCurator {
    /// Each feed as given, and its checked address.
    feeds: Vec<(String, Url)>,
    state_file: PathBuf,
    state: FeedsState,
    fetcher: Fetcher,
    priority: i32,
    max_items: usize,
    board: Option<Board>,
}

impl FeedCurator {
    /// Checks the feeds' addresses (a bad one is [`CurateError::Setting`]), reads the state
    /// file (an unreadable one is [`CurateError::BadState`]) and builds the HTTP client.
    pub fn new(settings: FeedSettings) -> Result<FeedCurator, CurateError> {
        let feeds = check_urls(&settings.feeds)?;
        let state: FeedsState = state::load(&settings.state_file)?;
        let fetcher = Fetcher::new(
            settings.timeout,
            settings.max_feed_size,
            settings.max_retry_wait,
            &settings.addresses,
        )?;
        Ok(FeedCurator {
            feeds,
            state_file: settings.state_file,
            state,
            fetcher,
            priority: settings.priority,
            max_items: settings.max_items,
            board: None,
        })
    }

    /// The feeds read by each pass, as shown (masked), in order, each once.
    pub fn feeds(&self) -> Vec<String> {
        self.feeds.iter().map(|(g, _)| shown_url(g)).collect()
    }

    /// What was sent so far, as the state file has it.
    pub fn state(&self) -> &FeedsState {
        &self.state
    }

    /// The board the passes update from now on (made at the first call; later calls return
    /// the same one). `every` is the interval between passes, as the page says it.
    pub fn board(&mut self, every: Duration) -> Board {
        let feeds = self.feeds();
        self.board
            .get_or_insert_with(|| Board::new(&feeds, every))
            .clone()
    }

    /// One pass over every feed: each is read, its new and changed episodes sent to `sink`,
    /// and recorded in the state file (unless `sink` is a dry run's); `on_feed` gets each
    /// feed's report as soon as it is done. A feed that fails is reported, and the pass goes
    /// on. Stops between two feeds once `token` is cancelled.
    ///
    /// An error is a failure of the curator itself (the sink, the state file): the feeds
    /// reported so far are recorded, the one in hand is not.
    pub async fn pass(
        &mut self,
        sink: &Sink,
        token: &CancellationToken,
        on_feed: impl FnMut(&FeedReport),
    ) -> Result<FeedsPass, CurateError> {
        let outcome = self.read_feeds(sink, token, on_feed).await;
        if let Some(b) = &self.board {
            b.pass_done();
        }
        outcome
    }

    async fn read_feeds(
        &mut self,
        sink: &Sink,
        token: &CancellationToken,
        mut on_feed: impl FnMut(&FeedReport),
    ) -> Result<FeedsPass, CurateError> {
        let dry_run = sink.is_dry_run();
        let mut reports = Vec::new();
        for (given, url) in &self.feeds {
            if token.is_cancelled() {
                break;
            }
            let mut entry = self.state.feeds.get(given).cloned().unwrap_or_default();
            // Shown everywhere but in the state file: a private feed's address carries its key.
            let shown = shown_url(given);
            let (report, record) = curate_feed(
                &shown,
                url,
                &mut entry,
                self.priority,
                self.max_items,
                &self.fetcher,
                sink,
                token,
            )
            .await?;
            if record && !dry_run {
                self.state.feeds.insert(given.clone(), entry);
                state::save(&self.state_file, &self.state)?;
            }
            count(&shown, &report, self.board.as_ref());
            if let Some(e) = &report.error {
                tracing::warn!(feed = %shown, error = %e, "feed not read");
            }
            on_feed(&report);
            reports.push(report);
        }
        Ok(FeedsPass {
            dry_run,
            sent: reports.iter().map(|r| r.sent).sum(),
            failed: reports.iter().filter(|r| r.error.is_some()).count(),
            feeds: reports,
        })
    }
}

/// The feeds' addresses, checked (http or https) and each once, in the order given.
fn check_urls(given: &[String]) -> Result<Vec<(String, Url)>, CurateError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for g in given {
        let g = g.trim();
        let url = Url::parse(g).map_err(|e| {
            CurateError::Setting(format!(
                "{:?} is not a feed address ({e}): expected http://… or https://…",
                shown_url(g)
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(CurateError::Setting(format!(
                "{:?} is not a feed address: expected http://… or https://…",
                shown_url(g)
            )));
        }
        if seen.insert(g.to_string()) {
            out.push((g.to_string(), url));
        }
    }
    Ok(out)
}

/// Counts one feed's pass in the metrics and on the board. A feed put off (waiting out an
/// earlier Retry-After) was not asked: it is not counted as polled, and its last poll stays.
fn count(shown: &str, report: &FeedReport, board: Option<&Board>) {
    if report.interrupted {
        return;
    }
    let feed = shown.to_string();
    let put_off = report.deferred_until.is_some();
    let now = Utc::now();
    if put_off {
        metrics::counter!("archivist_curator_put_off_total", "feed" => feed.clone()).increment(1);
    } else {
        metrics::counter!("archivist_curator_feeds_polled_total", "feed" => feed.clone())
            .increment(1);
        metrics::gauge!("archivist_curator_last_poll_timestamp_seconds", "feed" => feed.clone())
            .set(now.timestamp() as f64);
    }
    // Created at zero on every poll, so that a scrape shows the series before the first 304
    // or error (a rate over a missing series is no rate).
    let sent = metrics::counter!("archivist_curator_items_sent_total", "feed" => feed.clone());
    let not_modified =
        metrics::counter!("archivist_curator_not_modified_total", "feed" => feed.clone());
    let errors = metrics::counter!("archivist_curator_errors_total", "feed" => feed);
    sent.increment(report.sent as u64);
    if report.not_modified {
        not_modified.increment(1);
    }
    if report.error.is_some() {
        errors.increment(1);
    }
    let Some(board) = board else {
        return;
    };
    board.update(shown, |s| {
        s.url = report.url.clone();
        if report.title.is_some() {
            s.title = report.title.clone();
        }
        s.deferred_until = report.deferred_until;
        if put_off {
            s.outcome = Outcome::PutOff;
            s.error = None;
            return;
        }
        s.last_poll = Some(now);
        s.polls += 1;
        s.items_sent += report.sent as u64;
        s.error = report.error.clone();
        s.outcome = if report.error.is_some() {
            s.errors += 1;
            Outcome::Failed
        } else if report.not_modified {
            s.not_modified += 1;
            Outcome::NotModified
        } else {
            Outcome::Read
        };
    });
}

/// Curates one feed into `entry`; the report, and whether `entry` is to be recorded.
#[allow(clippy::too_many_arguments)]
async fn curate_feed(
    given: &str,
    default_url: &Url,
    entry: &mut FeedState,
    priority: i32,
    max_items: usize,
    fetcher: &Fetcher,
    sink: &Sink,
    token: &CancellationToken,
) -> Result<(FeedReport, bool), CurateError> {
    let now = Utc::now();
    let url = entry
        .url
        .as_deref()
        .and_then(|u| Url::parse(u).ok())
        .unwrap_or_else(|| default_url.clone());
    let mut report = FeedReport {
        feed: given.to_string(),
        url: shown_url(url.as_str()),
        ..FeedReport::default()
    };
    if let Some(until) = entry.not_before.filter(|t| *t > now) {
        report.deferred_until = Some(until);
        return Ok((report, false));
    }
    let validators = Validators {
        etag: entry.etag.clone(),
        last_modified: entry.last_modified.clone(),
    };
    // The feed's address is fetched as given: the one typed, or the one it moved to for good
    // (reached by a redirect that was allowed: checked, or from the user's own network).
    let fetched = match fetcher.fetch(token, &url, &validators, true).await {
        Ok(f) => f,
        Err(FetchError::Cancelled) => {
            report.error = Some("interrupted".into());
            report.interrupted = true;
            return Ok((report, false));
        }
        Err(e @ FetchError::RetryLater { until, .. }) => {
            report.error = Some(e.to_string());
            entry.not_before = Some(until);
            return Ok((report, true));
        }
        Err(e) => {
            report.error = Some(e.to_string());
            return Ok((report, false));
        }
    };
    let (moved_to, body, pages_as_given) = match fetched {
        Fetched::NotModified { moved_to } => (moved_to, None, false),
        Fetched::Body {
            bytes,
            validators,
            url,
            moved_to,
            as_given,
        } => (moved_to, Some((bytes, validators, url)), as_given),
    };
    let Some((bytes, validators, final_url)) = body else {
        report.not_modified = true;
        move_feed(given, entry, moved_to, &mut report);
        entry.last_read = Some(now);
        entry.not_before = None;
        return Ok((report, true));
    };
    let mut parsed = match parse_page(bytes, &final_url, max_items, 1).await? {
        Ok(p) => p,
        Err(why) => {
            report.error = Some(why);
            return Ok((report, false));
        }
    };
    // A paged feed (RFC 5005): older pages are read while a page brings items not sent
    // before, so the first pass reads them all and later ones stop at the first page.
    let mut complete = true;
    let mut pages = vec![final_url.clone()];
    let mut page_items: Vec<String> = parsed.items.iter().map(|i| i.key.clone()).collect();
    while let Some(next) = parsed.next_page.take() {
        // A page with items, each of them sent before: the older pages were read before.
        let known =
            !page_items.is_empty() && page_items.iter().all(|k| entry.items.contains_key(k));
        if token.is_cancelled() || known {
            break;
        }
        if pages.contains(&next) {
            report.notes.push(format!(
                "page {} names an earlier page as its next: paging stopped",
                shown_url(next.as_str())
            ));
            break;
        }
        if pages.len() >= MAX_PAGES {
            report.notes.push(format!(
                "more than {MAX_PAGES} pages: the rest are not read"
            ));
            break;
        }
        let page = pages.len() + 1;
        pages.push(next.clone());
        let bytes = match fetcher
            .fetch(token, &next, &Validators::default(), pages_as_given)
            .await
        {
            Ok(Fetched::Body { bytes, .. }) => bytes,
            Ok(Fetched::NotModified { .. }) => break,
            Err(e) => {
                report.error = Some(format!("page {page} ({}): {e}", shown_url(next.as_str())));
                complete = false;
                break;
            }
        };
        let older = match parse_page(bytes, &next, max_items, page).await? {
            Ok(p) => p,
            Err(why) => {
                report.error = Some(format!("page {page} ({}): {why}", shown_url(next.as_str())));
                complete = false;
                break;
            }
        };
        page_items = older.items.iter().map(|i| i.key.clone()).collect();
        merge_page(&mut parsed, older);
    }
    parse::cap(&mut parsed, max_items);
    let (bodies, sent) = episodes(given, parsed, entry, priority, now, &mut report);
    sink.deliver(token, &bodies)
        .await
        .map_err(|e| e.into_error(format!("feed {given}"), bodies.len(), "episodes", "pass"))?;
    report.sent = bodies.len();
    entry.items.extend(sent);
    // A page that failed: what was read is recorded, but not the validators, so that the
    // next pass reads the feed (and its pages) again.
    if complete {
        entry.etag = validators.etag;
        entry.last_modified = validators.last_modified;
    }
    entry.last_read = Some(now);
    entry.not_before = None;
    move_feed(given, entry, moved_to, &mut report);
    Ok((report, true))
}

/// The most pages read of one paged feed in one pass.
const MAX_PAGES: usize = 100;

/// Parses one page off the async threads (a large feed is seconds of CPU); the outer error
/// is the parser's task failing, the inner one a page that is not a feed.
async fn parse_page(
    bytes: Vec<u8>,
    url: &Url,
    max_items: usize,
    page: usize,
) -> Result<Result<ParsedFeed, String>, CurateError> {
    let base = url.clone();
    tokio::task::spawn_blocking(move || parse::parse(&bytes, &base, max_items, page))
        .await
        .map_err(|source| CurateError::Stopped {
            what: format!("parsing the feed {url}"),
            source,
        })
}

/// Adds an older page's items to `into`; an item repeating one of a newer page is skipped.
fn merge_page(into: &mut ParsedFeed, page: ParsedFeed) {
    let mut keys: HashSet<String> = into.items.iter().map(|i| i.key.clone()).collect();
    let mut uris: HashSet<String> = into
        .items
        .iter()
        .map(|i| parse::enclosure_identity(&i.media_uri))
        .collect();
    let mut ids: HashSet<(String, DateTime<Utc>)> = into
        .items
        .iter()
        .map(|i| (i.title.clone(), i.date_aired))
        .collect();
    into.found += page.found;
    into.skipped.extend(page.skipped);
    into.next_page = page.next_page;
    for item in page.items {
        let id = (item.title.clone(), item.date_aired);
        let enclosure = parse::enclosure_identity(&item.media_uri);
        if keys.contains(&item.key) || uris.contains(&enclosure) || ids.contains(&id) {
            into.skipped.push(Skipped {
                item: format!("{:?}", cut(&item.title, 80).0),
                reason: "repeats an item of a newer page: only that one is curated".into(),
            });
            continue;
        }
        keys.insert(item.key.clone());
        uris.insert(enclosure);
        ids.insert(id);
        into.items.push(item);
    }
}

/// Follows a permanent redirect: the feed is fetched at its new address from now on.
fn move_feed(given: &str, entry: &mut FeedState, moved_to: Option<Url>, report: &mut FeedReport) {
    let Some(to) = moved_to else {
        return;
    };
    let to = to.to_string();
    if entry.url.as_deref() == Some(to.as_str()) {
        return;
    }
    let shown = shown_url(&to);
    tracing::warn!(
        feed = %given,
        moved_to = %shown,
        "the feed has moved permanently (301/308): it is fetched at its new address from now on; \
         give that address instead"
    );
    report.notes.push(format!(
        "moved permanently to {shown}: fetched there from now on"
    ));
    report.moved_to = Some(shown);
    entry.url = Some(to);
}

/// The messages to send for a parsed feed (new or changed items, each checked), and what to
/// record for them once sent.
fn episodes(
    given: &str,
    parsed: ParsedFeed,
    entry: &FeedState,
    priority: i32,
    now: DateTime<Utc>,
    report: &mut FeedReport,
) -> (Vec<Vec<u8>>, Vec<(String, SentEpisode)>) {
    report.title = parsed.title.clone();
    report.items_found = parsed.found;
    for s in parsed.skipped {
        report.skip(s);
    }
    let (curator, _) = cut(given, MAX_SHORT_TEXT);
    let mut bodies = Vec::new();
    let mut sent = Vec::new();
    let mut notes = 0usize;
    for item in parsed.items {
        let label = format!("{:?}", cut(&item.title, 80).0);
        let (mut title, title_cut) = cut(&item.title, MAX_SHORT_TEXT);
        let mut date_aired = item.date_aired;
        let previous = entry.items.get(&item.key);
        if let Some(p) = previous {
            if p.title != title || p.date_aired != date_aired {
                if notes < MAX_NAMED_SKIPS {
                    report.notes.push(format!(
                        "{label} (dated {}) was first sent as {:?} (dated {}): it keeps that \
                         title and date, which identify it in the datastore",
                        date_aired.to_rfc3339(),
                        cut(&p.title, 80).0,
                        p.date_aired.to_rfc3339()
                    ));
                    notes += 1;
                }
                title = p.title.clone();
                date_aired = p.date_aired;
            }
        } else if title_cut && notes < MAX_NAMED_SKIPS {
            report.notes.push(format!(
                "{label}: title of {} characters cut to {MAX_SHORT_TEXT}",
                item.title.chars().count()
            ));
            notes += 1;
        }
        let (description, _) = cut(&item.description, MAX_DESCRIPTION);
        // The enclosure without its tracking parameters: a host that rotates `utm_*` on
        // every fetch has not changed the episode, and re-sending it each poll is noise.
        let print = fingerprint(&[
            &title,
            &date_aired.to_rfc3339(),
            &description,
            &parse::enclosure_identity(&item.media_uri),
            &item.media_type,
            &priority.to_string(),
            &curator,
        ]);
        if previous.is_some_and(|p| p.fingerprint == print) {
            report.unchanged += 1;
            continue;
        }
        let first_sent = previous.map_or(now, |p| p.first_sent);
        let episode = EpisodeInfo {
            initial_date_curated: first_sent,
            last_date_curated: now.max(first_sent),
            curator_information: curator.clone(),
            date_aired,
            title: title.clone(),
            description,
            media_uri: item.media_uri,
            media_type: item.media_type,
            priority,
        };
        let body = messages::encode(&episode);
        // The archivists' own check: what fails it would be poison on the bus.
        if let Err(e) = messages::decode::<EpisodeInfo>(&body) {
            report.skip(Skipped {
                item: label,
                reason: format!("would be refused by the archivists: {e}"),
            });
            continue;
        }
        bodies.push(body);
        sent.push((
            item.key,
            SentEpisode {
                fingerprint: print,
                title,
                date_aired,
                first_sent,
            },
        ));
    }
    (bodies, sent)
}
