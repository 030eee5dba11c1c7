//! Property tests of decoding and validation (`archivist::messages::decode`), beside the
//! hand-written corpus (`tests/corpus/hostile/`): arbitrary bytes, JSON-like noise, and valid
//! messages mutated one field at a time (a hostile value, the field removed, the key
//! duplicated). Decoding never panics, and whether it accepts a mutated message agrees with
//! an oracle written here from the rules (README, *Messages*), field by field; a rejection
//! names the field. Failing inputs shrink to a minimal case. Each test prints its counts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use archivist::messages::{
    decode, encode, ClipInfo, CompletedResearchItem, EpisodeInfo, InvalidMessage, Message,
    PendingResearchItem, MAX_BODY_BYTES, MAX_DURATION_NS, MAX_OFFSETS,
};
use chrono::{DateTime, Datelike, TimeZone, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};

/// Every message type decoded; only whether it panics matters here.
fn decode_all(body: &[u8]) -> [bool; 4] {
    [
        decode::<EpisodeInfo>(body).is_ok(),
        decode::<ClipInfo>(body).is_ok(),
        decode::<PendingResearchItem>(body).is_ok(),
        decode::<CompletedResearchItem>(body).is_ok(),
    ]
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn arbitrary_bytes_never_panic_and_fail_for_the_right_reason() {
    let mut runner = runner(4000);
    let accepted = std::cell::Cell::new(0u64);
    let bytes = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        // Bytes from JSON's alphabet reach deeper into the parser than random ones.
        proptest::collection::vec(
            proptest::sample::select(b"{}[]\":,-.0123456789eEtrufalsn \\u\xef\xbb\xbf".to_vec()),
            0..512
        ),
    ];
    runner
        .run(&bytes, |body| {
            let verdicts = decode_all(&body);
            accepted.set(accepted.get() + verdicts.iter().filter(|v| **v).count() as u64);
            match decode::<EpisodeInfo>(&body) {
                Err(InvalidMessage::NotUtf8(_)) => {
                    prop_assert!(std::str::from_utf8(&body).is_err())
                }
                Err(InvalidMessage::TooLarge(_)) => prop_assert!(body.len() > MAX_BODY_BYTES),
                Err(_) => prop_assert!(std::str::from_utf8(&body).is_ok()),
                Ok(_) => {
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    prop_assert!(v.is_object());
                }
            }
            Ok(())
        })
        .unwrap();
    println!(
        "arbitrary bytes: 4000 bodies × 4 message types decoded, no panic, {} accepted",
        accepted.get()
    );
}

/// What a field must hold, for the oracle.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// A string of at most `max` characters without NUL; `required`: not only whitespace.
    Text { max: usize, required: bool },
    /// An RFC 3339 time in years 0001 to 9999.
    Time,
    /// An integer that fits in i32.
    I32,
}

const EPISODE_FIELDS: &[(&str, Rule)] = &[
    ("initial_date_curated", Rule::Time),
    ("last_date_curated", Rule::Time),
    (
        "curator_information",
        Rule::Text {
            max: 1024,
            required: true,
        },
    ),
    ("date_aired", Rule::Time),
    (
        "title",
        Rule::Text {
            max: 1024,
            required: true,
        },
    ),
    (
        "description",
        Rule::Text {
            max: 65536,
            required: false,
        },
    ),
    (
        "media_uri",
        Rule::Text {
            max: 1024,
            required: true,
        },
    ),
    (
        "media_type",
        Rule::Text {
            max: 1024,
            required: true,
        },
    ),
    ("priority", Rule::I32),
];

/// Whether `v` keeps the rule.
fn keeps(rule: Rule, v: &Value) -> bool {
    match rule {
        Rule::Text { max, required } => v.as_str().is_some_and(|s| {
            (!required || !s.trim().is_empty()) && s.chars().count() <= max && !s.contains('\0')
        }),
        Rule::Time => v.as_str().is_some_and(|s| {
            s.parse::<DateTime<Utc>>()
                .is_ok_and(|t| (1..=9999).contains(&t.year()))
        }),
        Rule::I32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
    }
}

fn episode(i: u32, priority: i32, aired: i64) -> Value {
    json!({
        "initial_date_curated": "2026-01-10T08:00:00Z", "last_date_curated": "2026-01-11T08:00:00Z",
        "curator_information": format!("curator {i}"),
        "date_aired": Utc.timestamp_opt(aired, 0).unwrap().to_rfc3339(),
        "title": format!("Episode {i} ✓"), "description": "d",
        "media_uri": format!("https://x.test/{i}.mp3"), "media_type": "mp3", "priority": priority,
    })
}

