//! `memcap`'s parsing of /proc, and the binary end to end: it counts the memory of a whole
//! process tree and kills the tree above the cap. Three children that each hold a 30 MB
//! string (about 59 MiB at most while building it, 30 MiB after) stay below a cap of 75 MiB
//! alone and go above it together. They block on their standard input (kept open here), so
//! the only way the command ends is memcap's kill: no sleeps, no timing.

use linea_bench::memcap::{Usage, describe, parse_ppid, parse_status, tree};
use std::io::Read;
use std::process::{Command, Stdio};

/// A shell that builds a 30 MB string (a command substitution, held in the shell's memory)
/// and then waits for a line on its standard input.
const HOLD_30_MB: &str = "x=$(head -c 30000000 /dev/zero | tr '\\0' a); read line; echo ${#x}";

fn memcap(cap_mb: u64, script: &str) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memcap"))
        .args(["--cap-mb", &cap_mb.to_string(), "--every-ms", "5", "--name", "test", "--", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The stdin pipe stays open until the command has ended: nothing else lets it end.
    let stdin = child.stdin.take();
    let mut report = String::new();
    child.stderr.take().unwrap().read_to_string(&mut report).unwrap();
    let status = child.wait().unwrap();
    drop(stdin);
    (status.code(), report)
}

/// The MiB figure after `label` in memcap's report line.
fn figure(report: &str, label: &str) -> f64 {
    let rest = &report[report.find(label).unwrap_or_else(|| panic!("{label:?} in {report}")) + label.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_sum_over_the_tree_goes_above_a_cap_each_process_stays_below() {
    let three = format!("({HOLD_30_MB}) & ({HOLD_30_MB}) & ({HOLD_30_MB}) & wait");
    let (code, report) = memcap(75, &three);
    assert_eq!(code, Some(137), "{report}");
    assert!(report.contains("killed above the cap of 75 MiB"), "{report}");
    // memcap kills once the sum is above the cap by as little as 1 KiB, and prints MiB to
    // one decimal: a sum of 75.01 MiB reads "75.0" (CI, 2026-11-27).
    assert!(figure(&report, "peak sum of VmRSS") >= 75.0, "{report}");
    // Each process's high-water mark is at least what it held at the sample that saw the sum.
    assert!(figure(&report, "sum of VmHWM") >= figure(&report, "peak sum of VmRSS"), "{report}");
    // And each process's peak, named: the outer shell and its subshells.
    assert!(report.matches(" MiB (sh)").count() >= 4, "{report}");
}

#[test]
fn a_command_within_the_cap_keeps_its_exit_code() {
    // The tree never holds much: the shell ends by itself with its own code.
    let (code, report) = memcap(64, "exit 3");
    assert_eq!(code, Some(3), "{report}");
    assert!(report.contains("within the cap of 64 MiB"), "{report}");
}

#[test]
fn status_fields_in_kib() {
    let text = "Name:\tlinea\nVmPeak:\t  900 kB\nVmHWM:\t   5120 kB\nVmRSS:\t    4096 kB\nThreads:\t3\n";
    assert_eq!(parse_status(text), Some(Usage { rss_kb: 4096, hwm_kb: 5120 }));
    assert_eq!(parse_status("Name:\tkthreadd\nThreads:\t1\n"), None, "a kernel thread has no VmRSS");
}

#[test]
fn ppid_after_a_name_with_spaces_and_parentheses() {
    assert_eq!(parse_ppid("4242 (tokio-rt (worker) 1) S 17 4242 17 0 -1"), Some(17));
    assert_eq!(parse_ppid("1 (init) S 0 1 1"), Some(0));
    assert_eq!(parse_ppid("garbage"), None);
}

#[test]
fn tree_takes_descendants_only() {
    // 10 -> 11 -> 13, 10 -> 12; 20 is unrelated, 1 is 10's parent.
    let parents = [(1, 0), (10, 1), (11, 10), (12, 10), (13, 11), (20, 1)];
    let mut members = tree(10, &parents);
    assert_eq!(members[0], 10);
    members.sort();
    assert_eq!(members, vec![10, 11, 12, 13]);
}

#[test]
fn a_process_is_named_by_its_program_and_subcommand() {
    assert_eq!(describe(b"/work/target/release/linea\0worker\0--master\0http://x\0"), "linea worker");
    assert_eq!(describe(b"linea\0train\0--data\0g\0"), "linea train");
    assert_eq!(describe(b"liblinear-train\0-s\x007\0/tmp/gen.svm\0"), "liblinear-train");
    assert_eq!(describe(b"python\0/work/bench/peers/snapml_libsvm.py\0"), "python");
    assert_eq!(describe(b""), "");
}
