//! The S3 archive against moto's S3 (`moto_server`, started by `scripts/test.sh`, which sets
//! `ARCHIVIST_TEST_SQS_ENDPOINT` and the AWS variables; moto serves S3 on the same port as
//! SQS): the conformance suite, a bucket per case, then what is particular to S3 (multipart
//! uploads, prefixes, `open` by URL).
//!
//! moto answers one S3 request at a time per thread, but checks a conditional write's
//! condition and then writes with no lock between (its server is threaded): two conditional
//! writes of one object at once can both succeed, which S3 never allows, and the suite's
//! concurrent `record`s lost a version about once in a hundred runs. The tests' client
//! therefore sends moto one request at a time ([`OneAtATime`]): every request is still
//! answered as moto answers it, and the archive's participants still race (each reads, then
//! writes on condition, and retries when another wrote first), but each condition is checked
//! and written as S3 does it, in one step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use archive::testing::{aired, file_with, payload, sha256_of, version_of, Damage, Fresh};
use archive::{episode_key, ArchiveError, Kept, MediaArchive, S3Archive};
use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

fn endpoint() -> String {
    std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, which \
             starts moto_server (SQS and S3) and sets it (with AWS_REGION and test credentials)"
        )
    })
}

/// An HTTP client that sends one request at a time: the next is sent once the last one's
/// answer has come (its head; moto has done its work by then).
#[derive(Debug, Clone)]
struct OneAtATime {
    inner: SharedHttpClient,
    turn: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug)]
struct OneAtATimeConnector {
    inner: SharedHttpConnector,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl HttpClient for OneAtATime {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(OneAtATimeConnector {
            inner: self.inner.http_connector(settings, components),
            turn: self.turn.clone(),
        })
    }
}

impl HttpConnector for OneAtATimeConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, turn) = (self.inner.clone(), self.turn.clone());
        HttpConnectorFuture::new(async move {
            let _turn = turn.lock().await;
            inner.call(request).await
        })
    }
}

async fn sdk_config() -> SdkConfig {
    let client = OneAtATime {
        inner: aws_smithy_http_client::Builder::new().build_http(),
        turn: Arc::new(tokio::sync::Mutex::new(())),
    };
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .http_client(SharedHttpClient::new(client))
        .load()
        .await
}

fn client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(true)
            .build(),
    )
}

/// A new bucket, its name unique to this run.
async fn bucket(sdk: &SdkConfig) -> String {
    let name = format!("archive-{}", uuid::Uuid::new_v4().simple());
    client(sdk)
        .create_bucket()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    name
}

struct S3Damage(S3Archive);

#[async_trait]
impl Damage for S3Damage {
    async fn read(&self, sha256: &str) -> Option<Vec<u8>> {
        let got = self
            .0
            .client()
            .get_object()
            .bucket(self.0.bucket())
            .key(self.0.object_of_copy(sha256).unwrap())
            .send()
            .await
            .ok()?;
        Some(got.body.collect().await.unwrap().into_bytes().to_vec())
    }
    async fn write(&self, sha256: &str, bytes: Vec<u8>) {
        self.0
            .client()
            .put_object()
            .bucket(self.0.bucket())
            .key(self.0.object_of_copy(sha256).unwrap())
            .body(ByteStream::from(bytes))
            .send()
            .await
            .unwrap();
    }
}

async fn fresh() -> Fresh {
    let sdk = sdk_config().await;
    let archive = S3Archive::from_sdk_config(&sdk, &bucket(&sdk).await, "archivist/media").unwrap();
    Fresh {
        archive: Arc::new(archive.clone()),
        damage: Arc::new(S3Damage(archive)),
    }
}

archive::media_archive_conformance_tests!(fresh);