/// Hostile values for a field: every JSON type, edges of the rules, times of every year.
fn hostile_value() -> impl Strategy<Value = Value> {
    let text = proptest::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter);
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(i32::MAX as i64),
            Just(i32::MIN as i64),
            Just(i32::MAX as i64 + 1),
            Just(i32::MIN as i64 - 1),
            Just(0)
        ]
        .prop_map(|n| json!(n)),
        Just(json!(u64::MAX)),
        any::<f64>().prop_map(|f| json!(f)),
        text.clone().prop_map(Value::String),
        prop_oneof![
            Just(String::new()),
            Just(" \t\u{3000}".to_string()),
            Just("a\0b".to_string()),
            Just("t".repeat(1024)),
            Just("t".repeat(1025)),
            Just("📻".repeat(1025)),
            Just("\u{202e}abc".to_string()),
            Just("2026-01-01T00:00:00".to_string()),
            Just("2026-02-30T00:00:00Z".to_string()),
            Just("2026-01-01 00:00:00Z".to_string()),
            Just("2016-12-31T23:59:60Z".to_string()),
            Just("0000-01-01T00:00:00Z".to_string()),
            Just("9999-12-31T23:59:59.999999999Z".to_string()),
        ]
        .prop_map(Value::String),
        // Times from year -262,000 to 262,000, written as chrono writes them.
        (-8_200_000_000_000i64..8_200_000_000_000i64)
            .prop_map(|s| json!(Utc.timestamp_opt(s, 0).unwrap().to_rfc3339())),
        proptest::collection::vec(text.clone().prop_map(Value::String), 0..3)
            .prop_map(Value::Array),
        text.prop_map(|k| {
            let mut m = Map::new();
            m.insert(k, json!(1));
            Value::Object(m)
        }),
    ]
}

/// How one field of a valid message is changed.
#[derive(Debug, Clone)]
enum Mutation {
    Set(Value),
    Remove,
    /// The key written twice, the second time with this value.
    Duplicate(Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => hostile_value().prop_map(Mutation::Set),
        1 => Just(Mutation::Remove),
        1 => hostile_value().prop_map(Mutation::Duplicate),
    ]
}

/// `message` with `field` (a key of `object_path`'s object) changed, as a body.
fn mutate(message: &Value, object_path: &[&str], field: &str, m: &Mutation) -> Vec<u8> {
    let mut v = message.clone();
    let mut obj = &mut v;
    for p in object_path {
        obj = &mut obj[*p];
    }
    match m {
        Mutation::Set(x) => obj[field] = x.clone(),
        Mutation::Remove => {
            obj.as_object_mut().unwrap().remove(field);
        }
        Mutation::Duplicate(_) => {}
    }
    let mut body = serde_json::to_string(&v).unwrap();
    if let Mutation::Duplicate(x) = m {
        // Written as text: a JSON value cannot hold a key twice.
        let key = format!("\"{field}\":");
        let at = body.find(&key).unwrap();
        body.insert_str(at, &format!("{key}{x},"));
    }
    body.into_bytes()
}

/// Runs `cases` mutations of valid `M` messages made by `valid`, each changing the field
/// `fields[i]` of the object at `path`, and compares decoding with `oracle`.
fn mutated_fields<M: Message + std::fmt::Debug>(
    label: &str,
    cases: u32,
    valid: impl Strategy<Value = Value>,
    path: &'static [&'static str],
    fields: &'static [(&'static str, Rule)],
    oracle: fn(&Value, &str, Rule, &Mutation) -> bool,
) {
    let mut runner = runner(cases);
    let (accepted, rejected) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
    let strategy = (valid, 0..fields.len(), mutation());
    runner
        .run(&strategy, |(message, i, m)| {
            let (field, rule) = fields[i];
            // The unmutated message is accepted and round-trips.
            let whole = serde_json::to_vec(&message).unwrap();
            let decoded = decode::<M>(&whole);
            prop_assert!(decoded.is_ok(), "valid {label} refused: {decoded:?}");
            let again = decode::<M>(&encode(&decoded.unwrap()));
            prop_assert!(again.is_ok());

            let body = mutate(&message, path, field, &m);
            let want = oracle(&message, field, rule, &m);
            let got = decode::<M>(&body);
            match (&got, want) {
                (Ok(_), true) => accepted.set(accepted.get() + 1),
                (Err(e), false) => {
                    rejected.set(rejected.get() + 1);
                    prop_assert!(
                        e.to_string().contains(field),
                        "{label}.{field}: the reason names the field: {e}"
                    );
                }
                _ => prop_assert!(
                    false,
                    "{label}.{field} {m:?}: decode says {got:?}, the rules say {}",
                    if want { "valid" } else { "poison" }
                ),
            }
            Ok(())
        })
        .unwrap();
    println!(
        "{label}: {cases} valid messages mutated field by field: {} accepted, {} rejected \
         naming the field, all as the rules say",
        accepted.get(),
        rejected.get()
    );
}

