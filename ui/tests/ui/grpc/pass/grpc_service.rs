//! A tonic service's `impl` with idempotent and plain methods, as tonic-build's trait has them:
//! the key from a field or the metadata, every argument, `self` used in the body.

use idem_runtime::{Idempotency, idempotent};
use tonic::{Request, Response, Status};

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTransferRequest {
    #[prost(string, tag = "1")]
    pub request_id: String,
    #[prost(int64, tag = "2")]
    pub amount: i64,
}

impl prost::Name for CreateTransferRequest {
    const NAME: &'static str = "CreateTransferRequest";
    const PACKAGE: &'static str = "ledger.v1";
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Transfer {
    #[prost(string, tag = "1")]
    pub id: String,
}

#[tonic::async_trait]
pub trait Ledger: Send + Sync + 'static {
    async fn create_transfer(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status>;
    async fn create_by_metadata(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status>;
    async fn get_transfer(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status>;
}

#[derive(Clone)]
pub struct LedgerService {
    idempotency: Idempotency,
    prefix: &'static str,
}

impl AsRef<Idempotency> for LedgerService {
    fn as_ref(&self) -> &Idempotency {
        &self.idempotency
    }
}

impl LedgerService {
    fn id(&self, amount: i64) -> String {
        format!("{}{amount}", self.prefix)
    }
}

#[idem_runtime::grpc::service]
#[tonic::async_trait]
impl Ledger for LedgerService {
    /// Documented, with every argument.
    #[idempotent(
        scope = "global",
        key_field = "request_id",
        name = "ledger.v1.Ledger/CreateTransfer",
        ttl = "24h",
        key = "optional",
        in_flight = "wait",
        commits = "one"
    )]
    async fn create_transfer(
        &self,
        req: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let amount = req.get_ref().amount;
        if amount <= 0 {
            return Err(Status::invalid_argument("amount must be positive"));
        }
        let id = self.id(amount);
        Ok(Response::new(Transfer { id }))
    }

    #[idempotent(scope = "global", key_metadata = "x-transfer-key")]
    async fn create_by_metadata(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status> {
        self.create_transfer(request).await
    }

    async fn get_transfer(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status> {
        Ok(Response::new(Transfer {
            id: self.id(request.into_inner().amount),
        }))
    }
}

fn main() {}
