//! Renders `SCHEMA.md`, the user-facing reference of every table, from the
//! definitions in [`crate::tables`]. A test fails when the committed copy
//! differs; regenerate with `UPDATE_SCHEMA_DOC=1 cargo test -p hindsight-schemas`.

use std::fmt::Write;

use crate::{all_tables, derived, layout, views::VIEWS, SCHEMA_VERSION};

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
    let _ = writeln!(
        w,
        "Tables of group `{}` are not recorded but derived from the recorded ones by \
         `hindsight index` (see below, and the module doc of `schemas/src/derived.rs`).",
        derived::DERIVED_GROUP
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "| table | filled by `--events` | sort key |");
    let _ = writeln!(w, "|---|---|---|");
    for t in all_tables() {
        let _ = writeln!(
            w,
            "| [`{0}`](#{0}) | `{1}` | {2} |",
            t.name,
            t.group,
            t.sort_key.join(", ")
        );
    }
    for t in all_tables() {
        if t.name == derived::DERIVED_TABLES[0].name {
            let _ = writeln!(w);
            let _ = writeln!(w, "# Derived tables");
            let _ = writeln!(w);
            let _ = writeln!(w, "{}", derived_contract());
        }
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

/// The contract every derived table shares, for people.
fn derived_contract() -> &'static str {
    "Written by `hindsight index DIR` beside the raw tables, as plain Parquet: \
     `<table>/<name>.parquet` for every closed `sched_switch` chunk `<name>.parquet`, holding the rows \
     whose pairing completed while that chunk was read (a row's `ts` may lie in an earlier chunk); a \
     recording is *indexed* when every `sched_switch` chunk has its file in each derived table, and \
     only then do reports read them. Row groups hold the rows paired in one stretch of time, sorted by the sort key below, with page statistics.\n\n\
     What pairs with what is exactly what the views `cpu_time`, `off_cpu` and `runq_latency` pair \
     (below), in one pass over the events in time order, so each derived table equals its view row \
     for row, except at these edges:\n\n\
     - **Chunk edges** are invisible: the pass carries open intervals from one chunk to the next, and \
     pairs an event only once every source has been read one second past it, so rows that reached \
     the recorder late still pair in time order (`hindsight index` reports any later than that).\n\
     - **A recorder restart** (a new session in `recording.json`) ends every open interval unpaired: \
     no row spans the gap, while the views pair across it.\n\
     - **A dead thread** (`prev_state` `X` or `Z`) has no off-CPU interval after its last switch-out, \
     since its tid may be reused.\n\
     - **The end of the recording** leaves open intervals unpaired, as the views do.\n\
     - **Lost events** (`loss` rows for `sched_switch`, `sched_wakeup`) pair whatever events surround \
     them, as the views do: a slice whose end names another thread is dropped, an off-CPU interval or \
     a wait may come out too long. Reports print the loss beside each interval."
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
