//! Configuring a [`DynamoDbStore`]: the table, its creation on demand, and the bounds on each
//! call (the SDK's retries and timeouts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};

use super::DynamoDbStore;
use super::item::{PK, TTL};
use idem_core::error::StoreError;

/// How long [`DynamoDbStoreBuilder::build`] waits for a table it created to become active.
const ACTIVE_WITHIN: Duration = Duration::from_secs(120);

/// Configures a [`DynamoDbStore`]; made by [`DynamoDbStore::builder`].
#[derive(Debug, Clone)]
#[must_use = "call `.build().await` to check the table and build the store"]
pub struct DynamoDbStoreBuilder {
    client: Client,
    table: String,
    create_table_if_missing: bool,
    timeout: Duration,
    max_attempts: u32,
}

impl DynamoDbStoreBuilder {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            table: DynamoDbStore::DEFAULT_TABLE.to_owned(),
            create_table_if_missing: false,
            timeout: DynamoDbStore::DEFAULT_TIMEOUT,
            max_attempts: DynamoDbStore::DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// The table the records live in (default `idempotency`): 3 to 255 letters, digits, `_`,
    /// `-` or `.`. Its partition key must be `pk`, a string, with no sort key.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Whether [`build`](Self::build) creates the table when it does not exist (default
    /// `false`): on-demand capacity (`PAY_PER_REQUEST`), key `pk` (string), TTL on
    /// `expires_ttl`. It then waits for the table to become active. Creating a table needs the
    /// `dynamodb:CreateTable`, `DescribeTable` and `UpdateTimeToLive` permissions; the store
    /// itself needs `GetItem`, `PutItem`, `UpdateItem`, `DeleteItem` and, for operators, `Scan`.
    pub fn create_table_if_missing(mut self, create: bool) -> Self {
        self.create_table_if_missing = create;
        self
    }

    /// How long one store operation may take, the SDK's retries included (default 2 s): the
    /// client's operation timeout. Each attempt may take half of it. Keep it below the engine's
    /// `store_timeout` (5 s by default), which bounds each
    /// call anyway, so a slow DynamoDB fails with the SDK's account of why.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many attempts the SDK makes at one call (default 3), throttling and transient
    /// failures included, with its standard backoff from 25 ms (jittered, doubling), within the
    /// [`timeout`](Self::timeout).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Checks the settings, sets the retries and timeouts on a copy of the client, and checks
    /// the table (creating it if asked to): its key must be `pk` (string). A table without TTL
    /// on `expires_ttl` is logged as a warning (records still expire for requests; DynamoDB just
    /// keeps them).
    ///
    /// # Errors
    /// [`StoreError::Config`] for a bad table name, a zero timeout or attempt count (checked
    /// before DynamoDB is called), a table that does not exist (without
    /// [`create_table_if_missing`](Self::create_table_if_missing)) or has another key;
    /// [`StoreError::Unavailable`] or [`StoreError::Timeout`] when DynamoDB cannot be reached.
    pub async fn build(self) -> Result<DynamoDbStore, StoreError> {
        validate_table(&self.table)?;
        if self.timeout.is_zero() {
            return Err(StoreError::Config(
                "the DynamoDB timeout must be longer than zero".into(),
            ));
        }
        if self.max_attempts == 0 {
            return Err(StoreError::Config(
                "the DynamoDB store needs at least one attempt per call".into(),
            ));
        }
        let config = self
            .client
            .config()
            .to_builder()
            // A 25 ms base, as AWS's other SDKs use for DynamoDB (1 s is the SDK's default): a
            // request waits on this call, and the attempts are bounded by `timeout` anyway.
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(self.max_attempts)
                    .with_initial_backoff(Duration::from_millis(25))
                    .with_max_backoff(self.timeout / 2),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(self.timeout)
                    .operation_attempt_timeout(self.timeout / 2)
                    .connect_timeout(self.timeout / 2)
                    .build(),
            )
            .build();
        let store = DynamoDbStore {
            client: Client::from_conf(config),
            table: Arc::from(self.table),
            timeout: self.timeout,
        };
        let table = match store.describe().await? {
            Some(table) => table,
            None if self.create_table_if_missing => store.create().await?,
            None => {
                return Err(StoreError::Config(
                    format!(
                        "DynamoDB table `{}` does not exist: create it (key `pk`, string) or \
                         call `create_table_if_missing(true)`",
                        store.table
                    )
                    .into(),
                ));
            }
        };
        check_key(&store.table, &table)?;
        store.check_ttl(self.create_table_if_missing).await?;
        Ok(store)
    }
}

