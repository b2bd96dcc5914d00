//! The harness's HTTP/1.1 client: one request per connection, written and read by hand over a
//! `TcpStream`, every step bounded by [`STEP_TIMEOUT`].
#![allow(dead_code)]

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{STEP_TIMEOUT, Server};

/// One HTTP/1.1 request on its own connection.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    addr: SocketAddr,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Call {
    pub(super) fn new(addr: SocketAddr, method: &'static str, path: &str) -> Self {
        Self {
            addr,
            method,
            path: path.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The same request, sent to `server` instead.
    pub(crate) fn to(mut self, server: &Server) -> Self {
        self.addr = server.addr;
        self
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Authenticates as `org`.
    pub(crate) fn org(self, org: &str) -> Self {
        self.header("Authorization", &format!("Bearer sk_test_{org}"))
    }

    pub(crate) fn key(self, key: &str) -> Self {
        self.header("Idempotency-Key", key)
    }

    pub(crate) fn json(mut self, body: &Value) -> Self {
        self.body = serde_json::to_vec(body).unwrap();
        self.header("Content-Type", "application/json")
    }

    pub(crate) fn raw_body(mut self, body: &str) -> Self {
        self.body = body.as_bytes().to_vec();
        self
    }

    /// Sends the request and reads the whole response (the connection is closed after it).
    pub(crate) async fn send(self) -> Response {
        self.start().await.response().await
    }

    /// Sends the request without waiting for the response, so the server has it before
    /// whatever the test does next.
    pub(crate) async fn start(self) -> Sent {
        let what = format!("{} {}", self.method, self.path);
        match tokio::time::timeout(STEP_TIMEOUT, self.write()).await {
            Ok(Ok(stream)) => Sent { what, stream },
            Ok(Err(error)) => panic!("{what}: {error}"),
            Err(_) => panic!("{what}: could not send within {STEP_TIMEOUT:?}"),
        }
    }

    async fn write(self) -> std::io::Result<TcpStream> {
        let mut stream = TcpStream::connect(self.addr).await?;
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.method, self.path, self.addr
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&self.body).await?;
        stream.flush().await?;
        Ok(stream)
    }
}

/// A request on the wire, its response not yet read.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(super) what: String,
    pub(super) stream: TcpStream,
}

impl Sent {
    /// Reads the whole response.
    pub(crate) async fn response(self) -> Response {
        let what = self.what.clone();
        match self.read().await {
            Ok(raw) => Response::parse(&raw).unwrap_or_else(|| {
                panic!(
                    "{what}: malformed response: {}",
                    String::from_utf8_lossy(&raw)
                )
            }),
            Err(error) => panic!("{what}: {error}"),
        }
    }

    /// Reads the response, or `None` when the connection ended without a whole one (the server
    /// died mid-request).
    pub(crate) async fn try_response(self) -> Option<Response> {
        Response::parse(&self.read().await.ok()?)
    }

    async fn read(mut self) -> std::io::Result<Vec<u8>> {
        let mut raw = Vec::new();
        match tokio::time::timeout(STEP_TIMEOUT, self.stream.read_to_end(&mut raw)).await {
            Ok(result) => result.map(|_| raw),
            Err(_) => panic!("{}: no response within {STEP_TIMEOUT:?}", self.what),
        }
    }
}

/// A response as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// Names lower-cased, in the order received.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    fn parse(raw: &[u8]) -> Option<Self> {
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&raw[..split]).ok()?;
        let rest = &raw[split + 4..];
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(':')?;
                Some((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            })
            .collect::<Option<_>>()?;
        let mut response = Self {
            status,
            headers,
            body: Vec::new(),
        };
        response.body = if response
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
        {
            dechunk(rest)?
        } else if let Some(len) = response.header("content-length") {
            rest.get(..len.parse().ok()?)?.to_vec()
        } else {
            rest.to_vec()
        };
        Some(response)
    }

    /// The first value of header `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn is_replay(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("a UTF-8 body")
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("a JSON body ({e}): {}", String::from_utf8_lossy(&self.body))
        })
    }

    /// Asserts a problem document with `status` and `code`; returns it.
    #[track_caller]
    pub(crate) fn assert_problem(&self, status: u16, code: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let doc = self.json();
        assert_eq!(doc["code"], code, "{doc}");
        assert_eq!(doc["status"], status, "{doc}");
        doc
    }

    /// The headers a replay must reproduce: all but `date` (per response) and the replay marker.
    pub(crate) fn replayable_headers(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .filter(|(n, _)| n != "date" && n != "idempotent-replayed")
            .cloned()
            .collect()
    }
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_line = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}
