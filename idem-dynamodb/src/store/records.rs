//! The operators' methods on DynamoDB, and the purge of expired records: reading and
//! forgetting one record (one call each), listing, counting and purging by `Scan`.
//!
//! The table has no index but its key, so what selects by operation, scope, state or age reads
//! every item (a `Scan`, strongly consistent, without payloads) and selects in process with
//! [`RecordFilter::matches`]: a read unit per 4 KB scanned, whatever the filter selects. Each
//! delete is conditional, so a record that changed since the scan read it is left alone.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::DynamoDbStore;
use super::error::condition_failed;
use super::item::{
    COMPLETED, COMPLETED_AT, EXPIRES_AT, IN_FLIGHT, INFO, Item, LEASE_UNTIL, PK, STATE, Stored,
    TOKEN, key_value, millis, name, names, number, text,
};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{
    Forgotten, Oldest, Record, RecordFilter, RecordState, RecordStats,
};

/// Where a paged `Scan` is: not started, at a page's last key, or done.
enum Page {
    First,
    After(Item),
    Done,
}

impl DynamoDbStore {
    /// The next page of the table's records (without payloads), or `None` past the last.
    async fn next_page(&self, page: &mut Page) -> Result<Option<Vec<Stored>>, StoreError> {
        let start = match std::mem::replace(page, Page::Done) {
            Page::Done => return Ok(None),
            Page::First => None,
            Page::After(key) => Some(key),
        };
        let projection = INFO.iter().map(|a| name(a)).collect::<Vec<_>>().join(", ");
        let scanned = self
            .client
            .scan()
            .table_name(&*self.table)
            .consistent_read(true)
            .projection_expression(projection)
            .set_expression_attribute_names(Some(names(INFO)))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| self.failed("Scan", e))?;
        if let Some(last) = scanned.last_evaluated_key() {
            *page = Page::After(last.clone());
        }
        let records = scanned
            .items()
            .iter()
            .map(Stored::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(records))
    }

    /// Deletes up to `limit` records expired at `now`, each only if it is still expired (a
    /// claim may have taken the key afresh since the scan).
    pub(super) async fn purge_expired_now(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut purged = 0u64;
        let mut page = Page::First;
        while purged < u64::from(limit)
            && let Some(records) = self.next_page(&mut page).await?
        {
            for stored in records.iter().filter(|s| !s.live(now)) {
                let deleted = self
                    .delete_if(
                        &stored.key,
                        "#expires_at <= :now AND (#state = :in_flight OR #state = :completed)",
                        &[EXPIRES_AT, STATE],
                        vec![
                            (":now", millis(now)),
                            (":in_flight", text(IN_FLIGHT)),
                            (":completed", text(COMPLETED)),
                        ],
                    )
                    .await?;
                purged += u64::from(deleted);
                if purged >= u64::from(limit) {
                    break;
                }
            }
        }
        Ok(purged)
    }

    /// Deletes `key`'s record if `condition` holds: whether it did.
    async fn delete_if(
        &self,
        key: &RecordKey,
        condition: &str,
        attributes: &[&str],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<bool, StoreError> {
        let mut delete = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .key(PK, key_value(key))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names(attributes.iter().copied())));
        for (name, value) in values {
            delete = delete.expression_attribute_values(name, value);
        }
        match delete.send().await {
            Ok(_) => Ok(true),
            Err(error) => {
                condition_failed("DeleteItem", self.timeout, error, |e| match e {
                    DeleteItemError::ConditionalCheckFailedException(e) => Some(e.item()),
                    _ => None,
                })?;
                Ok(false)
            }
        }
    }
}

impl Admin for DynamoDbStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut oldest = Oldest::new(limit);
        let mut page = Page::First;
        while let Some(records) = self.next_page(&mut page).await? {
            for info in records.iter().map(Stored::info) {
                if filter.matches(&info, now) {
                    oldest.offer(info);
                }
            }
        }
        Ok(oldest.into_vec())
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&*self.table)
            .key(PK, key_value(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.failed("GetItem", e))?;
        let Some(item) = got.item() else {
            return Ok(None);
        };
        let stored = Stored::decode(item)?;
        let info = stored.info();
        if !stored.completed {
            return Ok(Some(info));
        }
        let payload = stored.payload.ok_or_else(|| {
            StoreError::Corrupt(
                format!("item {}: completed without a payload", key.to_hex()).into(),
            )
        })?;
        Ok(Some(info.with_payload(Some(payload))))
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        let mut delete = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .key(PK, key_value(key))
            .return_values(ReturnValue::AllOld);
        if !force {
            // Deleted unless an owner may still run: in flight, live, under a live lease.
            delete = delete
                .condition_expression(
                    "attribute_exists(#pk) AND (#state = :completed OR #expires_at <= :now \
                     OR #lease_until <= :now)",
                )
                .set_expression_attribute_names(Some(names([PK, STATE, EXPIRES_AT, LEASE_UNTIL])))
                .expression_attribute_values(":completed", text(COMPLETED))
                .expression_attribute_values(":now", millis(now))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
        }
        match delete.send().await {
            Ok(deleted) => match deleted.attributes() {
                Some(old) => Ok(Forgotten::Deleted(Stored::decode(old)?.info())),
                None => Ok(Forgotten::Absent),
            },
            Err(error) => {
                let old = condition_failed("DeleteItem", self.timeout, error, |e| match e {
                    DeleteItemError::ConditionalCheckFailedException(e) => Some(e.item()),
                    _ => None,
                })?;
                match old {
                    Some(old) => Ok(Forgotten::Leased(Stored::decode(&old)?.info())),
                    None => Ok(Forgotten::Absent),
                }
            }
        }
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut purged = 0u64;
        let mut page = Page::First;
        while purged < u64::from(limit)
            && let Some(records) = self.next_page(&mut page).await?
        {
            for stored in records {
                let info = stored.info();
                if info.state(now) != RecordState::Completed || !filter.matches(&info, now) {
                    continue;
                }
                // Only if it is still the completed, live record the scan read.
                let condition = "#state = :completed AND #lease_token = :token \
                                 AND #completed_at = :completed_at AND #expires_at > :now";
                let completed_at = stored.completed_at.unwrap_or(Timestamp::from_millis(0));
                let deleted = self
                    .delete_if(
                        &stored.key,
                        condition,
                        &[STATE, TOKEN, COMPLETED_AT, EXPIRES_AT],
                        vec![
                            (":completed", text(COMPLETED)),
                            (":token", number(stored.token.as_i64())),
                            (":completed_at", millis(completed_at)),
                            (":now", millis(now)),
                        ],
                    )
                    .await?;
                purged += u64::from(deleted);
                if purged >= u64::from(limit) {
                    break;
                }
            }
        }
        Ok(purged)
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        let mut stats = RecordStats::new();
        let mut page = Page::First;
        while let Some(records) = self.next_page(&mut page).await? {
            for info in records.iter().map(Stored::info) {
                if filter.matches(&info, now) {
                    stats.add(&info, now);
                }
            }
        }
        Ok(stats)
    }
}