impl DynamoDbStore {
    /// The table's description, or `None` when it does not exist.
    async fn describe(&self) -> Result<Option<TableDescription>, StoreError> {
        match self
            .client
            .describe_table()
            .table_name(&*self.table)
            .send()
            .await
        {
            Ok(described) => Ok(described.table().cloned()),
            Err(error)
                if matches!(
                    error.as_service_error(),
                    Some(DescribeTableError::ResourceNotFoundException(_))
                ) =>
            {
                Ok(None)
            }
            Err(error) => Err(self.failed("DescribeTable", error)),
        }
    }

    /// Creates the table (on demand, key `pk`), or finds it made meanwhile by another process,
    /// and waits until it is active.
    async fn create(&self) -> Result<TableDescription, StoreError> {
        let built =
            |e: aws_sdk_dynamodb::error::BuildError| StoreError::Config(e.to_string().into());
        let created = self
            .client
            .create_table()
            .table_name(&*self.table)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(PK)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(built)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(PK)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(built)?,
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match created {
            Ok(_) => tracing::info!(table = %self.table, "created the DynamoDB idempotency table"),
            // Another process created it first.
            Err(error)
                if matches!(
                    error.as_service_error(),
                    Some(CreateTableError::ResourceInUseException(_))
                ) => {}
            Err(error) => return Err(self.failed("CreateTable", error)),
        }
        let since = Instant::now();
        loop {
            if let Some(table) = self.describe().await?
                && table.table_status() == Some(&TableStatus::Active)
            {
                return Ok(table);
            }
            if since.elapsed() > ACTIVE_WITHIN {
                return Err(StoreError::unavailable(std::io::Error::other(format!(
                    "DynamoDB table `{}` did not become active within {ACTIVE_WITHIN:?}",
                    self.table
                ))));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Reads the table's TTL setting; turns TTL on `expires_ttl` on when it is off and
    /// `enable`, else warns unless it is on.
    async fn check_ttl(&self, enable: bool) -> Result<(), StoreError> {
        let described = self
            .client
            .describe_time_to_live()
            .table_name(&*self.table)
            .send()
            .await
            .map_err(|e| self.failed("DescribeTimeToLive", e))?;
        let ttl = described.time_to_live_description();
        let status = ttl.and_then(|t| t.time_to_live_status());
        let attribute = ttl.and_then(|t| t.attribute_name());
        let on = matches!(
            status,
            Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
        );
        if on && attribute == Some(TTL) {
            return Ok(());
        }
        if on || !enable {
            tracing::warn!(
                table = %self.table,
                ttl_attribute = attribute,
                "DynamoDB TTL is not on `{TTL}`: expired idempotency records are never deleted \
                 (they stay invisible to requests)"
            );
            return Ok(());
        }
        let specification = TimeToLiveSpecification::builder()
            .enabled(true)
            .attribute_name(TTL)
            .build()
            .map_err(|e| StoreError::Config(e.to_string().into()))?;
        self.client
            .update_time_to_live()
            .table_name(&*self.table)
            .time_to_live_specification(specification)
            .send()
            .await
            .map_err(|e| self.failed("UpdateTimeToLive", e))?;
        Ok(())
    }
}

/// A table name DynamoDB accepts: 3 to 255 of `[A-Za-z0-9_.-]`.
fn validate_table(table: &str) -> Result<(), StoreError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if (3..=255).contains(&table.len()) && table.chars().all(allowed) {
        Ok(())
    } else {
        Err(StoreError::Config(
            format!(
                "DynamoDB table name `{table}`: expected 3 to 255 letters, digits, `_`, `-` or `.`"
            )
            .into(),
        ))
    }
}

/// Refuses a table whose key is not `pk` (string) alone.
fn check_key(name: &str, table: &TableDescription) -> Result<(), StoreError> {
    let key = table.key_schema();
    let hash_is_pk =
        matches!(key, [only] if only.attribute_name() == PK && only.key_type() == &KeyType::Hash);
    let pk_is_string = table
        .attribute_definitions()
        .iter()
        .any(|a| a.attribute_name() == PK && a.attribute_type() == &ScalarAttributeType::S);
    if hash_is_pk && pk_is_string {
        Ok(())
    } else {
        Err(StoreError::Config(
            format!(
                "DynamoDB table `{name}` must have the partition key `pk` (string) and no sort key"
            )
            .into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_checked_before_dynamodb_is_called() {
        assert!(validate_table("idempotency").is_ok());
        assert!(validate_table("payments.idem-v1_2").is_ok());
        assert!(validate_table("ab").is_err());
        assert!(validate_table("with space").is_err());
        assert!(validate_table(&"x".repeat(256)).is_err());
    }
}
