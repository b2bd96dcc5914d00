//! The store host: a real `MemoryStore` behind a tiny request/response protocol over simulated
//! TCP, and `SimStore`, the app hosts' `Store` that speaks it. Partitions and lost replies between
//! an app and its store are therefore real network faults, and the store's state lives on its own
//! host, so it survives app crashes.
//!
//! Model, not engine code: the ledger (atomic mode's business effect, committed in the same
//! critical section as the completion that carries it), the ownership log, and the planted bugs.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, MemoryStore, Store};
use idem_runtime::{StoreError, StoredResponse};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};

use super::trace::{Event, Trace};

pub(crate) const STORE_PORT: u16 = 7000;

/// A bug planted in the store host, to show the simulation catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bug {
    /// Fenced writes ignore the owner's token: a displaced owner writes as the current one.
    NoFencing,
    /// A lapsed in-flight record is taken over by any request, whatever its fingerprint.
    TakeoverIgnoresFingerprint,
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Claim {
        key: [u8; 32],
        fingerprint: [u8; 32],
        token: i64,
        now: i64,
        lease_until: i64,
        expires_at: i64,
        tenant: u64,
    },
    Complete {
        key: [u8; 32],
        token: i64,
        payload: Vec<u8>,
        status: Option<u16>,
        completed_at: i64,
        expires_at: i64,
    },
    Release {
        key: [u8; 32],
        token: i64,
    },
    Renew {
        key: [u8; 32],
        token: i64,
        lease_until: i64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Acquired {
        took_over: bool,
    },
    InFlight {
        fingerprint: [u8; 32],
        lease_until: i64,
    },
    Completed {
        fingerprint: [u8; 32],
        payload: Vec<u8>,
        completed_at: Option<i64>,
    },
    Fence(bool),
    Failed(String),
}

/// What the store host holds: the real store, and the model around it.
pub(crate) struct StoreState {
    memory: MemoryStore,
    bug: Option<Bug>,
    /// Who owns each record as the store's answers say: (token, fingerprint), shadowing the
    /// memory store so a planted bug can act as the owner.
    owners: Mutex<BTreeMap<RecordKey, (i64, [u8; 32])>>,
    trace: Trace,
}