/// The rules for one changed field of a curated item (every field is required).
fn curated_oracle(_: &Value, _: &str, rule: Rule, m: &Mutation) -> bool {
    match m {
        Mutation::Set(v) => keeps(rule, v),
        Mutation::Remove | Mutation::Duplicate(_) => false,
    }
}

fn valid_episode() -> impl Strategy<Value = Value> {
    (
        any::<u32>(),
        any::<i32>(),
        -62_000_000_000i64..253_000_000_000i64,
    )
        .prop_map(|(i, p, aired)| episode(i, p, aired))
}

#[test]
fn mutated_episodes_decode_as_the_rules_say() {
    mutated_fields::<EpisodeInfo>(
        "EpisodeInfo",
        3000,
        valid_episode(),
        &[],
        EPISODE_FIELDS,
        curated_oracle,
    );
}

#[test]
fn mutated_clips_decode_as_the_rules_say() {
    let clip_fields: &'static [(&str, Rule)] = Box::leak(
        EPISODE_FIELDS
            .iter()
            .filter(|(f, _)| *f != "date_aired")
            .copied()
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let valid = valid_episode().prop_map(|mut e| {
        e.as_object_mut().unwrap().remove("date_aired");
        e
    });
    mutated_fields::<ClipInfo>("ClipInfo", 2000, valid, &[], clip_fields, curated_oracle);
}

/// The fields of a result besides its episode and clip, with what each must hold; `Rule` is
/// only a placeholder here, the oracle below knows each.
const RESULT_FIELDS: &[(&str, Rule)] = &[
    ("lease_id", Rule::I32),
    ("revoke_lease", Rule::I32),
    ("research_date", Rule::Time),
    ("episode_duration_ns", Rule::I32),
    (
        "episode_hash",
        Rule::Text {
            max: 1024,
            required: false,
        },
    ),
    ("clip_duration_ns", Rule::I32),
    (
        "clip_hash",
        Rule::Text {
            max: 1024,
            required: false,
        },
    ),
    ("clip_offsets_ns", Rule::I32),
];

fn result_oracle(message: &Value, field: &str, rule: Rule, m: &Mutation) -> bool {
    let v = match m {
        Mutation::Duplicate(_) => return false,
        // Two fields have defaults: no revocation, no offsets.
        Mutation::Remove => return matches!(field, "revoke_lease" | "clip_offsets_ns"),
        Mutation::Set(v) => v,
    };
    let duration = |v: &Value| {
        v.as_i64()
            .is_some_and(|n| (0..=MAX_DURATION_NS).contains(&n))
    };
    let episode_ns = message["episode_duration_ns"].as_i64().unwrap();
    let offsets_fit = |offsets: &Value, episode_ns: i64| {
        offsets.as_array().is_some_and(|a| {
            a.len() <= MAX_OFFSETS
                && a.iter()
                    .all(|o| o.as_i64().is_some_and(|o| (0..=episode_ns).contains(&o)))
        })
    };
    match field {
        "lease_id" => v.as_str().is_some_and(|s| uuid::Uuid::parse_str(s).is_ok()),
        "revoke_lease" => v.is_boolean(),
        "episode_duration_ns" => {
            duration(v) && offsets_fit(&message["clip_offsets_ns"], v.as_i64().unwrap())
        }
        "clip_duration_ns" => duration(v),
        "clip_offsets_ns" => offsets_fit(v, episode_ns),
        _ => keeps(rule, v),
    }
}

fn valid_result() -> impl Strategy<Value = Value> {
    (
        valid_episode(),
        valid_episode(),
        any::<bool>(),
        0..=MAX_DURATION_NS,
        0..=MAX_DURATION_NS,
        proptest::collection::vec(0..=1_000_000i64, 0..4),
    )
        .prop_map(|(e, mut c, revoke, episode_ns, clip_ns, offsets)| {
            c.as_object_mut().unwrap().remove("date_aired");
            let offsets: Vec<i64> = offsets.into_iter().map(|o| o.min(episode_ns)).collect();
            json!({
                "lease_id": uuid::Uuid::new_v4().to_string(), "revoke_lease": revoke,
                "research_date": "2026-02-01T12:00:00Z", "episode": e, "clip": c,
                "episode_duration_ns": episode_ns, "episode_hash": "eh",
                "clip_duration_ns": clip_ns, "clip_hash": "ch", "clip_offsets_ns": offsets,
            })
        })
}

#[test]
fn mutated_results_decode_as_the_rules_say() {
    mutated_fields::<CompletedResearchItem>(
        "CompletedResearchItem",
        3000,
        valid_result(),
        &[],
        RESULT_FIELDS,
        result_oracle,
    );
}

#[test]
fn mutated_episodes_inside_results_decode_as_the_rules_say() {
    mutated_fields::<CompletedResearchItem>(
        "CompletedResearchItem.episode",
        2000,
        valid_result(),
        &["episode"],
        EPISODE_FIELDS,
        curated_oracle,
    );
}
