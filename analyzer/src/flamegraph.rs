//! `hindsight flamegraph`: folded stacks and SVG flame graphs, on-CPU from
//! `cpu_sample`, off-CPU from the `off_cpu` view (or its derived table),
//! each one SQL statement.
//!
//! The statement returns one row per distinct stack: `stack` (frames root
//! first, separated by `;`, the thread's `comm` as the root) and `weight`
//! (samples on-CPU; nanoseconds blocked off-CPU). That is the folded format
//! flamegraph.pl and inferno read, once each row is printed as
//! `stack weight`. `stack` and `frame` rows can repeat (a frame written
//! unnamed, then named; older recordings' sessions), so the statement
//! deduplicates them (`DISTINCT`, `GROUP BY frame_id`).
//!
//! The statement is built from two parts the exports reuse, so every
//! output weighs and names stacks the same way: [`weights_cte`] (the pprof
//! export's weights) and [`stack_frames_ctes`] (stacks to named frames, for
//! pprof and for the Perfetto export's CPU samples).
//!
//! Off-CPU time is the `off_cpu` view's intervals (from a thread's switch
//! out to its next switch in), each attributed to the stack recorded as it
//! left: one pairing for the flame graph, the exports and the reports.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use datafusion::prelude::SessionContext;

use crate::{
    catalog, recording, report,
    when::{self, When},
};

/// Which time a flame graph weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Samples of running threads (`cpu_sample`).
    OnCpu,
    /// Nanoseconds threads spent switched out (`sched_switch`).
    OffCpu,
}

/// What to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Folded,
    Svg,
}

/// Everything `flamegraph` runs with, resolved from its flags.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    pub pid: Option<i32>,
    pub tid: Option<i32>,
    pub comm: Option<String>,
    /// UTC ns, inclusive.
    pub from: Option<i64>,
    /// UTC ns, exclusive.
    pub to: Option<i64>,
    pub format: Format,
    /// Write here instead of stdout.
    pub output: Option<PathBuf>,
    pub show_sql: bool,
    /// Every recording has its derived tables: off-CPU time is read from
    /// `off_cpu_interval` instead of pairing switches in the query.
    pub indexed: bool,
}

/// A SQL string literal.
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The WHERE conditions of the filters, on the columns `cpu_sample` and
/// the `off_cpu` intervals share (`pid`, `tid`, `comm`, `ts`).
fn conditions(o: &Options) -> Vec<String> {
    let mut c = Vec::new();
    if let Some(pid) = o.pid {
        c.push(format!("pid = {pid}"));
    }
    if let Some(tid) = o.tid {
        c.push(format!("tid = {tid}"));
    }
    if let Some(comm) = &o.comm {
        c.push(format!("comm = {}", quote(comm)));
    }
    if let Some(from) = o.from {
        c.push(format!("ts >= {}", crate::report::timestamp(from)));
    }
    if let Some(to) = o.to {
        c.push(format!("ts < {}", crate::report::timestamp(to)));
    }
    c
}

fn where_clause(conditions: &[String]) -> String {
    if conditions.is_empty() {
        String::new()
    } else {
        format!("\n  WHERE {}", conditions.join("\n    AND "))
    }
}

/// The `weights` CTE: one row per (comm, stack_id) with the weight of the
/// mode (samples on-CPU, nanoseconds off-CPU), filtered by the options.
/// The pprof export runs it too, so both weigh the same things.
pub fn weights_cte(o: &Options) -> String {
    match o.mode {
        Mode::OnCpu => format!(
            "weights AS (\n  SELECT CAST(comm AS VARCHAR) AS comm, stack_id, count(*) AS weight\n  FROM cpu_sample{}\n  GROUP BY 1, 2\n)",
            where_clause(&conditions(o))
        ),
        Mode::OffCpu => {
            let intervals = report::paired("off_cpu", o.indexed);
            format!(
                "weights AS (\n  SELECT CAST(comm AS VARCHAR) AS comm, stack_id, sum(dur_ns) AS weight\n  FROM {intervals}{}\n  GROUP BY 1, 2\n)",
                where_clause(&conditions(o))
            )
        }
    }
}

