//! Renders `SCHEMA.md`, the user-facing reference of every table, from the
//! definitions in [`crate::tables`]. A test fails when the committed copy
//! differs; regenerate with `UPDATE_SCHEMA_DOC=1 cargo test -p hindsight-schemas`.

use std::fmt::Write;

use crate::{layout, tables::TABLES, views::VIEWS, SCHEMA_VERSION};

pub fn render_schema_md() -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# Recording schema (version {SCHEMA_VERSION})");
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "<!-- Generated from schemas/src/tables.rs by `UPDATE_SCHEMA_DOC=1 cargo test -p hindsight-schemas`; do not edit. -->"
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "A recording is a directory: `{}` describes it, and every table is a folder of \
         zstd Parquet files named `<start>-<seq>.{}` that DataFusion, DuckDB \
         (`read_parquet('rec/sched_switch/*.parquet')`), pandas or Spark read as they are. \
         Files being written are hidden (`.<name>{}`) and appear by an atomic rename. \
         Every file carries `{}`, `{}` and `{}` in its key-value metadata.",
        layout::RECORDING_FILE,
        layout::PARQUET_EXT,
        layout::TEMP_SUFFIX,
        layout::key::SCHEMA_VERSION,
        layout::key::TABLE,
        layout::key::HOST,
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "Conventions: `pid` is the process (kernel tgid), `tid` the thread (kernel pid). \
         `ts` is UTC in nanoseconds. Within a row group, rows are sorted by the table's sort key."
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "| table | filled by `--events` | sort key |");
    let _ = writeln!(w, "|---|---|---|");
    for t in TABLES {
        let _ = writeln!(
            w,
            "| [`{0}`](#{0}) | `{1}` | {2} |",
            t.name,
            t.group,
            t.sort_key.join(", ")
        );
    }
    for t in TABLES {
        let _ = writeln!(w);
        let _ = writeln!(w, "## {}", t.name);
        let _ = writeln!(w);
        let _ = writeln!(w, "{}", t.doc);
        let _ = writeln!(w);
        write_columns(w, t.columns);
    }
    let _ = writeln!(w);
    let _ = writeln!(w, "# Views");
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "`hindsight` defines these views over every recording it opens (`hindsight sql`, the reports). \
         Their `ts` is a timestamp like the tables', so `date_bin` bins them. With several recordings \
         open, `host` is their first column and part of every partition."
    );
    let _ = writeln!(w);
    for v in VIEWS {
        let _ = writeln!(w, "- [`{0}`](#{0})", v.name);
    }
    for v in VIEWS {
        let _ = writeln!(w);
        let _ = writeln!(w, "## {}", v.name);
        let _ = writeln!(w);
        let _ = writeln!(w, "{}", v.doc);
        let _ = writeln!(w);
        write_columns(w, v.columns);
        let _ = writeln!(w);
        let _ = writeln!(w, "```sql");
        let _ = writeln!(w, "CREATE VIEW {} AS", v.name);
        let _ = writeln!(w, "{}", v.sql(false));
        let _ = writeln!(w, "```");
    }
    out
}

fn write_columns(w: &mut String, columns: &[crate::Column]) {
    let _ = writeln!(w, "| column | type | null | unit | meaning |");
    let _ = writeln!(w, "|---|---|---|---|---|");
    for c in columns {
        let _ = writeln!(
            w,
            "| `{}` | {} | {} | {} | {} |",
            c.name,
            c.kind.sql_name(),
            if c.nullable { "yes" } else { "" },
            c.unit,
            c.doc
        );
    }
}
