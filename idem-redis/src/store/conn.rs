//! The connection under a `RedisStore`: one server through a reconnecting `ConnectionManager`,
//! or a Redis Cluster (feature `cluster`), whose connection reconnects and follows the slots.

#[cfg(feature = "cluster")]
use redis::Value;
use redis::aio::ConnectionManager;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};

/// A connection to one server or to a cluster. Cheap to clone: both are handles to a shared,
/// multiplexed connection.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster {
        conn: redis::cluster_async::ClusterConnection,
        /// The nodes given at start-up (`host`, `port`), asked for the slot map.
        seeds: std::sync::Arc<[(String, u16)]>,
    },
}

/// Where a command that is not about one key goes: the only server, or a cluster node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    Only,
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Address {
        host: String,
        port: u16,
    },
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Only => f.write_str("the server"),
            Self::Address { host, port } => write!(f, "node {host}:{port}"),
        }
    }
}

impl Conn {
    /// Runs a script (EVALSHA, loading it first when the server does not know it).
    pub(super) async fn invoke<T: FromRedisValue>(
        &self,
        script: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        match self {
            Self::Single(conn) => script.invoke_async(&mut conn.clone()).await,
            #[cfg(feature = "cluster")]
            Self::Cluster { conn, .. } => script.invoke_async(&mut conn.clone()).await,
        }
    }

    /// Runs `cmd`, a command about one key, where that key lives.
    pub(super) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Self::Single(conn) => cmd.query_async(&mut conn.clone()).await,
            #[cfg(feature = "cluster")]
            Self::Cluster { conn, .. } => cmd.query_async(&mut conn.clone()).await,
        }
    }

    /// The nodes holding records: the server, or every primary of the cluster.
    pub(super) async fn nodes(&self) -> RedisResult<Vec<Node>> {
        match self {
            Self::Single(_) => Ok(vec![Node::Only]),
            #[cfg(feature = "cluster")]
            Self::Cluster { seeds, .. } => {
                // A node may not know its own address (a node that never met another one):
                // then `CLUSTER SLOTS` leaves it empty, meaning "the node you asked". So ask
                // the seeds by address, the first that answers.
                let mut last = None;
                for (host, port) in seeds.iter() {
                    let node = Node::Address {
                        host: host.clone(),
                        port: *port,
                    };
                    let mut cmd = redis::cmd("CLUSTER");
                    cmd.arg("SLOTS");
                    match self.on::<Value>(&node, cmd).await {
                        Ok(slots) => return Ok(primaries(slots, host)),
                        Err(error) => last = Some(error),
                    }
                }
                Err(last
                    .unwrap_or_else(|| (redis::ErrorKind::Client, "no cluster node to ask").into()))
            }
        }
    }

    /// Runs `cmd` on `node`.
    pub(super) async fn on<T: FromRedisValue>(&self, node: &Node, cmd: Cmd) -> RedisResult<T> {
        match (self, node) {
            (Self::Single(conn), _) => cmd.query_async(&mut conn.clone()).await,
            #[cfg(feature = "cluster")]
            (Self::Cluster { conn, .. }, node) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let route = match node {
                    Node::Address { host, port } => SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    },
                    Node::Only => SingleNodeRoutingInfo::Random,
                };
                let value = conn
                    .clone()
                    .route_command(cmd, RoutingInfo::SingleNode(route))
                    .await?;
                Ok(redis::from_redis_value(value)?)
            }
        }
    }
}

/// The primaries in a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id..], replicas..]..]`,
/// from the node at `answering` (the host of a node that does not know its own, see above).
/// Primaries whose address is unknown (`?`) are left out.
#[cfg(feature = "cluster")]
fn primaries(slots: Value, answering: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    let Value::Array(ranges) = slots else {
        return nodes;
    };
    for range in ranges {
        let Value::Array(range) = range else { continue };
        let Some(Value::Array(primary)) = range.get(2) else {
            continue;
        };
        let host = match primary.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            Some(Value::Nil) => String::new(),
            _ => continue,
        };
        let host = match host.as_str() {
            "?" => continue,
            "" => answering.to_owned(),
            _ => host,
        };
        let Some(Value::Int(port)) = primary.get(1) else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        let node = Node::Address { host, port };
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    nodes
}

#[cfg(all(test, feature = "cluster"))]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn primaries_are_read_once_each_from_cluster_slots() {
        let node = |host: &str, port| Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]);
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8000),
                node("10.0.0.1", 7000),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(8001),
                Value::Int(16383),
                node("10.0.0.3", 7002),
            ]),
            Value::Array(vec![Value::Int(1), Value::Int(2), node("10.0.0.1", 7000)]),
            Value::Array(vec![Value::Int(3), Value::Int(4), node("", 7003)]),
            Value::Array(vec![Value::Int(5), Value::Int(6), node("?", 7004)]),
            // Over RESP3 a host may come as a status string, and an unknown one as null.
            Value::Array(vec![
                Value::Int(7),
                Value::Int(8),
                Value::Array(vec![
                    Value::SimpleString("10.0.0.4".into()),
                    Value::Int(7005),
                ]),
            ]),
            Value::Array(vec![
                Value::Int(9),
                Value::Int(10),
                Value::Array(vec![Value::Nil, Value::Int(7006)]),
            ]),
        ]);
        let addr = |host: &str, port| Node::Address {
            host: host.into(),
            port,
        };
        assert_eq!(
            primaries(slots, "10.0.0.9"),
            vec![
                addr("10.0.0.1", 7000),
                addr("10.0.0.3", 7002),
                addr("10.0.0.9", 7003),
                addr("10.0.0.4", 7005),
                addr("10.0.0.9", 7006),
            ]
        );
        assert!(primaries(Value::Nil, "10.0.0.9").is_empty());
    }
}
