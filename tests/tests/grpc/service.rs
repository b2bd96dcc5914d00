//! The service under test: a hand-written equivalent of what tonic-build generates for a small
//! `test.v1.Payments` service (messages, descriptors, the service trait), and its
//! implementation with `#[idempotent]` methods whose behaviour each request chooses.

use std::collections::HashMap;
use std::time::Duration;

use idem_runtime::{Idempotency, idempotent};
use idem_tests::Gate;
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::support::Calls;

/// `test.v1.ChargeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ChargeRequest {
    /// The key (AIP-155).
    #[prost(string, tag = "1")]
    pub(crate) request_id: String,
    #[prost(int64, tag = "2")]
    pub(crate) amount: i64,
    /// A map: its entries come out of prost in a random order.
    #[prost(map = "string, string", tag = "3")]
    pub(crate) labels: HashMap<String, String>,
    /// A list: its order is meaning.
    #[prost(string, repeated, tag = "4")]
    pub(crate) items: Vec<String>,
    /// What the method does: `ok`, `gate` (wait at the gate, then ok), `panic`, or the name of
    /// the status code to answer (`not_found`, `unavailable`, ...).
    #[prost(string, tag = "5")]
    pub(crate) outcome: String,
    /// A map whose values are messages holding maps.
    #[prost(map = "string, message", tag = "6")]
    pub(crate) parts: HashMap<String, Part>,
}

/// `test.v1.Part`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Part {
    #[prost(map = "int32, string", tag = "1")]
    pub(crate) notes: HashMap<i32, String>,
}

impl prost::Name for ChargeRequest {
    const NAME: &'static str = "ChargeRequest";
    const PACKAGE: &'static str = "test.v1";
}

/// `test.v1.Charge`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Charge {
    #[prost(string, tag = "1")]
    pub(crate) id: String,
    #[prost(int64, tag = "2")]
    pub(crate) amount: i64,
}

/// The encoded `FileDescriptorSet` of `test.v1`, as a build script would write it.
pub(crate) fn descriptors() -> Vec<u8> {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
        MessageOptions,
    };
    let field = |name: &str, number: i32, ty: Type, label: Label, type_name: Option<&str>| {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            r#type: Some(ty as i32),
            label: Some(label as i32),
            type_name: type_name.map(Into::into),
            ..Default::default()
        }
    };
    let entry = |name: &str, key: Type, value: Type, value_type: Option<&str>| DescriptorProto {
        name: Some(name.into()),
        field: vec![
            field("key", 1, key, Label::Optional, None),
            field("value", 2, value, Label::Optional, value_type),
        ],
        options: Some(MessageOptions {
            map_entry: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (one, many) = (Label::Optional, Label::Repeated);
    let request = DescriptorProto {
        name: Some("ChargeRequest".into()),
        field: vec![
            field("request_id", 1, Type::String, one, None),
            field("amount", 2, Type::Int64, one, None),
            field(
                "labels",
                3,
                Type::Message,
                many,
                Some(".test.v1.ChargeRequest.LabelsEntry"),
            ),
            field("items", 4, Type::String, many, None),
            field("outcome", 5, Type::String, one, None),
            field(
                "parts",
                6,
                Type::Message,
                many,
                Some(".test.v1.ChargeRequest.PartsEntry"),
            ),
        ],
        nested_type: vec![
            entry("LabelsEntry", Type::String, Type::String, None),
            entry(
                "PartsEntry",
                Type::String,
                Type::Message,
                Some(".test.v1.Part"),
            ),
        ],
        ..Default::default()
    };
    let part = DescriptorProto {
        name: Some("Part".into()),
        field: vec![field(
            "notes",
            1,
            Type::Message,
            many,
            Some(".test.v1.Part.NotesEntry"),
        )],
        nested_type: vec![entry("NotesEntry", Type::Int32, Type::String, None)],
        ..Default::default()
    };
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("test/v1/payments.proto".into()),
            package: Some("test.v1".into()),
            message_type: vec![request, part],
            syntax: Some("proto3".into()),
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// The service trait tonic-build would generate.
#[tonic::async_trait]
pub(crate) trait Payments: Send + Sync + 'static {
    async fn charge(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status>;
    async fn charge_by_metadata(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status>;
    async fn refund(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status>;
    async fn charge_waiting(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status>;
    async fn charge_keyed(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status>;
}

/// The implementation: every method counts its runs and answers as the request says.
#[derive(Clone)]
pub(crate) struct Service {
    pub(crate) idempotency: Idempotency,
    pub(crate) calls: Calls,
    pub(crate) gate: Gate,
}

impl AsRef<Idempotency> for Service {
    fn as_ref(&self) -> &Idempotency {
        &self.idempotency
    }
}

impl Service {
    async fn answer(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status> {
        let run = self.calls.bump();
        let message = request.into_inner();
        let code = match message.outcome.as_str() {
            "" | "ok" => None,
            "gate" => {
                self.gate.pass().await;
                None
            }
            "slow" => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                None
            }
            "panic" => panic!("the method panicked"),
            "invalid_argument" => Some(Code::InvalidArgument),
            "failed_precondition" => Some(Code::FailedPrecondition),
            "not_found" => Some(Code::NotFound),
            "already_exists" => Some(Code::AlreadyExists),
            "permission_denied" => Some(Code::PermissionDenied),
            "out_of_range" => Some(Code::OutOfRange),
            "unavailable" => Some(Code::Unavailable),
            "internal" => Some(Code::Internal),
            "unknown" => Some(Code::Unknown),
            "deadline_exceeded" => Some(Code::DeadlineExceeded),
            "resource_exhausted" => Some(Code::ResourceExhausted),
            "cancelled" => Some(Code::Cancelled),
            "aborted" => Some(Code::Aborted),
            other => panic!("unknown outcome {other}"),
        };
        if let Some(code) = code {
            let details =
                ErrorDetails::with_error_info(format!("RUN_{run}"), "test", HashMap::new());
            let mut status = Status::with_error_details(code, format!("run {run}"), details);
            status
                .metadata_mut()
                .insert("x-run", MetadataValue::from(run as u64));
            return Err(status);
        }
        let mut response = Response::new(Charge {
            id: format!("ch_{run}"),
            amount: message.amount,
        });
        response
            .metadata_mut()
            .insert("x-run", MetadataValue::from(run as u64));
        response.metadata_mut().insert_bin(
            "x-trace-bin",
            tonic::metadata::MetadataValue::from_bytes(b"\x00\xff"),
        );
        Ok(response)
    }
}

#[idem_runtime::grpc::service]
#[tonic::async_trait]
impl Payments for Service {
    #[idempotent(scope = "tenant", key_field = "request_id", ttl = "1h")]
    async fn charge(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status> {
        self.answer(request).await
    }

    #[idempotent(scope = "tenant", key_metadata = "x-charge-key")]
    async fn charge_by_metadata(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status> {
        self.answer(request).await
    }

    #[idempotent(
        scope = "tenant",
        key_field = "request_id",
        name = "test.v1.Payments/Refund"
    )]
    async fn refund(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status> {
        self.answer(request).await
    }

    #[idempotent(scope = "tenant", key_field = "request_id", in_flight = "wait")]
    async fn charge_waiting(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status> {
        self.answer(request).await
    }

    #[idempotent(scope = "global", key_field = "request_id", key = "required")]
    async fn charge_keyed(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status> {
        self.answer(request).await
    }
}
