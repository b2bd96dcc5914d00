//! Just enough PromQL to find what a query uses (the series it selects, the labels it matches or
//! groups by, the label values it names), and the Prometheus text format to find what a recorder
//! exported.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

/// Functions and aggregations the queries may call (and Grafana's `label_values`).
const FUNCTIONS: &[&str] = &[
    "abs",
    "avg",
    "avg_over_time",
    "bottomk",
    "clamp_max",
    "clamp_min",
    "count",
    "delta",
    "deriv",
    "histogram_quantile",
    "increase",
    "irate",
    "label_values",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "quantile",
    "rate",
    "scalar",
    "sum",
    "sum_over_time",
    "time",
    "topk",
    "vector",
];
/// Aggregations, whose `by (..)`/`without (..)` may come before their argument.
const AGGREGATIONS: &[&str] = &[
    "avg", "bottomk", "count", "max", "min", "quantile", "sum", "topk",
];
/// Clauses followed by a list of labels.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Other keywords.
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    /// A number, or a duration (`5m`).
    Number,
    /// A range or subquery, `[5m]`, `[$__rate_interval]`: its content is never a name.
    Range,
    /// A Grafana variable, `$x` or `${x}`.
    Var,
    Punct(String),
}

fn punct(token: Option<&Token>, p: &str) -> bool {
    matches!(token, Some(Token::Punct(q)) if q == p)
}

fn tokens(query: &str) -> Vec<Token> {
    let chars: Vec<char> = query.chars().collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        i += 1;
        match c {
            _ if c.is_whitespace() => {}
            '"' => {
                let mut value = String::new();
                while chars.get(i).is_some_and(|&c| c != '"') {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    value.push(chars[i]);
                    i += 1;
                }
                assert!(i < chars.len(), "an unterminated string in {query}");
                i += 1;
                out.push(Token::Str(value));
            }
            '[' => {
                let end = chars[i..].iter().position(|&c| c == ']');
                i += end.unwrap_or_else(|| panic!("an unclosed range in {query}")) + 1;
                out.push(Token::Range);
            }
            '$' => {
                if chars.get(i) == Some(&'{') {
                    i += chars[i..].iter().position(|&c| c == '}').unwrap() + 1;
                } else {
                    while chars.get(i).is_some_and(|&c| word(c)) {
                        i += 1;
                    }
                }
                out.push(Token::Var);
            }
            _ if c.is_ascii_digit() || c == '.' => {
                while chars.get(i).is_some_and(|&c| word(c) || c == '.') {
                    i += 1;
                }
                out.push(Token::Number);
            }
            _ if word(c) => {
                while chars.get(i).is_some_and(|&c| word(c)) {
                    i += 1;
                }
                out.push(Token::Ident(chars[start..i].iter().collect()));
            }
            _ => {
                let two: String = chars[start..(start + 2).min(chars.len())].iter().collect();
                let op = if ["=~", "!~", "!=", "==", ">=", "<="].contains(&two.as_str()) {
                    i += 1;
                    two
                } else if "(){},=<>/*+-^%".contains(c) {
                    c.to_string()
                } else {
                    panic!("unexpected `{c}` in {query}")
                };
                out.push(Token::Punct(op));
            }
        }
    }
    out
}

/// Where each parenthesis closes (and opens).
fn matching(tokens: &[Token], query: &str) -> BTreeMap<usize, usize> {
    let mut open = Vec::new();
    let mut pairs = BTreeMap::new();
    for (i, token) in tokens.iter().enumerate() {
        if punct(Some(token), "(") {
            open.push(i);
        } else if punct(Some(token), ")") {
            let start = open
                .pop()
                .unwrap_or_else(|| panic!("unbalanced `)` in {query}"));
            pairs.insert(start, i);
            pairs.insert(i, start);
        }
    }
    assert!(open.is_empty(), "unbalanced `(` in {query}");
    pairs
}

/// What queries use, each with the query it came from.
#[derive(Debug, Default)]
pub(crate) struct Uses {
    series: Vec<(String, String)>,
    labels: Vec<(String, String, String)>,
    values: Vec<(String, String, String, String)>,
}

