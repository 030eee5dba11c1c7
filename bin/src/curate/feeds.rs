//! `archivist curate feed URL…`: one pass over the feeds, or one every `--every`.
//!
//! Per feed: fetch (conditionally), parse, build one `EpisodeInfo` per audio item, check it
//! with the archivists' rules, send those new or changed since last sent, then record them
//! (and the feed's validators) in the state file. Feeds are read one after another, and a
//! signal stops the curator between two feeds, never within one.

use std::collections::{BTreeSet, HashSet};

use anyhow::anyhow;
use archivist::messages::{self, EpisodeInfo, MAX_DESCRIPTION, MAX_SHORT_TEXT};
use chrono::{DateTime, Utc};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::fetch::{FetchError, Fetched, Fetcher, Validators};
use super::page::{self, Board, Outcome};
use super::parse::{self, ParsedFeed, Skipped};
use super::state::{self, FeedState, FeedsState, SentEpisode};
use super::{cut, fingerprint, say, shown_url, FeedArgs, Sink};
use crate::config::Config;
use crate::values::usage;

/// Skipped items named one by one in the text report and the JSON summary, at most (the
/// rest are counted): a broken 100,000-item feed must not drown the terminal.
const MAX_NAMED_SKIPS: usize = 50;

/// What one pass did with one feed.
#[derive(Debug, Default)]
struct FeedReport {
    feed: String,
    url: String,
    title: Option<String>,
    items_found: usize,
    sent: usize,
    unchanged: usize,
    skipped: Vec<Skipped>,
    skipped_count: usize,
    notes: Vec<String>,
    not_modified: bool,
    moved_to: Option<String>,
    deferred_until: Option<DateTime<Utc>>,
    error: Option<String>,
    /// Stopped by SIGINT/SIGTERM mid-fetch: neither a poll nor an error of the feed's.
    interrupted: bool,
}

