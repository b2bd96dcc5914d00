//! The canonical writer as it was before the one-pass writer (#51), kept as the reference the
//! differential test below compares the writer with: a scan for an input already canonical
//! (copied then), else its fields sorted by number and written, every map's entries sorted.

use std::ops::Range;

use proptest::prelude::*;
use prost::Message;

use super::super::wire::{Reader, WireField, encode_varint, varint_len};
use super::super::writer::{self, check_depth, malformed, require_len};
use super::super::{CanonicalError, FieldKind, Shape};
use super::{requests, schemas};

/// The canonical encoding of `input`, an encoding of message `root`, without field number `skip`.
fn canonical(
    shapes: &[Shape],
    root: usize,
    input: &[u8],
    skip: Option<u32>,
) -> Result<Vec<u8>, CanonicalError> {
    // A single buffer: the canonical form is never longer than the input.
    let mut writer = Writer {
        shapes,
        input,
        out: Vec::with_capacity(input.len()),
    };
    writer.message(root, 0..input.len(), 0, skip)?;
    Ok(writer.out)
}

/// Writes the canonical encoding of one input into one output buffer.
struct Writer<'a> {
    /// The resolved messages.
    shapes: &'a [Shape],
    /// The encoded message.
    input: &'a [u8],
    /// The canonical bytes so far.
    out: Vec<u8>,
}

