//! Request fingerprints: what makes a retry "the same request".

use std::fmt;

use http::{HeaderValue, Method, Uri};
use serde_json::Value;
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
            .then(|| serde_json::from_slice::<Value>(body).ok())
            .flatten();
        match canonical {
            Some(value) => {
                hasher.update(b"json\0");
                write_canonical(&mut hasher, &value);
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

/// Writes `value` with sorted object keys and no whitespace straight into the hasher, whatever
/// map type serde_json was built with (`preserve_order` keeps insertion order, so sort here).
fn write_canonical(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Null => hasher.update(b"null"),
        Value::Bool(true) => hasher.update(b"true"),
        Value::Bool(false) => hasher.update(b"false"),
        Value::Number(n) => hasher.update(n.to_string().as_bytes()),
        Value::String(s) => write_string(hasher, s),
        Value::Array(items) => {
            hasher.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_canonical(hasher, item);
            }
            hasher.update(b"]");
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            hasher.update(b"{");
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_string(hasher, k);
                hasher.update(b":");
                write_canonical(hasher, v);
            }
            hasher.update(b"}");
        }
    }
}

fn write_string(hasher: &mut Sha256, s: &str) {
    struct Sink<'a>(&'a mut Sha256);
    impl std::io::Write for Sink<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing a string to an infallible sink cannot fail.
    let _ = serde_json::to_writer(Sink(hasher), s);
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
}
