//! `/`: the status page. Server-rendered HTML (maud escapes every value), no script; it
//! reloads itself every [`REFRESH_SECONDS`]. Laid out for a phone's width first, and it
//! says everything in words and numbers: nothing depends on colour.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use chrono::{DateTime, SecondsFormat, Utc};
use datastore::{LeaseState, Match};
use maud::{html, Markup};

use super::app::App;
use super::archive_view::{short, ArchiveFigures};
use super::history::{rate_per_minute, Sample};
use super::layout::{self, Nav};
use super::snapshot::{self, Counts, LeaseRow, QueueView, Queues, Section};

/// How often the page reloads itself.
const REFRESH_SECONDS: u32 = 5;
/// Progress samples listed in the table under the chart (the chart has them all).
const SAMPLES_LISTED: usize = 10;

/// The page, read now.
pub(super) async fn page(State(app): State<Arc<App>>) -> Markup {
    let (counts, leases, queues, matches, archive) = tokio::join!(
        snapshot::counts(&app),
        snapshot::leases(&app),
        snapshot::queues(&app, true),
        snapshot::recent_matches(&app),
        snapshot::archive(&app),
    );
    let samples = app.history.samples();
    let now = Utc::now();
    layout::page(
        "Status",
        Some(Nav::Status),
        Some(REFRESH_SECONDS),
        html! {
            div.intro {
                h1 { "archivist status" }
                p {
                    "Read at " time datetime=(rfc3339(now)) { (when(now)) }
                    ". This page reloads itself every " (REFRESH_SECONDS) " seconds."
                }
                p {
                    "Datastore: " code { (app.sources.datastore_shown) } ". "
                    "Bus: " code { (app.sources.bus_shown) } "."
                }
            }
            main {
                (research_section(&counts, &samples))
                (leases_section(&counts, &leases))
                (queues_section(&queues, &app.sources.work_items))
                (dead_letters_section(&queues))
                (matches_section(&matches))
                @if let Some(archive) = &archive { (archive_section(archive)) }
            }
            footer {
                h2 { "The same as JSON" }
                p {
                    @for path in ["/api/status", "/api/progress", "/api/leases", "/api/queues", "/api/dead-letters", "/api/matches"] {
                        a href=(path) { (path) } " "
                    }
                    "· " a href="/metrics" { "/metrics" }
                }
            }
        },
    )
}

fn unavailable(why: &str) -> Markup {
    html! { p.why { "Not available now: " (why) } }
}

