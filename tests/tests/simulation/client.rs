//! Clients: each works through its jobs, sending each over HTTP to a random instance and
//! retrying with the same key until it gets a final answer or runs out of attempts.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::json;

use super::app::APP_PORT;
use super::trace::{Answer, Event, Op, Trace};

/// How long a client waits for one answer before giving up on that attempt.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(12);
/// Attempts per job, first included.
const ATTEMPTS: u32 = 8;

/// One operation a client performs.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) op: Op,
    /// The amount sent: the operation's own, or another (the key reused for another request).
    pub(crate) amount: u64,
    pub(crate) work_ms: u64,
    pub(crate) fail_first: bool,
    /// Pause before the first attempt.
    pub(crate) delay_ms: u64,
}

/// A client's software: its jobs in order, retrying each, every choice from its own seed.
pub(crate) async fn run(
    name: String,
    apps: Vec<String>,
    jobs: Vec<Job>,
    seed: u64,
    trace: Trace,
) -> turmoil::Result {
    let mut rng = fastrand::Rng::with_seed(seed);
    for job in jobs {
        tokio::time::sleep(Duration::from_millis(job.delay_ms)).await;
        for _ in 0..ATTEMPTS {
            let host = apps[rng.usize(..apps.len())].clone();
            trace.log(Event::Send {
                client: name.clone(),
                host: host.clone(),
                op: job.op.clone(),
                amount: job.amount,
            });
            let answer = send(&host, &job).await;
            let done = answer.is_final();
            trace.log(Event::Answer {
                client: name.clone(),
                op: job.op.clone(),
                amount: job.amount,
                answer,
            });
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(rng.u64(200..=3_000))).await;
        }
    }
    Ok(())
}

async fn send(host: &str, job: &Job) -> Answer {
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange(host, job)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => Answer::Error(error.to_string()),
        Err(_) => Answer::Error("timed out".into()),
    }
}

async fn exchange(host: &str, job: &Job) -> Result<Answer, Box<dyn std::error::Error>> {
    let stream = turmoil::net::TcpStream::connect((host, APP_PORT)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let body = json!({
        "amount": job.amount,
        "work_ms": job.work_ms,
        "fail_first": job.fail_first,
    });
    let path = if job.op.atomic { "/atomic" } else { "/plain" };
    let request = http::Request::post(path)
        .header("host", host)
        .header("content-type", "application/json")
        .header("idempotency-key", &job.op.key)
        .header("x-org", &job.op.org)
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Answer::Response {
        status,
        replayed,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
