//! Tokens against every route: none, unknown, revoked, every scope; failed attempts limited per
//! credential; spoofed forwarding headers.

use datastore::TokenScope;

use crate::world::{self, world, Backend};

/// Every route of the API, with the scope it takes (`None`: open to all).
const ROUTES: &[(&str, &str, Option<TokenScope>)] = &[
    ("POST", "/api/v1/episodes", Some(TokenScope::Curator)),
    ("POST", "/api/v1/clips", Some(TokenScope::Curator)),
    ("POST", "/api/v1/work", Some(TokenScope::Researcher)),
    (
        "POST",
        "/api/v1/work/00/extend",
        Some(TokenScope::Researcher),
    ),
    (
        "POST",
        "/api/v1/work/00/results",
        Some(TokenScope::Researcher),
    ),
    (
        "POST",
        "/api/v1/work/00/finish",
        Some(TokenScope::Researcher),
    ),
    (
        "POST",
        "/api/v1/work/00/release",
        Some(TokenScope::Researcher),
    ),
    ("GET", "/api/v1/archive", Some(TokenScope::Researcher)),
    (
        "GET",
        "/api/v1/archive/episodes/0000000000000000000000000000000000000000000000000000000000000000",
        Some(TokenScope::Researcher),
    ),
    (
        "POST",
        "/api/v1/archive/episodes/0000000000000000000000000000000000000000000000000000000000000000/versions",
        Some(TokenScope::Researcher),
    ),
    (
        "GET",
        "/api/v1/archive/media/0000000000000000000000000000000000000000000000000000000000000000",
        Some(TokenScope::Researcher),
    ),
    (
        "PUT",
        "/api/v1/archive/media/0000000000000000000000000000000000000000000000000000000000000000",
        Some(TokenScope::Researcher),
    ),
    (
        "GET",
        "/api/v1/prints/0000000000000000000000000000000000000000000000000000000000000000",
        Some(TokenScope::Researcher),
    ),
    (
        "PUT",
        "/api/v1/prints/0000000000000000000000000000000000000000000000000000000000000000",
        Some(TokenScope::Researcher),
    ),
    ("GET", "/api/v1/status", Some(TokenScope::Reader)),
    ("GET", "/api/v1/matches", Some(TokenScope::Reader)),
    ("GET", "/api/v1/openapi.json", None),
];

async fn every_route_refuses_what_it_must(backend: Backend) {
    let w = world(backend).await;
    let mut tokens = Vec::new();
    for scope in TokenScope::ALL {
        tokens.push((scope, w.token(scope).await));
    }
    let (revoked_name, revoked) = w.token_with(TokenScope::Researcher, 2).await;
    w.revoke(&revoked_name).await;
    let unknown = api::tokens::generate();
    // A work item waits, so that nothing refused can take it.
    w.publish(1, 1).await;
    for &(method, path, needs) in ROUTES {
        for bad in [None, Some(unknown.as_str()), Some(revoked.as_str())] {
            let answer = w.call(method, path, bad, "").await;
            let expected = if needs.is_none() { 200 } else { 401 };
            assert_eq!(
                answer.status, expected,
                "{method} {path} {bad:?}: {answer:?}"
            );
        }
        for (scope, token) in &tokens {
            let answer = w.call(method, path, Some(token), "").await;
            match needs {
                Some(needs) if needs != *scope => {
                    assert_eq!(answer.status, 403, "{method} {path} as {scope}: {answer:?}");
                    assert!(answer.body.contains(needs.as_str()), "{answer:?}");
                }
                _ => assert!(
                    ![401, 403, 429, 500].contains(&answer.status),
                    "{method} {path} as {scope}: {answer:?}"
                ),
            }
        }
    }
    // Nobody refused took the item; the researcher token's `POST /api/v1/work` (no wait) did,
    // and it is held, not lost.
    let stats = w.stats(world::PENDING).await;
    assert_eq!(stats.waiting + stats.in_flight, 1, "{stats:?}");
}

async fn failures_are_limited_per_credential_never_per_address(backend: Backend) {
    let w = world(backend).await;
    let reader = w.token(TokenScope::Reader).await;
    let bad = api::tokens::generate();
    let limit = api::Limits::default().max_failures;
    // The same bad credential, from this address, past its limit.
    let mut refused = None;
    for _ in 0..limit + 5 {
        let answer = w.call("GET", "/api/v1/status", Some(&bad), "").await;
        if answer.status == 429 {
            refused = Some(answer);
            break;
        }
        assert_eq!(answer.status, 401, "{answer:?}");
    }
    let refused = refused.expect("a credential that keeps failing is refused with 429");
    let wait: u64 = refused
        .retry_after
        .as_deref()
        .expect("every 429 says when to try again")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    // Many other bad tokens from the same address: each refused 401, never 429.
    for _ in 0..limit + 5 {
        let other = api::tokens::generate();
        let answer = w.call("GET", "/api/v1/status", Some(&other), "").await;
        assert_eq!(answer.status, 401, "{answer:?}");
    }
    // The good token behind the same address is never locked out.
    let answer = w.call("GET", "/api/v1/status", Some(&reader), "").await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

async fn forwarding_headers_cannot_lock_out_or_multiply_anyone(backend: Backend) {
    for trust_proxy in [false, true] {
        let limits = api::Limits {
            trust_proxy,
            ..world::limits()
        };
        let w = world::world_with(backend, limits, api::server::ServerLimits::default()).await;
        let (name, researcher) = w.token_with(TokenScope::Researcher, 50).await;
        let reader = w.token(TokenScope::Reader).await;
        // Twenty-five bad-token requests naming the victim's address, as the client wrote it
        // and as a proxy would append it.
        for i in 0..25 {
            let forwarded = format!("203.0.113.{i}, 198.51.100.7");
            let bad = api::tokens::generate();
            let answer = w
                .call_with(
                    "GET",
                    "/api/v1/status",
                    Some(&bad),
                    &[("x-forwarded-for", &forwarded)],
                    "",
                )
                .await;
            assert_eq!(answer.status, 401, "{answer:?}");
        }
        let answer = w
            .call_with(
                "GET",
                "/api/v1/status",
                Some(&reader),
                &[("x-forwarded-for", "198.51.100.7")],
                "",
            )
            .await;
        assert_eq!(answer.status, 200, "trust_proxy {trust_proxy}: {answer:?}");
        // A researcher rotating what it writes in the header is one researcher: only the
        // proxy's own entry (or the connection) names it.
        for i in 0..10 {
            let forwarded = format!("192.0.2.{i}, 198.51.100.9");
            let answer = w
                .call_with(
                    "POST",
                    "/api/v1/work",
                    Some(&researcher),
                    &[("x-forwarded-for", &forwarded)],
                    "",
                )
                .await;
            assert_eq!(answer.status, 204, "{answer:?}");
        }
        let since = chrono::Utc::now() - chrono::Duration::minutes(1);
        let presence = w.store.api_access().unwrap().presence(since).await.unwrap();
        assert_eq!(presence.researchers, 1, "{name}, trust_proxy {trust_proxy}");
    }
}

crate::both_buses!(
    every_route_refuses_what_it_must,
    failures_are_limited_per_credential_never_per_address,
    forwarding_headers_cannot_lock_out_or_multiply_anyone,
);
