//! `hindsight sql DIR` without a query: an interactive shell on a terminal
//! (line editing and history by rustyline), or a script read from standard
//! input otherwise, with the same grammar either way:
//!
//! - SQL statements end with `;` and may span lines;
//! - `\d` lists the tables and views, `\d NAME` describes one with the
//!   column docs of `hindsight_schemas`, `\q` quits, `\?` helps; a
//!   backslash command is one line, given between statements.
//!
//! A failed statement prints one line on stderr and the session goes on;
//! a script that had a failure exits with status 1.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Result;
use datafusion::prelude::SessionContext;
use hindsight_schemas::{all_tables, derived, Column, VIEWS};

use crate::catalog;
use crate::output::{self, Format};

const HELP: &str = "\
Statements end with ';' and may span lines. Commands (one line, between statements):
  \\d        list tables and views
  \\d NAME   describe a table or view: columns, types, units, meaning
  \\q        quit (also Ctrl-D)
  \\?        this help
Every table of the recording is there, and the helper views cpu_time, off_cpu,
runq_latency and counter_rate (on long recordings, `hindsight index` derives
their rows once as the tables cpu_slice, off_cpu_interval and runq_wait). `ts` is a UTC timestamp: date_bin(INTERVAL '10 seconds', ts).";

/// What the session does after a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
}

/// The statement being typed, and what to run it on.
pub struct Shell<'a> {
    ctx: &'a SessionContext,
    format: Format,
    buffer: String,
    /// Some statement or command failed.
    pub failed: bool,
}

impl<'a> Shell<'a> {
    pub fn new(ctx: &'a SessionContext, format: Format) -> Shell<'a> {
        Shell {
            ctx,
            format,
            buffer: String::new(),
            failed: false,
        }
    }

    /// True while a statement has started but not ended with `;`.
    pub fn pending(&self) -> bool {
        !self.buffer.trim().is_empty()
    }

    /// Forgets a half-typed statement (Ctrl-C).
    pub fn clear(&mut self) {
        self.buffer.clear();
    }

    /// Takes one line; runs the statement or command it completes, printing
    /// results on `out` and errors on stderr.
    pub async fn line(&mut self, line: &str, out: &mut impl Write) -> Result<Flow> {
        let trimmed = line.trim();
        if !self.pending() && trimmed.starts_with('\\') {
            return self.command(trimmed, out);
        }
        if !self.pending() && (trimmed.is_empty() || trimmed.starts_with("--")) {
            return Ok(Flow::Continue);
        }
        self.buffer.push_str(line);
        self.buffer.push('\n');
        if trimmed.ends_with(';') {
            let statement = std::mem::take(&mut self.buffer);
            let statement = statement.trim().trim_end_matches(';');
            let result = match catalog::query_stream(self.ctx, statement).await {
                Ok(stream) => output::write_stream(stream, self.format, &mut *out).await,
                Err(e) => Err(catalog::one_line(e)),
            };
            if let Err(e) = result {
                self.fail(&format!("{e:#}"));
            }
            out.flush()?;
        }
        Ok(Flow::Continue)
    }

    fn fail(&mut self, message: &str) {
        self.failed = true;
        eprintln!("error: {message}");
    }

    fn command(&mut self, command: &str, out: &mut impl Write) -> Result<Flow> {
        let mut words = command.split_whitespace();
        match (words.next(), words.next()) {
            (Some("\\q"), None) => return Ok(Flow::Quit),
            (Some("\\?"), None) => writeln!(out, "{HELP}")?,
            (Some("\\d"), None) => list(out)?,
            (Some("\\d"), Some(name)) => {
                if !describe(name, out)? {
                    self.fail(&format!(
                        "\\d {name}: no such table or view (\\d lists them)"
                    ));
                }
            }
            _ => self.fail(&format!("{command}: unknown command (\\? lists them)")),
        }
        out.flush()?;
        Ok(Flow::Continue)
    }
}

/// The first sentence of a doc, for one-line listings.
fn summary(doc: &str) -> &str {
    match doc.find(". ") {
        Some(end) => &doc[..=end],
        None => doc,
    }
}

fn list(out: &mut impl Write) -> Result<()> {
    let width = all_tables()
        .map(|t| t.name.len())
        .chain(VIEWS.iter().map(|v| v.name.len()))
        .max()
        .unwrap_or(0);
    writeln!(out, "{:<width$}  {:<5}  about", "name", "kind")?;
    for t in all_tables() {
        writeln!(out, "{:<width$}  table  {}", t.name, summary(t.doc))?;
    }
    for v in VIEWS {
        writeln!(out, "{:<width$}  view   {}", v.name, summary(v.doc))?;
    }
    Ok(())
}

/// Prints a table's or view's doc and columns; false when there is no such name.
fn describe(name: &str, out: &mut impl Write) -> Result<bool> {
    let (kind, doc, columns): (&str, &str, &[Column]) = if let Some(t) =
        hindsight_schemas::tables::table(name).or_else(|| derived::derived_table(name))
    {
        ("table", t.doc, t.columns)
    } else if let Some(v) = hindsight_schemas::views::view(name) {
        ("view", v.doc, v.columns)
    } else {
        return Ok(false);
    };
    writeln!(out, "{kind} {name}: {doc}")?;
    let width = columns.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let type_width = columns
        .iter()
        .map(|c| c.kind.sql_name().len())
        .max()
        .unwrap_or(0);
    for c in columns {
        let unit = if c.unit.is_empty() {
            String::new()
        } else {
            format!(" [{}]", c.unit)
        };
        let null = if c.nullable { " (nullable)" } else { "" };
        writeln!(
            out,
            "  {:<width$}  {:<type_width$}  {}{unit}{null}",
            c.name,
            c.kind.sql_name(),
            c.doc
        )?;
    }
    Ok(true)
}

/// Runs the shell: interactive on a terminal, else a script from stdin.
/// Returns whether every statement succeeded.
pub async fn run(ctx: &SessionContext, format: Format) -> Result<bool> {
    let mut shell = Shell::new(ctx, format);
    let mut out = io::stdout();
    if io::stdin().is_terminal() {
        interactive(&mut shell, &mut out).await?;
        return Ok(true);
    }
    for line in io::stdin().lock().lines() {
        if shell.line(&line?, &mut out).await? == Flow::Quit {
            break;
        }
    }
    if shell.pending() {
        shell.fail("the input ended inside a statement (a missing ';'?)");
    }
    Ok(!shell.failed)
}

/// Where history is kept: `$HOME/.hindsight_history`.
fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".hindsight_history"))
}

async fn interactive(shell: &mut Shell<'_>, out: &mut impl Write) -> Result<()> {
    use rustyline::error::ReadlineError;
    let mut editor = rustyline::DefaultEditor::new()?;
    let history = history_file();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    eprintln!(
        "hindsight sql: statements end with ';', \\d lists tables and views, \\? helps, \\q quits."
    );
    loop {
        let prompt = if shell.pending() {
            "     -> "
        } else {
            "hindsight> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                if shell.line(&line, out).await? == Flow::Quit {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => shell.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}
