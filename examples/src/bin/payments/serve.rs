//! The server loop: an axum `Router` over HTTP/1.1 with the limits a service facing the
//! internet needs and `axum::serve` does not have.
//!
//! - **Header-read timeout** (`HEADER_TIMEOUT_MS`): a connection that has not sent a whole
//!   request head that long after it opened, or after its previous response, is closed. Slow
//!   or idle clients cannot hold connections open.
//! - **Body deadline** (`BODY_TIMEOUT_MS`): a request whose body has not fully arrived that long
//!   after its head is answered `408 request_body_timeout` and its connection closed.
//! - **Connection cap** (`MAX_CONNECTIONS`): a connection over the cap is answered at once with
//!   `503 server_busy` and `Retry-After`, then closed: shed, never left waiting. The cap is
//!   lowered to fit the process's open-file limit, so accepting never fails for want of one.
//! - **Graceful shutdown**: when `shutdown` resolves, the listener closes, idle connections
//!   close, and requests in flight finish.
//!
//! Nothing here knows about payments but its error answers: the 408 and the 503 are
//! [`ApiError`]s, in the format every other error of the service has.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response, header};
use axum::response::IntoResponse;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::error::ApiError;

/// How many over-cap connections may be getting their 503 at once; past that, they are closed
/// without one.
const MAX_SHEDDING: usize = 64;
/// How long a shed connection may take to read its 503.
const SHED_LINGER: Duration = Duration::from_secs(1);
/// Open files kept for everything but client connections: the listener, database connections,
/// shed connections, logs.
const RESERVED_FILES: u64 = 64 + MAX_SHEDDING as u64;

/// What a client may hold. Read from the environment by `config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// How long a connection may take to send a request head.
    pub(crate) header_timeout: Duration,
    /// How long a request's body may take to arrive, from its head.
    pub(crate) body_timeout: Duration,
    /// How many connections are served at once.
    pub(crate) max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` resolves and every connection has finished.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let max_connections = fit_to_open_files(limits.max_connections, open_file_limit());
    let connections = Arc::new(Semaphore::new(max_connections));
    let shedding = Arc::new(Semaphore::new(MAX_SHEDDING));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            shed(stream, &shedding, max_connections);
            continue;
        };
        let (app, body_timeout) = (app.clone(), limits.body_timeout);
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            handle(app.clone(), body_timeout, request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                let error = &error as &dyn std::error::Error;
                tracing::debug!(%peer, error, "connection closed");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Runs one request through `app`, its body under a deadline.
async fn handle(
    app: Router,
    body_timeout: Duration,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let timed_out = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        Body::new(Deadline {
            body,
            deadline: Box::pin(tokio::time::sleep(body_timeout)),
            timed_out: timed_out.clone(),
        })
    });
    let response = app.oneshot(request).await?;
    if timed_out.load(Ordering::Relaxed) && !response.status().is_success() {
        // Whoever read the body answered its failure (400, say): the client was too slow.
        return Ok(body_timeout_response());
    }
    Ok(response)
}

/// A request body that fails once its deadline passes.
struct Deadline<B> {
    body: B,
    deadline: Pin<Box<Sleep>>,
    timed_out: Arc<AtomicBool>,
}

/// The error a [`Deadline`] body fails with.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.timed_out.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// `408 request_body_timeout`; the connection closes after it (its body was not read).
fn body_timeout_response() -> Response<Body> {
    ApiError::body_timeout().into_response()
}

/// `response` as bytes on the wire: HTTP/1.1, its head and its whole body.
async fn to_wire(response: Response<Body>) -> Vec<u8> {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let mut wire = format!(
        "HTTP/1.1 {} {}\r\n",
        parts.status.as_u16(),
        parts.status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH {
            wire.extend_from_slice(name.as_str().as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(value.as_bytes());
            wire.extend_from_slice(b"\r\n");
        }
    }
    wire.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    wire.extend_from_slice(&body);
    wire
}

/// Answers a connection over the cap with `503 server_busy` and closes it, on a task of its
/// own; closes it at once when [`MAX_SHEDDING`] are already being answered.
fn shed(mut stream: TcpStream, shedding: &Arc<Semaphore>, max_connections: usize) {
    metrics::counter!("http_connections_shed_total").increment(1);
    let Ok(permit) = shedding.clone().try_acquire_owned() else {
        return;
    };
    tracing::debug!(
        max_connections,
        "at the connection limit: shedding a connection"
    );
    let answer = ApiError::server_busy().into_response();
    tokio::spawn(async move {
        let answered = async {
            stream.write_all(&to_wire(answer).await).await?;
            stream.shutdown().await?;
            // Read what the client sent until it closes: closing with unread bytes would reset
            // the connection, and the client could lose the answer.
            let mut sink = [0; 1024];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        };
        let _ = tokio::time::timeout(SHED_LINGER, answered).await;
        drop(permit);
    });
}

/// What to do when `accept` fails: a connection that went away is nobody's problem; anything
/// else (out of open files, say) is logged, and accepting pauses so the loop does not spin.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::error!(error = error as &dyn std::error::Error, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// `wanted`, lowered if the process may not open that many files (`limit`) besides
/// [`RESERVED_FILES`]: past the limit, `accept` fails and every client waits, where a lower cap
/// sheds the excess.
fn fit_to_open_files(wanted: usize, limit: Option<u64>) -> usize {
    let Some(limit) = limit else {
        return wanted;
    };
    let fits = usize::try_from(limit.saturating_sub(RESERVED_FILES))
        .unwrap_or(usize::MAX)
        .max(1);
    if wanted > fits {
        tracing::warn!(
            "MAX_CONNECTIONS={wanted} does not fit the open-file limit ({limit}): serving at most \
             {fits} connections; raise the limit (ulimit -n) to serve more"
        );
    }
    wanted.min(fits)
}

/// The soft limit on open files (`RLIMIT_NOFILE`), where the platform tells (Linux's
/// `/proc/self/limits`).
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_file_limit(&limits)
}

fn parse_open_file_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_limit_is_read_from_proc() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
            Max cpu time              unlimited            unlimited            seconds\n\
            Max open files            1024                 1048576              files\n";
        assert_eq!(parse_open_file_limit(limits), Some(1024));
        let unlimited = "Max open files            unlimited            unlimited            files";
        assert_eq!(parse_open_file_limit(unlimited), None);
        assert_eq!(parse_open_file_limit(""), None);
    }

    #[test]
    fn the_connection_cap_fits_the_open_file_limit() {
        assert_eq!(fit_to_open_files(1024, None), 1024);
        assert_eq!(fit_to_open_files(1024, Some(1_048_576)), 1024);
        assert_eq!(fit_to_open_files(1024, Some(1024)), 1024 - 128);
        assert_eq!(fit_to_open_files(4, Some(1024)), 4);
        assert_eq!(fit_to_open_files(4, Some(16)), 1);
    }
}
