//! One name per concept: no two types, traits or aliases declared `pub` in the library crates of
//! the family share a name, so a reader (and an import) never has to ask which `Case` or
//! `Consumer` is meant. Read from the sources: a `pub` item declared twice fails here, with the
//! files that declare it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Each `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The name of a `pub struct`, `pub enum`, `pub trait`, `pub type` or `pub union` declared on
/// `line` (not `pub(crate)` and the like, which are not public).
fn declared(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("pub ")?;
    let rest = ["struct ", "enum ", "trait ", "type ", "union "]
        .iter()
        .find_map(|kind| rest.strip_prefix(kind))?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|name| !name.is_empty())
}

#[test]
fn no_two_public_types_of_the_family_share_a_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut crates: Vec<PathBuf> = fs::read_dir(&root)
        .expect("the workspace")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // The macros crate exports macros only; a crate's tests are not its API.
            name.starts_with("idem-") && name != "idem-macros" && path.join("src").is_dir()
        })
        .collect();
    crates.sort();
    assert!(crates.len() >= 10, "{crates:?}");
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for krate in &crates {
        let mut files = Vec::new();
        sources(&krate.join("src"), &mut files);
        for file in files.into_iter().filter(|f| !f.ends_with("tests.rs")) {
            let text = fs::read_to_string(&file).expect("a source file");
            // Unit tests' helpers are not API: stop at a file's inline test module, which
            // closes it (`tests.rs` files are skipped below).
            let api = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
            for name in api.lines().filter_map(declared) {
                let at = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                by_name.entry(name.to_owned()).or_default().push(at);
            }
        }
    }
    assert!(by_name.contains_key("Idempotency"), "the scan finds types");
    let shared: Vec<_> = by_name.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(shared.is_empty(), "declared more than once: {shared:#?}");
}

#[test]
fn declarations_are_read_as_rust_writes_them() {
    assert_eq!(declared("pub struct Record {"), Some("Record"));
    assert_eq!(declared("    pub enum Outcome<T> {"), Some("Outcome"));
    assert_eq!(declared("pub trait Store: Send {"), Some("Store"));
    assert_eq!(declared("pub type Result<T> = ..;"), Some("Result"));
    assert_eq!(declared("pub(crate) struct Inner;"), None);
    assert_eq!(declared("pub fn run() {}"), None);
}