/// The stack-resolution CTEs, the one place stacks become named frames:
/// `frames` (one row per `frame_id`, its rows deduplicated) and
/// `named` (`stack_id`, `depth` (0 the leaf), `frame_id`, `name` as the
/// flame graph shows it, and the frame's `kind`, `module`, `build_id`,
/// `address`, `file_offset`, `function`, `file`, `line`) for the stacks
/// whose `stack_id` the relation `stacks` holds.
pub fn stack_frames_ctes(stacks: &str) -> String {
    format!(
        "frames AS (\n  \
         SELECT frame_id, max(CAST(kind AS VARCHAR)) AS kind, max(function) AS function,\n    \
         max(module) AS module, max(build_id) AS build_id, max(address) AS address,\n    \
         max(file_offset) AS file_offset, max(file) AS file, max(line) AS line\n  \
         FROM frame\n  \
         GROUP BY frame_id\n\
         ),\n\
         named AS (\n  \
         SELECT s.stack_id, s.depth, s.frame_id,\n    \
         CASE\n      \
         WHEN f.function IS NOT NULL\n        \
         THEN replace(f.function, ';', ':') || CASE WHEN f.kind = 'kernel' THEN '_[k]' ELSE '' END\n      \
         WHEN f.file_offset IS NOT NULL\n        \
         THEN '[' || regexp_replace(f.module, '^.*/', '') || '+0x' || to_hex(CAST(f.file_offset AS BIGINT)) || ']'\n      \
         WHEN f.module IS NOT NULL THEN f.module\n      \
         ELSE '[unknown]'\n    \
         END AS name,\n    \
         f.kind, f.module, f.build_id, f.address, f.file_offset, f.function, f.file, f.line\n  \
         FROM (SELECT DISTINCT stack_id, depth, frame_id FROM stack) s\n  \
         LEFT JOIN frames f ON f.frame_id = s.frame_id\n  \
         WHERE s.stack_id IN (SELECT stack_id FROM {stacks})\n\
         )"
    )
}

/// The statement: `weights` (comm, stack_id, weight) per mode, then the
/// stacks' named frames folded into one line per stack, the same for both.
pub fn sql(o: &Options) -> String {
    format!(
        "WITH {},\n\
         {},\n\
         folded AS (\n  \
         SELECT stack_id, string_agg(name, ';' ORDER BY depth DESC) AS frames\n  \
         FROM named\n  \
         GROUP BY stack_id\n\
         )\n\
         SELECT CASE WHEN f.frames IS NULL THEN w.comm ELSE w.comm || ';' || f.frames END AS stack,\n  \
         CAST(sum(w.weight) AS BIGINT) AS weight\n\
         FROM weights w\n\
         LEFT JOIN folded f ON f.stack_id = w.stack_id\n\
         GROUP BY 1\n\
         ORDER BY 1",
        weights_cte(o),
        stack_frames_ctes("weights")
    )
}

/// Folded lines (`frame;frame;... weight`) from the statement's result
/// (whatever string and integer types the engine chose for its columns).
pub fn folded_lines(batches: &[RecordBatch]) -> arrow::error::Result<Vec<String>> {
    let mut lines = Vec::new();
    for batch in batches {
        let stacks = cast(batch.column(0), &DataType::Utf8)?;
        let weights = cast(batch.column(1), &DataType::Int64)?;
        let stacks = stacks.as_string::<i32>();
        let weights = weights.as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            if stacks.is_null(row) || weights.is_null(row) || weights.value(row) <= 0 {
                continue;
            }
            let mut line = stacks.value(row).replace(['\n', '\r'], " ");
            let _ = write!(line, " {}", weights.value(row));
            lines.push(line);
        }
    }
    Ok(lines)
}

/// An SVG flame graph of folded lines.
pub fn svg(lines: &[String], mode: Mode, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut options = inferno::flamegraph::Options::default();
    match mode {
        Mode::OnCpu => {
            options.title = "On-CPU flame graph".into();
            options.count_name = "samples".into();
        }
        Mode::OffCpu => {
            options.title = "Off-CPU flame graph".into();
            options.count_name = "ns".into();
            options.colors = inferno::flamegraph::color::Palette::Basic(
                inferno::flamegraph::color::BasicPalette::Io,
            );
        }
    }
    if lines.is_empty() {
        // inferno refuses empty input; an empty graph still says what was asked.
        options.title.push_str(" (no samples)");
        return inferno::flamegraph::from_lines(&mut options, ["[none] 1"], out)
            .context("drawing the flame graph");
    }
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .context("drawing the flame graph")
}

/// True when some session recorded the stack of every switch-out
/// (`--off-cpu-stacks`): without them off-CPU time has no stacks to show.
pub fn off_cpu_stacks_recorded(recordings: &[recording::Recording]) -> bool {
    recordings
        .iter()
        .any(|r| r.meta.sessions.iter().any(|s| s.off_cpu_stacks))
}

/// Runs `statement` (see [`sql`]) over `ctx`: the folded lines.
pub async fn folded(ctx: &SessionContext, statement: &str) -> anyhow::Result<Vec<String>> {
    let batches = catalog::query_batches(ctx, statement)
        .await
        .map_err(catalog::one_line)?;
    folded_lines(&batches).context("reading the flame graph query's result")
}

