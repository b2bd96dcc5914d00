//! DynamoDB for end-to-end tests: a table of the test's own on the moto server the test harness
//! starts (`idem_tests::moto`), reached by the server through the standard AWS environment
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`, credentials), and deleted afterwards.

use idem_tests::db::unique_name;
use idem_tests::dynamodb::{aws_env, delete_table, dynamodb_client, dynamodb_endpoint};

use super::ServerBuilder;

/// Whether this test binary runs every server on DynamoDB (see the `common` module docs).
pub(super) fn dynamodb_by_default() -> bool {
    env!("CARGO_CRATE_NAME").ends_with("_dynamodb")
}

impl ServerBuilder {
    /// Keeps the idempotency records in `table` (`IDEM_STORE=dynamodb`, created by the server if
    /// missing); the app data stays in `DATABASE_URL`.
    pub(crate) fn dynamodb(self, table: &DynamoTable) -> Self {
        self.env("IDEM_STORE", "dynamodb")
            .env("DYNAMODB_TABLE", table.name.as_str())
            .envs(aws_env(&table.endpoint))
    }
}

/// A fresh `DYNAMODB_TABLE` for the servers of one test, deleted on drop.
#[derive(Debug)]
pub(crate) struct DynamoTable {
    pub(crate) endpoint: String,
    pub(crate) name: String,
}

impl DynamoTable {
    /// A table name on the moto server the test harness starts (`idem_tests::moto`).
    pub(crate) fn new() -> Self {
        Self {
            endpoint: dynamodb_endpoint(),
            name: format!("payments-e2e-{}", unique_name()),
        }
    }
}

impl Drop for DynamoTable {
    fn drop(&mut self) {
        // Drop may run inside the test's runtime, which cannot block: a thread of its own.
        let (endpoint, name) = (self.endpoint.clone(), self.name.clone());
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to delete the table");
            runtime.block_on(delete_table(&dynamodb_client(&endpoint), &name));
        });
        let _ = deleted.join();
    }
}
