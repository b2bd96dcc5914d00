//! DynamoDB for tests: the moto server of [`crate::moto`] serves DynamoDB beside S3 on the same
//! port. [`dynamodb_client`] reaches it over plain HTTP with test
//! credentials; each [`DynamoDbStore`] of [`TestStore::fresh`] has a table of its own, named like
//! the PostgreSQL schemas ([`unique_name`]), which [`discard`](TestStore::discard) deletes.

use std::net::SocketAddr;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use idem_runtime::store::{DynamoDbStore, DynamoDbStoreBuilder};

use crate::db::{TestStore, unique_name};

/// The moto server's URL, started on first use ([`crate::moto::moto_endpoint`]).
///
/// # Panics
/// When moto cannot be installed or started, with the command that shows why.
pub fn dynamodb_endpoint() -> String {
    crate::moto::moto_endpoint()
}

/// The moto server's `host:port`, for a proxy in front of it.
///
/// # Panics
/// When the endpoint is not `http://<ip>:<port>`.
pub fn dynamodb_addr(endpoint: &str) -> SocketAddr {
    endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("the moto server's URL as http://<ip>:<port>")
}

/// A DynamoDB client for `endpoint`: plain HTTP (no TLS crate), region `us-east-1`, static test
/// credentials, as an application would build one with `aws-config` and an endpoint override.
pub fn dynamodb_client(endpoint: &str) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "idem-tests",
        ))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

/// The standard AWS environment (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`) pointing a process at the moto server: what a program that loads its
/// client with `aws-config` (the `idem` command, the examples) reads: the same variables as S3's,
/// and no instance metadata service to wait for.
pub fn aws_env(endpoint: &str) -> Vec<(String, String)> {
    let mut env = crate::s3::s3_env(endpoint);
    env.push(("AWS_EC2_METADATA_DISABLED".into(), "true".into()));
    env
}

/// A builder for a store on a fresh table of the server at `endpoint`, created on demand.
pub fn dynamodb_store_builder(endpoint: &str) -> DynamoDbStoreBuilder {
    DynamoDbStore::builder(dynamodb_client(endpoint))
        .table(unique_name())
        .create_table_if_missing(true)
}

/// Deletes `table` on the server `client` reaches. Best effort.
pub async fn delete_table(client: &Client, table: &str) {
    let _ = client.delete_table().table_name(table).send().await;
}

/// A store on a fresh table of the moto server.
impl TestStore for DynamoDbStore {
    async fn fresh() -> Self {
        let endpoint = dynamodb_endpoint();
        dynamodb_store_builder(&endpoint)
            .build()
            .await
            .unwrap_or_else(|e| panic!("the DynamoDB server at {endpoint}: {e}"))
    }

    async fn discard(self) {
        delete_table(self.client(), self.table()).await;
    }
}