/// A file longer than a part goes up in parts (its object's ETag says how many), named as the
/// layout says; one refused halfway (hashing to another SHA-256) leaves no upload open and no
/// object.
#[tokio::test]
async fn large_files_go_up_in_parts() {
    let sdk = sdk_config().await;
    let name = bucket(&sdk).await;
    let archive = S3Archive::from_sdk_config(&sdk, &name, "a").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload((17 << 20) + 5, 1);
    let sha256 = sha256_of(&bytes);
    let file = file_with(dir.path(), "big", &bytes);
    assert!(matches!(
        archive.keep(&sha256_of(b"other"), &file).await,
        Err(ArchiveError::Mismatch { .. })
    ));
    let uploads = client(&sdk)
        .list_multipart_uploads()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty(), "{:?}", uploads.uploads());
    let listed = client(&sdk)
        .list_objects_v2()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    assert!(listed.contents().is_empty(), "{:?}", listed.contents());

    assert_eq!(archive.keep(&sha256, &file).await.unwrap(), Kept::New);
    let object = format!("a/media/{}/{sha256}", &sha256[..2]);
    assert_eq!(archive.object_of_copy(&sha256).unwrap(), object);
    let head = client(&sdk)
        .head_object()
        .bucket(&name)
        .key(&object)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(bytes.len() as i64));
    assert!(
        head.e_tag().unwrap().trim_matches('"').ends_with("-3"),
        "{:?}",
        head.e_tag()
    );
    assert_eq!(archive.verify(&sha256).await.unwrap(), None);
}

/// Two prefixes of one bucket are two archives: each lists only its own copies and episodes,
/// and what else is under its prefix (not named as the layout names things) is not listed.
#[tokio::test]
async fn prefixes_keep_archives_apart() {
    let sdk = sdk_config().await;
    let name = bucket(&sdk).await;
    let (a, b) = (
        S3Archive::from_sdk_config(&sdk, &name, "a").unwrap(),
        S3Archive::from_sdk_config(&sdk, &name, "/b/").unwrap(),
    );
    assert_eq!(b.describe(), format!("s3://{name}/b/"));
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload(100, 2);
    let sha256 = sha256_of(&bytes);
    let file = file_with(dir.path(), "in", &bytes);
    assert_eq!(a.keep(&sha256, &file).await.unwrap(), Kept::New);
    let key = episode_key("apart", &aired());
    a.record(&key, "apart", aired(), version_of(&bytes, "u"))
        .await
        .unwrap();
    for foreign in [
        "a/readme.txt",
        "a/media/readme.txt",
        "a/media/zz/readme.txt",
        &format!("a/media/00/{sha256}"),
        "a/episodes/readme.json",
        &format!("a/episodes/{key}.txt"),
    ] {
        client(&sdk)
            .put_object()
            .bucket(&name)
            .key(foreign)
            .body(ByteStream::from_static(b"not the archive's"))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(a.copies().await.unwrap().len(), 1);
    assert_eq!(a.episodes().await.unwrap().len(), 1);
    assert_eq!(b.copies().await.unwrap(), vec![]);
    assert_eq!(b.episodes().await.unwrap(), vec![]);
    assert_eq!(b.size(&sha256).await.unwrap(), None);
    assert_eq!(b.versions(&key).await.unwrap(), None);
}

/// An archive opened by URL (`archive::open`, as `--media-archive` is) reaches the same
/// objects; a URL without a bucket is refused.
#[tokio::test]
async fn opened_by_url() {
    let sdk = sdk_config().await;
    let name = bucket(&sdk).await;
    let direct = S3Archive::from_sdk_config(&sdk, &name, "p").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bytes = payload(100, 3);
    let sha256 = sha256_of(&bytes);
    direct
        .keep(&sha256, &file_with(dir.path(), "in", &bytes))
        .await
        .unwrap();
    // `open` reads AWS_ENDPOINT_URL as the SDK does; the test's endpoint is given as that.
    std::env::set_var("AWS_ENDPOINT_URL", endpoint());
    let opened = archive::open(&format!("s3://{name}/p")).await.unwrap();
    assert_eq!(opened.describe(), format!("s3://{name}/p/"));
    assert_eq!(opened.read(&sha256, 0..100).await.unwrap(), bytes);
    assert!(matches!(
        archive::open("s3:///p").await,
        Err(ArchiveError::Config { .. })
    ));
}

/// An archive in a bucket that is not there says it is unavailable, naming the archive and
/// no credential.
#[tokio::test]
async fn a_missing_bucket_is_unavailable() {
    let sdk = sdk_config().await;
    let archive = S3Archive::from_sdk_config(&sdk, "archive-no-such-bucket", "p").unwrap();
    match archive.copies().await {
        Err(e @ ArchiveError::Unavailable { .. }) => {
            let said = e.to_string();
            assert!(said.contains("s3://archive-no-such-bucket/p/"), "{said}");
            assert!(!said.contains("testing"), "a credential in {said}");
        }
        other => panic!("{other:?}"),
    }
}