fn research_section(counts: &Section<Counts>, samples: &[Sample]) -> Markup {
    html! {
        section #research {
            h2 { "Research" }
            @match counts {
                Err(why) => (unavailable(why)),
                Ok(c) => {
                    @let s = &c.status;
                    p.big {
                        strong #researched-pairs { (s.researched_pairs) } " of "
                        span #research-pairs { (s.research_pairs) }
                        " pairs researched ("
                        span #percent-researched { (format!("{:.1}", c.percent_researched)) } "%)."
                        @if let Some(rate) = rate_per_minute(samples) {
                            " Lately " (format!("{rate:.1}")) " pairs a minute."
                        }
                    }
                    progress value=(s.researched_pairs) max=(s.research_pairs.max(1)) {
                        (format!("{:.1}%", c.percent_researched))
                    }
                    dl.tiles {
                        div { dt { "Episodes" } dd.n #episodes { (s.episodes) } }
                        div { dt { "Clips" } dd.n #clips { (s.clips) } }
                        div { dt { "Matches (pairs where the clip was found)" } dd.n #matched-pairs { (s.matched_pairs) } }
                        div { dt { "Pairs under lease" } dd.n #leased-pairs { (s.leased_pairs) } }
                        div { dt { "Pairs to lease" } dd.n #unresearched-pairs { (c.unresearched_pairs) } }
                        div {
                            dt { "Failed pairs (not leased until retried: archivist retry-failed)" }
                            dd.n #failed-pairs { (s.failed_pairs) }
                        }
                    }
                    @if !c.failure_reasons.is_empty() {
                        table #failure-reasons {
                            caption { "The most common failure reasons" }
                            thead { tr { th { "reason" } th.n { "pairs" } } }
                            tbody {
                                @for r in &c.failure_reasons {
                                    tr { td { (r.reason) } td.n { (r.pairs) } }
                                }
                            }
                        }
                    }
                }
            }
            h3 { "Over time" }
            (progress_chart(samples))
            @if samples.is_empty() {
                p { "No samples yet." }
            } @else {
                div.scroll {
                    table #progress-samples {
                        caption { "The latest readings, newest first (one every 10 seconds, and one at each load)" }
                        thead { tr { th { "time (UTC)" } th.n { "researched" } th.n { "of" } th.n { "matches" } } }
                        tbody {
                            @for sample in samples.iter().rev().take(SAMPLES_LISTED) {
                                tr {
                                    td { time datetime=(rfc3339(sample.at)) { (when(sample.at)) } }
                                    td.n { (sample.researched_pairs) }
                                    td.n { (sample.research_pairs) }
                                    td.n { (sample.matched_pairs) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The chart's drawing box (SVG user units), stretched to the page's width.
const CHART_WIDTH: f64 = 300.0;
const CHART_HEIGHT: f64 = 100.0;
/// Where the share 1 (every pair researched) and the share 0 are drawn: inside the box, so
/// that a line at either is seen, not hidden under the frame.
const CHART_TOP: f64 = 8.0;
const CHART_BOTTOM: f64 = 92.0;

/// Pairs researched (as a share of all pairs) against time: a line over a shaded area, under a
/// dashed line at the top for every pair researched; the numbers are also in the table beside
/// it. One reading is drawn across the whole width (a finished archive is a full line at the
/// top, not an empty box).
fn progress_chart(samples: &[Sample]) -> Markup {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return html! {};
    };
    let span = (last.at - first.at).num_milliseconds() as f64;
    let y = |s: &Sample| {
        let share = if s.research_pairs == 0 {
            0.0
        } else {
            (s.researched_pairs as f64 / s.research_pairs as f64).clamp(0.0, 1.0)
        };
        CHART_BOTTOM - (CHART_BOTTOM - CHART_TOP) * share
    };
    let mut points: Vec<(f64, f64)> = if span <= 0.0 {
        vec![(0.0, y(last)), (CHART_WIDTH, y(last))]
    } else {
        samples
            .iter()
            .map(|s| {
                let x = CHART_WIDTH * (s.at - first.at).num_milliseconds() as f64 / span;
                (x, y(s))
            })
            .collect()
    };
    points.dedup();
    let line = points.iter().fold(String::new(), |mut out, (x, y)| {
        let _ = write!(out, "{x:.1},{y:.1} ");
        out
    });
    let area = format!(
        "{line}{CHART_WIDTH:.1},{CHART_BOTTOM:.1} 0.0,{CHART_BOTTOM:.1}",
        line = line
    );
    let label = format!(
        "Pairs researched from {} ({} of {}) to {} ({} of {})",
        when(first.at),
        first.researched_pairs,
        first.research_pairs,
        when(last.at),
        last.researched_pairs,
        last.research_pairs
    );
    html! {
        svg.chart #progress-chart viewBox=(format!("0 0 {CHART_WIDTH} {CHART_HEIGHT}")) preserveAspectRatio="none" role="img" aria-label=(label) {
            title { (label) }
            rect.frame x="0.5" y="0.5" width=(CHART_WIDTH - 1.0) height=(CHART_HEIGHT - 1.0) rx="3" vector-effect="non-scaling-stroke" {}
            polygon.area points=(area) {}
            line.all x1="0" y1=(CHART_TOP) x2=(CHART_WIDTH) y2=(CHART_TOP) vector-effect="non-scaling-stroke" {}
            polyline.line points=(line.trim_end()) vector-effect="non-scaling-stroke" {}
        }
        p.muted { (label) "; the dashed line at the top is every pair researched." }
    }
}

fn leases_section(counts: &Section<Counts>, leases: &Section<Vec<LeaseRow>>) -> Markup {
    html! {
        section #leases {
            h2 { "Leases" }
            @if let Ok(c) = counts {
                p {
                    (c.status.active_leases) " active, "
                    (c.status.awaiting_late_results) " awaiting late results, "
                    (c.status.expired_leases) " expired (their pairs are taken over by the next work assignment)."
                }
            }
            @match leases {
                Err(why) => (unavailable(why)),
                Ok(rows) if rows.is_empty() => p { "No lease holds pairs." },
                Ok(rows) => div.scroll {
                    table {
                        caption { "Expired first, then the oldest (at most " (snapshot::LEASES_SHOWN) ")" }
                        thead { tr { th { "state" } th { "episode" } th.n { "age" } th.n { "expiry" } th.n { "pairs held" } th { "lease" } } }
                        tbody {
                            @for row in rows {
                                tr {
                                    td { (state_words(row.lease.state)) }
                                    td { (row.lease.episode_title) " (aired " (row.lease.episode_date_aired.format("%Y-%m-%d")) ")" }
                                    td.n { (seconds(row.age_seconds)) }
                                    td.n {
                                        @if row.expires_in_seconds >= 0 {
                                            "in " (seconds(row.expires_in_seconds))
                                        } @else {
                                            (seconds(-row.expires_in_seconds)) " ago"
                                        }
                                    }
                                    td.n { (row.lease.held_pairs) }
                                    td { code { (row.lease.id) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The queues' table; `pending` is the work items' queue (the third of `Sources::queues`,
/// which lists them in pipeline order), for the note `status` shows too.
fn queues_section(queues: &Section<Option<Queues>>, pending: &str) -> Markup {
    let note = match queues {
        Ok(Some(Queues { views, .. })) => views
            .iter()
            .find(|v| v.depth.queue == pending)
            .and_then(|v| crate::depths::no_researcher_note(&v.depth)),
        _ => None,
    };
    html! {
        section #queues {
            h2 { "Queues" }
            @match queues {
                Err(why) => (unavailable(why)),
                Ok(None) => p { "Unknown here: the in-memory bus's queues live inside the process that runs it." },
                Ok(Some(Queues { views, missing })) => {
                    @if !missing.is_empty() {
                        p { "Not created yet: " (missing.join(", ")) " (" code { "archivist queues" } " creates them)." }
                    }
                    @if !views.is_empty() { div.scroll {
                    table {
                        thead { tr { th { "queue" } th.n { "waiting" } th.n { "in flight" } th.n { "dead letters" } th.n { "consumers" } } }
                        tbody {
                            @for v in views {
                                tr {
                                    td { (v.depth.queue) }
                                    td.n { (v.depth.waiting) }
                                    td.n { (v.depth.in_flight) }
                                    td.n { (v.depth.dead_letters) }
                                    td.n {
                                        @match v.depth.consumers {
                                            Some(n) => (n),
                                            None => "not counted",
                                        }
                                    }
                                }
                            }
                        }
                    }
                    } }
                    @if let Some(note) = &note {
                        p #no-researcher { (note) }
                    }
                }
            }
        }
    }
}

fn dead_letters_section(queues: &Section<Option<Queues>>) -> Markup {
    let Ok(Some(Queues { views, .. })) = queues else {
        // The queues section already says why.
        return html! {};
    };
    let with_letters: Vec<&QueueView> = views.iter().filter(|v| v.depth.dead_letters > 0).collect();
    html! {
        section #dead-letters {
            h2 { "Dead letters" }
            @if with_letters.is_empty() {
                p { "None: no message was set aside." }
            }
            @for v in with_letters {
                h3 { (v.depth.dead_letter_queue) ": " (v.depth.dead_letters) }
                @match &v.dead_letters {
                    None => p { "This bus cannot show dead letters without taking them off their queue; only the count is shown. "
                        code { "archivist receive " (v.depth.queue) " --dead-letters" } " takes them." },
                    Some(letters) => {
                        @if (letters.len() as u64) < v.depth.dead_letters {
                            p { "The first " (letters.len()) " shown." }
                        }
                        ol {
                            @for letter in letters {
                                li {
                                    p { "Reason: " (letter.reason.as_deref().unwrap_or("none recorded")) }
                                    pre { (letter.body) }
                                    @if letter.body_truncated {
                                        p { "(the first part of " (letter.body_bytes) " bytes)" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn matches_section(matches: &Section<Vec<Match>>) -> Markup {
    html! {
        section #matches {
            h2 { "Recent matches" }
            @match matches {
                Err(why) => (unavailable(why)),
                Ok(ms) if ms.is_empty() => p { "No match recorded yet." },
                Ok(ms) => div.scroll {
                    table {
                        caption { "The latest researched first (at most " (snapshot::MATCHES_SHOWN) ")" }
                        thead { tr { th { "researched (UTC)" } th { "episode" } th { "clip" } th { "found at" } } }
                        tbody {
                            @for m in ms {
                                tr {
                                    td { time datetime=(rfc3339(m.research_date)) { (when(m.research_date)) } }
                                    td { (m.episode_title) " (aired " (m.episode_date_aired.format("%Y-%m-%d")) ")" }
                                    td { (m.clip_title) }
                                    td { (occurrences(m)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The media archive: its copies and bytes, the episodes and versions kept (and the episodes
/// with more than one), and the last `archive verify`.
fn archive_section(figures: &Section<Arc<ArchiveFigures>>) -> Markup {
    html! {
        section #media-archive {
            h2 { "Media archive" }
            @match figures {
                Err(why) => (unavailable(why)),
                Ok(f) => {
                    p {
                        code { (f.archive) } ", counted at " time datetime=(rfc3339(f.counted_at)) { (when(f.counted_at)) }
                        " (at most once a minute)."
                    }
                    dl.tiles {
                        div { dt { "Copies kept" } dd.n #archive-copies { (f.copies) } }
                        div { dt { "Their size" } dd.n #archive-bytes data-bytes=(f.bytes) { (bytes(f.bytes)) } }
                        div { dt { "Episodes" } dd.n #archive-episodes { (f.episodes) } }
                        div { dt { "Versions" } dd.n #archive-versions { (f.versions) } }
                        div { dt { "Episodes with more than one version" } dd.n #archive-changed { (f.episodes_with_versions) } }
                    }
                    @if !f.changed.is_empty() {
                        div.scroll { table #archive-changed-episodes {
                            caption { "Episodes whose media changed, latest aired first" }
                            thead { tr { th { "episode" } th.n { "versions" } th { "answered for" } } }
                            tbody {
                                @for e in &f.changed {
                                    tr {
                                        td { (e.title) " (aired " (e.date_aired.format("%Y-%m-%d")) ")" }
                                        td.n { (e.versions) }
                                        td { code title=(e.chosen) { (short(&e.chosen)) } }
                                    }
                                }
                            }
                        } }
                    }
                    @match &f.last_verify {
                        None => p #archive-verify { "Never checked: " code { "archivist archive verify" } " checks every copy against its SHA-256." },
                        Some(v) => {
                            p #archive-verify {
                                "Last checked " time datetime=(rfc3339(v.checked_at)) { (when(v.checked_at)) } ": "
                                (v.copies) " copies (" (bytes(v.bytes)) "), "
                                strong #archive-failed { (v.failed) } " failed."
                            }
                            @if !v.failures.is_empty() {
                                ul #archive-failures {
                                    @for failure in &v.failures {
                                        li { code title=(failure.sha256) { (short(&failure.sha256)) } ": " (failure.why) " (not played)" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A size in bytes as people read it: `1.5 GB` (powers of 1000).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn state_words(state: LeaseState) -> &'static str {
    match state {
        LeaseState::Active => "active",
        LeaseState::AwaitingLateResults => "awaiting late results",
        LeaseState::Expired => "expired",
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A length of time in words, to the second: `1h 2m 3s`.
fn seconds(s: i64) -> String {
    humantime::format_duration(Duration::from_secs(s.unsigned_abs())).to_string()
}

/// Where a match occurs: each offset, with its score where the analyser gave them
/// (`0:01:02.345 (0.97)`).
fn occurrences(m: &datastore::Match) -> String {
    let scores = m
        .clip_match_scores
        .as_ref()
        .filter(|s| s.len() == m.clip_offsets_ns.len());
    m.clip_offsets_ns
        .iter()
        .enumerate()
        .map(|(i, &ns)| match scores.and_then(|s| s.get(i)) {
            Some(s) => format!("{} ({s:.2})", offset(ns)),
            None => offset(ns),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An offset into an episode as `H:MM:SS.mmm`.
fn offset(ns: i64) -> String {
    let ms = ns / 1_000_000;
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    format!(
        "{h}:{:02}:{:02}.{:03}",
        rest / 60_000,
        rest / 1000 % 60,
        rest % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_ages_read_as_people_write_them() {
        assert_eq!(offset(0), "0:00:00.000");
        assert_eq!(offset(3_723_500_000_000), "1:02:03.500");
        assert_eq!(seconds(0), "0s");
        assert_eq!(seconds(3723), "1h 2m 3s");
        assert_eq!(seconds(-90), "1m 30s");
        assert_eq!(bytes(999), "999 bytes");
        assert_eq!(bytes(1_500_000_000), "1.5 GB");
    }
}
