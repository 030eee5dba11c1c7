//! End-to-end tests of the `archivist` binary across processes on the SQS bus (moto_server):
//! the pipeline (`common::pipeline`) once on an SQLite file and once on a fresh Postgres
//! database, then what `send` does with lines SQS cannot carry.
//!
//! Every test uses queue names of its own, so tests can share one moto_server. The SQS
//! endpoint comes from `ARCHIVIST_TEST_SQS_ENDPOINT`, which `scripts/test.sh` sets; without
//! it the tests fail (see `common::BusEnv`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Stdio;

use crate::common::pipeline::{pipeline, Scenario};
use crate::common::{archivist_with_input, PgDatabase, Run};

#[test]
fn pipeline_across_processes_on_sqs_and_sqlite() {
    let s = Scenario::sqs(None);
    pipeline(&s);
    assert!(s.path().join("archive.sqlite").exists());
}

#[test]
fn pipeline_across_processes_on_sqs_and_postgres() {
    let db = PgDatabase::create();
    let s = Scenario::sqs(Some(&db.url));
    pipeline(&s);
}

#[test]
fn send_with_a_line_that_is_not_utf8_sends_nothing_and_exits_2() {
    use std::io::Write;
    let s = Scenario::sqs(None);
    s.run(&["queues"], &[]).expect_code(0);
    let mut child = common::command(s.path(), &["send", &s.bus.clips_queue], &s.bus.with(&[]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"n\":1}\n\xff\xfe\n{\"n\":3}\n")
        .unwrap();
    let run = Run::from_output(child.wait_with_output().unwrap()).expect_code(2);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    assert!(run.stderr.contains("UTF-8"), "{}", run.stderr);
    // Nothing was sent: the fixed input can be sent again as a whole.
    let got = s
        .run(
            &["receive", &s.bus.clips_queue, "--max", "10", "--wait", "1s"],
            &[],
        )
        .expect_code(0);
    assert_eq!(got.stdout, "");
}

#[test]
fn send_raw_sends_each_line_as_it_is() {
    let s = Scenario::sqs(None);
    s.run(&["queues"], &[]).expect_code(0);
    let input = "  not json, blanks kept  \r\n\n\t{\"n\": 2}\n";
    archivist_with_input(
        s.path(),
        &["send", "--raw", &s.bus.clips_queue],
        &s.bus.with(&[]),
        input,
    )
    .expect_code(0);
    let got = s
        .run(
            &["receive", &s.bus.clips_queue, "--max", "10", "--wait", "1s"],
            &[],
        )
        .expect_code(0);
    // A standard queue keeps no order.
    let mut lines: Vec<&str> = got.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["\t{\"n\": 2}", "  not json, blanks kept  "]);
}

#[test]
fn send_with_a_line_too_large_for_the_bus_sends_nothing_and_exits_2() {
    let s = Scenario::sqs(None);
    s.run(&["queues"], &[]).expect_code(0);
    // Larger than SQS's largest body (1 MiB), in the same batch as a good line before it.
    let huge = format!("{{\"x\":\"{}\"}}", "x".repeat(1_100_000));
    let input = format!("{{\"n\":1}}\n{huge}\n{{\"n\":3}}\n");
    let run = archivist_with_input(
        s.path(),
        &["send", &s.bus.clips_queue],
        &s.bus.with(&[]),
        &input,
    )
    .expect_code(2);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    let got = s
        .run(
            &["receive", &s.bus.clips_queue, "--max", "10", "--wait", "1s"],
            &[],
        )
        .expect_code(0);
    assert_eq!(got.stdout, "");
}

/// On SQS, `queues` says what it created, names an existing queue whose maxReceiveCount
/// differs from ARCHIVIST_MAX_RECEIVES instead of keeping it silently, and `--update` sets it.
#[test]
fn queues_on_sqs_report_and_update_the_receive_limit() {
    let s = Scenario::sqs(None);
    let run = s.run(&["queues"], &[]).expect_code(0);
    assert!(run.stderr.contains("created queue"), "{}", run.stderr);
    let three = [("ARCHIVIST_MAX_RECEIVES", "3")];
    let run = s.run(&["queues"], &three).expect_code(0);
    assert!(
        run.stderr.contains("maxReceiveCount is 5") && run.stderr.contains("--update"),
        "{}",
        run.stderr
    );
    s.run(&["queues", "--update"], &three).expect_code(0);
    let run = s.run(&["queues"], &three).expect_code(0);
    assert!(!run.stderr.contains("left as it is"), "{}", run.stderr);
}

/// Fourteen days, in seconds: the retention the README asks for (SQS's default is four).
const FOURTEEN_DAYS: &str = "1209600";

