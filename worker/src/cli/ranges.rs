//! The valid range of every bounded option, checked once when the command line is parsed.

use super::Cli;
use clap::{CommandFactory, FromArgMatches};

/// The valid values of every option that has a bound, in one place. clap checks types when
/// it parses the command line; [`parse`] then checks each value against this table before
/// anything runs, and each option's `--help` ends with its range, generated from here. A
/// new option joins with one line; options not listed take any value of their type.
const RANGES: &[(&str, Range)] = &[
    ("rows_per_shard", Range::Int { min: 1, max: u32::MAX as u64 }),
    ("epochs", Range::Int { min: 1, max: 1_000_000 }),
    ("l2", Range::NonNegative),
    ("l1", Range::NonNegative),
    ("tolerance", Range::Float { min: 0.0, max: 1.0 }),
    ("threads", Range::Int { min: 1, max: 256 }),
    ("workers", Range::Int { min: 0, max: 256 }),
    ("cache_mb", Range::Int { min: 0, max: 1 << 24 }),
    ("reconnect_for", Range::Int { min: 0, max: 604_800 }),
    ("wait_for_workers_timeout", Range::Int { min: 0, max: 604_800 }),
    ("late_workers_for", Range::Int { min: 0, max: 3_600 }),
    ("drain_timeout", Range::Int { min: 0, max: 3_600 }),
    ("slots", Range::Int { min: 1, max: 4_096 }),
    ("local_passes", Range::Int { min: 1, max: 1_000 }),
    ("gap_tolerance", Range::Float { min: 0.0, max: 1.0 }),
    ("elastic_min_slots", Range::Int { min: 1, max: 4_096 }),
    ("elastic_factor", Range::Int { min: 2, max: 4_096 }),
    ("elastic_window", Range::Int { min: 1, max: 1_000 }),
    ("elastic_threshold", Range::Float { min: 1.0, max: 1_000.0 }),
    ("kappa", Range::Float { min: 1e-9, max: 1e15 }),
    ("memory", Range::Int { min: 1, max: 1_000 }),
    ("lbfgs_precondition_refresh", Range::Int { min: 0, max: 1_000_000 }),
    ("gradient_tolerance", Range::Float { min: 0.0, max: 0.999_999 }),
    ("sgd_rate", Range::Float { min: 1e-9, max: 100.0 }),
    ("speculate_factor", Range::Float { min: 1.0, max: 1_000.0 }),
    ("speculate_floor", Range::Float { min: 0.0, max: 3_600.0 }),
];

/// A range of valid values, as [`RANGES`] lists them.
#[derive(Debug, Clone, Copy)]
enum Range {
    /// An integer from `min` to `max`, both included.
    Int { min: u64, max: u64 },
    /// A finite number from `min` to `max`, both included.
    Float { min: f64, max: f64 },
    /// A finite number >= 0.
    NonNegative,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Range::Int { min, max } => write!(f, "an integer from {min} to {max}"),
            Range::Float { min, max } => write!(f, "a number from {min} to {max}"),
            Range::NonNegative => write!(f, "a finite number >= 0"),
        }
    }
}

impl Range {
    fn contains(&self, text: &str) -> bool {
        match *self {
            Range::Int { min, max } => text.trim().parse::<u64>().is_ok_and(|v| (min..=max).contains(&v)),
            Range::Float { min, max } => text.trim().parse::<f64>().is_ok_and(|v| (min..=max).contains(&v)),
            Range::NonNegative => text.trim().parse::<f64>().is_ok_and(|v| v.is_finite() && v >= 0.0),
        }
    }
}

/// The command line definition with each ranged option's range appended to its help.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        command = command.mut_subcommand(&name, |mut sub| {
            for (id, range) in RANGES {
                if sub.get_arguments().any(|a| a.get_id() == id) {
                    sub = sub.mut_arg(*id, |arg| {
                        let help = arg.get_help().map_or(String::new(), |h| format!("{h} "));
                        let long = arg.get_long_help().map(|h| format!("{h}\n\n[valid: {range}]"));
                        let arg = arg.help(format!("{help}[valid: {range}]"));
                        match long {
                            Some(long) => arg.long_help(long),
                            None => arg,
                        }
                    });
                }
            }
            sub
        });
    }
    command
}

/// Parses and validates a command line (`args` includes the program name). Every option is
/// checked here, once: nothing later sees a value outside its range.
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut command = command();
    let matches = command.try_get_matches_from_mut(args)?;
    if let Some((_, sub)) = matches.subcommand() {
        for (id, range) in RANGES {
            let Ok(Some(values)) = sub.try_get_raw(id) else { continue };
            for value in values {
                let text = value.to_string_lossy();
                if !range.contains(&text) {
                    let flag = id.replace('_', "-");
                    return Err(command.error(
                        clap::error::ErrorKind::ValueValidation,
                        format!("invalid value '{text}' for '--{flag}': must be {range}"),
                    ));
                }
            }
        }
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}