impl FeedReport {
    fn skip(&mut self, skipped: Skipped) {
        self.skipped_count += 1;
        if self.skipped.len() < MAX_NAMED_SKIPS {
            self.skipped.push(skipped);
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "feed": self.feed,
            "url": self.url,
            "title": self.title,
            "items_found": self.items_found,
            "sent": self.sent,
            "unchanged": self.unchanged,
            "skipped": self.skipped_count,
            "skipped_items": self.skipped,
            "notes": self.notes,
            "not_modified": self.not_modified,
            "moved_to": self.moved_to,
            "deferred_until": self.deferred_until,
            "error": self.error,
        })
    }

    /// The report for people, on standard error.
    fn say(&self, dry_run: bool) {
        let sent = if dry_run { "would be sent" } else { "sent" };
        let head = if let Some(e) = &self.error {
            format!("feed {}: FAILED: {e}", self.feed)
        } else if let Some(t) = self.deferred_until {
            format!(
                "feed {}: put off until {} (the server's Retry-After)",
                self.feed,
                t.to_rfc3339()
            )
        } else if self.not_modified {
            format!("feed {}: not modified since the last read (304)", self.feed)
        } else {
            format!(
                "feed {}: {} items, {} {sent}, {} unchanged, {} skipped",
                self.feed, self.items_found, self.sent, self.unchanged, self.skipped_count
            )
        };
        say(&head);
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

/// Runs `curate feed`.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: FeedArgs,
) -> anyhow::Result<()> {
    let feeds = check_urls(&args.urls)?;
    let mut state: FeedsState = state::load(&args.state)?;
    let fetcher = Fetcher::new(
        args.timeout,
        args.max_feed_size,
        args.max_retry_wait,
        &args.addresses.policy(),
    )?;
    let long_running = args.every.is_some();
    let sink = Sink::open(
        config,
        &token,
        &config.queues.episodes,
        args.dry_run,
        long_running,
        "curate feed",
    )
    .await?;
    let board = args.every.map(|every| {
        let shown: Vec<String> = feeds.iter().map(|(g, _)| shown_url(g)).collect();
        Board::new(&shown, every)
    });
    if let (Some(board), Some(addr)) = (&board, config.metrics_addr) {
        page::serve(addr, Some(board.clone()), &token).await?;
    }
    loop {
        let outcome = pass(
            &feeds,
            &args,
            &fetcher,
            &sink,
            &mut state,
            board.as_ref(),
            &token,
        )
        .await;
        if let Some(b) = &board {
            b.pass_done();
        }
        match (args.every, outcome) {
            (None, Ok(failed)) if failed.is_empty() => return Ok(()),
            (None, Ok(failed)) => {
                return Err(anyhow!(
                    "{} of {} feeds failed: {}",
                    failed.len(),
                    feeds.len(),
                    failed.join("; ")
                ))
            }
            (None, Err(e)) => return Err(e),
            (Some(_), Ok(_)) => {}
            // A long-running curator outlives a bad pass; the next one tries again.
            (Some(_), Err(e)) => {
                tracing::error!(error = %crate::describe(&e), "the pass failed; trying again at the next");
            }
        }
        let Some(every) = args.every else {
            return Ok(());
        };
        tokio::select! {
            _ = token.cancelled() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
        if token.is_cancelled() {
            return Ok(());
        }
    }
}

/// The feeds' addresses, checked (http or https) and each once, in the order given.
fn check_urls(given: &[String]) -> anyhow::Result<Vec<(String, Url)>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for g in given {
        let g = g.trim();
        let url = Url::parse(g).map_err(|e| {
            usage(format!(
                "{:?} is not a feed address ({e}): expected http://… or https://…",
                shown_url(g)
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(usage(format!(
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

/// One pass over every feed; the feeds that failed, each with its reason. An error is a
/// failure of the curator itself (the bus, the state file), which ends a one-shot run.
async fn pass(
    feeds: &[(String, Url)],
    args: &FeedArgs,
    fetcher: &Fetcher,
    sink: &Sink,
    state: &mut FeedsState,
    board: Option<&Board>,
    token: &CancellationToken,
) -> anyhow::Result<Vec<String>> {
    let mut failed = Vec::new();
    let mut reports = Vec::new();
    for (given, url) in feeds {
        if token.is_cancelled() {
            break;
        }
        let mut entry = state.feeds.get(given).cloned().unwrap_or_default();
        // Shown everywhere but in the state file: a private feed's address carries its key.
        let shown = shown_url(given);
        let (report, record) =
            curate_feed(&shown, url, &mut entry, args, fetcher, sink, token).await?;
        if record && !args.dry_run {
            state.feeds.insert(given.clone(), entry);
            state::save(&args.state, state)?;
        }
        count(&shown, &report, board);
        if let Some(e) = &report.error {
            tracing::warn!(feed = %shown, error = %e, "feed not read");
            failed.push(format!("{shown} ({e})"));
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
            "feeds": reports.iter().map(FeedReport::json).collect::<Vec<_>>(),
            "sent": sent,
            "failed": failed.len(),
        }))?;
    }
    Ok(failed)
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
async fn curate_feed(
    given: &str,
    default_url: &Url,
    entry: &mut FeedState,
    args: &FeedArgs,
    fetcher: &Fetcher,
    sink: &Sink,
    token: &CancellationToken,
) -> anyhow::Result<(FeedReport, bool)> {
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
    let max_items = usize::try_from(args.max_items).unwrap_or(usize::MAX);
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
    let (bodies, sent) = episodes(given, parsed, entry, args.priority, now, &mut report);
    sink.deliver(token, &bodies).await.map_err(|e| {
        e.context(format!(
            "feed {given}: {} episodes not sent (they will be at the next pass)",
            bodies.len()
        ))
    })?;
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
) -> anyhow::Result<Result<ParsedFeed, String>> {
    let base = url.clone();
    tokio::task::spawn_blocking(move || parse::parse(&bytes, &base, max_items, page))
        .await
        .map_err(|e| anyhow!("parsing the feed {url} stopped: {e}"))
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
