//! The canonical form of an `application/x-www-form-urlencoded` body, written with the buffers
//! of the thread: no allocation per body once they have grown to the bodies it sees.
//!
//! One look at each byte finds the pairs and their escapes: a name or value with no `+` or
//! `%` is not copied, only noted as a range of the body; one with escapes is decoded into a
//! buffer. Each pair is ranked by its name's first sixteen bytes, so most comparisons are
//! one of two numbers; pairs already in order by name (what a client sorting its fields sends)
//! are not sorted. The form is then written once, each name and value after its length.

use std::cell::RefCell;
use std::cmp::Ordering;

use super::buffers::{recycle, with_thread};

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
    /// The name's first sixteen bytes, zero-padded, as a big-endian number.
    rank: u128,
    name: Part,
    value: Part,
    /// Its place in the body: pairs with one name keep their order.
    index: usize,
}

/// The buffers a form is written with, kept by each thread ([`with_thread`]).
#[derive(Default)]
struct Buffers {
    decoded: Vec<u8>,
    pairs: Vec<Pair>,
    out: Vec<u8>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// Calls `f` with the canonical form of `body` (see
/// [`canonical_form`](super::canonical_form)) and returns what it returns.
pub(super) fn with_canonical<R>(body: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    with_thread(&BUFFERS, |buffers| write(body, buffers, f))
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
    recycle(decoded);
    recycle(pairs);
    recycle(out);
    result
}

/// Notes the pairs of `body` in `pairs`, decoding escaped parts into `decoded`: whether they
/// came in order by name. One look at each byte: separators, the first `=` of a segment, and
/// whether its name or value holds an escape (`+` or `%`).
fn split(body: &[u8], decoded: &mut Vec<u8>, pairs: &mut Vec<Pair>) -> bool {
    let mut in_order = true;
    let mut segment = Segment::at(0);
    for (i, &byte) in body.iter().enumerate() {
        if !SPECIAL[usize::from(byte)] {
            continue;
        }
        match byte {
            b'&' => {
                in_order &= segment.end(i, body, decoded, pairs);
                segment = Segment::at(i + 1);
            }
            b'=' if segment.equals.is_none() => segment.equals = Some(i),
            b'=' => {}
            // `+` or `%`.
            _ if segment.equals.is_none() => segment.escaped_name = true,
            _ => segment.escaped_value = true,
        }
    }
    in_order &= segment.end(body.len(), body, decoded, pairs);
    in_order
}

/// The bytes [`split`] stops at: `&`, `=`, `+` and `%`.
static SPECIAL: [bool; 256] = {
    let mut special = [false; 256];
    special[b'&' as usize] = true;
    special[b'=' as usize] = true;
    special[b'+' as usize] = true;
    special[b'%' as usize] = true;
    special
};

/// A segment of the body (between two `&`) as [`split`] reads it.
struct Segment {
    start: usize,
    /// Its first `=`.
    equals: Option<usize>,
    escaped_name: bool,
    escaped_value: bool,
}

impl Segment {
    fn at(start: usize) -> Self {
        Self {
            start,
            equals: None,
            escaped_name: false,
            escaped_value: false,
        }
    }

    /// Ends the segment at `end`: its pair noted, unless it is empty. Whether the pair comes
    /// in order after the one before (or none was noted).
    fn end(self, end: usize, body: &[u8], decoded: &mut Vec<u8>, pairs: &mut Vec<Pair>) -> bool {
        if end == self.start {
            return true;
        }
        let (name, value) = match self.equals {
            Some(at) => (self.start..at, at + 1..end),
            None => (self.start..end, end..end),
        };
        let name = part(body, name, self.escaped_name, decoded);
        let value = part(body, value, self.escaped_value, decoded);
        let pair = Pair {
            rank: rank(name.bytes(body, decoded)),
            name,
            value,
            index: pairs.len(),
        };
        let in_order = pairs
            .last()
            .is_none_or(|last| by_name(last, &pair, body, decoded).is_le());
        pairs.push(pair);
        in_order
    }
}

/// `body[range]` as a part: decoded into `decoded` if it holds an escape, else where it is.
fn part(body: &[u8], range: std::ops::Range<usize>, escaped: bool, decoded: &mut Vec<u8>) -> Part {
    if escaped {
        decode(&body[range], decoded)
    } else {
        Part {
            start: range.start,
            end: range.end,
        }
    }
}

/// The order of two pairs' names, byte by byte: the ranks decide unless they tie.
#[inline]
fn by_name(a: &Pair, b: &Pair, body: &[u8], decoded: &[u8]) -> Ordering {
    match a.rank.cmp(&b.rank) {
        Ordering::Equal => a.name.bytes(body, decoded).cmp(b.name.bytes(body, decoded)),
        unequal => unequal,
    }
}

/// The first sixteen bytes of `name`, zero-padded, as a big-endian number: two ranks in order
/// are two names in order, and equal ranks leave it to the bytes (a shorter name ranks as if
/// padded with zero bytes). Sixteen, not eight: the names of one item of a list
/// (`items[0][sku]`, `items[0][quantity]`) share their first eight bytes.
fn rank(name: &[u8]) -> u128 {
    let mut first = [0; 16];
    let len = name.len().min(16);
    first[..len].copy_from_slice(&name[..len]);
    u128::from_be_bytes(first)
}

/// `part` decoded into `out`: `+` as a space and each `%` followed by two hexadecimal digits
/// as the byte they spell (any other `%` as it is).
fn decode(part: &[u8], out: &mut Vec<u8>) -> Part {
    let start = out.len();
    // Decoded, a part is no longer than it was: written by index into room for all of it, and
    // the rest cut off after.
    out.resize(start + part.len(), 0);
    let written = &mut out[start..];
    let hex = |at: usize| part.get(at).map_or(NOT_HEX, |&b| HEX[usize::from(b)]);
    let (mut from, mut to) = (0, 0);
    while let Some(&byte) = part.get(from) {
        written[to] = match byte {
            b'+' => b' ',
            b'%' => match (hex(from + 1), hex(from + 2)) {
                (high, low) if high != NOT_HEX && low != NOT_HEX => {
                    from += 2;
                    high << 4 | low
                }
                _ => b'%',
            },
            other => other,
        };
        from += 1;
        to += 1;
    }
    out.truncate(start + to);
    Part {
        start,
        end: out.len() | DECODED,
    }
}

/// [`HEX`] of a byte that is not a hexadecimal digit.
const NOT_HEX: u8 = 0xff;

/// The value of each hexadecimal digit (either case), [`NOT_HEX`] for any other byte.
static HEX: [u8; 256] = {
    let mut hex = [NOT_HEX; 256];
    let mut digit = 0;
    while digit < 16 {
        hex[b"0123456789abcdef"[digit] as usize] = digit as u8;
        hex[b"0123456789ABCDEF"[digit] as usize] = digit as u8;
        digit += 1;
    }
    hex
};
