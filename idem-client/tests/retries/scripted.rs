//! A scripted loopback server: it answers each request with the next scripted reply (or
//! closes the connection, or never answers) and records what it received.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Clone)]
pub(crate) enum Reply {
    /// Answers with this status, extra headers and body.
    Answer(u16, &'static [(&'static str, &'static str)], &'static str),
    /// Answers 200 with a body sent in these chunks, and no length ahead of it.
    Chunked(&'static [&'static str]),
    /// Closes the connection without answering.
    Close,
    /// Holds the connection open without answering.
    Hang,
}

/// A request as the server received it: method and lower-cased headers.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) method: String,
    pub(crate) headers: Vec<(String, String)>,
}

impl Received {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) struct Scripted {
    pub(crate) url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Scripted {
    /// Serves `script` in order; requests past its end get 500.
    pub(crate) async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/op", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        tokio::spawn(async move {
            let mut script = script.into_iter();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let Some(request) = read_request(&mut stream).await else {
                    continue;
                };
                log.lock().unwrap().push(request);
                match script
                    .next()
                    .unwrap_or(Reply::Answer(500, &[], "script ended"))
                {
                    Reply::Answer(status, headers, body) => {
                        let mut head = format!(
                            "HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Length: {}\r\n",
                            body.len()
                        );
                        for (name, value) in headers {
                            head.push_str(&format!("{name}: {value}\r\n"));
                        }
                        head.push_str("\r\n");
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.write_all(body.as_bytes()).await;
                    }
                    Reply::Chunked(chunks) => {
                        let mut out = String::from(
                            "HTTP/1.1 200 X\r\nConnection: close\r\n\
                             Transfer-Encoding: chunked\r\n\r\n",
                        );
                        for chunk in chunks {
                            out.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
                        }
                        out.push_str("0\r\n\r\n");
                        let _ = stream.write_all(out.as_bytes()).await;
                    }
                    Reply::Close => drop(stream),
                    Reply::Hang => {
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            drop(stream);
                        });
                    }
                }
            }
        });
        Self { url, received }
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(raw[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let method = lines.next()?.split(' ').next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while raw.len() < head_end + 4 + length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    Some(Received { method, headers })
}
