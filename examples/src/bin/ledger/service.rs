//! The `ledger.v1.Ledger` service: `CreateTransfer`, idempotent per tenant by its
//! `request_id` (AIP-155), and `GetTransfer`.
//!
//! `CreateTransfer` runs in atomic mode: the transfer's row is written in the transaction the
//! engine lends ([`idem_runtime::grpc::any_tx`]) and commits with the stored response, so a
//! crash can never leave a transfer whose retry would make a second one. Its answers and
//! whether the engine stores them:
//!
//! | request | status | stored and replayed |
//! |---|---|---|
//! | valid | `OK`, the `Transfer` | yes |
//! | `amount <= 0`, or an empty account or currency | `INVALID_ARGUMENT`, `google.rpc.BadRequest` naming the field | yes |
//! | `from_account = "acct_empty"` | `FAILED_PRECONDITION`, `google.rpc.ErrorInfo` reason `INSUFFICIENT_FUNDS` | yes |
//! | a value the database refuses (a NUL in a name, on PostgreSQL) | `INVALID_ARGUMENT` | no: the refused write aborted the transaction, so nothing of the call commits; a retry gets the same answer |
//! | the database fails | `UNAVAILABLE` | no: the key is released, a retry runs again |

use std::collections::HashMap;
use std::time::Duration;

use idem_runtime::{AnyTx, Idempotency, idempotent};
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::Tenant;
use crate::db::Db;
use crate::proto::ledger_server::Ledger;
use crate::proto::{CreateTransferRequest, GetTransferRequest, Transfer};

/// The account that never has funds: transfers from it fail `INSUFFICIENT_FUNDS`.
const EMPTY_ACCOUNT: &str = "acct_empty";
/// The account whose transfers take `SLOW_MS`.
const SLOW_ACCOUNT: &str = "acct_slow";
/// The `domain` of the service's own `google.rpc.ErrorInfo`.
const ERROR_DOMAIN: &str = "ledger.idem.rs";
/// What transfer ids start with; 24 letters and digits follow.
const ID_PREFIX: &str = "tr_";
const ID_LEN: usize = 24;

/// The service. Clone, because the engine runs each idempotent call on a task of its own.
#[derive(Clone)]
pub(crate) struct LedgerService {
    idempotency: Idempotency,
    db: Db,
    /// How long a transfer to `acct_slow` takes.
    slow: Duration,
}

impl LedgerService {
    pub(crate) fn new(idempotency: Idempotency, db: Db, slow: Duration) -> Self {
        Self {
            idempotency,
            db,
            slow,
        }
    }
}

/// Where the engine's methods find it.
impl AsRef<Idempotency> for LedgerService {
    fn as_ref(&self) -> &Idempotency {
        &self.idempotency
    }
}

#[idem_runtime::grpc::service]
#[tonic::async_trait]
impl Ledger for LedgerService {
    // One commit: on PostgreSQL the claim, the transfer's row and the stored answer share one
    // transaction, so a call killed mid-way leaves nothing behind and its retry runs at once.
    #[idempotent(
        scope = "tenant",
        key_field = "request_id",
        name = "ledger.v1.Ledger/CreateTransfer",
        ttl = "24h",
        commits = "one"
    )]
    async fn create_transfer(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let tenant = Tenant::of(&request)?.clone();
        let mut tx: AnyTx = idem_runtime::grpc::any_tx(&request)?;
        let new = request.into_inner();
        check(&new)?;
        if new.from_account == EMPTY_ACCOUNT {
            return Err(insufficient_funds(&new.from_account));
        }
        if new.to_account == SLOW_ACCOUNT {
            tracing::info!(
                tenant = tenant.as_str(),
                "transfer to {SLOW_ACCOUNT}: {:?}",
                self.slow
            );
            tokio::time::sleep(self.slow).await;
        }
        let transfer = Transfer {
            id: new_id(),
            from_account: new.from_account,
            to_account: new.to_account,
            amount: new.amount,
            currency: new.currency,
        };
        self.db
            .insert_transfer(&mut tx, tenant.as_str(), &transfer)
            .await
            .map_err(database_error)?;
        tracing::info!(tenant = tenant.as_str(), id = %transfer.id, "transfer recorded");
        Ok(Response::new(transfer))
    }

    async fn get_transfer(
        &self,
        request: Request<GetTransferRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let tenant = Tenant::of(&request)?;
        let id = &request.get_ref().id;
        let transfer = if is_id(id) {
            let found = self.db.transfer(tenant.as_str(), id).await;
            found.map_err(database_error)?
        } else {
            None // names no transfer: no query (PostgreSQL would reject a NUL, say)
        };
        transfer
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no transfer {id:?}")))
    }
}

