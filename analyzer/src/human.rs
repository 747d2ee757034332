//! Tables and figures for people: the one place the reports' table format
//! is laid out.
//!
//! A [`Table`] sizes each column to its widest cell, right-aligns figures
//! and left-aligns names, and fits the terminal it is printed on: columns
//! marked as cuttable (names, command lines) give up width first, and a
//! cell cut short ends in `…`, so a long name never wraps into the grid.
//! Control characters in names (a command line's newlines) are shown
//! escaped, for the same reason. Colour (bold headings, a red loss line)
//! only on a terminal, and never with `NO_COLOR` set.
//!
//! Figures are rounded for reading: counts grouped in thousands, rates to
//! three significant digits, percentages to one decimal. The CSV and JSON
//! formats keep full precision; they never pass through here.

use std::io::{self, IsTerminal, Write};

/// Where a table is printed: how wide it may be and whether it may use colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Columns available; `None` when not printing to a terminal (a file,
    /// a pipe), where nothing is cut but the columns' own limits.
    pub width: Option<usize>,
    pub colour: bool,
}

impl Layout {
    /// Standard output's layout: a terminal's width (or `COLUMNS`), colour
    /// on a terminal unless `NO_COLOR` is set to anything non-empty.
    pub fn stdout() -> Layout {
        let terminal = io::stdout().is_terminal();
        let columns = std::env::var("COLUMNS").ok();
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let size = || {
            console::Term::stdout()
                .size_checked()
                .map(|(_, w)| w as usize)
        };
        Layout::decide(terminal, columns.as_deref(), no_colour, size)
    }

    fn decide(
        terminal: bool,
        columns: Option<&str>,
        no_colour: bool,
        size: impl FnOnce() -> Option<usize>,
    ) -> Layout {
        let from_env = columns
            .and_then(|c| c.trim().parse::<usize>().ok())
            .filter(|&w| w > 0);
        let width = match (from_env, terminal) {
            (Some(w), _) => Some(w),
            (None, true) => size(),
            (None, false) => None,
        };
        Layout {
            width,
            colour: terminal && !no_colour,
        }
    }

    /// No width limit and no colour: files, pipes and tests.
    pub fn plain() -> Layout {
        Layout {
            width: None,
            colour: false,
        }
    }

    /// `text` in bold, on a terminal.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// `text` in red, on a terminal: what the recorder missed.
    pub fn warn(&self, text: &str) -> String {
        self.paint("31", text)
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// A heading line: `== text ==`, cut to the width.
    pub fn heading(&self, text: &str) -> String {
        let line = format!("== {text} ==");
        let line = match self.width {
            Some(w) => cut(&line, w),
            None => line,
        };
        self.bold(&line)
    }
}

/// How a column's cells sit in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column of a [`Table`].
#[derive(Clone, Debug)]
pub struct Column {
    pub header: String,
    pub align: Align,
    /// The widest a cell may be wherever it is printed (`None`: no limit).
    pub max: Option<usize>,
    /// Whether the column gives up width on a narrow terminal.
    pub cuttable: bool,
    /// Whether the column is left out on a terminal too narrow for it once
    /// names are cut (a detail; the figures a report is read for stay).
    pub optional: bool,
}

impl Column {
    /// This column, left out where the terminal is too narrow for it.
    pub fn optional(mut self) -> Column {
        self.optional = true;
        self
    }
}

/// A right-aligned figure column.
pub fn figure(header: &str) -> Column {
    Column {
        header: header.to_owned(),
        align: Align::Right,
        max: None,
        cuttable: false,
        optional: false,
    }
}

/// A left-aligned text column that keeps its width.
pub fn label(header: &str) -> Column {
    Column {
        header: header.to_owned(),
        align: Align::Left,
        max: None,
        cuttable: false,
        optional: false,
    }
}

/// A left-aligned name column, at most `max` wide, cut first on a narrow
/// terminal.
pub fn name(header: &str, max: usize) -> Column {
    Column {
        header: header.to_owned(),
        align: Align::Left,
        max: Some(max),
        cuttable: true,
        optional: false,
    }
}

/// Rows under a header, laid out by [`Table::write`].
#[derive(Clone, Debug)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
    indent: usize,
}

/// Between two columns.
const GAP: usize = 2;
/// A cut column keeps at least its header or this much, whichever is wider.
const MIN_CUT: usize = 8;

