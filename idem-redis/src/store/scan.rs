//! Walking a store's records: `SCAN` over the keys of its prefix on every node (the server, or
//! each primary of a cluster), keeping the keys named exactly like a record and returning each
//! record key once. A walk costs a pass over the whole keyspace of every node: `SCAN MATCH`
//! filters what it returns, not what it visits.

use std::collections::HashSet;

use super::RedisStore;
use super::conn::Node;
use idem_core::error::StoreError;
use idem_core::key::{RecordKey, unhex};

/// The `COUNT` hint of each `SCAN`: how many keys Redis visits per call, about.
const COUNT: u32 = 1000;

/// The keys of a store's records, one `SCAN` batch at a time.
pub(super) struct Keys<'s> {
    store: &'s RedisStore,
    pattern: String,
    /// The nodes still to scan; the last one is being scanned.
    nodes: Vec<Node>,
    cursor: u64,
    /// Every key returned so far: `SCAN` may return a key twice (while Redis grows or shrinks its
    /// table, or a cluster moves a slot), and a listing or a count must see it once.
    seen: HashSet<RecordKey>,
}

impl<'s> Keys<'s> {
    /// A walk over `store`'s records, on the nodes the store finds now.
    pub(super) async fn new(store: &'s RedisStore) -> Result<Self, StoreError> {
        let mut nodes = store.within(store.conn.nodes()).await?;
        nodes.reverse();
        Ok(Self {
            store,
            pattern: pattern(&store.prefix),
            nodes,
            cursor: 0,
            seen: HashSet::new(),
        })
    }

    /// The next batch of record keys (possibly none), or `None` once every node is scanned.
    pub(super) async fn next(&mut self) -> Result<Option<Vec<RecordKey>>, StoreError> {
        let Some(node) = self.nodes.last() else {
            return Ok(None);
        };
        let mut scan = redis::cmd("SCAN");
        scan.arg(self.cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(COUNT);
        let (next, names): (u64, Vec<Vec<u8>>) =
            self.store.within(self.store.conn.on(node, scan)).await?;
        if next == 0 {
            // This node is done; the next one starts at cursor 0.
            self.nodes.pop();
        }
        self.cursor = next;
        let prefix = self.store.prefix.as_bytes();
        Ok(Some(
            names
                .iter()
                .filter_map(|name| record_key(prefix, name))
                .filter(|key| self.seen.insert(*key))
                .collect(),
        ))
    }
}

/// The `SCAN MATCH` pattern of the records under `prefix`: `<prefix>{*`, with the glob
/// characters of the prefix (`* ? [ ] \`) escaped so they match only themselves.
pub(super) fn pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("{*");
    pattern
}

/// The record key a Redis key names, if it is named exactly as the store names records:
/// `<prefix>{<64 lower-case hex digits>}`. Another prefix's keys that the pattern also matches
/// (`idem:{a}:{...}` under `idem:`) are not this store's records, and are left out.
fn record_key(prefix: &[u8], name: &[u8]) -> Option<RecordKey> {
    let digits = name
        .strip_prefix(prefix)?
        .strip_prefix(b"{")?
        .strip_suffix(b"}")?;
    if digits.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    unhex(digits).map(RecordKey::from_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_of_the_prefix_match_only_themselves() {
        assert_eq!(pattern("idem:"), "idem:{*");
        assert_eq!(pattern(r"t[1]*?\:"), r"t\[1\]\*\?\\:{*");
    }

    #[test]
    fn only_keys_named_like_a_record_are_records() {
        let key = RecordKey::from_bytes([0xab; 32]);
        let named = |s: String| record_key(b"idem:", s.as_bytes());
        assert_eq!(named(format!("idem:{{{}}}", key.to_hex())), Some(key));
        for other in [
            format!("idem:{{{}}}", key.to_hex().to_uppercase()),
            format!("idem:{{{}}}:x", key.to_hex()),
            format!("idem:{{a}}:{{{}}}", key.to_hex()),
            format!("idem:{{{}}}", &key.to_hex()[2..]),
            format!("idem:{}", key.to_hex()),
            format!("idex:{{{}}}", key.to_hex()),
            "idem:{}".to_owned(),
        ] {
            assert_eq!(named(other.clone()), None, "{other}");
        }
    }
}
