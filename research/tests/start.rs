//! A researcher started on the in-memory bus: how its runs end, and what its report and
//! errors channel say.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use messagebus::{Bus, MemoryBus};
use research::{
    Analyser, BoxError, Ended, Media, MediaConfig, ResearchError, ResearcherSettings, Run,
};
use tokio_util::sync::CancellationToken;

/// Never asked: the items here never reach an analyser.
struct Unused;

#[async_trait::async_trait]
impl Analyser for Unused {
    async fn start(&self, _input: Vec<u8>, _lease: &str) -> Result<Box<dyn Run>, BoxError> {
        Err("not expected".into())
    }

    fn describe(&self) -> String {
        "unused".into()
    }
}

fn media_config(dir: &Path) -> MediaConfig {
    MediaConfig {
        cache_dir: dir.join("cache"),
        cache_size: 1 << 20,
        max_size: 1 << 20,
        media_roots: Vec::new(),
        connect_timeout: Duration::from_secs(1),
        read_timeout: Duration::from_secs(1),
        attempts: 1,
        addresses: Default::default(),
        min_rate: 0,
    }
}

fn media(dir: &Path) -> Media {
    Media::new(media_config(dir)).unwrap()
}

async fn bus() -> MemoryBus {
    let bus = MemoryBus::default();
    bus.create_queue("pending_research").await.unwrap();
    bus.create_queue("completed_research").await.unwrap();
    bus
}

#[tokio::test]
async fn once_sets_poison_aside_says_so_and_finishes_when_the_queue_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus().await;
    bus.sender("pending_research")
        .await
        .unwrap()
        .send(b"{\"not\": \"a work item\"}".to_vec())
        .await
        .unwrap();
    let mut handle = research::start(
        CancellationToken::new(),
        vec![
            bus.receiver("pending_research").await.unwrap(),
            bus.receiver("pending_research").await.unwrap(),
        ],
        bus.sender("completed_research").await.unwrap(),
        Arc::new(Unused),
        media(dir.path()),
        ResearcherSettings {
            once: true,
            ..ResearcherSettings::default()
        },
    );
    assert_eq!(handle.status.snapshot().slots.len(), 2);
    let report = (&mut handle.done).await.unwrap();
    assert!(
        matches!(report.ended, Ended::Finished),
        "{:?}",
        report.ended
    );
    assert_eq!((report.received, report.dead_lettered), (1, 1));
    let error = handle.errors.try_recv().unwrap();
    assert!(
        matches!(error, ResearchError::DeadLettered { .. }),
        "{error}"
    );
    assert!(!error.is_retryable());
    let stats = bus
        .sender("pending_research")
        .await
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!(
        stats.dead_letters, 1,
        "the poison is in the dead-letter queue"
    );
}

#[tokio::test]
async fn no_slots_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus().await;
    let handle = research::start(
        CancellationToken::new(),
        Vec::new(),
        bus.sender("completed_research").await.unwrap(),
        Arc::new(Unused),
        media(dir.path()),
        ResearcherSettings::default(),
    );
    let report = handle.done.await.unwrap();
    let Ended::Failed(e) = report.ended else {
        panic!("{:?}", report.ended)
    };
    assert!(matches!(e, ResearchError::Config(_)), "{e}");
}

#[tokio::test]
async fn a_cancelled_researcher_ends_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus().await;
    let token = CancellationToken::new();
    let handle = research::start(
        token.clone(),
        vec![bus.receiver("pending_research").await.unwrap()],
        bus.sender("completed_research").await.unwrap(),
        Arc::new(Unused),
        media(dir.path()),
        ResearcherSettings::default(),
    );
    token.cancel();
    let report = handle.done.await.unwrap();
    assert!(
        matches!(report.ended, Ended::Cancelled),
        "{:?}",
        report.ended
    );
    assert_eq!(report.received, 0);
}

#[test]
fn a_cache_dir_that_cannot_be_made_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let refused = Media::new(MediaConfig {
        cache_dir: file.join("cache"),
        ..media_config(dir.path())
    });
    let Err(ResearchError::Config(message)) = refused else {
        panic!("not refused as a setting")
    };
    assert!(message.starts_with("--cache-dir "), "{message}");
}