impl Table {
    pub fn new(columns: Vec<Column>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
            indent: 0,
        }
    }

    /// Every line starts with `n` spaces (a table inside a section).
    pub fn indent(mut self, n: usize) -> Table {
        self.indent = n;
        self
    }

    /// Adds a row: one cell a column (missing cells are empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| printable(&c)).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The width each column gets in `layout`; `None` for one left out.
    fn widths(&self, layout: &Layout) -> Vec<Option<usize>> {
        let mut widths: Vec<Option<usize>> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let widest = self
                    .rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
                    .max(c.header.chars().count());
                Some(
                    c.max
                        .map_or(widest, |m| widest.min(m.max(c.header.chars().count()))),
                )
            })
            .collect();
        let Some(available) = layout.width else {
            return widths;
        };
        let natural = widths.clone();
        let total = |w: &[Option<usize>]| {
            let shown: Vec<usize> = w.iter().flatten().copied().collect();
            self.indent + shown.iter().sum::<usize>() + GAP * shown.len().saturating_sub(1)
        };
        // The rightmost cuttable column (a command line) gives first, down
        // to its floor, then the next one left (a name); then optional
        // columns are left out, rightmost first. When nothing more can
        // give, the line is wider than the terminal, as it must be.
        for i in (0..widths.len()).rev() {
            if !self.columns[i].cuttable {
                continue;
            }
            let floor = self.columns[i].header.chars().count().max(MIN_CUT);
            let excess = total(&widths).saturating_sub(available);
            if let Some(w) = widths[i].as_mut() {
                *w -= excess.min(w.saturating_sub(floor));
            }
        }
        for i in (0..widths.len()).rev() {
            if total(&widths) <= available {
                break;
            }
            if self.columns[i].optional {
                widths[i] = None;
            }
        }
        // What leaving columns out freed goes back to the names cut before.
        for i in 0..widths.len() {
            let slack = available.saturating_sub(total(&widths));
            if let (Some(w), Some(full)) = (widths[i].as_mut(), natural[i]) {
                *w += slack.min(full - *w);
            }
        }
        widths
    }

    /// Prints the header (bold on a terminal) and every row.
    pub fn write(&self, layout: &Layout, out: &mut impl Write) -> io::Result<()> {
        let widths = self.widths(layout);
        let line = |cells: &[String]| {
            let mut text = " ".repeat(self.indent);
            let shown: Vec<usize> = (0..widths.len()).filter(|&i| widths[i].is_some()).collect();
            for (n, &i) in shown.iter().enumerate() {
                let (column, width) = (&self.columns[i], widths[i].unwrap_or(0));
                let cell = cut(cells.get(i).map_or("", String::as_str), width);
                let pad = width - cell.chars().count();
                let last = n + 1 == shown.len();
                match column.align {
                    Align::Right => {
                        text.push_str(&" ".repeat(pad));
                        text.push_str(&cell);
                    }
                    Align::Left => {
                        text.push_str(&cell);
                        if !last {
                            text.push_str(&" ".repeat(pad));
                        }
                    }
                }
                if !last {
                    text.push_str(&" ".repeat(GAP));
                }
            }
            text.trim_end().to_owned()
        };
        let header: Vec<String> = self.columns.iter().map(|c| c.header.clone()).collect();
        writeln!(out, "{}", layout.bold(&line(&header)))?;
        for row in &self.rows {
            writeln!(out, "{}", line(row))?;
        }
        Ok(())
    }
}

/// Prose (a report's legend) broken into lines at spaces, at most the
/// terminal's width or 100 characters.
pub fn wrap(text: &str, layout: &Layout) -> String {
    let width = layout.width.unwrap_or(100).clamp(40, 100);
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if line > 0 && line + 1 + len > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += len;
    }
    out
}

