//! The reference JSON canonicaliser (version 2), written from the documentation, not from the
//! code under test: a recursive-descent parser into a tree by the JSON grammar, keeping each
//! number as its token's text and normalising it by string manipulation (no float anywhere);
//! only string escapes are left to serde_json. It depends on serde_json alone, so that
//! idem-core's differential property test compiles this same file (by `#[path]`) and runs it
//! against every string scanner in CI.

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
