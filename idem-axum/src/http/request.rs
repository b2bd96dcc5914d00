//! What the HTTP adapters read from a request: the key from its header, the body within its
//! limit, and the fingerprint.

use axum::RequestExt;
use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};
use http_body_util::BodyExt;

use idem_core::error::KeyError;
use idem_core::fingerprint::{Encoding, Fingerprint, Hasher, Version};
use idem_core::key::IdempotencyKey;
use idem_core::rejection::Rejection;

use crate::http::replay::RawDigest;

/// Reads a request's body whole, up to `limit` bytes and axum's `DefaultBodyLimit`, whichever
/// is smaller. A body that `Content-Length` declares larger is refused before any of it is read
/// (no `100 Continue`); one that grows past the limit while read is refused then.
pub(crate) async fn read_body(
    parts: Parts,
    body: Body,
    limit: usize,
) -> Result<(Parts, Bytes), Rejection> {
    if declared_length(&parts.headers).is_some_and(|len| len > limit as u64) {
        return Err(Rejection::PayloadTooLarge);
    }
    let (parts, body) = Request::from_parts(parts, body)
        .with_limited_body()
        .into_parts();
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok((parts, collected.to_bytes())),
        Err(error) if is_length_limit(&*error) => Err(Rejection::PayloadTooLarge),
        Err(error) => {
            tracing::debug!(error = &*error, "could not read request body");
            Err(Rejection::BodyUnreadable)
        }
    }
}

/// The body length the client declared, when it declared one that parses.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Reads the key from `headers`: `Ok(None)` when the header is absent, an error when it is
/// malformed or present more than once.
pub(crate) fn key_from_headers(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<IdempotencyKey>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Duplicate);
    }
    IdempotencyKey::parse(first.as_bytes()).map(Some)
}

