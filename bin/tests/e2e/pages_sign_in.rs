//! `serve --api` guards the pages, their JSON and `/metrics` with a reader token however the
//! server is reached, loopback included (a proxy on the same host makes every visitor come
//! from loopback); a browser, which cannot send a bearer token, is sent to `/sign-in`, and a
//! session opened there ends when its token is revoked. Over HTTP here; in a real browser in
//! `status_page.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use crate::common::pipeline::Scenario;
use crate::common::serving::{start_serving, Running};

/// How long a process may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

/// What a browser says it accepts when it loads a page.
const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// What a reader token guards: the pages, their JSON, the metrics.
const GUARDED: &[&str] = &["/", "/api/dead-letters", "/api/leases", "/metrics"];

fn scenario() -> Scenario {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    s
}

fn create_token(s: &Scenario, scope: &str, name: &str) -> String {
    let run = s
        .run(&["token", "create", "--scope", scope, "--name", name], &[])
        .expect_code(0);
    run.stdout.trim().to_string()
}

/// `serve --api` on a free loopback port: the process and its base URL.
fn serve_api(s: &Scenario) -> (Running, String) {
    let (running, addr) = start_serving(
        s,
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &[],
        DEADLINE,
    );
    (running, format!("http://{addr}"))
}

/// A client that follows no redirect (the test reads them).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// An answer: status, the `Location` and `Set-Cookie` headers, the body.
struct Answer {
    status: u16,
    location: Option<String>,
    set_cookie: Option<String>,
    body: String,
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let (location, set_cookie) = (header("location"), header("set-cookie"));
    Answer {
        status: response.status().as_u16(),
        location,
        set_cookie,
        body: response.text().await.unwrap(),
    }
}

