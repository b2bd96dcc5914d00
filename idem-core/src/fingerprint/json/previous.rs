//! The previous release's canonicaliser, kept as the reference the one-pass writer is checked
//! against: it parses into a borrowed tree through serde and writes it back sorted. Its output
//! fixed the digests of records already stored.

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// The canonical form as the previous release computed it.
pub(super) fn canonical_json(input: &[u8]) -> Option<Vec<u8>> {
    let value = serde_json::from_slice::<Canon<'_>>(input).ok()?;
    let mut buf = Vec::with_capacity(input.len());
    write_canonical(&mut buf, &value);
    Some(buf)
}

/// A JSON document as the fingerprint needs it: strings borrowed from the body where they have
/// no escapes, objects as vectors sorted by key. Parsing into this instead of a
/// `serde_json::Value` skips a `String` per key and a B-tree per object, and gives the same
/// canonical bytes: numbers are serde_json's `Number` (as `Value` holds them), and a key repeated
/// in one object keeps its last value (as `Value`'s map does).
enum Canon<'a> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(Cow<'a, str>),
    Array(Vec<Canon<'a>>),
    Object(Vec<(Cow<'a, str>, Canon<'a>)>),
}

impl<'de> Deserialize<'de> for Canon<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CanonVisitor)
    }
}

struct CanonVisitor;

impl<'de> Visitor<'de> for CanonVisitor {
    type Value = Canon<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Canon<'de>, E> {
        Ok(Canon::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Canon<'de>, E> {
        Ok(Canon::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Canon<'de>, E> {
        Ok(Canon::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Canon<'de>, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Canon::Null, Canon::Number))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Canon<'de>, E> {
        Ok(Canon::String(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Canon<'de>, E> {
        Ok(Canon::String(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Canon<'de>, E> {
        Ok(Canon::String(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Canon<'de>, E> {
        Ok(Canon::Null)
    }
    fn visit_none<E>(self) -> Result<Canon<'de>, E> {
        Ok(Canon::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Canon<'de>, D::Error> {
        Canon::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Canon<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Canon::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Canon<'de>, A::Error> {
        let mut entries: Vec<(Cow<'de, str>, Canon<'de>)> =
            Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable, so repeated keys stay in document order; the last one wins.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            entries.reverse();
            entries.dedup_by(|later, earlier| later.0 == earlier.0);
            entries.reverse();
        }
        Ok(Canon::Object(entries))
    }
}

/// An object key, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Writes `value` with sorted object keys and no whitespace.
fn write_canonical(out: &mut Vec<u8>, value: &Canon<'_>) {
    match value {
        Canon::Null => out.extend_from_slice(b"null"),
        Canon::Bool(true) => out.extend_from_slice(b"true"),
        Canon::Bool(false) => out.extend_from_slice(b"false"),
        Canon::Number(n) => {
            // `Display`, as `to_string` was, without the intermediate `String`.
            let _ = write!(out, "{n}");
        }
        Canon::String(s) => write_string(out, s),
        Canon::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        Canon::Object(entries) => {
            out.push(b'{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, k);
                out.push(b':');
                write_canonical(out, v);
            }
            out.push(b'}');
        }
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    // Writing a string to a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}
