//! An object's members as the writer notes them, and how they are put in key order: by the rank
//! of their keys' first eight bytes, then by the bytes themselves, then copied in that order.

use std::cmp::Ordering;

/// Marks a key decoded into `Writer::keys` (one written with escapes) in [`Member::key_end`]:
/// offsets into a slice never reach `isize::MAX`, so the top bit is free.
pub(super) const DECODED: usize = 1 << (usize::BITS - 1);

/// One member of an object being read: its key and where `"key":value` is in the output. Plain
/// words, no enum: a member is written with a few stores and read back whole.
#[derive(Clone, Copy)]
pub(super) struct Member {
    /// The key's first eight bytes, zero-padded, as a big-endian number: comparing two ranks
    /// orders most keys without reading them again.
    pub(super) rank: u64,
    /// Where the key's bytes are: `input[key_start..key_end]`, or, with [`DECODED`] set in
    /// `key_end`, in `Writer::keys`.
    pub(super) key_start: usize,
    pub(super) key_end: usize,
    pub(super) start: usize,
    /// Where `"key":value` ends in the output: noted when the next member starts (a comma
    /// before it), [`LAST`] until then (the object's end, once it closes).
    pub(super) end: usize,
}

/// [`Member::end`] of an object's last member: it ends where the object does.
pub(super) const LAST: usize = usize::MAX;

/// The order of two members' keys, byte by byte: the ranks decide unless they tie (a shorter
/// key ranks as if padded with zero bytes, so the bytes then decide).
#[inline(always)]
pub(super) fn order(a: &Member, b: &Member, input: &[u8], keys: &[u8]) -> Ordering {
    order_of(a, b.rank, b.key_start, b.key_end, input, keys)
}

/// [`order`] of `a` and a member not built yet, given by its key's rank and place: in plain
/// words, so that the new member is built once, where it is stored, and never read back from
/// the stack (a wide read of narrow writes stalls).
#[inline(always)]
pub(super) fn order_of(
    a: &Member,
    rank: u64,
    key_start: usize,
    key_end: usize,
    input: &[u8],
    keys: &[u8],
) -> Ordering {
    match a.rank.cmp(&rank) {
        Ordering::Equal => tie(a.key_start, a.key_end, key_start, key_end, input, keys),
        unequal => unequal,
    }
}

/// The order of two keys whose first eight bytes are alike, each given by its place
/// ([`Member::key_start`], [`Member::key_end`]).
#[inline(never)]
pub(super) fn tie(
    a_start: usize,
    a_end: usize,
    b_start: usize,
    b_end: usize,
    input: &[u8],
    keys: &[u8],
) -> Ordering {
    let bytes = |start: usize, end: usize| {
        if end & DECODED == 0 {
            &input[start..end]
        } else {
            &keys[start..end & !DECODED]
        }
    };
    bytes(a_start, a_end).cmp(bytes(b_start, b_end))
}

/// The first eight bytes of `key`, zero-padded, as a big-endian number; `word` holds them when
/// eight bytes were there to read.
#[inline(always)]
pub(super) fn rank(key: &[u8], word: Option<&[u8; 8]>) -> u64 {
    match (word, key.len()) {
        (Some(word), len) => {
            let word = u64::from_be_bytes(*word);
            if len >= 8 {
                word
            } else {
                // The key's `len` bytes are the top ones: keep them, clear the rest.
                word & !(u64::MAX >> (len * 8))
            }
        }
        (None, _) => {
            let mut first = [0; 8];
            let len = key.len().min(8);
            first[..len].copy_from_slice(&key[..len]);
            u64::from_be_bytes(first)
        }
    }
}

/// The largest object whose members are put in order by index (see [`sort_small`]).
pub(super) const SMALL: usize = 32;

/// Puts `order` (indices into `members`, at most [`SMALL`]) in the order of their members' keys,
/// stably (a repeated key's values stay in document order): insertion sort, as objects are
/// small and mostly in order. The members stay where they are: moving 40-byte members read
/// back words written a moment before, which stalls, where a byte index does not.
pub(super) fn sort_small(order: &mut [u8], members: &[Member], input: &[u8], keys: &[u8]) {
    for i in 1..order.len() {
        let index = order[i];
        let member = &members[usize::from(index)];
        let mut j = i;
        while j > 0 && self::order(&members[usize::from(order[j - 1])], member, input, keys).is_gt()
        {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = index;
    }
}

/// Appends `out[start..end]` to `out`. Most members are short: one of up to 16 bytes is copied
/// as a 16-byte block and the length set after, which the compiler writes as two moves, where
/// `Vec::extend_from_within` calls `memcpy` (a call per member weighed a tenth of the time).
#[inline(always)]
pub(super) fn extend_from_within(out: &mut Vec<u8>, start: usize, end: usize) {
    let len = out.len();
    match out.get(start..).and_then(<[u8]>::first_chunk::<16>) {
        Some(&block) if end - start <= 16 => {
            out.extend_from_slice(&block);
            out.truncate(len + (end - start));
        }
        _ => out.extend_from_within(start..end),
    }
}