impl StoreState {
    pub(crate) fn new(trace: Trace, bug: Option<Bug>) -> Arc<Self> {
        Arc::new(Self {
            memory: MemoryStore::new().tenant_share(1.0),
            bug,
            owners: Mutex::default(),
            trace,
        })
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, BTreeMap<RecordKey, (i64, [u8; 32])>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token a fenced write acts with: the caller's, or (planted bug) the current owner's.
    fn acting(&self, key: &RecordKey, token: i64) -> i64 {
        match (self.bug, self.owners().get(key)) {
            (Some(Bug::NoFencing), Some((owner, _))) => *owner,
            _ => token,
        }
    }

    async fn handle(&self, from: &str, request: Request) -> Reply {
        match self.apply(from, request).await {
            Ok(reply) => reply,
            Err(error) => Reply::Failed(error.to_string()),
        }
    }

    async fn apply(&self, from: &str, request: Request) -> Result<Reply, StoreError> {
        let store = &self.memory;
        Ok(match request {
            Request::Claim {
                key,
                fingerprint,
                token,
                now,
                lease_until,
                expires_at,
                tenant,
            } => {
                let key = RecordKey::from_bytes(key);
                let fp = Fingerprint::from_bytes(fingerprint);
                let claim = ClaimRequest {
                    key: &key,
                    fingerprint: &fp,
                    token: LeaseToken::from_i64(token),
                    now: Timestamp::from_millis(now),
                    lease_until: Timestamp::from_millis(lease_until),
                    expires_at: Timestamp::from_millis(expires_at),
                    operation: "sim",
                    scope: "global",
                    scope_value: "",
                    tenant,
                };
                let mut result = store.claim(claim).await?;
                let owner = self.owners().get(&key).map(|(token, _)| *token);
                if let (Some(Bug::TakeoverIgnoresFingerprint), Claim::InFlight { lease_until, .. }) =
                    (self.bug, &result)
                    && lease_until.as_millis() <= now
                    && let Some(owner) = owner
                {
                    // The planted bug: evict the lapsed owner whatever the fingerprint.
                    self.trace.log(Event::Fault(
                        "planted bug: takeover by another request".into(),
                    ));
                    store.release(&key, LeaseToken::from_i64(owner)).await?;
                    result = match store.claim(claim).await? {
                        Claim::Acquired { .. } => Claim::Acquired { took_over: true },
                        other => other,
                    };
                }
                let reply = match result {
                    Claim::Acquired { took_over } => {
                        let previous = self.owners().insert(key, (token, fingerprint));
                        self.trace.log(Event::Acquired {
                            host: from.to_owned(),
                            key,
                            token,
                            fingerprint: u64::from_be_bytes(
                                fingerprint[..8].try_into().expect("8 bytes"),
                            ),
                            took_over,
                            previous: previous.filter(|_| took_over).map(|(t, _)| t),
                        });
                        Reply::Acquired { took_over }
                    }
                    Claim::InFlight {
                        fingerprint,
                        lease_until,
                    } => Reply::InFlight {
                        fingerprint: *fingerprint.as_bytes(),
                        lease_until: lease_until.as_millis(),
                    },
                    Claim::Completed {
                        fingerprint,
                        payload,
                        completed_at,
                    } => Reply::Completed {
                        fingerprint: *fingerprint.as_bytes(),
                        payload: payload.to_vec(),
                        completed_at: completed_at.map(Timestamp::as_millis),
                    },
                    other => Reply::Failed(format!("unknown claim outcome {other:?}")),
                };
                self.trace.log(Event::StoreCall {
                    host: from.to_owned(),
                    op: "claim",
                    key,
                    token,
                    outcome: outcome_of(&reply),
                });
                reply
            }
            Request::Complete {
                key,
                token,
                payload,
                status,
                completed_at,
                expires_at,
            } => {
                let key = RecordKey::from_bytes(key);
                let acting = LeaseToken::from_i64(self.acting(&key, token));
                let completion = Completion {
                    payload: &payload,
                    status,
                    completed_at: Timestamp::from_millis(completed_at),
                    expires_at: Timestamp::from_millis(expires_at),
                };
                // The completion and the ledger entry it carries land together: nothing awaits
                // between them on this single-threaded host.
                let fence = store.complete(&key, acting, completion).await?;
                if fence == Fence::Held {
                    self.owners().remove(&key);
                    self.trace.log(Event::Committed {
                        host: from.to_owned(),
                        key,
                        token,
                        exec: exec_of(&payload),
                    });
                }
                self.fenced_reply(from, "complete", key, token, fence)
            }
            Request::Release { key, token } => {
                let key = RecordKey::from_bytes(key);
                let acting = LeaseToken::from_i64(self.acting(&key, token));
                let fence = store.release(&key, acting).await?;
                if fence == Fence::Held {
                    self.owners().remove(&key);
                }
                self.fenced_reply(from, "release", key, token, fence)
            }
            Request::Renew {
                key,
                token,
                lease_until,
            } => {
                let key = RecordKey::from_bytes(key);
                let acting = LeaseToken::from_i64(self.acting(&key, token));
                let until = Timestamp::from_millis(lease_until);
                let fence = store.renew(&key, acting, until).await?;
                self.fenced_reply(from, "renew", key, token, fence)
            }
        })
    }

    fn fenced_reply(
        &self,
        from: &str,
        op: &'static str,
        key: RecordKey,
        token: i64,
        fence: Fence,
    ) -> Reply {
        let reply = Reply::Fence(fence == Fence::Held);
        self.trace.log(Event::StoreCall {
            host: from.to_owned(),
            op,
            key,
            token,
            outcome: outcome_of(&reply),
        });
        reply
    }
}

fn outcome_of(reply: &Reply) -> String {
    match reply {
        Reply::Acquired { took_over: false } => "acquired".into(),
        Reply::Acquired { took_over: true } => "took over".into(),
        Reply::InFlight { .. } => "in flight".into(),
        Reply::Completed { .. } => "completed".into(),
        Reply::Fence(true) => "held".into(),
        Reply::Fence(false) => "lost".into(),
        Reply::Failed(error) => format!("failed: {error}"),
    }
}

/// The execution id in a stored response's body (`"exec"`), if any.
fn exec_of(payload: &[u8]) -> Option<String> {
    let stored = StoredResponse::decode(payload).ok()?;
    let body: serde_json::Value = serde_json::from_slice(stored.body()).ok()?;
    body["exec"].as_str().map(str::to_owned)
}

/// The store host's software: serves every connection, one request per connection.
pub(crate) async fn serve(state: Arc<StoreState>) -> turmoil::Result {
    let listener = TcpListener::bind(("0.0.0.0", STORE_PORT)).await?;
    loop {
        let (mut stream, peer) = listener.accept().await?;
        let from = turmoil::reverse_lookup(peer.ip()).unwrap_or_else(|| peer.ip().to_string());
        let state = state.clone();
        tokio::spawn(async move {
            let Ok(request) = read_frame(&mut stream).await else {
                return;
            };
            let Ok(request) = serde_json::from_slice::<Request>(&request) else {
                return;
            };
            let reply = state.handle(&from, request).await;
            let bytes = serde_json::to_vec(&reply).expect("replies serialise");
            let _ = write_frame(&mut stream, &bytes).await;
        });
    }
}

async fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let len = stream.read_u32().await? as usize;
    if len > 16 << 20 {
        return Err(io::Error::other("frame too large"));
    }
    let mut buf = vec![0; len];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}

