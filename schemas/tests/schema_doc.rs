//! SCHEMA.md is generated from the code: this fails when the committed copy is stale.

use std::path::Path;

#[test]
fn schema_md_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("SCHEMA.md");
    let rendered = hindsight_schemas::doc::render_schema_md();
    if std::env::var_os("UPDATE_SCHEMA_DOC").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "{} is stale: run `UPDATE_SCHEMA_DOC=1 cargo test -p hindsight-schemas` and commit it",
        path.display()
    );
}

#[test]
fn every_table_has_ts_first_and_documented_columns() {
    // Stacks and frames are dictionaries that event rows point into, not events.
    let dictionaries = ["stack", "frame"];
    for t in hindsight_schemas::TABLES {
        if !dictionaries.contains(&t.name) {
            assert_eq!(t.columns[0].name, "ts", "{}", t.name);
        }
        for c in t.columns {
            assert!(!c.doc.is_empty(), "{}.{} has no doc", t.name, c.name);
        }
        for k in t.sort_key {
            assert!(
                t.column(k).is_some(),
                "{} sort key {k} is not a column",
                t.name
            );
        }
    }
}