/// A client of the emulator, to look at queues as SQS keeps them (the binary under test only
/// says what it did).
fn sqs_client(rt: &tokio::runtime::Runtime) -> aws_sdk_sqs::Client {
    let endpoint = std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT")
        .expect("ARCHIVIST_TEST_SQS_ENDPOINT is not set: run scripts/test.sh");
    let config = rt.block_on(
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws_config::Region::new(
                std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_string()),
            ))
            .load(),
    );
    aws_sdk_sqs::Client::new(&config)
}

/// Queue `name`'s retention (seconds) and redrive policy's maxReceiveCount.
fn queue_settings(
    rt: &tokio::runtime::Runtime,
    client: &aws_sdk_sqs::Client,
    name: &str,
) -> (String, Option<u64>) {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    rt.block_on(async {
        let url = client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .unwrap()
            .queue_url()
            .unwrap()
            .to_string();
        let out = client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(A::MessageRetentionPeriod)
            .attribute_names(A::RedrivePolicy)
            .send()
            .await
            .unwrap();
        let attributes = out.attributes().unwrap();
        let receives = attributes.get(&A::RedrivePolicy).map(|p| {
            let p: serde_json::Value = serde_json::from_str(p).unwrap();
            match &p["maxReceiveCount"] {
                serde_json::Value::String(s) => s.parse().unwrap(),
                n => n.as_u64().unwrap(),
            }
        });
        (attributes[&A::MessageRetentionPeriod].clone(), receives)
    })
}

/// `queues` on SQS, checked against the queues' attributes in the emulator: it creates them
/// with 14 days' retention (as the README asks) and the redrive policy; a queue made by
/// hand with SQS's defaults (4 days, no redrive policy) gets the redrive policy, and its
/// retention is named and left alone, as is a maxReceiveCount other than
/// ARCHIVIST_MAX_RECEIVES; `--update` changes them.
#[test]
fn queues_on_sqs_keep_messages_14_days_and_update_hand_made_queues() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = sqs_client(&rt);
    let s = Scenario::sqs(None);
    let [episodes, clips, pending, completed] = s.bus.queues().map(str::to_string);
    // completed_research made by hand, with SQS's defaults.
    rt.block_on(client.create_queue().queue_name(&completed).send())
        .unwrap();

    let run = s.run(&["queues"], &[]).expect_code(0);
    for q in [&episodes, &clips, &pending] {
        assert!(
            run.stderr.contains(&format!(
                "created queue {q} and its dead-letter queue {q}_dead_letter"
            )),
            "{q}: {}",
            run.stderr
        );
        assert_eq!(
            queue_settings(&rt, &client, q),
            (FOURTEEN_DAYS.to_string(), Some(5)),
            "{q}"
        );
    }
    assert!(
        !run.stderr.contains(&format!("created queue {completed}")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("queue {completed} exists")),
        "{}",
        run.stderr
    );
    // A queue with no redrive policy gets one at once (a failing message must not cycle
    // forever, and nothing else depends on its absence); its retention is named and kept.
    assert!(
        run.stderr.contains("keeps messages 4 days, not 14") && run.stderr.contains("--update"),
        "{}",
        run.stderr
    );
    assert_eq!(
        queue_settings(&rt, &client, &completed),
        ("345600".to_string(), Some(5))
    );

    let run = s.run(&["queues", "--update"], &[]).expect_code(0);
    assert!(
        run.stderr.contains(&format!("updated queue {completed}")),
        "{}",
        run.stderr
    );
    assert_eq!(
        queue_settings(&rt, &client, &completed),
        (FOURTEEN_DAYS.to_string(), Some(5))
    );
    // Nothing differs now.
    let run = s.run(&["queues"], &[]).expect_code(0);
    assert!(!run.stderr.contains("left as it is"), "{}", run.stderr);
    assert!(!run.stderr.contains("created queue"), "{}", run.stderr);

    // A receive limit other than the queues' is named, and changed with --update.
    let three = [("ARCHIVIST_MAX_RECEIVES", "3")];
    let run = s.run(&["queues"], &three).expect_code(0);
    assert!(
        run.stderr
            .contains("its maxReceiveCount is 5, ARCHIVIST_MAX_RECEIVES is 3")
            && run.stderr.contains("--update"),
        "{}",
        run.stderr
    );
    assert_eq!(queue_settings(&rt, &client, &episodes).1, Some(5));
    s.run(&["queues", "--update"], &three).expect_code(0);
    for q in s.bus.queues() {
        assert_eq!(queue_settings(&rt, &client, q).1, Some(3), "{q}");
    }
    let run = s.run(&["queues"], &three).expect_code(0);
    assert!(!run.stderr.contains("left as it is"), "{}", run.stderr);
}
