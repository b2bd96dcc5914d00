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
}

#[derive(Clone)]
pub struct LedgerService {
    idempotency: Idempotency,
}

impl AsRef<Idempotency> for LedgerService {
    fn as_ref(&self) -> &Idempotency {
        &self.idempotency
    }
}

#[idem_runtime::grpc::service]
#[tonic::async_trait]
impl Ledger for LedgerService {
    #[idempotent(scope = "global", key_field = "amount")]
    async fn create_transfer(
        &self,
        request: Request<CreateTransferRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let _ = request;
        Ok(Response::new(Transfer { id: "tr_1".into() }))
    }
}

fn main() {}
