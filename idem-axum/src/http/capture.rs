//! Capturing a handler's response for its retries, without holding more of it than can be
//! stored: a body within the replay limit is buffered and stored; a larger one is stored as the
//! too-large marker and streams on to the client as the handler produces it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;

use super::response::StoredResponse;
use super::settings::reject;
use idem_core::idempotency::Idempotency;
use idem_core::rejection::Rejection;

/// A handler's response: what to send now and what to store for retries.
pub(crate) struct Captured {
    /// The response to send: buffered when it was stored whole, else streaming.
    pub(crate) response: Response,
    /// What retries replay: the response itself, or the too-large marker.
    pub(crate) stored: StoredResponse,
}

/// Reads a handler's response up to the replay limit and builds what to store: the response
/// itself when its body ends within the limit, or the marker its retries get when it does not.
/// At most the limit and one frame are held: past the limit the body's frames read so far are
/// sent first, then the rest as the handler produces it. `None` when the body stream failed
/// before its end or the limit (the record is then released).
pub(crate) async fn capture(response: Response, idempotency: &Idempotency) -> Option<Captured> {
    let limit = idempotency.limits().max_response_bytes;
    let (parts, mut body) = response.into_parts();
    let mut read = VecDeque::new();
    let mut len = 0usize;
    while len <= limit {
        match body.frame().await {
            None => {
                let whole = concat(read, len);
                let stored = StoredResponse::capture(parts.status, &parts.headers, whole.clone());
                let response = Response::from_parts(parts, Body::from(whole));
                return Some(Captured { response, stored });
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    len += data.len();
                }
                read.push_back(frame);
            }
            Some(Err(error)) => {
                tracing::error!(
                    error = &error as &dyn std::error::Error,
                    "handler response body failed; releasing the record"
                );
                return None;
            }
        }
    }
    tracing::warn!(
        read = len,
        limit,
        "response over the replay limit: retries get 409 idempotency_response_too_large"
    );
    let marker = reject(
        idempotency,
        Rejection::ResponseTooLarge {
            original_status: parts.status.as_u16(),
        },
    );
    let (marker, marker_body) = marker.into_parts();
    let marker_body = marker_body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let stored = StoredResponse::capture(marker.status, &marker.headers, marker_body);
    let rest = Body::new(Resumed { read, rest: body });
    Some(Captured {
        response: Response::from_parts(parts, rest),
        stored,
    })
}

/// The data of `frames` (trailers have none worth keeping in a stored response), in one buffer.
fn concat(frames: VecDeque<Frame<Bytes>>, len: usize) -> Bytes {
    let mut data = frames.into_iter().filter_map(|f| f.into_data().ok());
    match (data.next(), len) {
        (None, _) => Bytes::new(),
        (Some(only), n) if only.len() == n => only,
        (Some(first), _) => {
            let mut whole = BytesMut::with_capacity(len);
            whole.extend_from_slice(&first);
            data.for_each(|chunk| whole.extend_from_slice(&chunk));
            whole.freeze()
        }
    }
}

/// A body whose first frames were already read: those, then the rest of the body.
struct Resumed {
    read: VecDeque<Frame<Bytes>>,
    rest: Body,
}

impl http_body::Body for Resumed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Some(frame) = self.read.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self
            .read
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + read);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}
