//! Progress on stderr: live bars on a terminal, one line per finished step elsewhere (logs
//! stay readable), nothing with `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Instant;

#[derive(Clone, Copy)]
pub struct Progress {
    quiet: bool,
    terminal: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        Self { quiet, terminal: std::io::stderr().is_terminal() }
    }

    pub fn silent() -> Self {
        Self { quiet: true, terminal: false }
    }

    fn bar(&self, style: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if self.quiet || !self.terminal {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar.set_style(ProgressStyle::with_template(style).expect("valid template"));
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    }

    /// A count of things done, with its rate.
    pub fn counter(&self, label: &str, unit: &str) -> Counter {
        let bar = self.bar(&format!("{{spinner}} {label}: {{human_pos}} {unit} ({{per_sec}}) {{elapsed}}"));
        Counter { bar, progress: *self, label: label.to_string(), unit: unit.to_string(), started: Instant::now() }
    }

    /// A bar over a known number of steps with a message (training epochs).
    pub fn steps(&self, total: u64, label: &str) -> Steps {
        let bar = self.bar(&format!("{label} [{{bar:30}}] {{pos}}/{{len}} {{msg}} {{elapsed}}"));
        bar.set_length(total);
        Steps { bar, progress: *self }
    }

    /// A line that shows only where no live bar does (logs), unless quiet.
    pub fn line(&self, text: &str) {
        if !self.quiet && !self.terminal {
            eprintln!("{text}");
        }
    }

    /// A line shown unless quiet.
    pub fn always(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }
}

pub struct Counter {
    bar: ProgressBar,
    progress: Progress,
    label: String,
    unit: String,
    started: Instant,
}

impl Counter {
    pub fn set(&self, n: u64) {
        self.bar.set_position(n);
    }

    pub fn finish(&self, n: u64) {
        self.bar.finish_and_clear();
        let seconds = self.started.elapsed().as_secs_f64();
        self.progress.always(&format!("{}: {n} {} in {seconds:.2}s", self.label, self.unit));
    }
}

pub struct Steps {
    bar: ProgressBar,
    progress: Progress,
}

impl Steps {
    pub fn step(&self, position: u64, message: String) {
        self.bar.set_position(position);
        self.progress.line(&message);
        self.bar.set_message(message);
    }

    /// A line that stays above the bar (a decision the run made), unless quiet.
    pub fn note(&self, text: &str) {
        if self.progress.quiet {
            return;
        }
        if self.progress.terminal {
            self.bar.println(text);
        } else {
            eprintln!("{text}");
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