/// A query session over `recordings` for stacks weighed by `options`:
/// `--from`/`--to` resolved against the recordings into the options, and a
/// note on stderr when off-CPU stacks were not recorded. Shared by the flame
/// graph and the pprof export.
pub(crate) fn prepare(
    recordings: &[PathBuf],
    options: &Options,
    (from, to): (Option<When>, Option<When>),
    partitions: usize,
) -> anyhow::Result<(Vec<recording::Recording>, SessionContext, Options)> {
    let opened = recording::open_all(recordings)?;
    let (from, to) =
        when::resolve_window(from, to, report::time_range(&opened)).map_err(crate::UsageError)?;
    let options = Options {
        from: from.or(options.from),
        to: to.or(options.to),
        indexed: opened.iter().all(recording::Recording::indexed),
        ..options.clone()
    };
    if options.mode == Mode::OffCpu && !off_cpu_stacks_recorded(&opened) {
        eprintln!(
            "hindsight: note: recorded without --off-cpu-stacks: off-CPU time is shown per thread name, without stacks"
        );
    }
    let ctx = catalog::context_for(&opened, partitions).map_err(catalog::one_line)?;
    Ok((opened, ctx, options))
}

/// Runs `flamegraph` over `recordings`.
pub async fn run(
    recordings: &[PathBuf],
    options: &Options,
    window: (Option<When>, Option<When>),
    partitions: usize,
) -> anyhow::Result<()> {
    let (_, ctx, options) = prepare(recordings, options, window, partitions)?;
    let options = &options;
    let statement = sql(options);
    let mut out: Box<dyn Write> = match &options.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    if options.show_sql {
        // Beside the graph, not inside it: SVG output keeps the SQL on stderr.
        if options.format == Format::Svg || options.output.is_some() {
            eprintln!("{statement};\n");
        } else {
            writeln!(out, "{statement};\n")?;
        }
    }
    let lines = folded(&ctx, &statement).await?;
    match options.format {
        Format::Folded => {
            for line in &lines {
                writeln!(out, "{line}")?;
            }
        }
        Format::Svg => svg(&lines, options.mode, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn options(mode: Mode) -> Options {
        Options {
            mode,
            pid: None,
            tid: None,
            comm: None,
            from: None,
            to: None,
            format: Format::Folded,
            output: None,
            show_sql: false,
            indexed: false,
        }
    }

    #[test]
    fn folded_lines_skip_empty_weights_and_keep_spaces_in_names() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("stack", DataType::Utf8, true),
            Field::new("weight", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("app;main;<T as Tr>::f"),
                    Some("app;idle"),
                    None,
                    Some("app;x\ny"),
                ])),
                Arc::new(Int64Array::from(vec![Some(3), Some(0), Some(1), Some(2)])),
            ],
        )
        .unwrap();
        assert_eq!(
            folded_lines(&[batch]).unwrap(),
            ["app;main;<T as Tr>::f 3", "app;x y 2"]
        );
    }

    #[test]
    fn filters_land_on_the_right_columns() {
        let mut o = options(Mode::OffCpu);
        o.pid = Some(7);
        o.comm = Some("it's".into());
        o.from = Some(5);
        o.to = Some(9);
        let s = sql(&o);
        assert!(s.contains("FROM off_cpu\n  WHERE pid = 7"), "{s}");
        assert!(s.contains("comm = 'it''s'"), "{s}");
        // An interval counts where it began: its end may come after --to.
        let to = format!("ts < {}", crate::report::timestamp(9));
        assert_eq!(s.matches(&to).count(), 1, "{s}");
        o.indexed = true;
        let s = sql(&o);
        assert!(s.contains("FROM off_cpu_interval\n  WHERE pid = 7"), "{s}");
        let on = sql(&Mode::OnCpu.with(|o| o.tid = Some(3)));
        assert!(on.contains("FROM cpu_sample\n  WHERE tid = 3"), "{on}");
    }

    impl Mode {
        fn with(self, f: impl FnOnce(&mut Options)) -> Options {
            let mut o = options(self);
            f(&mut o);
            o
        }
    }

    #[test]
    fn svg_is_drawn_also_from_nothing() {
        let mut out = Vec::new();
        svg(&["a;b 3".into(), "a;c 1".into()], Mode::OnCpu, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("<?xml") && text.contains("<svg"), "{text}");
        assert!(text.contains(">b (3 samples, 75.00%)<"), "{text}");
        let mut empty = Vec::new();
        svg(&[], Mode::OffCpu, &mut empty).unwrap();
        assert!(String::from_utf8(empty).unwrap().contains("no samples"));
    }
}