impl Writer<'_> {
    /// Writes message `shape` found in `span` of the input, leaving out field number `skip`.
    fn message(
        &mut self,
        shape: usize,
        span: Range<usize>,
        depth: usize,
        skip: Option<u32>,
    ) -> Result<(), CanonicalError> {
        let shapes = self.shapes;
        let s = &shapes[shape];
        check_depth(s, depth)?;
        if self.already_canonical(shape, span.clone(), depth, skip)? {
            return self.copy_except(s, span, skip);
        }
        let fields = self.fields(s, span, skip)?;
        let mut i = 0;
        while i < fields.len() {
            let (field, kind) = fields[i];
            match kind {
                FieldKind::Copy => self
                    .out
                    .extend_from_slice(&self.input[field.key_start..field.end]),
                FieldKind::Message(child) => {
                    require_len(s, &field)?;
                    self.out
                        .extend_from_slice(&self.input[field.key_start..field.key_end]);
                    self.nested(child, &field, depth)?;
                }
                FieldKind::Map(entry) => {
                    let run = fields[i..]
                        .iter()
                        .take_while(|(f, _)| f.number == field.number)
                        .count();
                    self.map(s, entry, &fields[i..i + run], depth)?;
                    i += run;
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// Whether `span` is already canonical but for the `skip` field: fields known and in order,
    /// entries of each map in order, nested messages likewise, length prefixes minimal. Then the
    /// input is copied: no allocation, one scan. That is the common case (map-free messages, empty
    /// or one-entry maps). A message found out of order deep down is scanned again by each enclosing
    /// level's slow path: at worst the nesting limit times the input, bounded and rare.
    fn already_canonical(
        &self,
        shape: usize,
        span: Range<usize>,
        depth: usize,
        skip: Option<u32>,
    ) -> Result<bool, CanonicalError> {
        let s = &self.shapes[shape];
        check_depth(s, depth)?;
        let mut reader = Reader::new(self.input, span);
        let mut last = 0;
        let mut previous_entry: Option<Range<usize>> = None;
        while let Some(field) = reader.next_field().map_err(|e| malformed(s, e))? {
            if Some(field.number) == skip {
                continue;
            }
            if field.number < last {
                return Ok(false);
            }
            if field.number != last {
                previous_entry = None;
            }
            last = field.number;
            let in_order = match s.kind(field.number) {
                Some(FieldKind::Copy) => true,
                Some(FieldKind::Message(child)) => {
                    self.nested_canonical(s, &field, child, depth)?
                }
                Some(FieldKind::Map(entry)) => {
                    let body = field.body_start..field.end;
                    let sorted =
                        previous_entry.is_none_or(|p| self.input[p] <= self.input[body.clone()]);
                    previous_entry = Some(body);
                    sorted && self.nested_canonical(s, &field, entry, depth)?
                }
                None => false,
            };
            if !in_order {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether the message-typed `field` is already canonical, its length prefix included (the slow
    /// path writes minimal prefixes, so the fast path must not copy longer ones).
    fn nested_canonical(
        &self,
        s: &Shape,
        field: &WireField,
        child: usize,
        depth: usize,
    ) -> Result<bool, CanonicalError> {
        require_len(s, field)?;
        let body = field.body_start..field.end;
        let minimal = field.body_start - field.key_end == varint_len(body.len() as u64);
        Ok(minimal && self.already_canonical(child, body, depth + 1, None)?)
    }

    /// Copies `span` as it is, except for the fields numbered `skip` (the idempotency key, which
    /// the request being fingerprinted always has: so this is the common case at the top level).
    fn copy_except(
        &mut self,
        s: &Shape,
        span: Range<usize>,
        skip: Option<u32>,
    ) -> Result<(), CanonicalError> {
        let Some(skip) = skip else {
            self.out.extend_from_slice(&self.input[span]);
            return Ok(());
        };
        let mut reader = Reader::new(self.input, span.clone());
        let mut run = span.start;
        while let Some(field) = reader.next_field().map_err(|e| malformed(s, e))? {
            if field.number == skip {
                self.out
                    .extend_from_slice(&self.input[run..field.key_start]);
                run = field.end;
            }
        }
        self.out.extend_from_slice(&self.input[run..span.end]);
        Ok(())
    }

    /// The known, not skipped fields of `span`, stably sorted by number.
    fn fields(
        &self,
        s: &Shape,
        span: Range<usize>,
        skip: Option<u32>,
    ) -> Result<Vec<(WireField, FieldKind)>, CanonicalError> {
        let mut reader = Reader::new(self.input, span);
        let mut fields = Vec::new();
        while let Some(field) = reader.next_field().map_err(|e| malformed(s, e))? {
            if Some(field.number) == skip {
                continue;
            }
            if let Some(kind) = s.kind(field.number) {
                fields.push((field, kind));
            }
        }
        if !fields.is_sorted_by_key(|(f, _)| f.number) {
            fields.sort_by_key(|(f, _)| f.number);
        }
        Ok(fields)
    }

    /// Writes the length prefix and canonical body of a message field (its key is already written),
    /// returning where the body lies in the output.
    fn nested(
        &mut self,
        child: usize,
        field: &WireField,
        depth: usize,
    ) -> Result<Range<usize>, CanonicalError> {
        // The canonical body is never longer than the input's (fields are only dropped or moved), so
        // reserving the input's prefix size almost always leaves the body in place.
        let reserved = varint_len((field.end - field.body_start) as u64);
        let len_pos = self.out.len();
        self.out.resize(len_pos + reserved, 0);
        self.message(child, field.body_start..field.end, depth + 1, None)?;
        let body_len = self.out.len() - len_pos - reserved;
        let mut prefix = [0u8; 10];
        let n = encode_varint(body_len as u64, &mut prefix);
        self.out
            .splice(len_pos..len_pos + reserved, prefix[..n].iter().copied());
        Ok(len_pos + n..len_pos + n + body_len)
    }

    /// Writes the entries of one map field (consecutive occurrences of its number), sorted by their
    /// canonical bytes, which start with the key: prost writes them in `HashMap` order.
    fn map(
        &mut self,
        s: &Shape,
        entry: usize,
        fields: &[(WireField, FieldKind)],
        depth: usize,
    ) -> Result<(), CanonicalError> {
        let group_start = self.out.len();
        let mut entries: Vec<(Range<usize>, Range<usize>)> = Vec::with_capacity(fields.len());
        for (field, _) in fields {
            require_len(s, field)?;
            let whole_start = self.out.len();
            self.out
                .extend_from_slice(&self.input[field.key_start..field.key_end]);
            let body = self.nested(entry, field, depth)?;
            entries.push((whole_start..self.out.len(), body));
        }
        let out = &self.out;
        if entries.is_sorted_by(|a, b| out[a.1.clone()] <= out[b.1.clone()]) {
            return Ok(());
        }
        entries.sort_by(|a, b| out[a.1.clone()].cmp(&out[b.1.clone()]));
        let written = self.out.split_off(group_start);
        for (whole, _) in entries {
            self.out
                .extend_from_slice(&written[whole.start - group_start..whole.end - group_start]);
        }
        Ok(())
    }
}

/// The top-level fields of `encoded` (well formed), in the order `order`'s keys give them:
/// a valid encoding, most often out of number order.
fn shuffled(encoded: &[u8], order: &[u64]) -> Vec<u8> {
    let mut reader = Reader::new(encoded, 0..encoded.len());
    let mut fields = Vec::new();
    while let Ok(Some(field)) = reader.next_field() {
        fields.push(&encoded[field.key_start..field.end]);
    }
    let mut keyed: Vec<_> = fields
        .into_iter()
        .enumerate()
        .map(|(i, f)| (order.get(i).copied().unwrap_or(0), f))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    keyed
        .into_iter()
        .flat_map(|(_, f)| f.iter().copied())
        .collect()
}

proptest! {
    /// The one-pass writer gives the reference's bytes for every input the reference accepts,
    /// and refuses every input it refuses: prost's encodings, their fields out of order, and
    /// either with a byte changed, inserted or removed; with and without the key left out.
    #[test]
    fn the_one_pass_writer_gives_the_reference_bytes(
        request in requests(),
        order in prop::collection::vec(any::<u64>(), 0..12),
        edit in (any::<prop::sample::Index>(), any::<u8>(), 0..3u8),
        skip in any::<bool>(),
    ) {
        let schemas = schemas();
        let root = schemas.index["test.v1.Request"];
        let skip = skip.then_some(1);
        let encoded = request.encode_to_vec();
        let reordered = shuffled(&encoded, &order);
        for input in [encoded, reordered] {
            let mut edited = input.clone();
            let (at, byte, how) = edit;
            if !edited.is_empty() {
                let at = at.index(edited.len());
                match how {
                    0 => edited[at] ^= byte | 1,
                    1 => edited.insert(at, byte),
                    _ => { edited.remove(at); }
                }
            }
            for input in [input, edited] {
                let new = writer::with_canonical(&schemas.shapes, root, &input, skip, <[u8]>::to_vec);
                let old = canonical(&schemas.shapes, root, &input, skip);
                match (new, old) {
                    (Ok(new), Ok(old)) => prop_assert_eq!(new, old, "{:?}", input),
                    (Err(_), Err(_)) => {}
                    (new, old) => prop_assert!(false, "{:?}: {:?} against {:?}", input, new, old),
                }
            }
        }
    }
}
