//! The canonical form of an `application/x-www-form-urlencoded` body, written with the buffers
//! of the thread: no allocation per body once they have grown to the bodies it sees.
//!
//! One pass finds the pairs (`memchr` for the separators and escapes): a name or value with no
//! `+` or `%` is not copied, only noted as a range of the body; one with escapes is decoded
//! into a buffer. Each pair is ranked by its name's first eight bytes, so most comparisons are
//! one of two numbers; pairs already in order by name (what a client sorting its fields sends)
//! are not sorted. The form is then written once, each name and value after its length.

use std::cell::RefCell;
use std::cmp::Ordering;

/// Marks a part decoded into [`Buffers::decoded`] in its end: offsets into a slice never reach
/// `isize::MAX`, so the top bit is free.
const DECODED: usize = 1 << (usize::BITS - 1);

/// A name or a value: `body[start..end]`, or, with [`DECODED`] set in `end`, in the buffer of
/// decoded parts.
#[derive(Clone, Copy)]
struct Part {
    start: usize,
    end: usize,
}

impl Part {
    fn len(self) -> usize {
        (self.end & !DECODED) - self.start
    }

    fn bytes<'a>(self, body: &'a [u8], decoded: &'a [u8]) -> &'a [u8] {
        if self.end & DECODED == 0 {
            &body[self.start..self.end]
        } else {
            &decoded[self.start..self.end & !DECODED]
        }
    }
}

/// One pair of the form.
#[derive(Clone, Copy)]
struct Pair {
    /// The name's first eight bytes, zero-padded, as a big-endian number.
    rank: u64,
    name: Part,
    value: Part,
    /// Its place in the body: pairs with one name keep their order.
    index: usize,
}

/// The buffers a form is written with, kept by each thread for its next form.
#[derive(Default)]
struct Buffers {
    decoded: Vec<u8>,
    pairs: Vec<Pair>,
    out: Vec<u8>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// The largest buffer kept for the next form, in bytes: a thread does not hold the memory of
/// its largest body.
const KEEP: usize = 256 * 1024;

/// Calls `f` with the canonical form of `body` (see
/// [`canonical_form`](super::canonical_form)) and returns what it returns.
pub(super) fn with_canonical<R>(body: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    BUFFERS.with(|buffers| match buffers.try_borrow_mut() {
        Ok(mut buffers) => write(body, &mut buffers, f),
        // Only if `f` itself fingerprinted a form: buffers of its own then.
        Err(_) => write(body, &mut Buffers::default(), f),
    })
}

fn write<R>(body: &[u8], buffers: &mut Buffers, f: impl FnOnce(&[u8]) -> R) -> R {
    let Buffers {
        decoded,
        pairs,
        out,
    } = buffers;
    let in_order = split(body, decoded, pairs);
    if !in_order {
        pairs.sort_unstable_by(|a, b| by_name(a, b, body, decoded).then(a.index.cmp(&b.index)));
    }
    let size: usize = pairs
        .iter()
        .map(|p| 16 + p.name.len() + p.value.len())
        .sum();
    out.reserve(size);
    for pair in pairs.iter() {
        for part in [pair.name, pair.value] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.bytes(body, decoded));
        }
    }
    let result = f(out);
    for buffer in [&mut *decoded, &mut *out] {
        buffer.clear();
        if buffer.capacity() > KEEP {
            *buffer = Vec::new();
        }
    }
    pairs.clear();
    if pairs.capacity() * size_of::<Pair>() > KEEP {
        *pairs = Vec::new();
    }
    result
}

/// Notes the pairs of `body` in `pairs`, decoding escaped parts into `decoded`: whether they
/// came in order by name.
fn split(body: &[u8], decoded: &mut Vec<u8>, pairs: &mut Vec<Pair>) -> bool {
    let mut in_order = true;
    let mut start = 0;
    while start <= body.len() {
        let end = memchr::memchr(b'&', &body[start..]).map_or(body.len(), |at| start + at);
        let segment = &body[start..end];
        if !segment.is_empty() {
            let (name, value) = match memchr::memchr(b'=', segment) {
                Some(at) => (start..start + at, start + at + 1..end),
                None => (start..end, end..end),
            };
            let name = decode(body, name, decoded);
            let value = decode(body, value, decoded);
            let bytes = name.bytes(body, decoded);
            let pair = Pair {
                rank: rank(bytes),
                name,
                value,
                index: pairs.len(),
            };
            if let Some(last) = pairs.last() {
                in_order &= by_name(last, &pair, body, decoded).is_le();
            }
            pairs.push(pair);
        }
        start = end + 1;
    }
    in_order
}

/// The order of two pairs' names, byte by byte: the ranks decide unless they tie.
#[inline]
fn by_name(a: &Pair, b: &Pair, body: &[u8], decoded: &[u8]) -> Ordering {
    match a.rank.cmp(&b.rank) {
        Ordering::Equal => a.name.bytes(body, decoded).cmp(b.name.bytes(body, decoded)),
        unequal => unequal,
    }
}

/// The first eight bytes of `name`, zero-padded, as a big-endian number: two ranks in order
/// are two names in order, and equal ranks leave it to the bytes (a shorter name ranks as if
/// padded with zero bytes).
fn rank(name: &[u8]) -> u64 {
    let mut first = [0; 8];
    let len = name.len().min(8);
    first[..len].copy_from_slice(&name[..len]);
    u64::from_be_bytes(first)
}

/// `body[range]` decoded: `+` as a space and each `%` followed by two hexadecimal digits as
/// the byte they spell (any other `%` as it is). Without either it stays in the body;
/// otherwise it is decoded into `out`.
fn decode(body: &[u8], range: std::ops::Range<usize>, out: &mut Vec<u8>) -> Part {
    let part = &body[range.clone()];
    let Some(first) = memchr::memchr2(b'+', b'%', part) else {
        return Part {
            start: range.start,
            end: range.end,
        };
    };
    let start = out.len();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    out.extend_from_slice(&part[..first]);
    let mut rest = &part[first..];
    loop {
        // `rest` starts with `+` or `%`.
        if rest[0] == b'+' {
            out.push(b' ');
            rest = &rest[1..];
        } else {
            match (
                rest.get(1).and_then(|&h| hex(h)),
                rest.get(2).and_then(|&l| hex(l)),
            ) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    rest = &rest[3..];
                }
                _ => {
                    out.push(b'%');
                    rest = &rest[1..];
                }
            }
        }
        match memchr::memchr2(b'+', b'%', rest) {
            Some(at) => {
                out.extend_from_slice(&rest[..at]);
                rest = &rest[at..];
            }
            None => {
                out.extend_from_slice(rest);
                break;
            }
        }
    }
    Part {
        start,
        end: out.len() | DECODED,
    }
}
