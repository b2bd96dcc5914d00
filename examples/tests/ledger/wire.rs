//! What reaches `CreateTransfer` as bytes on the wire, not as a message the generated client
//! encodes: a body that is not a valid `CreateTransferRequest` is `INVALID_ARGUMENT` (input that
//! can never succeed is never answered as retryable, nor as the server's fault), and nothing of
//! it is claimed, run or stored.

use bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

use super::support::{Database, as_tenant, channel, client, create, request_id, transfer};

/// A codec whose messages are raw bytes: what a client sends when it speaks another version of
/// the `.proto`, or no protobuf at all.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Self;
    type Decoder = Self;

    fn encoder(&mut self) -> Self {
        Self
    }

    fn decoder(&mut self) -> Self {
        Self
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining()).to_vec()))
    }
}

/// Bodies that are not a `CreateTransferRequest`, each for its own reason.
const GARBAGE: [(&str, &[u8]); 3] = [
    // Field 1 (`request_id`) says 64 bytes follow; one does.
    ("truncated", &[0x0a, 0x40, b'x']),
    // Field 2 (`from_account`, a string) holds bytes that are not UTF-8.
    ("not UTF-8", &[0x12, 0x02, 0xff, 0xfe]),
    // Field 4 (`amount`, an int64) sent length-delimited.
    ("wrong wire type", &[0x22, 0x01, 0x05]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_the_request_message_is_invalid_argument_and_stores_nothing() {
    let db = Database::sqlite();
    let server = db.server().start();
    let mut grpc = tonic::client::Grpc::new(channel(&server).await);
    let method = http::uri::PathAndQuery::from_static("/ledger.v1.Ledger/CreateTransfer");
    for (why, body) in GARBAGE {
        for _ in 0..2 {
            grpc.ready().await.unwrap();
            let call = as_tenant("acme", body.to_vec());
            let status = grpc.unary(call, method.clone(), Raw).await.unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument, "{why}: {status:?}");
            assert!(
                status
                    .message()
                    .contains("not a valid protobuf encoding of `CreateTransferRequest`"),
                "{why}: {status:?}"
            );
        }
    }
    assert_eq!(db.transfers().await, 0, "nothing ran");
    assert_eq!(db.records().await, 0, "nothing was claimed or stored");

    // The generated client, on the same codec, encodes and decodes as before.
    let mut ledger = client(&server).await;
    let made = create(&mut ledger, "acme", &transfer(&request_id(), "acct_b", 100)).await;
    assert_eq!(made.unwrap().into_inner().amount, 100);
    assert_eq!((db.transfers().await, db.records().await), (1, 1));
}
