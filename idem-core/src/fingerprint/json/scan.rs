//! Where a JSON string's plain run ends: the first quote, backslash or control character, and
//! whether every byte before it is ASCII (then the run needs no UTF-8 check). The only module
//! of the crate with `unsafe` code, allowed here alone.
//!
//! Three scanners give the same answer for every input (the unit tests below and the
//! differential tests in `idem-fuzz` run each of them):
//! - [`Scan::Scalar`]: eight bytes at a time in a `u64`, then one at a time. Every CPU.
//! - [`Scan::Sse2`]: sixteen bytes at a time. SSE2 is part of the x86-64 baseline, so every
//!   x86-64 CPU has it and no detection is needed.
//! - [`Scan::Avx2`]: the first sixteen bytes as SSE2 does (most strings end there: keys, codes,
//!   identifiers), then thirty-two at a time. Only built by [`Scan::best`] after the CPU was
//!   seen to have AVX2 at run time.
//!
//! Every scanner reads the rest of the document, not the string alone, so a string shorter
//! than a block is still read as one block unless the document ends within it.
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
    _mm_set1_epi8,
};

/// How strings are scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Eight bytes at a time, portable.
    Scalar,
    /// Sixteen bytes at a time (x86-64).
    #[cfg(target_arch = "x86_64")]
    Sse2,
    /// Thirty-two bytes at a time, on an x86-64 CPU seen to have AVX2.
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2Detected),
}

/// Proof that the CPU running this process has AVX2: only [`Scan::best`] and
/// [`Scan::available`] make one, after `is_x86_feature_detected!("avx2")` said so.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Avx2Detected(());

impl Scan {
    /// The fastest scanner this CPU runs.
    pub(crate) fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                Scan::Avx2(Avx2Detected(()))
            } else {
                Scan::Sse2
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Scan::Scalar
        }
    }

    /// Every scanner this CPU runs, the portable one first (for tests).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let mut all = vec![Scan::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            all.push(Scan::Sse2);
            if std::arch::is_x86_feature_detected!("avx2") {
                all.push(Scan::Avx2(Avx2Detected(())));
            }
        }
        all
    }

    /// How many bytes `text` starts with that are neither a quote, a backslash nor a control
    /// character, and whether all of those are ASCII.
    #[inline(always)]
    pub(crate) fn plain(self, text: &[u8]) -> (usize, bool) {
        match self {
            Scan::Scalar => scalar(text),
            // SAFETY: SSE2 is part of the x86-64 baseline: every CPU this code runs on has it
            // (the compiler uses it anywhere too).
            #[cfg(target_arch = "x86_64")]
            Scan::Sse2 => unsafe { sse2(text, 0) },
            #[cfg(target_arch = "x86_64")]
            Scan::Avx2(_) => {
                // One block inline: most strings end in it.
                if let Some(block) = text.first_chunk::<16>() {
                    // SAFETY: SSE2 is part of the x86-64 baseline.
                    let (stop, high) = unsafe { block16(block) };
                    if stop != 0 {
                        return ended(0, stop, high, 0);
                    }
                    // SAFETY: `Avx2Detected` exists only once `is_x86_feature_detected!` saw
                    // AVX2 on this CPU, so the instructions `avx2` is compiled with exist here.
                    unsafe { avx2(text, 16, high) }
                } else {
                    scalar(text)
                }
            }
        }
    }
}

/// The answer once a block of `text` from `start` held the run's end: `stop` has a bit set for
/// each byte of the block that ends a run, `high` one for each non-ASCII byte, `seen` the
/// non-ASCII bytes of the blocks before.
#[inline(always)]
fn ended(start: usize, stop: u32, high: u32, seen: u32) -> (usize, bool) {
    let len = stop.trailing_zeros();
    let before = (1u32 << len) - 1;
    (start + len as usize, seen == 0 && high & before == 0)
}

/// The portable scanner.
fn scalar(text: &[u8]) -> (usize, bool) {
    let len = plain_run(text);
    (len, text[..len].is_ascii())
}

/// How many bytes `text` starts with that are neither a quote, a backslash nor a control
/// character: eight at a time, then one at a time from the eight that hold the first of them.
fn plain_run(text: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `word` is zero. It never misses one, and says only whether there is
    // one: the bytes are then read one at a time.
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH != 0;
    let mut start = 0;
    while let Some(chunk) = text[start..].first_chunk::<8>() {
        let word = u64::from_ne_bytes(*chunk);
        // A byte below 0x20 borrows through `- 0x20` and had its high bit clear.
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH != 0;
        if control
            || has_zero(word ^ (ONES * u64::from(b'"')))
            || has_zero(word ^ (ONES * u64::from(b'\\')))
        {
            break;
        }
        start += 8;
    }
    start
        + text[start..]
            .iter()
            .position(|&b| matches!(b, b'"' | b'\\' | 0..=0x1f))
            .unwrap_or(text.len() - start)
}

