//! A minimal protobuf wire reader: it only finds where fields lie, so canonicalizing can copy them.

use std::ops::Range;

use super::WireProblem;

/// The largest field number protobuf allows (2^29 - 1).
const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;
/// Wire type of varints.
const VARINT: u8 = 0;
/// Wire type of 64-bit fixed-width values.
const I64: u8 = 1;
/// Wire type of length-delimited values (strings, bytes, messages, packed scalars).
pub(super) const LEN: u8 = 2;
/// Wire type of 32-bit fixed-width values.
const I32: u8 = 5;

/// A wire error before the caller attaches the name of the message it was reading.
#[derive(Debug, Clone, Copy)]
pub(super) struct WireError {
    /// Where the field (or its unreadable key) starts.
    pub(super) offset: usize,
    /// The field number, once the key was read.
    pub(super) field: Option<u32>,
    /// What is wrong.
    pub(super) problem: WireProblem,
}

/// One field as it lies in the input: positions, not copies, so parsing allocates nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct WireField {
    /// The field number.
    pub(super) number: u32,
    /// The wire type.
    pub(super) wire: u8,
    /// Where the key starts (the whole field is `key_start..end`).
    pub(super) key_start: usize,
    /// Where the key ends.
    pub(super) key_end: usize,
    /// Where the value starts, after the length prefix of a length-delimited field.
    pub(super) body_start: usize,
    /// Where the field ends.
    pub(super) end: usize,
}

impl WireField {
    /// The error for this field, at its start.
    pub(super) fn error(&self, problem: WireProblem) -> WireError {
        WireError {
            offset: self.key_start,
            field: Some(self.number),
            problem,
        }
    }
}

/// Reads the fields of one message within a bounded range of the input.
pub(super) struct Reader<'a> {
    /// The whole input, so offsets in errors are absolute.
    buf: &'a [u8],
    /// The next byte to read.
    pos: usize,
    /// The end of this message.
    end: usize,
}

impl<'a> Reader<'a> {
    /// A reader of the message in `span` of `buf`.
    pub(super) fn new(buf: &'a [u8], span: Range<usize>) -> Self {
        let end = span.end.min(buf.len());
        Reader {
            buf,
            pos: span.start.min(end),
            end,
        }
    }

    /// Reads a base-128 varint: a field's key, most often one byte.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, WireProblem> {
        let mut value = 0u64;
        for i in 0..10 {
            if self.pos >= self.end {
                return Err(WireProblem::TruncatedVarint);
            }
            let byte = self.buf[self.pos];
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(WireProblem::OverlongVarint);
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(WireProblem::OverlongVarint)
    }

    /// Skips `needed` bytes, which must lie within the message.
    fn skip(&mut self, needed: u64) -> Result<(), WireProblem> {
        let available = self.end - self.pos;
        match usize::try_from(needed) {
            Ok(n) if n <= available => {
                self.pos += n;
                Ok(())
            }
            _ => Err(WireProblem::Truncated { needed, available }),
        }
    }

    /// Reads the next field, or `None` at the end of the message. Inlined, so that the field
    /// stays in registers rather than being written out and read back whole (which stalls).
    #[inline(always)]
    pub(super) fn next_field(&mut self) -> Result<Option<WireField>, WireError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let key_start = self.pos;
        let at_key = |problem| WireError {
            offset: key_start,
            field: None,
            problem,
        };
        let key = self.varint().map_err(at_key)?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        if number == 0 || number > MAX_FIELD_NUMBER {
            return Err(at_key(WireProblem::InvalidFieldNumber(number)));
        }
        let mut field = WireField {
            number: number as u32,
            wire,
            key_start,
            key_end: self.pos,
            body_start: self.pos,
            end: 0,
        };
        self.value(&mut field)
            .map_err(|problem| field.error(problem))?;
        field.end = self.pos;
        Ok(Some(field))
    }

    /// Skips over the value of `field`, noting where the body of a length-delimited one starts.
    #[inline(always)]
    fn value(&mut self, field: &mut WireField) -> Result<(), WireProblem> {
        match field.wire {
            VARINT => self.varint().map(drop),
            I64 => self.skip(8),
            I32 => self.skip(4),
            LEN => {
                let len = self.varint()?;
                field.body_start = self.pos;
                self.skip(len)
            }
            3 | 4 => Err(WireProblem::Group(field.wire)),
            other => Err(WireProblem::InvalidWireType(other)),
        }
    }
}

/// The number of bytes of `value` as a varint.
pub(super) fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes `value` as a varint into `buf`, returning its length.
pub(super) fn encode_varint(mut value: u64, buf: &mut [u8; 10]) -> usize {
    let mut i = 0;
    while value >= 0x80 {
        buf[i] = (value as u8) | 0x80;
        value >>= 7;
        i += 1;
    }
    buf[i] = value as u8;
    i + 1
}

#[cfg(test)]
mod tests {
    use super::{encode_varint, varint_len};

    /// The slow path writes length prefixes with `encode_varint`, and the fast path copies a
    /// nested message only when its prefix is as short as `varint_len` says: both must be
    /// protobuf's varint, at every byte boundary.
    #[test]
    fn varints_are_protobufs_at_every_length() {
        let mut buf = [0u8; 10];
        for bits in 0..64 {
            let top = (1u64 << bits) - 1;
            for value in [top, top + 1] {
                let mut expected = Vec::new();
                prost::encoding::encode_varint(value, &mut expected);
                let written = encode_varint(value, &mut buf);
                assert_eq!(&buf[..written], expected.as_slice(), "{value}");
                assert_eq!(varint_len(value), expected.len(), "{value}");
            }
        }
        assert_eq!(varint_len(u64::MAX), 10);
    }
}
