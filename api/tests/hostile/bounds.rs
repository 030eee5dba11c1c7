//! Bodies and numbers from a participant: bounded before they cost anything.

use datastore::TokenScope;

use crate::world::{self, at, result, world, Backend};

async fn numerous_and_oversized_lines_are_refused_cheaply(backend: Backend) {
    let w = world(backend).await;
    let curator = w.token(TokenScope::Curator).await;
    let researcher = w.token(TokenScope::Researcher).await;
    let max_lines = api::Limits::default().max_lines;
    // Millions of tiny lines: refused by their count, nothing decoded, nothing listed.
    let many = "{}\n".repeat(2_000_000);
    let answer = w
        .call("POST", "/api/v1/episodes", Some(&curator), &many)
        .await;
    assert_eq!(
        answer.status,
        413,
        "{}",
        &answer.body[..answer.body.len().min(300)]
    );
    assert!(
        answer.body.len() < 1000,
        "a short answer: {} bytes",
        answer.body.len()
    );
    // As many bad lines as are allowed: all counted, the first hundred listed.
    let bad = "{}\n".repeat(max_lines);
    let answer = w.call("POST", "/api/v1/clips", Some(&curator), &bad).await;
    assert_eq!(answer.status, 422);
    let refused = answer.json();
    assert_eq!(refused["errors"].as_array().unwrap().len(), api::MAX_LISTED);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{max_lines} lines refused")),
        "{}",
        refused["error"]
    );
    // Over the byte limit.
    let huge = "x".repeat(api::Limits::default().max_body_bytes + 1);
    let answer = w
        .call("POST", "/api/v1/episodes", Some(&curator), &huge)
        .await;
    assert_eq!(answer.status, 413);
    // Results: the receipt is checked before the body is read or decoded.
    let answer = w
        .call(
            "POST",
            &at("0123456789abcdef0123456789abcdef", "results"),
            Some(&researcher),
            &many,
        )
        .await;
    assert_eq!(
        answer.status,
        409,
        "{}",
        &answer.body[..answer.body.len().min(300)]
    );
    // An item of two clips takes at most two results a request.
    w.publish(1, 2).await;
    let (receipt, item) = w.take_one(&researcher).await;
    let three = format!(
        "{}\n{}\n{}\n",
        result(&item, 0, false),
        result(&item, 1, false),
        result(&item, 1, true)
    );
    let answer = w
        .call("POST", &at(&receipt, "results"), Some(&researcher), &three)
        .await;
    assert_eq!(answer.status, 413, "{answer:?}");
    // Nothing was sent anywhere.
    for q in [world::EPISODES, world::CLIPS, world::COMPLETED] {
        assert_eq!(w.stats(q).await.waiting, 0, "{q}");
    }
}

async fn every_number_is_range_checked(backend: Backend) {
    let w = world(backend).await;
    let researcher = w.token(TokenScope::Researcher).await;
    let reader = w.token(TokenScope::Reader).await;
    // Out of range, not a number: 400, never a panic (the connection answers).
    for wait in ["-1", "NaN", "inf", "-inf", "1e400", "abc"] {
        let answer = w
            .call(
                "POST",
                &format!("/api/v1/work?wait={wait}"),
                Some(&researcher),
                "",
            )
            .await;
        assert_eq!(answer.status, 400, "wait={wait}: {answer:?}");
    }
    // Far over the maximum: waits the maximum at most (here, an item is there at once).
    w.publish(1, 1).await;
    let answer = w
        .call("POST", "/api/v1/work?wait=1e20", Some(&researcher), "")
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let answer = w
        .call("POST", "/api/v1/work?wait=0", Some(&researcher), "")
        .await;
    assert_eq!(answer.status, 204, "{answer:?}");
    for query in [
        "limit=-1",
        "limit=1e99",
        "limit=99999999999999999999999",
        "since=yesterday",
    ] {
        let answer = w
            .call(
                "GET",
                &format!("/api/v1/matches?{query}"),
                Some(&reader),
                "",
            )
            .await;
        assert_eq!(answer.status, 400, "{query}: {answer:?}");
    }
    let answer = w
        .call("GET", "/api/v1/matches?limit=99999999", Some(&reader), "")
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    // The server still answers everyone.
    let answer = w.call("GET", "/api/v1/status", Some(&reader), "").await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

crate::both_buses!(
    numerous_and_oversized_lines_are_refused_cheaply,
    every_number_is_range_checked,
);