impl Uses {
    /// Adds what `query` uses. Panics on what is neither one of idem's metrics, nor a function,
    /// a keyword or a label.
    pub(crate) fn add(&mut self, query: &str) {
        let t = tokens(query);
        let pairs = matching(&t, query);
        let q = query.to_owned();
        let mut metrics: Vec<(usize, String)> = Vec::new();
        let mut groupings: Vec<(Vec<String>, RangeInclusive<usize>)> = Vec::new();
        let mut i = 0;
        while i < t.len() {
            let Token::Ident(name) = &t[i] else {
                assert!(
                    !punct(t.get(i), "{"),
                    "a selector without a metric name: {query}"
                );
                i += 1;
                continue;
            };
            // A call, or an aggregation whose `by (..)` comes first.
            let grouped =
                matches!(t.get(i + 1), Some(Token::Ident(g)) if g == "by" || g == "without");
            let opens = punct(t.get(i + 1), "(");
            if GROUPING.contains(&name.as_str()) {
                assert!(opens, "`{name}` without its labels: {query}");
                let close = pairs[&(i + 1)];
                let labels = t[i + 2..close]
                    .iter()
                    .filter(|token| !punct(Some(token), ","))
                    .map(|token| match token {
                        Token::Ident(label) => label.clone(),
                        other => panic!("{other:?} among the labels of `{name}`: {query}"),
                    })
                    .collect();
                let body = match i.checked_sub(1).map(|before| &t[before]) {
                    Some(Token::Ident(f)) if AGGREGATIONS.contains(&f.as_str()) => {
                        assert!(punct(t.get(close + 1), "("), "`{f} {name} (..)`: {query}");
                        close + 1..=pairs[&(close + 1)]
                    }
                    Some(Token::Punct(p)) if p == ")" => pairs[&(i - 1)]..=i - 1,
                    _ => 0..=t.len() - 1,
                };
                groupings.push((labels, body));
                i = close + 1;
            } else if name == "label_values" {
                let (Some(Token::Ident(metric)), Some(Token::Ident(label))) =
                    (t.get(i + 2), t.get(i + 4))
                else {
                    panic!("`label_values(metric, label)`: {query}");
                };
                assert!(
                    is_idem(metric),
                    "`{metric}` is not one of idem's metrics: {query}"
                );
                self.series.push((q.clone(), metric.clone()));
                self.labels.push((q.clone(), metric.clone(), label.clone()));
                i = pairs[&(i + 1)] + 1;
            } else if opens || grouped {
                assert!(
                    FUNCTIONS.contains(&name.as_str()),
                    "unknown function `{name}`: {query}"
                );
                i += 1;
            } else if KEYWORDS.contains(&name.as_str()) {
                i += 1;
            } else {
                assert!(
                    is_idem(name),
                    "`{name}` is neither one of idem's metrics nor a PromQL function or keyword: {query}"
                );
                metrics.push((i, name.clone()));
                self.series.push((q.clone(), name.clone()));
                i += 1;
                if punct(t.get(i), "{") {
                    i = self.matchers(&t, i + 1, name, query);
                }
            }
        }
        for (labels, body) in groupings {
            let inside: Vec<&String> = metrics
                .iter()
                .filter(|(at, _)| body.contains(at))
                .map(|(_, metric)| metric)
                .collect();
            assert!(!inside.is_empty(), "a grouping over no metric: {query}");
            for metric in inside {
                for label in &labels {
                    self.labels.push((q.clone(), metric.clone(), label.clone()));
                }
            }
        }
    }

    /// The matchers `label op "value", ..}` of `metric` from `i`; where they end.
    fn matchers(&mut self, t: &[Token], mut i: usize, metric: &str, query: &str) -> usize {
        let q = query.to_owned();
        loop {
            match (t.get(i), t.get(i + 1), t.get(i + 2)) {
                (Some(Token::Punct(close)), ..) if close == "}" => return i + 1,
                (Some(Token::Ident(label)), Some(Token::Punct(op)), Some(Token::Str(value))) => {
                    self.labels
                        .push((q.clone(), metric.to_owned(), label.clone()));
                    // A literal value (or alternatives of literals) must be one exported; a
                    // variable or a pattern is not checked.
                    let literal = value
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || "_|".contains(c));
                    if (op == "=" || op == "=~") && literal {
                        for value in value.split('|') {
                            let value = value.to_owned();
                            self.values
                                .push((q.clone(), metric.to_owned(), label.clone(), value));
                        }
                    }
                    i += 3;
                    if punct(t.get(i), ",") {
                        i += 1;
                    }
                }
                other => panic!(
                    "a matcher of {metric} that is not `label op \"value\"` ({other:?}): {query}"
                ),
            }
        }
    }

    /// The series used.
    pub(crate) fn metrics(&self) -> BTreeSet<String> {
        self.series
            .iter()
            .map(|(_, series)| series.clone())
            .collect()
    }
}

