//! What every page shares: the head, the top bar and the stylesheet (`style.css`, compiled in
//! and served at [`STYLESHEET_PATH`]; nothing is fetched from elsewhere).

use axum::http::header;
use axum::response::IntoResponse;
use maud::{html, Markup, DOCTYPE};

/// Where the stylesheet is served.
pub(super) const STYLESHEET_PATH: &str = "/style.css";

/// The stylesheet's text.
const STYLESHEET: &str = include_str!("style.css");

/// Which page of the top bar's is shown (marked `aria-current`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nav {
    Status,
    Clips,
    Episodes,
}

/// `GET /style.css`. Cached for an hour: it changes only with the binary.
pub(super) async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLESHEET,
    )
}

/// A whole page: `title` (the document's, before " · archivist"), the top bar with `current`
/// (if any) marked, then `body`. `refresh`: the page reloads itself every that many seconds.
pub(super) fn page(
    title: &str,
    current: Option<Nav>,
    refresh: Option<u32>,
    body: Markup,
) -> Markup {
    let link = |path: &str, name: &str, nav: Nav| {
        html! {
            @if Some(nav) == current {
                a href=(path) aria-current="page" { (name) }
            } @else {
                a href=(path) { (name) }
            }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(seconds) = refresh {
                    meta http-equiv="refresh" content=(seconds);
                }
                title { (title) " · archivist" }
                link rel="stylesheet" href=(STYLESHEET_PATH);
            }
            body {
                header.top {
                    a.brand href="/" { "archivist" }
                    nav {
                        (link("/", "Status", Nav::Status))
                        (link("/clips", "Clips", Nav::Clips))
                        (link("/episodes", "Episodes", Nav::Episodes))
                    }
                }
                (body)
            }
        }
    }
}
