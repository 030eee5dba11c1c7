//! The S3 store against moto's S3 (`moto_server`, started by `scripts/test.sh`, which sets
//! `ARCHIVIST_TEST_SQS_ENDPOINT` and the AWS variables; moto serves S3 on the same port as
//! SQS): the conformance suite, a bucket per case, and a store under a prefix beside another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::primitives::ByteStream;
use prints::testing::{payload, unique_key, Fresh, Raw};
use prints::{PrintStore, S3Store};

fn endpoint() -> String {
    std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, which \
             starts moto_server (SQS and S3) and sets it (with AWS_REGION and test credentials)"
        )
    })
}

async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .load()
        .await
}

/// A new bucket, its name unique to this run.
async fn bucket(sdk: &SdkConfig) -> String {
    let name = format!("prints-{:016x}", rand::random::<u64>());
    let client = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(true)
            .build(),
    );
    client.create_bucket().bucket(&name).send().await.unwrap();
    name
}

struct S3Raw(S3Store);

#[async_trait]
impl Raw for S3Raw {
    async fn read(&self, key: &str) -> Vec<u8> {
        let got = self
            .0
            .client()
            .get_object()
            .bucket(self.0.bucket())
            .key(self.0.object_of(key).unwrap())
            .send()
            .await
            .unwrap();
        got.body.collect().await.unwrap().into_bytes().to_vec()
    }
    async fn write(&self, key: &str, bytes: Vec<u8>) {
        self.0
            .client()
            .put_object()
            .bucket(self.0.bucket())
            .key(self.0.object_of(key).unwrap())
            .body(ByteStream::from(bytes))
            .send()
            .await
            .unwrap();
    }
}

async fn fresh() -> Fresh {
    let sdk = sdk_config().await;
    let store = S3Store::from_sdk_config(&sdk, &bucket(&sdk).await, "archive/prints").unwrap();
    Fresh {
        store: Arc::new(store.clone()),
        raw: Arc::new(S3Raw(store)),
    }
}

prints::print_store_conformance_tests!(fresh);

/// Two prefixes of one bucket are two stores: each lists and removes only its own, and
/// what else is in the bucket is left alone.
#[tokio::test]
async fn prefixes_keep_stores_apart() {
    let sdk = sdk_config().await;
    let name = bucket(&sdk).await;
    let (a, b) = (
        S3Store::from_sdk_config(&sdk, &name, "a").unwrap(),
        S3Store::from_sdk_config(&sdk, &name, "/b/").unwrap(),
    );
    assert_eq!(b.describe(), format!("s3://{name}/b/"));
    let key = unique_key("prefix");
    a.put(&key, &payload(10, 1)).await.unwrap();
    b.put(&key, &payload(20, 2)).await.unwrap();
    a.client()
        .put_object()
        .bucket(&name)
        .key("a/readme.txt")
        .body(ByteStream::from_static(b"not a print"))
        .send()
        .await
        .unwrap();
    assert_eq!(a.list().await.unwrap().len(), 1);
    assert!(a.remove(&key).await.unwrap());
    assert_eq!(b.get(&key).await.unwrap(), Some(payload(20, 2)));
    assert_eq!(a.get(&key).await.unwrap(), None);
}

/// A store opened by URL (`prints::open`, as `--print-store` is) reaches the same objects.
#[tokio::test]
async fn opened_by_url() {
    let sdk = sdk_config().await;
    let name = bucket(&sdk).await;
    let direct = S3Store::from_sdk_config(&sdk, &name, "p").unwrap();
    let key = unique_key("open");
    direct.put(&key, b"shared").await.unwrap();
    // `open` reads AWS_ENDPOINT_URL as the SDK does; the test's endpoint is given as that.
    std::env::set_var("AWS_ENDPOINT_URL", endpoint());
    let opened = prints::open(&format!("s3://{name}/p"), &prints::StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        opened.get(&key).await.unwrap().as_deref(),
        Some(&b"shared"[..])
    );
}