fn is_idem(name: &str) -> bool {
    name.strip_prefix("idempotency_").is_some_and(|rest| {
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    })
}

/// A rendering of a Prometheus recorder: its families' types, and each series' labels and their
/// values.
#[derive(Debug)]
pub(crate) struct Exported {
    types: BTreeMap<String, String>,
    series: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Exported {
    pub(crate) fn parse(text: &str) -> Self {
        let mut types = BTreeMap::new();
        let mut series: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            if let Some(family) = line.strip_prefix("# TYPE ") {
                let (name, kind) = family.split_once(' ').expect("`# TYPE name kind`");
                types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let end = line.find(['{', ' ']).expect("a sample");
            let labels = series.entry(line[..end].to_owned()).or_default();
            let Some(mut rest) = line[end..].strip_prefix('{') else {
                continue;
            };
            while let Some((label, after)) = rest.split_once("=\"") {
                let mut value = String::new();
                let mut chars = after.char_indices();
                let close = loop {
                    match chars.next().expect("a closed label value") {
                        (_, '\\') => value.push(chars.next().unwrap().1),
                        (at, '"') => break at,
                        (_, c) => value.push(c),
                    }
                };
                labels.entry(label.to_owned()).or_default().insert(value);
                rest = after[close + 1..].trim_start_matches(',');
                if rest.starts_with('}') {
                    break;
                }
            }
        }
        Self { types, series }
    }

    /// idem's metric families and their types.
    pub(crate) fn families(&self) -> BTreeMap<String, String> {
        let idem = self.types.iter().filter(|(name, _)| is_idem(name));
        idem.map(|(name, kind)| (name.clone(), kind.clone()))
            .collect()
    }

    /// The family of a series: itself, or the histogram whose `_bucket`, `_sum` or `_count` it is.
    pub(crate) fn family_of(&self, series: &str) -> String {
        ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| series.strip_suffix(suffix))
            .find(|family| {
                self.types
                    .get(*family)
                    .is_some_and(|kind| kind == "histogram")
            })
            .unwrap_or(series)
            .to_owned()
    }

    /// The labels of a family's series, but a histogram's `le`.
    pub(crate) fn labels_of(&self, family: &str) -> BTreeSet<String> {
        let series = self
            .series
            .iter()
            .filter(|(name, _)| self.family_of(name) == family);
        series
            .flat_map(|(_, labels)| labels.keys().cloned())
            .filter(|label| label != "le")
            .collect()
    }

    /// The values of `label` on `series`.
    pub(crate) fn values(&self, series: &str, label: &str) -> BTreeSet<String> {
        self.series
            .get(series)
            .and_then(|labels| labels.get(label))
            .cloned()
            .unwrap_or_default()
    }

    /// Every series, label and value `uses` names, or what is missing.
    pub(crate) fn check(&self, uses: &Uses) -> Result<(), String> {
        let mut missing = Vec::new();
        for (query, series) in &uses.series {
            if !self.series.contains_key(series) {
                missing.push(format!("no series `{series}`, in: {query}"));
            }
        }
        for (query, series, label) in &uses.labels {
            let has = self
                .series
                .get(series)
                .is_some_and(|labels| labels.contains_key(label));
            if !has {
                missing.push(format!("no label `{label}` on `{series}`, in: {query}"));
            }
        }
        for (query, series, label, value) in &uses.values {
            if !self.values(series, label).contains(value) {
                missing.push(format!(
                    "no `{label}=\"{value}\"` on `{series}`, in: {query}"
                ));
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("\n"))
        }
    }
}
