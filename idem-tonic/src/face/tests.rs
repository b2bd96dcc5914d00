//! What a gRPC method's reply is kept as, at the edge of the replay limit.

use http::HeaderMap;
use prost::Message;
use tonic::{Code, Response, Status};

use super::keep;
use crate::rpc::stored::StoredReply;
use idem_core::engine::Verdict;

/// A response message.
fn charge() -> prost_types::Duration {
    prost_types::Duration {
        seconds: 1_700_000_000,
        nanos: 5,
    }
}

/// What is stored for the method's reply `charge()` under the replay limit `limit`.
async fn kept(limit: usize) -> StoredReply {
    let reply = async { Ok::<_, Status>(Response::new(charge())) };
    let Verdict::Keep { payload, .. } = keep(reply, limit).await else {
        panic!("a message is kept");
    };
    StoredReply::decode(&payload).expect("a stored reply")
}

/// The limit is the largest reply kept, as `max_response_bytes` says: a reply of exactly that
/// size is replayed; one byte over it, retries get the status saying it was not kept.
#[tokio::test]
async fn a_reply_of_exactly_the_limit_is_kept() {
    let whole = StoredReply::Message {
        metadata: HeaderMap::new(),
        body: charge().encode_to_vec().into(),
    };
    let size = whole.encode().len();
    assert_eq!(kept(size).await, whole);
    match kept(size - 1).await {
        StoredReply::Status { code, .. } => assert_eq!(code, Code::FailedPrecondition),
        other => panic!("kept over the limit: {other:?}"),
    }
}
