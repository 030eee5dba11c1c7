//! `/sign-in` and `/sign-out`: a reader's way in to the pages from a browser when `serve
//! --api` guards them with a reader token (a browser cannot send a bearer token). The form
//! takes a reader token once; the session it opens, its cookie, its checks and its end are
//! the API crate's ([`api::ReaderSessions`]): this module only shows the form and answers it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};

use super::layout;

/// The routes of signing in and out (open to all: they are the way in).
pub(crate) fn router(sessions: Arc<api::ReaderSessions>) -> Router {
    Router::new()
        .route(api::SIGN_IN_PATH, get(form).post(sign_in))
        .route("/sign-out", axum::routing::post(sign_out))
        .with_state(sessions)
}

/// Where to go once signed in: a path of this server (`next`), else the status page. Anything
/// that could leave the server (`//host`, `/\host`, a scheme) is the status page.
fn next_page(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".to_string(),
    }
}

/// The value of `key` in a form-encoded text.
fn field(form: &[u8], key: &str) -> Option<String> {
    url::form_urlencoded::parse(form)
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The page: the form (with `error` above it, if any), or who is signed in and a button to
/// sign out.
fn page(next: &str, signed_in_as: Option<&str>, error: Option<&str>) -> Markup {
    let body = html! {
        main {
            h1 { "Sign in" }
            section.card {
                @if let Some(name) = signed_in_as {
                    p { "Signed in with the reader token " code { (name) } "." }
                    p { a href=(next) { "Go on to the pages" } }
                    form method="post" action="/sign-out" {
                        button type="submit" { "Sign out" }
                    }
                } @else {
                    p.muted {
                        "The pages of this server need a reader token (" code { "archivist token create --scope reader" } "). "
                        "Signing in keeps a session in this browser until you sign out, for "
                        (api::SESSION_LIFETIME.as_secs() / 3600) " hours at most, or until the token is revoked."
                    }
                    @if let Some(error) = error {
                        p.bad role="alert" { (error) }
                    }
                    form method="post" action=(api::SIGN_IN_PATH) {
                        label for="token" { "Reader token" }
                        input #token type="password" name="token" autocomplete="off" required autofocus;
                        input type="hidden" name="next" value=(next);
                        button type="submit" { "Sign in" }
                    }
                }
            }
        }
    };
    layout::page("Sign in", None, None, body)
}

/// `text` as a sentence on the page: its first letter capital, a full stop at its end.
fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => String::new(),
    }
}

/// Answers with the page, never cached (it says who is signed in).
fn answer(status: StatusCode, markup: Markup) -> Response {
    (status, [(header::CACHE_CONTROL, "no-store")], markup).into_response()
}

/// `GET /sign-in?next=PATH`: the form, or who is signed in.
async fn form(
    State(sessions): State<Arc<api::ReaderSessions>>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response {
    let next = query.and_then(|q| field(q.as_bytes(), "next"));
    let next = next_page(next.as_deref());
    let name = sessions.signed_in_as(request.headers()).await;
    answer(StatusCode::OK, page(&next, name.as_deref(), None))
}

/// `POST /sign-in` (form: `token`, `next`): a session and on to `next` (303), or the form
/// again saying why not.
async fn sign_in(State(sessions): State<Arc<api::ReaderSessions>>, request: Request) -> Response {
    let (head, body) = request.into_parts();
    // A token is a line of text: a form past this is no sign-in.
    let form = match axum::body::to_bytes(body, 16 * 1024).await {
        Ok(form) => form,
        Err(_) => Bytes::new(),
    };
    let next = next_page(field(&form, "next").as_deref());
    let token = field(&form, "token").unwrap_or_default();
    match sessions.sign_in(&head, &token).await {
        Ok(signed_in) => {
            let location = HeaderValue::from_str(&next).unwrap_or(HeaderValue::from_static("/"));
            (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, signed_in.cookie),
                    (header::LOCATION, location),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
                ],
            )
                .into_response()
        }
        Err(refused) => {
            let error = sentence(&refused.to_string());
            answer(refused.status(), page(&next, None, Some(&error)))
        }
    }
}

/// `POST /sign-out`: ends the session and goes back to the form.
async fn sign_out(State(sessions): State<Arc<api::ReaderSessions>>, request: Request) -> Response {
    let (head, _) = request.into_parts();
    if !sessions.same_origin(&head) {
        let error = sentence(&api::SignInRefused::CrossOrigin.to_string());
        return answer(StatusCode::FORBIDDEN, page("/", None, Some(&error)));
    }
    let cleared = sessions.sign_out(&head.headers);
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cleared),
            (
                header::LOCATION,
                HeaderValue::from_static(api::SIGN_IN_PATH),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_stays_on_this_server() {
        assert_eq!(next_page(Some("/clips?q=a")), "/clips?q=a");
        for away in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "",
        ] {
            assert_eq!(next_page(Some(away)), "/", "{away}");
        }
        assert_eq!(next_page(None), "/");
    }
}
