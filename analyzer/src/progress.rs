//! Progress bars for long work, on stderr and only when stderr is a
//! terminal: a pipe or a log file gets nothing.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of bytes done out of a total, or nothing off a terminal.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn bytes(label: &str, total: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_message(label.to_owned());
        Progress { bar: Some(bar) }
    }

    pub fn advance(&mut self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// Clears the bar, so what follows on the terminal starts clean.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