/// `INVALID_ARGUMENT` with a `google.rpc.BadRequest` naming each bad field.
fn check(new: &CreateTransferRequest) -> Result<(), Status> {
    let mut details = ErrorDetails::new();
    if new.amount <= 0 {
        details.add_bad_request_violation("amount", "must be above 0 (minor units)");
    }
    for (field, value) in [
        ("from_account", &new.from_account),
        ("to_account", &new.to_account),
        ("currency", &new.currency),
    ] {
        if value.is_empty() {
            details.add_bad_request_violation(field, "is required");
        }
    }
    match details.bad_request() {
        None => Ok(()),
        Some(bad) => {
            let fields: Vec<_> = bad.field_violations.iter().map(|v| &v.field).collect();
            let message = format!("invalid transfer: check {fields:?}");
            Err(Status::with_error_details(
                Code::InvalidArgument,
                message,
                details,
            ))
        }
    }
}

/// `FAILED_PRECONDITION` with `google.rpc.ErrorInfo` reason `INSUFFICIENT_FUNDS`.
fn insufficient_funds(account: &str) -> Status {
    let metadata = HashMap::from([("account".to_owned(), account.to_owned())]);
    Status::with_error_details(
        Code::FailedPrecondition,
        format!("{account} has insufficient funds"),
        ErrorDetails::with_error_info("INSUFFICIENT_FUNDS", ERROR_DOMAIN, metadata),
    )
}

/// A database error: a value the database refuses is the request's fault, `INVALID_ARGUMENT`
/// (retrying cannot help); any other failure is logged and answered `UNAVAILABLE`, which the
/// engine does not store.
fn database_error(error: sqlx::Error) -> Status {
    if idem_examples::sql_errors::is_bad_value(&error) {
        tracing::warn!(%error, "the database refused a value of the request");
        return Status::invalid_argument(
            "the ledger cannot store a value of this transfer (a NUL or an invalid character in \
             a name, a number out of range)",
        );
    }
    tracing::error!(%error, "database error");
    Status::unavailable("the ledger's database failed; retry with the same request_id")
}

/// A new transfer id: `tr_` and 24 random letters and digits.
fn new_id() -> String {
    let mut id = String::with_capacity(ID_PREFIX.len() + ID_LEN);
    id.push_str(ID_PREFIX);
    id.extend(std::iter::repeat_with(fastrand::alphanumeric).take(ID_LEN));
    id
}

/// Whether `id` can be one [`new_id`] made.
fn is_id(id: &str) -> bool {
    id.strip_prefix(ID_PREFIX)
        .is_some_and(|rest| rest.len() == ID_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_recognised() {
        let id = new_id();
        assert!(is_id(&id), "{id}");
        for other in [
            "",
            "tr_",
            "ch_abc",
            &id[..id.len() - 1],
            &format!("{id}x"),
            "tr_\0",
        ] {
            assert!(!is_id(other), "{other:?}");
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let new = CreateTransferRequest {
            amount: 0,
            from_account: "acct_a".into(),
            ..Default::default()
        };
        let status = check(&new).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        let bad = status.get_details_bad_request().unwrap();
        let fields: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, ["amount", "to_account", "currency"]);
    }

    #[test]
    fn insufficient_funds_carries_its_reason() {
        let status = insufficient_funds("acct_empty");
        assert_eq!(status.code(), Code::FailedPrecondition);
        let info = status.get_details_error_info().unwrap();
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("INSUFFICIENT_FUNDS", ERROR_DOMAIN)
        );
        assert_eq!(info.metadata["account"], "acct_empty");
    }
}
