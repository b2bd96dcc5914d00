//! Slow, obvious reference implementations the targets compare the real ones against. Written
//! from the documentation (README, rustdoc, the description of version 2 fingerprints), not
//! from the code under test: the JSON canonicaliser parses into a tree by the JSON grammar,
//! keeping each number as its token's text and normalising it by string manipulation (no
//! float anywhere); only string escapes are left to serde_json.

use idem_runtime::{KeyError, MAX_KEY_LEN};

/// An idempotency key header value, read as documented: optional whitespace (space, tab) around
/// it; either bare, or an RFC 8941 string (`"..."` where only `\"` and `\\` are escapes); then
/// 1..=255 visible ASCII characters.
pub fn parse_key(raw: &[u8]) -> Result<String, KeyError> {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    let raw = &raw[start..end];
    let key: Vec<u8> = if raw.first() == Some(&b'"') {
        if raw.len() < 2 || raw.last() != Some(&b'"') {
            return Err(KeyError::Malformed);
        }
        let mut out = Vec::new();
        let mut i = 1;
        while i < raw.len() - 1 {
            match raw[i] {
                b'\\' if i + 1 < raw.len() - 1 && matches!(raw[i + 1], b'"' | b'\\') => {
                    out.push(raw[i + 1]);
                    i += 2;
                }
                b'\\' | b'"' => return Err(KeyError::Malformed),
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        out
    } else {
        raw.to_vec()
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: key.len() });
    }
    if let Some(position) = key.iter().position(|b| !(b'!'..=b'~').contains(b)) {
        return Err(KeyError::InvalidCharacter { position });
    }
    Ok(key.into_iter().map(char::from).collect())
}

/// The canonical form of a JSON document, version 2, read as documented: object keys sorted by
/// their UTF-8 bytes, no whitespace, strings decoded and written back as serde_json writes them,
/// an integer literal as written, any other number as its exact decimal value
/// ([`number_form`]). `None` when the input is not JSON (serde_json's grammar and its limits:
/// invalid UTF-8, lone surrogates, 128 levels of nesting), repeats a key in one object at any
/// depth, or writes an exponent of more than 18 significant digits.
///
/// A recursive-descent parser into a tree, then the tree written out: slow, and obvious.
pub fn canonical_json(input: &[u8]) -> Option<Vec<u8>> {
    let mut reader = Reader { input, pos: 0 };
    reader.whitespace();
    let node = reader.value(0)?;
    reader.whitespace();
    if reader.pos != input.len() {
        return None;
    }
    let mut out = Vec::new();
    node.write(&mut out);
    Some(out)
}

/// serde_json's nesting limit: a document may hold at most 127 levels of arrays and objects.
const MAX_LEVELS: usize = 127;

/// A JSON value as read: scalars already in their canonical text, strings decoded, an object's
/// members sorted by key.
enum Node {
    /// `true`, `false`, `null`, or a number's canonical form.
    Scalar(String),
    Text(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Node::Scalar(text) => out.extend_from_slice(text.as_bytes()),
            Node::Text(text) => out.extend(serde_json::to_vec(text).expect("a string serialises")),
            Node::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write(out);
                }
                out.push(b']');
            }
            Node::Object(members) => {
                out.push(b'{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend(serde_json::to_vec(key).expect("a string serialises"));
                    out.push(b':');
                    value.write(out);
                }
                out.push(b'}');
            }
        }
    }
}

struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    /// JSON's whitespace: space, tab, line feed, carriage return.
    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Consumes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    /// A value inside `levels` levels of arrays and objects.
    fn value(&mut self, levels: usize) -> Option<Node> {
        match self.peek()? {
            b'[' => {
                if levels + 1 > MAX_LEVELS {
                    return None;
                }
                self.pos += 1;
                let mut items = Vec::new();
                self.whitespace();
                if self.eat(b']') {
                    return Some(Node::Array(items));
                }
                loop {
                    self.whitespace();
                    items.push(self.value(levels + 1)?);
                    self.whitespace();
                    if self.eat(b']') {
                        return Some(Node::Array(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'{' => {
                if levels + 1 > MAX_LEVELS {
                    return None;
                }
                self.pos += 1;
                let mut members = Vec::new();
                self.whitespace();
                if !self.eat(b'}') {
                    loop {
                        self.whitespace();
                        let key = self.string()?;
                        self.whitespace();
                        if !self.eat(b':') {
                            return None;
                        }
                        self.whitespace();
                        let value = self.value(levels + 1)?;
                        members.push((key, value));
                        self.whitespace();
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                if members.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                    return None; // a repeated key
                }
                Some(Node::Object(members))
            }
            b'"' => self.string().map(Node::Text),
            b't' => self.word("true"),
            b'f' => self.word("false"),
            b'n' => self.word("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, word: &'static str) -> Option<Node> {
        if !self.input[self.pos..].starts_with(word.as_bytes()) {
            return None;
        }
        self.pos += word.len();
        Some(Node::Scalar(word.to_owned()))
    }

    /// A string: the quoted token (up to the first quote not escaped by a backslash), decoded by
    /// serde_json, which checks its escapes, UTF-8, control characters and surrogates.
    fn string(&mut self) -> Option<String> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let mut end = self.pos + 1;
        loop {
            match *self.input.get(end)? {
                b'\\' => end += 2,
                b'"' => break,
                _ => end += 1,
            }
        }
        let text = serde_json::from_slice::<String>(&self.input[self.pos..=end]).ok()?;
        self.pos = end + 1;
        Some(text)
    }

    /// A number, by the grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    /// (What may follow it is the caller's business: `01` reads `0`, then fails on `1`.)
    fn number(&mut self) -> Option<Node> {
        let start = self.pos;
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.') {
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        let token = std::str::from_utf8(&self.input[start..self.pos]).expect("ASCII");
        number_form(token).map(Node::Scalar)
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }
}

/// The canonical form of a number token that follows JSON's grammar, by string manipulation:
/// an integer literal (no `.`, no exponent) as written; any other number as
/// `[-]<significant digits>e<exponent>`, the digits without leading or trailing zeros (zero is
/// `0e0`, keeping its `-`). `None` when the exponent has more than 18 significant digits.
pub fn number_form(token: &str) -> Option<String> {
    if !token.contains(['.', 'e', 'E']) {
        return Some(token.to_owned());
    }
    let (sign, unsigned) = match token.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", token),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent),
        None => (unsigned, "0"),
    };
    let (exponent_negative, exponent) = match exponent.as_bytes().first() {
        Some(b'-') => (true, &exponent[1..]),
        Some(b'+') => (false, &exponent[1..]),
        _ => (false, exponent),
    };
    let exponent = exponent.trim_start_matches('0');
    if exponent.len() > 18 {
        return None;
    }
    let mut exponent: i128 = if exponent.is_empty() {
        0
    } else {
        exponent.parse().expect("digits")
    };
    if exponent_negative {
        exponent = -exponent;
    }
    // `int.frac` × 10^e is the integer `intfrac` × 10^(e - len(frac)).
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{integer}{fraction}");
    exponent -= fraction.len() as i128;
    let significant = all.trim_start_matches('0');
    if significant.is_empty() {
        return Some(format!("{sign}0e0"));
    }
    let trimmed = significant.trim_end_matches('0');
    exponent += (significant.len() - trimmed.len()) as i128;
    if exponent.unsigned_abs().to_string().len() > 18 {
        return None;
    }
    Some(format!("{sign}{trimmed}e{exponent}"))
}

/// An `application/x-www-form-urlencoded` body's pairs, in document order, read as documented:
/// split on `&`, empty segments dropped, name and value split at the first `=` (no `=`: an
/// empty value), each `+` turned into a space and then percent-decoded to bytes.
pub fn form_pairs(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    body.split(|&b| b == b'&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| match segment.iter().position(|&b| b == b'=') {
            Some(eq) => (form_decode(&segment[..eq]), form_decode(&segment[eq + 1..])),
            None => (form_decode(segment), Vec::new()),
        })
        .collect()
}

/// `+` to a space, then `%XX` (two hexadecimal digits, either case) to its byte; a `%` not
/// followed by two hexadecimal digits stays as it is.
pub fn form_decode(part: &[u8]) -> Vec<u8> {
    let spaced: Vec<u8> = part
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut out = Vec::new();
    let mut i = 0;
    while i < spaced.len() {
        if spaced[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                spaced.get(i + 1).copied().and_then(hex),
                spaced.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(hi * 16 + lo);
            i += 3;
        } else {
            out.push(spaced[i]);
            i += 1;
        }
    }
    out
}

/// A form body's canonical form: its pairs ([`form_pairs`]) ordered by name bytes, the pairs
/// of one name in document order (the names taken in ascending order, each one's pairs picked
/// out in turn), each name and value prefixed by its length as a big-endian `u64`.
pub fn canonical_form(body: &[u8]) -> Vec<u8> {
    let pairs = form_pairs(body);
    let names: std::collections::BTreeSet<&Vec<u8>> = pairs.iter().map(|(name, _)| name).collect();
    let mut out = Vec::new();
    for name in names {
        for (n, value) in pairs.iter().filter(|(n, _)| n == name) {
            for part in [n, value] {
                out.extend_from_slice(&(part.len() as u64).to_be_bytes());
                out.extend_from_slice(part);
            }
        }
    }
    out
}

/// The attribute's ttl grammar: digits, then exactly one of `s`, `m`, `h`, `d`. `None` outside
/// the grammar; else the seconds if within 1 s ..= 30 d, or which bound it breaks (`"too
/// short"`, `"too long"`).
pub fn strict_ttl(text: &str) -> Option<Result<u64, &'static str>> {
    let unit = match text.chars().last()? {
        's' => 1u128,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let capped = u128::from(u64::MAX) + 1;
    let n = digits
        .bytes()
        .fold(0u128, |n, d| (n * 10 + u128::from(d - b'0')).min(capped));
    let secs = n.saturating_mul(unit);
    Some(match secs {
        0 => Err("too short"),
        s if s > 30 * 86_400 => Err("too long"),
        s => Ok(s as u64),
    })
}
