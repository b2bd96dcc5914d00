//! Request bodies: JSON orders of an exact size, shaped like a real API payload (nested objects,
//! arrays, strings and numbers), so canonicalisation has real work to do.

use bytes::Bytes;

/// The body sizes every benchmark runs at, with their labels.
pub const SIZES: [(&str, usize); 4] = [
    ("100B", 100),
    ("1KB", 1024),
    ("10KB", 10 * 1024),
    ("1MB", 1024 * 1024),
];

/// A JSON object of exactly `len` bytes (at least 64):
/// `{"amount":..,"currency":"usd","customer":"..","items":[{..},..],"memo":"xx.."}`.
///
/// ```
/// let body = idem_bench::body::json(1024);
/// assert_eq!(body.len(), 1024);
/// let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
/// assert!(value["items"].is_array());
/// ```
pub fn json(len: usize) -> Bytes {
    let len = len.max(64);
    let head = r#"{"amount":4200,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","items":["#;
    let tail_fixed = r#"],"memo":""}"#.len();
    let mut out = String::with_capacity(len);
    out.push_str(head);
    let mut i = 0u32;
    loop {
        let item = format!(
            r#"{}{{"sku":"sku_{i:05}","qty":{},"unit_amount":{},"tax":{{"rate":0.2,"included":false}}}}"#,
            if i == 0 { "" } else { "," },
            i % 7 + 1,
            199 + i * 13 % 1000,
        );
        if out.len() + item.len() + tail_fixed > len {
            break;
        }
        out.push_str(&item);
        i += 1;
    }
    out.push_str(r#"],"memo":""#);
    let pad = len.saturating_sub(out.len() + 2);
    out.extend(std::iter::repeat_n('x', pad));
    out.push_str(r#""}"#);
    debug_assert_eq!(out.len(), len);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_exact_size_and_are_json() {
        for (_, len) in SIZES {
            let body = json(len);
            assert_eq!(body.len(), len);
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(value["currency"], "usd");
        }
    }
}