/// The bytes of a 16-byte vector that end a run (bit `i` for byte `i`), and its non-ASCII
/// bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn classify16(v: __m128i) -> (u32, u32) {
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    // A byte is at most 0x1f exactly when the unsigned maximum of it and 0x1f is 0x1f.
    let limit = _mm_set1_epi8(0x1f);
    let control = _mm_cmpeq_epi8(_mm_max_epu8(v, limit), limit);
    let stop = _mm_or_si128(_mm_or_si128(quote, backslash), control);
    // `movemask` sets the low 16 bits only: the casts keep every bit.
    (_mm_movemask_epi8(stop) as u32, _mm_movemask_epi8(v) as u32)
}

/// [`classify16`] of a block of the input.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn block16(block: &[u8; 16]) -> (u32, u32) {
    // SAFETY: `block` is 16 readable bytes, the width of the load, and `_mm_loadu_si128` has
    // no alignment requirement.
    let v = unsafe { _mm_loadu_si128(block.as_ptr().cast::<__m128i>()) };
    classify16(v)
}

/// Sixteen bytes at a time from `start`, then the portable scanner for the last few bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn sse2(text: &[u8], mut start: usize) -> (usize, bool) {
    let mut seen = 0;
    while let Some(block) = text[start..].first_chunk::<16>() {
        let (stop, high) = block16(block);
        if stop != 0 {
            return ended(start, stop, high, seen);
        }
        seen |= high;
        start += 16;
    }
    let (len, ascii) = scalar(&text[start..]);
    (start + len, ascii && seen == 0)
}

/// Thirty-two bytes at a time from `start`, then SSE2 for what is left; `seen` is nonzero when
/// the bytes before `start` held a non-ASCII byte.
///
/// # Safety
///
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(text: &[u8], mut start: usize, mut seen: u32) -> (usize, bool) {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_max_epu8, _mm256_movemask_epi8,
        _mm256_or_si256, _mm256_set1_epi8,
    };
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let limit = _mm256_set1_epi8(0x1f);
    while let Some(block) = text[start..].first_chunk::<32>() {
        // SAFETY: `block` is 32 readable bytes, the width of the load, which needs no
        // alignment; the caller guarantees AVX2.
        let v = unsafe { _mm256_loadu_si256(block.as_ptr().cast::<__m256i>()) };
        let control = _mm256_cmpeq_epi8(_mm256_max_epu8(v, limit), limit);
        let stop = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
            control,
        );
        // All 32 bits of the masks are meaningful: the casts reinterpret them.
        let (stop, high) = (
            _mm256_movemask_epi8(stop) as u32,
            _mm256_movemask_epi8(v) as u32,
        );
        if stop != 0 {
            // `stop` is nonzero, so `len` is below 32 and the shift is defined.
            let len = stop.trailing_zeros();
            let before = (1u32 << len) - 1;
            return (start + len as usize, seen == 0 && high & before == 0);
        }
        seen |= high;
        start += 32;
    }
    // A CPU with AVX2 has SSE2: this function's features include `sse2`'s.
    let (len, ascii) = sse2(text, start);
    (len, ascii && seen == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scanner_stops_at_the_first_quote_backslash_or_control_character() {
        for scan in Scan::available() {
            for len in 0..80 {
                for special in [b'"', b'\\', 0x00, 0x1f, b'\n', 0x7f, 0x80, 0xc3] {
                    for at in 0..=len {
                        // Bytes on either side of every class boundary the scan tests:
                        // 0x1f/0x20, '"'/'#', '\\'/']', high bytes.
                        let mut text: Vec<u8> = (0..len)
                            .map(|i| [b' ', b'#', b']', b'!', b'a', 0x7f, b'['][i % 7])
                            .collect();
                        if at < len {
                            text[at] = special;
                        }
                        let expected = text
                            .iter()
                            .position(|&b| matches!(b, b'"' | b'\\' | 0..=0x1f))
                            .unwrap_or(len);
                        let ascii = text[..expected].is_ascii();
                        assert_eq!(scan.plain(&text), (expected, ascii), "{scan:?} {text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_best_scanner_is_available() {
        assert!(Scan::available().contains(&Scan::best()));
    }
}
