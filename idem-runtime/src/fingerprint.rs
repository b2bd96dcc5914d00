//! Request fingerprints: what makes a retry "the same request".

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;

use http::{HeaderValue, Method, Uri};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

/// SHA-256 over the method, the path and query, and the body.
///
/// JSON bodies (`application/json` or any `+json` media type) are canonicalised first: object keys
/// are sorted and insignificant whitespace dropped, so `{"a":1, "b":2}` and `{"b":2,"a":1}` are the
/// same request. Any other body is hashed byte for byte.
///
/// ```
/// use http::{HeaderValue, Method, Uri};
/// use idem_runtime::Fingerprint;
///
/// let json = HeaderValue::from_static("application/json");
/// let uri = Uri::from_static("/v1/charges");
/// let a = Fingerprint::of_request(&Method::POST, &uri, Some(&json), br#"{"amount":1,"currency":"usd"}"#);
/// let b = Fingerprint::of_request(&Method::POST, &uri, Some(&json), b"{ \"currency\": \"usd\", \"amount\": 1 }");
/// assert_eq!(a, b);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Fingerprints one request.
    pub fn of_request(
        method: &Method,
        uri: &Uri,
        content_type: Option<&HeaderValue>,
        body: &[u8],
    ) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"idem.fingerprint.v1\0");
        hasher.update(method.as_str().as_bytes());
        hasher.update(b"\0");
        let path_and_query = uri.path_and_query().map_or("/", |pq| pq.as_str());
        hasher.update(path_and_query.as_bytes());
        hasher.update(b"\0");
        let canonical = is_json(content_type)
            .then(|| serde_json::from_slice::<Canon<'_>>(body).ok())
            .flatten();
        match canonical {
            Some(value) => {
                hasher.update(b"json\0");
                // One update over a buffer: SHA-256 is fed whole blocks instead of a call per
                // token. The bytes, and so the digest, are exactly those of the streaming form.
                let mut buf = Vec::with_capacity(body.len());
                write_canonical(&mut buf, &value);
                hasher.update(&buf);
            }
            None => {
                hasher.update(b"raw\0");
                hasher.update(body);
            }
        }
        Self(hasher.finalize().into())
    }

    /// Builds a fingerprint from its 32 raw bytes (as read back from a store).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", crate::key::hex(&self.0[..8]))
    }
}

fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(ct) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(method: Method, uri: &'static str, ct: Option<&'static str>, body: &[u8]) -> Fingerprint {
        let ct = ct.map(HeaderValue::from_static);
        Fingerprint::of_request(&method, &Uri::from_static(uri), ct.as_ref(), body)
    }

    const JSON: Option<&str> = Some("application/json");

    #[test]
    fn json_key_order_and_whitespace_do_not_matter() {
        let a = fp(
            Method::POST,
            "/c",
            JSON,
            br#"{"a":1,"b":{"y":[1,2],"x":null}}"#,
        );
        let b = fp(
            Method::POST,
            "/c",
            JSON,
            b" { \"b\" : { \"x\":null, \"y\":[ 1, 2 ] }, \"a\":1 }\n",
        );
        assert_eq!(a, b);
    }

    #[test]
    fn json_values_and_array_order_matter() {
        let a = fp(Method::POST, "/c", JSON, br#"{"a":[1,2]}"#);
        assert_ne!(a, fp(Method::POST, "/c", JSON, br#"{"a":[2,1]}"#));
        assert_ne!(a, fp(Method::POST, "/c", JSON, br#"{"a":[1,3]}"#));
        assert_ne!(a, fp(Method::POST, "/c", JSON, br#"{"a":"[1,2]"}"#));
    }

    #[test]
    fn method_path_and_query_matter() {
        let a = fp(Method::POST, "/c?x=1", None, b"body");
        assert_ne!(a, fp(Method::PUT, "/c?x=1", None, b"body"));
        assert_ne!(a, fp(Method::POST, "/c?x=2", None, b"body"));
        assert_ne!(a, fp(Method::POST, "/d?x=1", None, b"body"));
        assert_eq!(a, fp(Method::POST, "/c?x=1", None, b"body"));
    }

    #[test]
    fn non_json_bodies_are_hashed_raw() {
        let a = fp(Method::POST, "/c", Some("text/plain"), br#"{"a":1,"b":2}"#);
        let b = fp(Method::POST, "/c", Some("text/plain"), br#"{"b":2,"a":1}"#);
        assert_ne!(a, b);
    }

    #[test]
    fn json_media_types_are_recognised() {
        assert!(is_json(Some(&HeaderValue::from_static("application/json"))));
        assert!(is_json(Some(&HeaderValue::from_static(
            "Application/JSON; charset=utf-8"
        ))));
        assert!(is_json(Some(&HeaderValue::from_static(
            "application/merge-patch+json"
        ))));
        assert!(!is_json(Some(&HeaderValue::from_static("text/json5"))));
        assert!(!is_json(Some(&HeaderValue::from_static(
            "application/jsonx"
        ))));
        assert!(!is_json(None));
    }

    #[test]
    fn invalid_json_falls_back_to_raw_bytes() {
        let a = fp(Method::POST, "/c", JSON, b"{not json");
        assert_eq!(a, fp(Method::POST, "/c", JSON, b"{not json"));
        assert_ne!(a, fp(Method::POST, "/c", JSON, b"{not json "));
    }

    #[test]
    fn strings_are_escaped_canonically() {
        // "\u0041" and "A" are the same JSON string.
        let a = fp(Method::POST, "/c", JSON, br#"{"k":"\u0041"}"#);
        assert_eq!(a, fp(Method::POST, "/c", JSON, br#"{"k":"A"}"#));
    }

    #[test]
    fn digests_are_stable_across_releases() {
        // Pinned from the first release's implementation: records in flight during a deploy
        // must keep matching their retries.
        let hex = |fp: Fingerprint| -> String { crate::key::hex(fp.as_bytes()) };
        assert_eq!(
            hex(fp(
                Method::POST,
                "/v1/charges",
                JSON,
                br#"{"amount":1,"currency":"usd"}"#
            )),
            "78c8fdd4047736fa0661ac7c3c036424b3268f2911a4306f8198bc2a4d8053c4"
        );
        // Nested objects, repeated keys (the last wins), escapes in keys and strings.
        assert_eq!(
            hex(fp(
                Method::POST,
                "/v1/charges",
                JSON,
                br#"{"b":[1,2.5,-3e10,null,true,"\u0041\n\"q\""],"a":{"y":1,"x":2,"y":3},"ab":1,"a\u0062":2}"#
            )),
            "ba6c3ac37295173177a63c23fa38898f213cd2f3c6867977b4e0791645c71164"
        );
    }
}