/// `text` in at most `width` characters, ending in `…` when cut.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// A name as one line of text: control characters (a command line's
/// newlines, tabs) escaped as `\n`, `\t`, `\u{1b}`.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A count, grouped in thousands: `49,155`; `-` when unknown.
pub fn count(n: Option<i64>) -> String {
    let Some(n) = n else {
        return "-".into();
    };
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A rate or other measured figure to three significant digits (at least
/// the units): `4,917`, `12.5`, `0.37`, `0`; `-` when unknown.
pub fn rate(v: Option<f64>) -> String {
    let Some(v) = v.filter(|v| v.is_finite()) else {
        return "-".into();
    };
    let magnitude = v.abs();
    if magnitude > 0.0 && magnitude < 0.005 {
        // Not nil, and not to be read as nil.
        return if v > 0.0 { "<0.01" } else { ">-0.01" }.into();
    }
    if magnitude >= 99.95 || magnitude == 0.0 {
        count(Some(v.round() as i64))
    } else if magnitude >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A percentage to one decimal: `97.9%`; `-` when unknown. A share that
/// is not whole or not nil never reads as such: `>99.9%`, `<0.1%`.
pub fn pct(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "-".into(),
        Some(v) if v > 99.95 && v < 100.0 => ">99.9%".into(),
        Some(v) if v > 0.0 && v < 0.05 => "<0.1%".into(),
        Some(v) => format!("{v:.1}%"),
    }
}

/// A size in bytes with a binary unit: `512 B`, `1.5 KiB`, `20.0 MiB`.
pub fn bytes(n: Option<f64>) -> String {
    let Some(mut n) = n.filter(|v| v.is_finite()) else {
        return "-".into();
    };
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"] {
        if n.abs() < 1024.0 || unit == "TiB" {
            return if unit == "B" {
                format!("{n:.0} {unit}")
            } else {
                format!("{n:.1} {unit}")
            };
        }
        n /= 1024.0;
    }
    unreachable!()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(table: &Table, layout: Layout) -> String {
        let mut out = Vec::new();
        table.write(&layout, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn sample() -> Table {
        let mut t = Table::new(vec![
            figure("PID"),
            name("COMM", 16),
            name("CMDLINE", 60),
            figure("HITS"),
        ]);
        t.row(vec![
            "7".into(),
            "cat".into(),
            "cat /var/log/syslog /var/log/messages /var/log/kern.log".into(),
            count(Some(16_074)),
        ]);
        t.row(vec![
            "12345".into(),
            "a-very-long-name-indeed".into(),
            "python3 -c\nimport os".into(),
            count(Some(3)),
        ]);
        t
    }

    #[test]
    fn columns_fit_their_widest_cell_and_figures_align_right() {
        let text = render(&sample(), Layout::plain());
        assert_eq!(
            text,
            "  PID  COMM              CMDLINE                                                    HITS\n\
             \x20   7  cat               cat /var/log/syslog /var/log/messages /var/log/kern.log  16,074\n\
             12345  a-very-long-nam…  python3 -c\\nimport os                                         3\n"
        );
    }

    #[test]
    fn a_narrow_terminal_cuts_names_first_and_never_wraps() {
        let layout = Layout {
            width: Some(50),
            colour: false,
        };
        let text = render(&sample(), layout);
        for line in text.lines() {
            assert!(line.chars().count() <= 50, "{line:?} wider than 50");
        }
        // The figures are whole; the command line gave up its width.
        assert!(text.contains("16,074"), "{text}");
        assert!(text.contains("12345"), "{text}");
        // The command line gives first; the name keeps what it can.
        assert!(text.contains("cat /var/log/sys…  16,074"), "{text}");
        assert!(text.contains("a-very-long-nam…"), "{text}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let none = || None;
        assert!(Layout::decide(true, None, false, none).colour);
        assert!(!Layout::decide(true, None, true, none).colour);
        assert!(!Layout::decide(false, None, false, none).colour);
        assert_eq!(
            Layout::decide(false, Some("100"), false, none).width,
            Some(100)
        );
        assert_eq!(Layout::decide(false, None, false, || Some(80)).width, None);
        assert_eq!(
            Layout::decide(true, None, false, || Some(80)).width,
            Some(80)
        );
        assert_eq!(
            Layout::decide(true, Some("x"), false, || Some(80)).width,
            Some(80)
        );
        let painted = Layout::decide(true, None, false, none).bold("x");
        assert_eq!(painted, "\x1b[1mx\x1b[0m");
        assert_eq!(Layout::plain().bold("x"), "x");
    }

    #[test]
    fn figures_are_rounded_for_reading() {
        assert_eq!(count(Some(49_155)), "49,155");
        assert_eq!(count(Some(-1_234_567)), "-1,234,567");
        assert_eq!(count(Some(999)), "999");
        assert_eq!(count(None), "-");
        assert_eq!(rate(Some(4916.565611514074)), "4,917");
        assert_eq!(rate(Some(99.96)), "100");
        assert_eq!(rate(Some(12.54)), "12.5");
        assert_eq!(rate(Some(0.3712)), "0.37");
        assert_eq!(rate(Some(0.0)), "0");
        assert_eq!(rate(Some(0.001)), "<0.01");
        assert_eq!(rate(Some(f64::NAN)), "-");
        assert_eq!(pct(Some(99.98230088495575)), ">99.9%");
        assert_eq!(pct(Some(100.0)), "100.0%");
        assert_eq!(pct(Some(0.01)), "<0.1%");
        assert_eq!(pct(Some(0.0)), "0.0%");
        assert_eq!(pct(Some(97.99426934097421)), "98.0%");
        assert_eq!(bytes(Some(1536.0)), "1.5 KiB");
        assert_eq!(bytes(Some(100.0)), "100 B");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        let narrow = Layout {
            width: Some(40),
            colour: false,
        };
        let prose = "word ".repeat(30);
        let wrapped = wrap(&prose, &narrow);
        assert!(wrapped.lines().all(|l| l.len() <= 40), "{wrapped}");
        assert_eq!(wrapped.split_whitespace().count(), 30);
    }
}