/// `GET path`, with the `Authorization`, `Cookie` and `Accept` given.
async fn get(
    base: &str,
    path: &str,
    token: Option<&str>,
    cookie: Option<&str>,
    accept: Option<&str>,
) -> Answer {
    let mut request = client().get(format!("{base}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    answer(request).await
}

/// The sign-in form posted with `token`, from `origin` (none: no `Origin` header).
async fn sign_in(base: &str, token: &str, next: &str, origin: Option<&str>) -> Answer {
    let form: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("token", token)
        .append_pair("next", next)
        .finish();
    let mut request = client()
        .post(format!("{base}/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form);
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    answer(request).await
}

/// The `name=value` part of a `Set-Cookie` value.
fn cookie_of(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_api_the_pages_need_a_reader_on_loopback_too() {
    let s = scenario();
    let reader = create_token(&s, "reader", "wall-screen");
    let curator = create_token(&s, "curator", "feeds");
    let (_serve, base) = serve_api(&s);

    for &path in GUARDED {
        let none = get(&base, path, None, None, None).await;
        assert_eq!(none.status, 401, "{path} without a token: {}", none.body);
        let error: serde_json::Value = serde_json::from_str(&none.body).unwrap();
        assert!(error["error"].is_string(), "{path}: {}", none.body);
        let browser = get(&base, path, None, None, Some(BROWSER_ACCEPT)).await;
        assert_eq!(
            browser.status, 303,
            "{path} from a browser without a session"
        );
        let location = browser.location.unwrap();
        assert!(location.starts_with("/sign-in?next="), "{path}: {location}");
        let curated = get(&base, path, Some(&curator), None, None).await;
        assert_eq!(curated.status, 403, "{path} with a curator's token");
        let read = get(&base, path, Some(&reader), None, None).await;
        assert_eq!(
            read.status, 200,
            "{path} with a reader's token: {}",
            read.body
        );
    }
    // The health checks, the stylesheet and the way in stay open.
    for path in ["/healthz", "/readyz", "/style.css", "/sign-in"] {
        let open = get(&base, path, None, None, Some(BROWSER_ACCEPT)).await;
        assert_eq!(open.status, 200, "{path}: {}", open.body);
    }
    let form = get(&base, "/sign-in?next=%2Fclips", None, None, None).await;
    assert!(form.body.contains(r#"type="password""#), "{}", form.body);
    assert!(form.body.contains(r#"value="/clips""#), "{}", form.body);

    // Signing in: only from the server's own page, only with a reader token.
    let no_origin = sign_in(&base, &reader, "/", None).await;
    assert_eq!(no_origin.status, 403, "{}", no_origin.body);
    assert!(no_origin.set_cookie.is_none());
    let elsewhere = sign_in(&base, &reader, "/", Some("http://evil.example")).await;
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.body);
    assert!(
        elsewhere.body.contains("must be sent from this server"),
        "{}",
        elsewhere.body
    );
    let mistyped = sign_in(&base, "archivist_mistyped", "/", Some(&base)).await;
    assert_eq!(mistyped.status, 401);
    assert!(
        mistyped.body.contains("That token is not valid"),
        "{}",
        mistyped.body
    );
    assert!(mistyped.set_cookie.is_none());
    let wrong_scope = sign_in(&base, &curator, "/", Some(&base)).await;
    assert_eq!(wrong_scope.status, 403);
    assert!(
        wrong_scope.body.contains("the pages need a reader token"),
        "{}",
        wrong_scope.body
    );

    let signed = sign_in(&base, &reader, "/clips", Some(&base)).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.location.as_deref(), Some("/clips"));
    let set_cookie = signed.set_cookie.unwrap();
    for part in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(part), "{set_cookie}");
    }
    assert!(!set_cookie.contains(&reader), "the token is in the cookie");
    let cookie = cookie_of(&set_cookie);
    for &path in GUARDED {
        let read = get(&base, path, None, Some(&cookie), Some(BROWSER_ACCEPT)).await;
        assert_eq!(read.status, 200, "{path} with a session: {}", read.body);
    }
    let who = get(&base, "/sign-in", None, Some(&cookie), None).await;
    assert!(who.body.contains("wall-screen"), "{}", who.body);

    // Revoked, the token ends its session at the next request.
    s.run(&["token", "revoke", "wall-screen"], &[])
        .expect_code(0);
    let page = get(&base, "/", None, Some(&cookie), Some(BROWSER_ACCEPT)).await;
    assert_eq!(page.status, 303);
    assert!(page.location.unwrap().starts_with("/sign-in"));
    let cleared = page.set_cookie.unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let json = get(&base, "/api/leases", None, Some(&cookie), None).await;
    assert_eq!(json.status, 401, "{}", json.body);

    // Signing out ends a session at once.
    let other = create_token(&s, "reader", "laptop");
    let signed = sign_in(&base, &other, "/", Some(&base)).await;
    let cookie = cookie_of(&signed.set_cookie.unwrap());
    let refused = client()
        .post(format!("{base}/sign-out"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example");
    assert_eq!(answer(refused).await.status, 403);
    let still = get(&base, "/api/leases", None, Some(&cookie), None).await;
    assert_eq!(
        still.status, 200,
        "a sign-out from elsewhere ended the session"
    );
    let out = client()
        .post(format!("{base}/sign-out"))
        .header("cookie", &cookie)
        .header("origin", &base);
    let out = answer(out).await;
    assert_eq!(out.status, 303);
    assert_eq!(out.location.as_deref(), Some("/sign-in"));
    assert!(out.set_cookie.unwrap().contains("Max-Age=0"));
    let gone = get(&base, "/api/leases", None, Some(&cookie), None).await;
    assert_eq!(gone.status, 401, "{}", gone.body);
}

/// One wrong token on the sign-in form, again and again, until it is refused with 429: how
/// many times it was answered (401) before.
async fn guess_until_refused(base: &str, guess: &str) -> usize {
    let mut answered = 0;
    loop {
        let answer = sign_in(base, guess, "/", Some(base)).await;
        match answer.status {
            401 => answered += 1,
            429 => {
                assert!(
                    answer.body.contains("Too many failed attempts"),
                    "{}",
                    answer.body
                );
                return answered;
            }
            other => panic!("{other}: {}", answer.body),
        }
        assert!(answered < 100, "the guesses were never refused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_form_is_no_faster_an_oracle_than_the_api() {
    let s = scenario();
    let reader = create_token(&s, "reader", "wall-screen");
    let (_serve, base) = serve_api(&s);
    // The gateway's limit: 20 failed attempts with one credential at once, one more back
    // every 3 s (a slow machine's guesses may be answered a few more times).
    let started = std::time::Instant::now();
    let answered = guess_until_refused(&base, "archivist_guess").await;
    let refills = (started.elapsed().as_secs_f64() / 3.0).ceil() as usize;
    assert!(answered <= 20 + refills, "{answered} guesses were answered");
    // The form and the API share one budget per credential: the same guess is refused by
    // the API too, before it is looked up.
    let api = get(&base, "/api/v1/status", Some("archivist_guess"), None, None).await;
    assert_eq!(api.status, 429, "{}", api.body);
    // Guessing on the API spends the same budget the form reads.
    let mut api_answered = 0;
    loop {
        let api = get(&base, "/api/v1/status", Some("archivist_other"), None, None).await;
        if api.status == 429 {
            break;
        }
        assert_eq!(api.status, 401, "{}", api.body);
        api_answered += 1;
        assert!(api_answered < 100, "the API's guesses were never refused");
    }
    let form = sign_in(&base, "archivist_other", "/", Some(&base)).await;
    assert_eq!(form.status, 429, "{}", form.body);
    // Another reader behind the same address is not locked out by them.
    let right = sign_in(&base, &reader, "/", Some(&base)).await;
    assert_eq!(right.status, 303, "{}", right.body);
}
