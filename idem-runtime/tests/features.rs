//! The crate docs' feature table lists exactly the features `Cargo.toml` declares: a feature
//! added without a row, or a row left for a feature that is gone, fails here.

use std::collections::BTreeSet;

fn declared() -> BTreeSet<String> {
    let manifest = include_str!("../Cargo.toml");
    let features = manifest
        .split("\n[features]\n")
        .nth(1)
        .expect("a [features] table")
        .split("\n[")
        .next()
        .expect("its body");
    features
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains(" = ["))
        .map(|line| line.split(" = ").next().expect("a name").trim().to_owned())
        .filter(|name| name != "default")
        .collect()
}

fn documented() -> BTreeSet<String> {
    include_str!("../src/lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter_map(|row| row.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_feature_table_lists_every_feature_and_no_other() {
    let declared = declared();
    assert!(
        declared.contains("sqlite") && declared.contains("tonic"),
        "{declared:?}"
    );
    assert_eq!(documented(), declared);
}
