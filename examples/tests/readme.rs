//! The README's quick start is `src/bin/quickstart.rs`, which this package compiles: the two
//! cannot drift apart. And the README's `[dependencies]` name every crate the quick start uses,
//! so it compiles when copied into a new crate.

use std::path::Path;

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The body of the first fenced block of `lang` after the heading `heading`.
fn block(markdown: &str, heading: &str, lang: &str) -> String {
    let section = markdown
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("the README has a `{heading}` section"))
        .1;
    let start = section
        .split_once(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("`{heading}` has a ```{lang} block"))
        .1;
    start
        .split_once("\n```")
        .expect("the block is closed")
        .0
        .to_owned()
        + "\n"
}

/// The quick start file without its `//!` header (which says where it comes from).
fn quickstart() -> String {
    let file = read("src/bin/quickstart.rs");
    let code = file
        .lines()
        .skip_while(|line| line.starts_with("//!"))
        .skip_while(|line| line.is_empty())
        .collect::<Vec<_>>();
    code.join("\n") + "\n"
}

#[test]
fn the_readme_quick_start_is_the_compiled_quickstart_example() {
    let readme = read("../README.md");
    let shown = block(&readme, "## Quick start", "rust");
    let compiled = quickstart();
    if shown != compiled {
        let line = shown
            .lines()
            .zip(compiled.lines())
            .position(|(a, b)| a != b)
            .map_or(shown.lines().count().min(compiled.lines().count()), |i| i);
        panic!(
            "README.md's quick start differs from examples/src/bin/quickstart.rs at line {}:\n  \
             README: {:?}\n  file:   {:?}\ncopy the file (without its `//!` header) into the README",
            line + 1,
            shown.lines().nth(line),
            compiled.lines().nth(line),
        );
    }
}

#[test]
fn the_readme_dependencies_cover_every_crate_the_quick_start_uses() {
    let readme = read("../README.md");
    let toml = block(&readme, "## Install", "toml");
    let code = quickstart();
    // Crate roots: the first segment of `use` paths, and of paths like `sqlx::query(..)` in
    // other lines (lowercase, followed by `::` and a name: `get::<T>` is a turbofish,
    // `Type::new` a type).
    let mut used: Vec<String> = Vec::new();
    for line in code.lines() {
        if let Some(path) = line.strip_prefix("use ") {
            used.extend(path.split("::").next().map(str::to_owned));
            continue;
        }
        // Paths, not string literals (`"sqlite::memory:"`): every other piece between quotes.
        let line: String = line.split('"').step_by(2).collect::<Vec<_>>().join("\"\"");
        let line = line.as_str();
        for (at, _) in line.match_indices("::") {
            let before = &line[..at];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(0, |i| i + 1);
            let root = before[start..].split("::").next().unwrap_or_default();
            let next = line[at + 2..].chars().next().unwrap_or(' ');
            if root.starts_with(|c: char| c.is_ascii_lowercase()) && next.is_ascii_alphabetic() {
                used.push(root.to_owned());
            }
        }
    }
    // Not crates: the file's own functions (`create_charge::call`, the handler's struct).
    let local: Vec<&str> = code
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .collect();
    used.retain(|root| !["std", "core", "crate", "self", "super"].contains(&root.as_str()));
    used.retain(|root| !local.contains(&root.as_str()));
    used.sort_unstable();
    used.dedup();
    assert!(
        used.iter().any(|u| u == "idem_runtime") && used.iter().any(|u| u == "tokio"),
        "{used:?}"
    );
    for krate in used {
        let name = krate.replace('_', "-");
        assert!(
            toml.lines()
                .any(|line| line.starts_with(&format!("{name} = "))),
            "the quick start uses `{krate}`, which README.md's `[dependencies]` do not list"
        );
    }
}
