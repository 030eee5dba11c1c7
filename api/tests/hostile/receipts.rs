//! Receipts and results: a researcher acts only on the items its own token took, its results
//! must name those items' pairs, and it counts as at most its bound of researchers.

use datastore::TokenScope;
use serde_json::json;

use crate::world::{self, at, result, world, Backend};

async fn receipts_act_only_for_the_token_that_took_them(backend: Backend) {
    let w = world(backend).await;
    let alice = w.token(TokenScope::Researcher).await;
    let mallory = w.token(TokenScope::Researcher).await;
    let item = w.publish(1, 2).await;
    let other_item = w.publish(2, 1).await;
    let (receipt, taken) = w.take_one(&alice).await;
    assert_eq!(taken["lease_id"], item["lease_id"]);
    // At least 128 random bits, and nothing of the bus in it.
    assert!(
        receipt.len() >= 32 && receipt.chars().all(|c| c.is_ascii_hexdigit()),
        "{receipt}"
    );
    let (mallory_receipt, _) = w.take_one(&mallory).await;
    assert_ne!(receipt, mallory_receipt);

    // Mallory, with alice's receipt: every action is the 409 of a receipt that holds nothing.
    let nothing = w
        .call(
            "POST",
            &at("0123456789abcdef0123456789abcdef", "extend"),
            Some(&alice),
            "",
        )
        .await;
    assert_eq!(nothing.status, 409, "{nothing:?}");
    for what in ["extend", "finish", "release"] {
        let answer = w
            .call("POST", &at(&receipt, what), Some(&mallory), "")
            .await;
        assert_eq!(answer.status, 409, "{what}: {answer:?}");
        assert_eq!(
            answer.body, nothing.body,
            "a stolen receipt tells nothing more"
        );
    }
    let stolen = result(&taken, 0, false).to_string();
    let answer = w
        .call("POST", &at(&receipt, "results"), Some(&mallory), &stolen)
        .await;
    assert_eq!(answer.status, 409, "{answer:?}");
    // Guessed receipts, in today's and yesterday's forms.
    for guess in [
        "b.1.1",
        "b.2.5231",
        "g.00",
        &receipt[..31],
        &format!("{receipt}0"),
    ] {
        let answer = w.call("POST", &at(guess, "finish"), Some(&alice), "").await;
        assert_eq!(answer.status, 409, "{guess}: {answer:?}");
    }
    // Alice's item is untouched: she sends both results and finishes.
    let lines = format!(
        "{}\n{}\n",
        result(&taken, 0, false),
        result(&taken, 1, true)
    );
    let answer = w
        .call("POST", &at(&receipt, "results"), Some(&alice), &lines)
        .await;
    assert_eq!(
        (answer.status, answer.json()["sent"].clone()),
        (200, json!(2)),
        "{answer:?}"
    );
    let answer = w
        .call("POST", &at(&receipt, "finish"), Some(&alice), "")
        .await;
    assert_eq!(answer.status, 204, "{answer:?}");
    // A finished receipt holds nothing, for her too, with the same words.
    let again = w
        .call("POST", &at(&receipt, "finish"), Some(&alice), "")
        .await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (409, nothing.body.as_str())
    );
    // Nothing lost or recorded twice: alice's two results, mallory's item still held by her.
    assert_eq!(w.stats(world::COMPLETED).await.waiting, 2);
    let pending = w.stats(world::PENDING).await;
    assert_eq!((pending.waiting, pending.in_flight), (0, 1), "{other_item}");
    let answer = w
        .call("POST", &at(&mallory_receipt, "release"), Some(&mallory), "")
        .await;
    assert_eq!(answer.status, 204, "{answer:?}");
    assert_eq!(w.stats(world::PENDING).await.waiting, 1);
}

async fn results_must_name_the_items_pairs(backend: Backend) {
    let w = world(backend).await;
    let alice = w.token(TokenScope::Researcher).await;
    w.publish(1, 2).await;
    let elsewhere = w.publish(2, 3).await;
    let (receipt, item) = w.take_one(&alice).await;
    let good = result(&item, 0, false);
    let mut other_lease = good.clone();
    other_lease["lease_id"] = elsewhere["lease_id"].clone();
    let mut other_episode = good.clone();
    other_episode["episode"] = elsewhere["episode"].clone();
    let mut other_clip = good.clone();
    other_clip["clip"] = elsewhere["clips"][2].clone();
    for (bad, why) in [
        (&other_lease, "lease"),
        (&other_episode, "episode"),
        (&other_clip, "clip"),
    ] {
        let body = format!("{good}\n{bad}\n");
        let answer = w
            .call("POST", &at(&receipt, "results"), Some(&alice), &body)
            .await;
        assert_eq!(answer.status, 422, "{why}: {answer:?}");
        let refused = answer.json();
        assert_eq!(refused["errors"][0]["line"], 2, "{refused}");
        assert!(
            refused["errors"][0]["reason"]
                .as_str()
                .unwrap()
                .contains(why),
            "{refused}"
        );
    }
    // Nothing of any refused request was sent.
    assert_eq!(w.stats(world::COMPLETED).await.waiting, 0);
    let answer = w
        .call(
            "POST",
            &at(&receipt, "results"),
            Some(&alice),
            &good.to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(w.stats(world::COMPLETED).await.waiting, 1);
}

async fn presence_counts_a_token_at_most_its_bound(backend: Backend) {
    let w = world(backend).await;
    let (_, volunteer) = w.token_with(TokenScope::Researcher, 2).await;
    let (_, other) = w.token_with(TokenScope::Researcher, 8).await;
    for i in 0..50 {
        let name = format!("slot-{i}");
        let answer = w
            .call_with(
                "POST",
                "/api/v1/work",
                Some(&volunteer),
                &[(api::RESEARCHER_HEADER, &name)],
                "",
            )
            .await;
        assert_eq!(answer.status, 204, "{answer:?}");
    }
    for i in 0..3 {
        let name = format!("box-{i}");
        let answer = w
            .call_with(
                "POST",
                "/api/v1/work",
                Some(&other),
                &[(api::RESEARCHER_HEADER, &name)],
                "",
            )
            .await;
        assert_eq!(answer.status, 204, "{answer:?}");
    }
    let since = chrono::Utc::now() - chrono::Duration::minutes(1);
    let presence = w.store.api_access().unwrap().presence(since).await.unwrap();
    assert_eq!(presence.researchers, 2 + 3);
}

crate::both_buses!(
    receipts_act_only_for_the_token_that_took_them,
    results_must_name_the_items_pairs,
    presence_counts_a_token_at_most_its_bound,
);
