//! Revocation: a revoked token's polls in flight end, what it holds goes back at once, and it
//! gets nothing more.

use std::time::Duration;

use datastore::TokenScope;

use crate::world::{self, at, eventually, result, world, Backend};

async fn a_revoked_token_gets_nothing_more_and_gives_back_what_it_held(backend: Backend) {
    let w = std::sync::Arc::new(world(backend).await);
    let (name, revoked) = w.token_with(TokenScope::Researcher, 4).await;
    let honest = w.token(TokenScope::Researcher).await;
    let held = w.publish(1, 2).await;
    let (receipt, item) = w.take_one(&revoked).await;
    assert_eq!(item["lease_id"], held["lease_id"]);
    // A long poll in flight when the token is revoked.
    let poll = {
        let w = w.clone();
        let revoked = revoked.clone();
        tokio::spawn(async move { w.take(&revoked, 20).await })
    };
    // The poll is waiting once the gateway has it (its presence is written first).
    eventually(Duration::from_secs(10), "the poll waits", || async {
        let since = chrono::Utc::now() - chrono::Duration::minutes(1);
        w.store
            .api_access()
            .unwrap()
            .presence(since)
            .await
            .unwrap()
            .researchers
            >= 1
    })
    .await;
    w.revoke(&name).await;
    // Work published after the revocation goes to nobody but the honest researcher.
    let later = w.publish(2, 1).await;
    let answer = tokio::time::timeout(Duration::from_secs(15), poll)
        .await
        .expect("the revoked token's poll ends")
        .unwrap();
    assert_eq!(answer.status, 401, "{answer:?}");
    // What it held goes back at once (long before its 60 s visibility), for another to take.
    let mut taken = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while taken.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "taken again: {taken:?}"
        );
        // A long poll of a second: the item comes as soon as it is given back.
        let answer = w.take(&honest, 1).await;
        if answer.status == 200 {
            taken.push(answer.json());
        }
    }
    let mut leases: Vec<String> = taken
        .iter()
        .map(|t| t["item"]["lease_id"].to_string())
        .collect();
    leases.sort();
    let mut expected = vec![held["lease_id"].to_string(), later["lease_id"].to_string()];
    expected.sort();
    assert_eq!(leases, expected);
    // The revoked token's receipt and results are refused; nothing it sends is recorded.
    let answer = w
        .call(
            "POST",
            &at(&receipt, "results"),
            Some(&revoked),
            &result(&item, 0, true).to_string(),
        )
        .await;
    assert_eq!(answer.status, 401, "{answer:?}");
    assert_eq!(w.stats(world::COMPLETED).await.waiting, 0);
    // Nothing lost: both items are in flight with the honest researcher.
    let pending = w.stats(world::PENDING).await;
    assert_eq!((pending.waiting, pending.in_flight), (0, 2), "{pending:?}");
}

crate::both_buses!(a_revoked_token_gets_nothing_more_and_gives_back_what_it_held);