/// Fingerprints one HTTP request: SHA-256 over the method, the path and query, and the body.
///
/// JSON bodies (`application/json` or any `+json` media type) are canonicalised first, so
/// `{"a":1, "b":2}` and `{"b":2,"a":1}` are the same request; so are form bodies
/// (`application/x-www-form-urlencoded`: `a=1&b=2` and `b=2&a=1`, with the values of a
/// repeated name kept in order). Any other body is hashed byte for byte.
///
/// ```
/// use http::{HeaderValue, Method, Uri};
/// use idem_runtime::__private::fingerprint_of_request;
///
/// let json = HeaderValue::from_static("application/json");
/// let uri = Uri::from_static("/v1/charges");
/// let a = fingerprint_of_request(&Method::POST, &uri, Some(&json), br#"{"amount":1,"currency":"usd"}"#);
/// let b = fingerprint_of_request(&Method::POST, &uri, Some(&json), b"{ \"currency\": \"usd\", \"amount\": 1 }");
/// assert_eq!(a, b);
/// ```
pub fn fingerprint_of_request(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> Fingerprint {
    fingerprint_of_request_in(method, uri, content_type, body, Version::CURRENT)
}

/// The fingerprint of a request in `version`.
pub(crate) fn fingerprint_of_request_in(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
    version: Version,
) -> Fingerprint {
    let mut hasher = hasher_of_request(method, uri, version);
    hasher.body(body, encoding(content_type));
    hasher.finish()
}

/// A request's fingerprint and the digest of its raw request, for early replay, with the fewest
/// passes over the body: one SHA-256 pass serves both when the body is canonical as written.
pub(crate) fn digests_of_request(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> (Fingerprint, RawDigest) {
    let hasher = hasher_of_request(method, uri, Version::CURRENT);
    let (fingerprint, as_is) = hasher.finish_both(body, encoding(content_type));
    (fingerprint, RawDigest::of(&as_is))
}

/// The fingerprint's hash of a request with its body as written, not canonicalised
/// ([`Hasher::finish_as_is`]): what the raw digest is built on.
pub(crate) fn as_is_of_request(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> Fingerprint {
    hasher_of_request(method, uri, Version::CURRENT).finish_as_is(body, encoding(content_type))
}

/// The digest of a raw request for early replay: one pass of SHA-256 over the body as written.
pub(crate) fn raw_digest_of_request(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> RawDigest {
    RawDigest::of(&as_is_of_request(method, uri, content_type, body))
}

/// What a fresh request computes on a store that reads in process: the fingerprint and the raw
/// digest's 32 bytes ([`digests_of_request`]). For the benchmarks; not part of the stable API.
#[doc(hidden)]
pub fn fresh_digests(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> (Fingerprint, [u8; 32]) {
    let (fingerprint, raw) = digests_of_request(method, uri, content_type, body);
    (fingerprint, *raw.as_bytes())
}

/// What a retry computes before its early replay: the raw digest's 32 bytes alone. For the
/// benchmarks; not part of the stable API.
#[doc(hidden)]
pub fn raw_digest(
    method: &Method,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> [u8; 32] {
    *raw_digest_of_request(method, uri, content_type, body).as_bytes()
}

/// A fingerprint's hasher after the request line: method and path and query.
fn hasher_of_request(method: &Method, uri: &Uri, version: Version) -> Hasher {
    let mut hasher = Hasher::new(b"idem.fingerprint", version);
    hasher.update(method.as_str().as_bytes());
    hasher.update(b"\0");
    let path_and_query = uri.path_and_query().map_or("/", |pq| pq.as_str());
    hasher.update(path_and_query.as_bytes());
    hasher.update(b"\0");
    hasher
}

fn encoding(content_type: Option<&HeaderValue>) -> Encoding {
    let Some(ct) = content_type.and_then(|v| v.to_str().ok()) else {
        return Encoding::Raw;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return Encoding::Raw;
    };
    if !kind.eq_ignore_ascii_case("application") {
        Encoding::Raw
    } else if subtype.eq_ignore_ascii_case("json")
        || subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json")
    {
        Encoding::Json
    } else if subtype.eq_ignore_ascii_case("x-www-form-urlencoded") {
        Encoding::Form
    } else {
        Encoding::Raw
    }
}

#[cfg(test)]
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    encoding(content_type) == Encoding::Json
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    fn fp(method: Method, uri: &'static str, ct: Option<&'static str>, body: &[u8]) -> Fingerprint {
        let ct = ct.map(HeaderValue::from_static);
        fingerprint_of_request(&method, &Uri::from_static(uri), ct.as_ref(), body)
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
        // A suffix with no subtype before it is no media type.
        assert!(!is_json(Some(&HeaderValue::from_static(
            "application/+json"
        ))));
        assert!(!is_json(None));
    }

    #[test]
    fn form_bodies_are_canonicalised() {
        const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
        let a = fp(Method::POST, "/c", FORM, b"amount=2000&currency=usd");
        assert_eq!(a, fp(Method::POST, "/c", FORM, b"currency=usd&amount=2000"));
        assert_ne!(a, fp(Method::POST, "/c", FORM, b"amount=2001&currency=usd"));
        // The same bytes as another media type are another request.
        assert_ne!(
            a,
            fp(
                Method::POST,
                "/c",
                Some("text/plain"),
                b"amount=2000&currency=usd"
            )
        );
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
        let hex = |fp: Fingerprint| -> String { idem_core::key::hex(fp.as_bytes()) };
        let digest = |body: &[u8], version| {
            let json = HeaderValue::from_static("application/json");
            let uri = Uri::from_static("/v1/charges");
            hex(fingerprint_of_request_in(
                &Method::POST,
                &uri,
                Some(&json),
                body,
                version,
            ))
        };
        let simple = br#"{"amount":1,"currency":"usd"}"#;
        // Nested objects, numbers, escapes in keys and strings.
        let nested = br#"{"b":[1,2.5,-3e10,null,true,"\u0041\n\"q\""],"a":{"y":1,"x":2},"ab":1,"a\u0063":2}"#;
        // Version 1, pinned from the first release's implementation: its records keep matching
        // their retries. A repeated key kept its last value.
        let repeated = br#"{"b":[1,2.5,-3e10,null,true,"\u0041\n\"q\""],"a":{"y":1,"x":2,"y":3},"ab":1,"a\u0062":2}"#;
        assert_eq!(
            digest(simple, Version::V1),
            "78c8fdd4047736fa0661ac7c3c036424b3268f2911a4306f8198bc2a4d8053c4"
        );
        assert_eq!(
            digest(repeated, Version::V1),
            "ba6c3ac37295173177a63c23fa38898f213cd2f3c6867977b4e0791645c71164"
        );
        // Version 2, pinned (and recomputed by hand from the documented parts): records written
        // by this release must keep matching too.
        assert_eq!(
            digest(simple, Version::V2),
            "bdd86944ad72fae1da4a65c249068e7b1c3837b1bf4ae71dba6633d7b75af33e"
        );
        assert_eq!(
            digest(nested, Version::V2),
            "4958c9fbf0f76c9382360b29e3b78c80f4896635074c2649a851a2a4a1d096da"
        );
        assert_eq!(
            hex(fp(Method::POST, "/v1/charges", JSON, simple)),
            digest(simple, Version::CURRENT)
        );
    }

    /// A random JSON value: objects with keys in any order, integers, decimals, escapes.
    fn value(rng: &mut fastrand::Rng, depth: u32) -> serde_json::Value {
        use serde_json::Value;
        let keys = [
            "a",
            "b",
            "amount",
            "amount_total",
            "é",
            "k\"q",
            "x\n",
            "sku",
        ];
        match rng.u8(0..if depth == 0 { 4 } else { 6 }) {
            0 => Value::from(rng.i64(-1000..1000)),
            1 => Value::from(["usd", "a\u{1}b", "\u{e9}t\u{e9}", "sku_00042"][rng.usize(0..4)]),
            2 => Value::Bool(rng.bool()),
            3 => serde_json::from_str(["0.25", "1e3", "-0.0", "12.50"][rng.usize(0..4)]).unwrap(),
            4 => (0..rng.usize(0..4))
                .map(|_| value(rng, depth - 1))
                .collect(),
            _ => (0..rng.usize(0..5))
                .map(|_| {
                    (
                        keys[rng.usize(0..keys.len())].to_owned(),
                        value(rng, depth - 1),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }

    /// A random body: JSON canonical as written or not (members reversed, spaces, pretty),
    /// broken JSON, a form.
    fn body(rng: &mut fastrand::Rng) -> Vec<u8> {
        let doc = value(rng, 3);
        // serde_json's map is sorted: compact output is canonical unless a number is not.
        let compact = serde_json::to_vec(&doc).unwrap();
        match rng.u8(0..6) {
            0 | 1 => compact,
            2 => serde_json::to_vec_pretty(&doc).unwrap(),
            3 => {
                let text = String::from_utf8(compact).unwrap();
                // Another order (`b` before `a`) or whitespace, where the text allows.
                text.replacen(",", " , ", 1).into_bytes()
            }
            4 => {
                let mut broken = compact;
                let at = rng.usize(0..=broken.len());
                broken.insert(at, [b'{', b'"', b',', b' ', 0xff][rng.usize(0..5)]);
                broken
            }
            _ => b"b=2&a=1&amount=4200&items%5B%5D=x".to_vec(),
        }
    }

    /// The fingerprint as documented (and as every release computed it): SHA-256 over the
    /// domain, method, path and query, and the body's canonical form under its tag.
    fn documented(method: &Method, pq: &str, ct: Option<&HeaderValue>, body: &[u8]) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut sha = Sha256::new();
        sha.update(format!("idem.fingerprint.v2\0{method}\0{pq}\0"));
        match (encoding(ct), idem_core::fingerprint::canonical_json(body)) {
            (Encoding::Json, Some(form)) => {
                sha.update(b"json\0");
                sha.update(form);
            }
            (Encoding::Form, _) => {
                sha.update(b"form\0");
                sha.update(idem_core::fingerprint::canonical_form(body));
            }
            _ => {
                sha.update(b"raw\0");
                sha.update(body);
            }
        }
        sha.finalize().into()
    }

    /// The fresh path's one pass gives the fingerprint as documented and the raw digest a retry
    /// computes alone, for every input; and two requests share a raw digest only when every
    /// part the fingerprint reads is equal, and with it the fingerprint.
    #[test]
    fn both_digests_in_one_pass_are_those_computed_apart() {
        let mut rng = fastrand::Rng::with_seed(51);
        let types = [
            None,
            Some(""),
            Some("application/json"),
            Some("application/merge-patch+json"),
            Some("application/x-www-form-urlencoded"),
            Some("text/plain"),
        ];
        let mut seen = std::collections::HashMap::new();
        let mut one_pass = 0;
        for _ in 0..4000 {
            let method = [Method::POST, Method::PUT, Method::PATCH][rng.usize(0..3)].clone();
            let pq = ["/v1/orders", "/v1/orders?x=1", "/"][rng.usize(0..3)];
            let uri = Uri::from_static(pq);
            let ct = types[rng.usize(0..types.len())].map(HeaderValue::from_static);
            let body = body(&mut rng);
            let (fingerprint, raw) = digests_of_request(&method, &uri, ct.as_ref(), &body);
            assert_eq!(
                fingerprint,
                fingerprint_of_request(&method, &uri, ct.as_ref(), &body)
            );
            assert_eq!(
                fingerprint.as_bytes(),
                &documented(&method, pq, ct.as_ref(), &body)
            );
            assert_eq!(
                raw,
                raw_digest_of_request(&method, &uri, ct.as_ref(), &body)
            );
            let as_is = as_is_of_request(&method, &uri, ct.as_ref(), &body);
            one_pass += usize::from(as_is == fingerprint);
            // One raw digest: one method, path and query, encoding and body, so one
            // fingerprint (what early replay rests on).
            let parts = (method, pq, encoding(ct.as_ref()), body, fingerprint);
            let earlier = seen
                .entry(format!("{raw:?}"))
                .or_insert_with(|| parts.clone());
            assert_eq!(*earlier, parts, "one raw digest, two requests");
        }
        // Both branches were taken.
        assert!((500..3500).contains(&one_pass), "{one_pass}");
    }

    fn raw(method: Method, uri: &'static str, ct: Option<&'static str>, body: &[u8]) -> RawDigest {
        let ct = ct.map(HeaderValue::from_static);
        raw_digest_of_request(&method, &Uri::from_static(uri), ct.as_ref(), body)
    }

    #[test]
    fn every_part_of_the_raw_request_the_fingerprint_reads_counts() {
        let json = Some("application/json");
        let a = raw(Method::POST, "/c?x=1", json, b"{\"a\":1}");
        assert_eq!(a, raw(Method::POST, "/c?x=1", json, b"{\"a\":1}"));
        assert_ne!(a, raw(Method::PUT, "/c?x=1", json, b"{\"a\":1}"));
        assert_ne!(a, raw(Method::POST, "/c?x=2", json, b"{\"a\":1}"));
        assert_ne!(a, raw(Method::POST, "/c?x=1", None, b"{\"a\":1}"));
        let form = Some("application/x-www-form-urlencoded");
        assert_ne!(a, raw(Method::POST, "/c?x=1", form, b"{\"a\":1}"));
        assert_ne!(
            raw(Method::POST, "/c", form, b"a=1"),
            raw(Method::POST, "/c", Some("text/plain"), b"a=1")
        );
        // Another serialisation of the same document: same fingerprint, other raw digest.
        assert_ne!(a, raw(Method::POST, "/c?x=1", json, b"{ \"a\": 1 }"));
        // Another JSON media type, or no type against an empty one: the fingerprint reads only
        // the encoding, so the two requests are one, raw or not.
        let fingerprint = |ct: Option<&'static str>, body: &[u8]| {
            let ct = ct.map(HeaderValue::from_static);
            fingerprint_of_request(
                &Method::POST,
                &Uri::from_static("/c?x=1"),
                ct.as_ref(),
                body,
            )
        };
        let patch = Some("application/merge-patch+json");
        assert_eq!(a, raw(Method::POST, "/c?x=1", patch, b"{\"a\":1}"));
        assert_eq!(
            fingerprint(json, b"{\"a\":1}"),
            fingerprint(patch, b"{\"a\":1}")
        );
        assert_eq!(
            raw(Method::POST, "/c?x=1", None, b""),
            raw(Method::POST, "/c?x=1", Some(""), b"")
        );
        assert_eq!(fingerprint(None, b""), fingerprint(Some(""), b""));
    }

    #[test]
    fn duplicate_header_fields_are_rejected() {
        let name = HeaderName::from_static("idempotency-key");
        let mut headers = HeaderMap::new();
        assert_eq!(key_from_headers(&headers, &name), Ok(None));
        headers.append(&name, HeaderValue::from_static("a"));
        assert!(key_from_headers(&headers, &name).unwrap().is_some());
        headers.append(&name, HeaderValue::from_static("a"));
        assert_eq!(key_from_headers(&headers, &name), Err(KeyError::Duplicate));
    }
}
