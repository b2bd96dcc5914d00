//! Canonical JSON in one pass over the body: no tree, no allocation per key or string, and no
//! copy of what is already canonical.
//!
//! The parser reads the body once, with an explicit stack of the containers open at the moment
//! (no recursion). What it reads is canonical as it stands (compact JSON: keys in order, strings
//! without escapes, integers) is not copied: it is a run of the input, pending, and the output
//! is the runs in order. Only where the canonical form differs (whitespace dropped, a decimal
//! rewritten, an escaped string decoded and written back as serde_json writes it, an object's
//! members out of order) is the pending run copied into a buffer and the new bytes written
//! after it. A document that is canonical already is never copied at all: its form is the
//! input itself. An object's members are remembered as spans of the output; when one arrives
//! out of order, the object is rewritten in key order as it closes (one copy of its bytes).
//! Strings are scanned 16 or 32 bytes at a time where the CPU has the instructions (`scan`).
//!
//! The two versions differ in numbers and repeated keys (see [`Version`]):
//! - [`Version::V2`] writes a number written as an integer as it is written (the JSON grammar
//!   leaves one spelling), and any other number as its exact decimal value: sign, significant
//!   digits, exponent (`1.50`, `15e-1` and `0.0015E3` are all `15e-1`). Nothing goes through a
//!   float. A key repeated in one object makes the document non-canonical (`None`), since
//!   parsers disagree on which value wins.
//! - [`Version::V1`] (the first release's) is exactly a `serde_json::Value` written with sorted
//!   keys: integers beyond a machine word and every other number through serde_json's `f64`, a
//!   repeated key keeping its last value. Kept so records written under it still replay.
//!
//! What serde_json refuses (bad syntax, invalid UTF-8, lone surrogates, nesting 128 deep; in V1
//! numbers out of range) is refused here too.

use std::cell::RefCell;
use std::cmp::Ordering;

use super::Version;
use super::buffers::{recycle, with_thread};

mod member;
mod number;
mod scan;

use member::{DECODED, LAST, Member, SMALL, extend_from_within, order, order_of, rank, sort_small};
pub(crate) use scan::Scan;

/// serde_json's recursion limit: entering the 128th level of arrays and objects fails, so at
/// most 127 containers are open at once.
const MAX_OPEN: usize = 127;

/// The canonical form of a JSON document in `version`, or `None` when it is not JSON (or, in
/// V2, repeats a key in one object).
pub(super) fn canonical(input: &[u8], version: Version) -> Option<Vec<u8>> {
    canonical_with(input, version, Scan::best())
}

/// [`canonical`] with the string scanner `scan`: every scanner gives the same form.
pub(super) fn canonical_with(input: &[u8], version: Version, scan: Scan) -> Option<Vec<u8>> {
    with_canonical(input, version, scan, |head, tail| [head, tail].concat())
}

/// Calls `f` with the canonical form of `input` in `version`, in two parts (what was written to
/// a buffer, then the input's last run, canonical as it stood; either may be empty), and
/// returns what it returns; `None` when `input` has no canonical form.
pub(super) fn with_canonical<R>(
    input: &[u8],
    version: Version,
    scan: Scan,
    f: impl FnOnce(&[u8], &[u8]) -> R,
) -> Option<R> {
    with_thread(&BUFFERS, |buffers| write(input, version, scan, buffers, f))
}

