//! The writer of canonical encodings: one pass over the input into one output buffer. prost
//! writes fields in number order, so a message is copied field by field as it is read, nested
//! messages written in place behind their length prefix, and only a map's entries (which prost
//! writes in `HashMap` order) sorted as their run ends. A message whose fields come out of
//! number order (not prost's writing, but a valid encoding) is written again from its start,
//! its fields sorted first.

use std::cell::RefCell;
use std::ops::Range;

use idem_core::fingerprint::buffers::{recycle, with_thread};

use super::wire::{LEN, Reader, WireError, WireField, encode_varint, varint_len};
use super::{CanonicalError, FieldKind, Shape, WireProblem};

/// How deeply messages may nest: protobuf's default, which is also prost's decoder limit, so whatever
/// prost decoded can be canonicalized, and hostile input cannot exhaust the stack.
const RECURSION_LIMIT: usize = 100;

/// Calls `f` with the canonical encoding of `input`, an encoding of message `root`, without
/// field number `skip`, and returns what it returns. Written in the thread's buffers, so a warm
/// thread allocates nothing.
pub(super) fn with_canonical<R>(
    shapes: &[Shape],
    root: usize,
    input: &[u8],
    skip: Option<u32>,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, CanonicalError> {
    with_thread(&BUFFERS, |buffers| {
        let mut writer = Writer {
            shapes,
            input,
            out: std::mem::take(&mut buffers.out),
            entries: std::mem::take(&mut buffers.entries),
            scratch: std::mem::take(&mut buffers.scratch),
        };
        // A single buffer: the canonical form is never longer than the input.
        writer.out.reserve(input.len());
        let result = writer
            .message(root, 0..input.len(), 0, skip)
            .map(|()| f(&writer.out));
        buffers.out = writer.out;
        buffers.entries = writer.entries;
        buffers.scratch = writer.scratch;
        recycle(&mut buffers.out);
        recycle(&mut buffers.entries);
        recycle(&mut buffers.scratch);
        result
    })
}

/// The buffers an encoding is written with, kept by each thread ([`with_thread`]).
#[derive(Default)]
struct Buffers {
    out: Vec<u8>,
    entries: Vec<(Range<usize>, Range<usize>)>,
    scratch: Vec<u8>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// Writes the canonical encoding of one input into one output buffer.
struct Writer<'a> {
    /// The resolved messages.
    shapes: &'a [Shape],
    /// The encoded message.
    input: &'a [u8],
    /// The canonical bytes so far.
    out: Vec<u8>,
    /// The entries of the maps being written, innermost run last: where each entry is in the
    /// output, whole and its canonical body (by which entries are sorted).
    entries: Vec<(Range<usize>, Range<usize>)>,
    /// A map's entries while they are put in order.
    scratch: Vec<u8>,
}

/// A map's entries written so far, in the order they came.
struct MapRun {
    /// The map's field number.
    number: u32,
    /// Its first entry in `Writer::entries`.
    first: usize,
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
        let start = self.out.len();
        let mut reader = Reader::new(self.input, span.clone());
        let mut last = 0;
        let mut run: Option<MapRun> = None;
        while let Some(field) = reader.next_field().map_err(|e| malformed(s, e))? {
            if Some(field.number) == skip {
                continue;
            }
            if field.number < last {
                // Not in number order: this message again from its start, its fields sorted.
                if let Some(run) = run {
                    self.entries.truncate(run.first);
                }
                self.out.truncate(start);
                return self.sorted(s, span, depth, skip);
            }
            last = field.number;
            match s.kind(field.number) {
                // Not in the descriptor: dropped.
                None => {}
                Some(kind) => self.field(s, &field, kind, depth, &mut run)?,
            }
        }
        self.end_map(run);
        Ok(())
    }

    /// The slow path of [`message`](Self::message): its known fields, not skipped, stably sorted
    /// by number, then written in that order.
    fn sorted(
        &mut self,
        s: &Shape,
        span: Range<usize>,
        depth: usize,
        skip: Option<u32>,
    ) -> Result<(), CanonicalError> {
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
        fields.sort_by_key(|(f, _)| f.number);
        let mut run: Option<MapRun> = None;
        for (field, kind) in fields {
            self.field(s, &field, kind, depth, &mut run)?;
        }
        self.end_map(run);
        Ok(())
    }

    /// Writes one known field of message `s`, fields coming in number order; an entry of a map
    /// joins `run`, the map's run of entries, which a field of another number ends first.
    fn field(
        &mut self,
        s: &Shape,
        field: &WireField,
        kind: FieldKind,
        depth: usize,
        run: &mut Option<MapRun>,
    ) -> Result<(), CanonicalError> {
        if run.as_ref().is_some_and(|run| run.number != field.number) {
            self.end_map(run.take());
        }
        match kind {
            FieldKind::Copy => self
                .out
                .extend_from_slice(&self.input[field.key_start..field.end]),
            FieldKind::Message(child) => {
                require_len(s, field)?;
                if self.shapes[child].map_free && self.is_canonical(child, field, depth + 1)? {
                    self.out
                        .extend_from_slice(&self.input[field.key_start..field.end]);
                } else {
                    self.out
                        .extend_from_slice(&self.input[field.key_start..field.key_end]);
                    self.nested(child, field, depth)?;
                }
            }
            FieldKind::Map(entry) => {
                require_len(s, field)?;
                let whole = self.out.len();
                run.get_or_insert(MapRun {
                    number: field.number,
                    first: self.entries.len(),
                });
                self.out
                    .extend_from_slice(&self.input[field.key_start..field.key_end]);
                let body = self.nested(entry, field, depth)?;
                self.entries.push((whole..self.out.len(), body));
            }
        }
        Ok(())
    }

    /// Whether the body of `field`, a message of map-free type `shape` at `depth`, is canonical
    /// as it stands, its length prefix included: its fields known and in number order, those
    /// of message type likewise. Then it is copied whole, with no prefix to write again.
    fn is_canonical(
        &self,
        shape: usize,
        field: &WireField,
        depth: usize,
    ) -> Result<bool, CanonicalError> {
        let s = &self.shapes[shape];
        check_depth(s, depth)?;
        let body = field.body_start..field.end;
        if field.body_start - field.key_end != varint_len(body.len() as u64) {
            return Ok(false);
        }
        let mut reader = Reader::new(self.input, body);
        let mut last = 0;
        while let Some(field) = reader.next_field().map_err(|e| malformed(s, e))? {
            if field.number < last {
                return Ok(false);
            }
            last = field.number;
            let canonical = match s.kind(field.number) {
                Some(FieldKind::Copy) => true,
                Some(FieldKind::Message(child)) => {
                    require_len(s, &field)?;
                    self.is_canonical(child, &field, depth + 1)?
                }
                // A map-free message has no map field; an unknown field is dropped.
                Some(FieldKind::Map(_)) | None => false,
            };
            if !canonical {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Writes the length prefix and canonical body of a message field (its key is already written),
    /// returning where the body lies in the output.
    fn nested(
        &mut self,
        child: usize,
        field: &WireField,
        depth: usize,
    ) -> Result<Range<usize>, CanonicalError> {
        // The canonical body is never longer than the input's (fields are only dropped or moved),
        // so its prefix is never longer than the input's: room for that is made before it, and
        // the body moved back only when its prefix came out shorter.
        let reserved = varint_len((field.end - field.body_start) as u64);
        let len_pos = self.out.len();
        self.out.resize(len_pos + reserved, 0);
        self.message(child, field.body_start..field.end, depth + 1, None)?;
        let body_start = len_pos + reserved;
        let body_len = self.out.len() - body_start;
        let mut prefix = [0u8; 10];
        let n = encode_varint(body_len as u64, &mut prefix);
        debug_assert!(n <= reserved);
        if n < reserved {
            self.out.copy_within(body_start.., len_pos + n);
            self.out.truncate(len_pos + n + body_len);
        }
        self.out[len_pos..len_pos + n].copy_from_slice(&prefix[..n]);
        Ok(len_pos + n..len_pos + n + body_len)
    }

    /// Ends a map's run of entries: puts them in the order of their canonical bytes (which start
    /// with the key) unless they came in it, and forgets them.
    fn end_map(&mut self, run: Option<MapRun>) {
        let Some(run) = run else {
            return;
        };
        let out = &self.out;
        let entries = &mut self.entries[run.first..];
        // Where the run starts in the output: at its first entry.
        let Some(start) = entries.first().map(|(whole, _)| whole.start) else {
            return;
        };
        if !entries.is_sorted_by(|a, b| out[a.1.clone()] <= out[b.1.clone()]) {
            // Stable: entries with equal bytes are equal, so their order does not show.
            entries.sort_by(|a, b| out[a.1.clone()].cmp(&out[b.1.clone()]));
            self.scratch.clear();
            for (whole, _) in entries.iter() {
                self.scratch.extend_from_slice(&out[whole.clone()]);
            }
            self.out.truncate(start);
            self.out.extend_from_slice(&self.scratch);
        }
        self.entries.truncate(run.first);
    }
}

/// Refuses to go deeper than [`RECURSION_LIMIT`].
pub(super) fn check_depth(s: &Shape, depth: usize) -> Result<(), CanonicalError> {
    if depth > RECURSION_LIMIT {
        return Err(CanonicalError::TooDeep {
            message: s.name.clone(),
            limit: RECURSION_LIMIT,
        });
    }
    Ok(())
}

/// A message-typed field must be length-delimited: its body is parsed, not copied.
pub(super) fn require_len(s: &Shape, field: &WireField) -> Result<(), CanonicalError> {
    if field.wire == LEN {
        return Ok(());
    }
    Err(malformed(
        s,
        field.error(WireProblem::NotLengthDelimited(field.wire)),
    ))
}

/// Names the message in a wire error.
pub(super) fn malformed(s: &Shape, e: WireError) -> CanonicalError {
    CanonicalError::Malformed {
        message: s.name.clone(),
        field: e.field,
        offset: e.offset,
        problem: e.problem,
    }
}