async fn write_frame(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    stream.write_u32(bytes.len() as u32).await?;
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// The app hosts' store: every call is one connection to the store host. The engine's
/// `store_timeout` bounds each call, as it bounds a real store's.
#[derive(Clone, Debug, Default)]
pub(crate) struct SimStore;

impl SimStore {
    async fn call(&self, request: &Request) -> Result<Reply, StoreError> {
        let request = serde_json::to_vec(request).expect("requests serialise");
        let reply = async {
            let mut stream = TcpStream::connect(("store", STORE_PORT)).await?;
            write_frame(&mut stream, &request).await?;
            read_frame(&mut stream).await
        }
        .await
        .map_err(StoreError::unavailable)?;
        match serde_json::from_slice(&reply) {
            Ok(Reply::Failed(error)) => Err(StoreError::unavailable(io::Error::other(error))),
            Ok(reply) => Ok(reply),
            Err(error) => Err(StoreError::unavailable(error)),
        }
    }

    async fn fenced(&self, request: Request) -> Result<Fence, StoreError> {
        match self.call(&request).await? {
            Reply::Fence(true) => Ok(Fence::Held),
            Reply::Fence(false) => Ok(Fence::Lost),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(reply: &Reply) -> StoreError {
    StoreError::unavailable(io::Error::other(format!("unexpected reply {reply:?}")))
}

impl Store for SimStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let request = Request::Claim {
            key: *req.key.as_bytes(),
            fingerprint: *req.fingerprint.as_bytes(),
            token: req.token.as_i64(),
            now: req.now.as_millis(),
            lease_until: req.lease_until.as_millis(),
            expires_at: req.expires_at.as_millis(),
            tenant: req.tenant,
        };
        Ok(match self.call(&request).await? {
            Reply::Acquired { took_over } => Claim::Acquired { took_over },
            Reply::InFlight {
                fingerprint,
                lease_until,
            } => Claim::InFlight {
                fingerprint: Fingerprint::from_bytes(fingerprint),
                lease_until: Timestamp::from_millis(lease_until),
            },
            Reply::Completed {
                fingerprint,
                payload,
                completed_at,
            } => Claim::Completed {
                fingerprint: Fingerprint::from_bytes(fingerprint),
                payload: Bytes::from(payload),
                completed_at: completed_at.map(Timestamp::from_millis),
            },
            other => return Err(unexpected(&other)),
        })
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let exec = exec_of(completion.payload).unwrap_or_default();
        super::app::note_completion_started(&exec);
        let fence = self
            .fenced(Request::Complete {
                key: *key.as_bytes(),
                token: token.as_i64(),
                payload: completion.payload.to_vec(),
                status: completion.status,
                completed_at: completion.completed_at.as_millis(),
                expires_at: completion.expires_at.as_millis(),
            })
            .await;
        // Tell the request whose execution this is how it went: the atomic model answers only
        // once its completion, which carries the effect, has landed.
        super::app::note_completion(&exec, &fence);
        fence
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        self.fenced(Request::Release {
            key: *key.as_bytes(),
            token: token.as_i64(),
        })
        .await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        self.fenced(Request::Renew {
            key: *key.as_bytes(),
            token: token.as_i64(),
            lease_until: lease_until.as_millis(),
        })
        .await
    }

    async fn purge_expired(&self, _now: Timestamp, _limit: u32) -> Result<u64, StoreError> {
        // Records outlive the simulation (TTL 24 h): nothing to purge, no sweeper runs.
        Ok(0)
    }
}