/// The buffers a document is written with, kept by each thread ([`with_thread`]).
#[derive(Default)]
struct Buffers {
    out: Vec<u8>,
    members: Vec<Member>,
    keys: Vec<u8>,
    open: Vec<Open>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

fn write<R>(
    input: &[u8],
    version: Version,
    scan: Scan,
    buffers: &mut Buffers,
    f: impl FnOnce(&[u8], &[u8]) -> R,
) -> Option<R> {
    let result = parse(input, version, scan, buffers)
        .ok()
        .map(|(run, end)| f(&buffers.out, &input[run..end]));
    recycle(&mut buffers.out);
    recycle(&mut buffers.members);
    recycle(&mut buffers.keys);
    recycle(&mut buffers.open);
    result
}

/// Reads `input` into `buffers.out`: where the input's last run starts and where the document
/// ends. Not generic, and the writer a local of its own into which the whole parser is
/// inlined, so that the compiler keeps its cursor in registers rather than in memory.
#[inline(never)]
fn parse(
    input: &[u8],
    version: Version,
    scan: Scan,
    buffers: &mut Buffers,
) -> Result<(usize, usize), Invalid> {
    let mut writer = Writer {
        version,
        scan,
        input,
        pos: 0,
        run: 0,
        out: std::mem::take(&mut buffers.out),
        members: std::mem::take(&mut buffers.members),
        keys: std::mem::take(&mut buffers.keys),
        open: std::mem::take(&mut buffers.open),
    };
    let result = writer.document().map(|end| (writer.run, end));
    buffers.out = writer.out;
    buffers.members = writer.members;
    buffers.keys = writer.keys;
    buffers.open = writer.open;
    result
}

/// Not JSON (the detail does not matter: the body is then hashed raw).
struct Invalid;

type Parsed = Result<(), Invalid>;

/// A container being read.
#[derive(Clone, Copy)]
struct Open {
    object: bool,
    /// Its first member in `Writer::members`.
    first: usize,
    /// Whether every member so far came after the one before it.
    in_order: bool,
}

struct Writer<'a> {
    version: Version,
    scan: Scan,
    input: &'a [u8],
    pos: usize,
    /// Where the pending run starts: `input[run..pos]` is canonical as it stands and comes
    /// after `out`.
    run: usize,
    out: Vec<u8>,
    /// The members of the objects open at the moment, innermost last.
    members: Vec<Member>,
    /// Decoded keys (those written with escapes).
    keys: Vec<u8>,
    /// The containers open at the moment, innermost last.
    open: Vec<Open>,
}

impl<'a> Writer<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    /// Where the cursor is in the output: what is written, then the pending run.
    #[inline(always)]
    fn at(&self) -> usize {
        self.out.len() + (self.pos - self.run)
    }

    /// Copies the pending run into the output, before something else is written or input is
    /// skipped.
    fn cut(&mut self) {
        if self.out.is_empty() {
            // Room for the canonical form (numbers may grow: `0.2` is `2e-1`) and, after it,
            // for an object's members put in order: at most one allocation for the document.
            self.out.reserve(2 * self.input.len() + 16);
        }
        self.out.extend_from_slice(&self.input[self.run..self.pos]);
        self.run = self.pos;
    }

    /// Skips whitespace, if any (compact JSON has none: one test, inline).
    #[inline(always)]
    fn skip_whitespace(&mut self) {
        if let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.skip_blank();
        }
    }

    #[inline(never)]
    fn skip_blank(&mut self) {
        self.cut();
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
        self.run = self.pos;
    }

    /// Reads the whole document: where its value ends (the form is then `out`, followed by
    /// `input[run..end]`).
    #[inline(always)]
    fn document(&mut self) -> Result<usize, Invalid> {
        self.skip_whitespace();
        self.value()?;
        let end = self.pos;
        let rest = &self.input[end..];
        if !rest
            .iter()
            .all(|b| matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
        {
            return Err(Invalid);
        }
        Ok(end)
    }

    /// Reads one value (the cursor on its first byte) with every container in it.
    #[inline(always)]
    fn value(&mut self) -> Parsed {
        loop {
            match self.peek().ok_or(Invalid)? {
                b'{' => {
                    if self.enter(true)? {
                        self.key()?;
                        continue;
                    }
                }
                b'[' => {
                    if self.enter(false)? {
                        continue;
                    }
                }
                b'"' => self.string_value()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return Err(Invalid),
            }
            // A value is complete: close the containers it completes, up to one that takes
            // another element (then read it) or to the end of the document. A member's end is
            // not noted here: the output is compact, so a member ends one byte (its comma)
            // before the next starts (noted as the next is read), and the last where its
            // object closes.
            loop {
                // Its kind alone: the container is read whole only as it closes, not after
                // every value (its `in_order`, a byte written as a key is read, would be read
                // back in a wider load, which stalls).
                let Some(object) = self.open.last().map(|open| open.object) else {
                    return Ok(());
                };
                self.skip_whitespace();
                match (self.peek(), object) {
                    (Some(b','), object) => {
                        self.pos += 1;
                        self.skip_whitespace();
                        if object {
                            self.key()?;
                        }
                        break;
                    }
                    (Some(b'}'), true) => {
                        self.close_object()?;
                        self.pos += 1;
                    }
                    (Some(b']'), false) => {
                        self.open.pop();
                        self.pos += 1;
                    }
                    _ => return Err(Invalid),
                }
            }
        }
    }

    /// Opens an object or an array (the cursor on its bracket): `true` when an element
    /// follows, `false` when it was empty and is closed already.
    #[inline(always)]
    fn enter(&mut self, object: bool) -> Result<bool, Invalid> {
        if self.open.len() >= MAX_OPEN {
            return Err(Invalid);
        }
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(if object { b'}' } else { b']' }) {
            self.pos += 1;
            return Ok(false);
        }
        self.open.push(Open {
            object,
            first: self.members.len(),
            in_order: true,
        });
        Ok(true)
    }

    /// Reads an object member's key and its colon (the cursor on the key), up to its value.
    #[inline(always)]
    fn key(&mut self) -> Parsed {
        if self.peek() != Some(b'"') {
            return Err(Invalid);
        }
        let start = self.at();
        let open = self.pos;
        let (key_start, key_end, rank) = match self.string()? {
            None => {
                let (from, to) = (open + 1, self.pos - 1);
                (
                    from,
                    to,
                    rank(&self.input[from..to], self.input[from..].first_chunk()),
                )
            }
            Some((text, close)) => {
                let from = self.keys.len();
                self.keys.extend_from_slice(text.as_bytes());
                self.write_decoded(&text, close);
                let to = self.keys.len();
                (from, to | DECODED, rank(&self.keys[from..to], None))
            }
        };
        self.skip_whitespace();
        if self.peek() != Some(b':') {
            return Err(Invalid);
        }
        self.pos += 1;
        self.skip_whitespace();
        let Some(open) = self.open.last_mut() else {
            return Err(Invalid);
        };
        if self.members.len() > open.first {
            let last = self.members.len() - 1;
            let last = &mut self.members[last];
            // Compact output: the member before ends at this one's comma.
            last.end = start - 1;
            match order_of(last, rank, key_start, key_end, self.input, &self.keys) {
                Ordering::Less => {}
                Ordering::Equal if self.version == Version::V2 => return Err(Invalid),
                _ => open.in_order = false,
            }
        }
        self.members.push(Member {
            rank,
            key_start,
            key_end,
            start,
            end: LAST,
        });
        Ok(())
    }

    /// Closes the innermost object (the cursor on its `}`): puts its members in key order if
    /// one came out of order, then forgets them. A repeated key keeps its last value in V1 and
    /// makes the document non-canonical in V2.
    fn close_object(&mut self) -> Parsed {
        let Some(open) = self.open.pop() else {
            return Err(Invalid);
        };
        if !open.in_order {
            self.cut();
            let object_end = self.out.len();
            let Writer {
                members,
                input,
                keys,
                out,
                version,
                ..
            } = self;
            let members = &mut members[open.first..];
            let start = members[0].start;
            let by_key = |a: &Member, b: &Member| order(a, b, input, keys);
            // The members in key order: by index for a small object, else sorted in place.
            let mut small: [u8; SMALL] = std::array::from_fn(|i| i as u8);
            let count = members.len();
            if count <= SMALL {
                sort_small(&mut small[..count], members, input, keys);
            } else {
                // Stable: a repeated key's values stay in document order, and the last is kept.
                members.sort_by(by_key);
            }
            let members = &*members;
            let nth = |k: usize| {
                if count <= SMALL {
                    &members[usize::from(small[k])]
                } else {
                    &members[k]
                }
            };
            // The members are written in order after the object, then moved over it: the room
            // `cut` reserved holds them unless numbers grew past it. A member is written with
            // the comma after it (in the output it is followed by one, unless it is the last),
            // and the last comma dropped. One comparison per member tells a repeated key.
            let unordered_end = out.len();
            for k in 0..count {
                let member = nth(k);
                if k + 1 < count && by_key(nth(k + 1), member).is_eq() {
                    if *version == Version::V2 {
                        return Err(Invalid);
                    }
                    // V1: the last value of a repeated key is kept.
                    continue;
                }
                if member.end == LAST {
                    extend_from_within(out, member.start, object_end);
                    out.push(b',');
                } else {
                    extend_from_within(out, member.start, member.end + 1);
                }
            }
            out.pop();
            let ordered = out.len() - unordered_end;
            out.copy_within(unordered_end.., start);
            out.truncate(start + ordered);
        }
        self.members.truncate(open.first);
        Ok(())
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8]) -> Parsed {
        if !self.input[self.pos..].starts_with(word) {
            return Err(Invalid);
        }
        self.pos += word.len();
        Ok(())
    }

    #[inline(always)]
    fn string_value(&mut self) -> Parsed {
        if let Some((text, close)) = self.string()? {
            self.write_decoded(&text, close);
        }
        Ok(())
    }

    /// Reads a string (the cursor on its opening quote). Without escapes it stays in the run
    /// (`None`, the cursor after it); with escapes it is decoded by serde_json and returned
    /// with where its closing quote is, the cursor left on its opening quote.
    #[inline(always)]
    fn string(&mut self) -> Result<Option<(String, usize)>, Invalid> {
        let open = self.pos;
        let contents = open + 1;
        let rest = &self.input[contents..];
        let (len, ascii) = self.scan.plain(rest);
        match rest.get(len) {
            Some(b'"') => {
                if !ascii {
                    std::str::from_utf8(&rest[..len]).map_err(|_| Invalid)?;
                }
                self.pos = contents + len + 1;
                Ok(None)
            }
            Some(b'\\') => {
                // Find the closing quote, skipping the character after each backslash.
                let mut i = contents + len;
                loop {
                    match *self.input.get(i).ok_or(Invalid)? {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                let text = serde_json::from_slice(&self.input[open..=i]).map_err(|_| Invalid)?;
                Ok(Some((text, i)))
            }
            // A control character, or the end of the body.
            _ => Err(Invalid),
        }
    }

    /// Writes a decoded string as serde_json writes it, in place of its escaped text in the
    /// input (the cursor on its opening quote, `close` its closing one).
    fn write_decoded(&mut self, text: &str, close: usize) {
        self.cut();
        // Writing a string to a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut self.out, text);
        self.pos = close + 1;
        self.run = self.pos;
    }

    /// Reads a number. An integer (the common case) stays in the run; anything else is the
    /// longest run of number characters, which must be a number whole (a number followed by
    /// any of them is invalid in the document too), written in its canonical form.
    #[inline(always)]
    fn number(&mut self) -> Parsed {
        let input = self.input;
        let start = self.pos;
        let digits = start + usize::from(input[start] == b'-');
        let mut end = digits;
        while let Some(b'0'..=b'9') = input.get(end) {
            end += 1;
        }
        let integer = end > digits
            && (input[digits] != b'0' || end == digits + 1)
            && !matches!(input.get(end), Some(b'.' | b'e' | b'E' | b'+' | b'-'));
        if integer && (self.version == Version::V2 || number::is_word_integer(&input[start..end])) {
            self.pos = end;
            return Ok(());
        }
        let len = input[start..]
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(input.len() - start);
        let token = &input[start..start + len];
        self.cut();
        self.pos = start + len;
        self.run = self.pos;
        match self.version {
            Version::V2 => number::write_exact(&mut self.out, token),
            Version::V1 => number::write_v1(&mut self.out, token),
        }
    }
}

#[cfg(test)]
mod differential;
#[cfg(test)]
mod exact;
#[cfg(test)]
mod previous;
#[cfg(test)]
mod tests;
