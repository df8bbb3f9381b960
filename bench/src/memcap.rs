//! The memory of a whole process tree: `linea train --workers N` is a master and N worker
//! processes, so `/usr/bin/time`'s peak RSS (the larger of the command and the child it
//! waited for) is not what the job needs. [`Watch`] samples every process of the tree from
//! `/proc` and keeps the largest sum of their resident sets; with a cap it kills the tree
//! when that sum goes above it, which simulates a machine (or a cgroup's `memory.max`
//! with its OOM killer) of that much memory for every trainer alike. cgroup v2's
//! `memory.peak` would be exact but this machine mounts cgroup v1, and moving processes
//! into a new cgroup would take them out of the one they were started in.

use std::collections::HashMap;
use std::fs;

/// One process's memory, from `/proc/PID/status`, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Resident now (`VmRSS`).
    pub rss_kb: u64,
    /// The most it was ever resident (`VmHWM`).
    pub hwm_kb: u64,
}

/// Reads `VmRSS` and `VmHWM` from the text of `/proc/PID/status`; `None` for a process
/// without them (a kernel thread, a zombie).
pub fn parse_status(text: &str) -> Option<Usage> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some(Usage { rss_kb: field("VmRSS:")?, hwm_kb: field("VmHWM:")? })
}

/// A process's name for the report: its program's file name and, for a program with
/// subcommands (`linea train`, `linea worker`), the first argument, from the NUL-separated
/// text of `/proc/PID/cmdline`.
pub fn describe(cmdline: &[u8]) -> String {
    let mut args = cmdline.split(|&b| b == 0).map(String::from_utf8_lossy);
    let program = args.next().unwrap_or_default();
    let program = program.rsplit('/').next().unwrap_or_default().to_string();
    match args.next() {
        Some(first) if !first.is_empty() && !first.starts_with('-') && !first.contains('/') => {
            format!("{program} {first}")
        }
        _ => program,
    }
}

/// The parent of a process from the text of `/proc/PID/stat` (its fourth field; the
/// second, the command name in parentheses, may hold spaces and parentheses itself).
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and its descendants among `(pid, ppid)` pairs, root first.
pub fn tree(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut members = vec![root];
    let mut i = 0;
    while i < members.len() {
        let parent = members[i];
        members.extend(parents.iter().filter(|&&(pid, ppid)| ppid == parent && pid != root).map(|&(pid, _)| pid));
        i += 1;
    }
    members
}

/// Every process's `(pid, ppid)` now.
fn processes() -> Vec<(u32, u32)> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parse_ppid(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?)))
        .collect()
}

/// What one sample saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The tree's processes that had a resident set.
    pub pids: Vec<u32>,
    /// The sum of their `VmRSS`, KiB.
    pub rss_kb: u64,
}

/// The peaks of a process tree over the samples taken so far.
#[derive(Debug, Default)]
pub struct Watch {
    /// The largest sum of `VmRSS` at one sample, KiB: a lower bound of the true peak of
    /// the sum (a peak between two samples is missed).
    pub peak_sum_kb: u64,
    /// Each process's largest `VmHWM` seen: their sum is an upper bound of the peak of the
    /// sum (the processes' peaks need not coincide).
    hwm_kb: HashMap<u32, u64>,
    /// Each process's [`describe`], as last seen.
    names: HashMap<u32, String>,
    /// The most processes seen at once.
    pub most_processes: usize,
}

impl Watch {
    /// Samples the tree under `root` now.
    pub fn sample(&mut self, root: u32) -> Sample {
        let mut pids = Vec::new();
        let mut rss_kb = 0;
        for pid in tree(root, &processes()) {
            let Some(usage) = fs::read_to_string(format!("/proc/{pid}/status")).ok().and_then(|t| parse_status(&t))
            else {
                continue;
            };
            rss_kb += usage.rss_kb;
            let hwm = self.hwm_kb.entry(pid).or_default();
            *hwm = (*hwm).max(usage.hwm_kb);
            // Read at every sample: a child seen between its fork and its exec still has its
            // parent's command line.
            if let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) {
                self.names.insert(pid, describe(&cmdline));
            }
            pids.push(pid);
        }
        self.peak_sum_kb = self.peak_sum_kb.max(rss_kb);
        self.most_processes = self.most_processes.max(pids.len());
        Sample { pids, rss_kb }
    }

    /// The sum over every process seen of its largest `VmHWM`, KiB.
    pub fn sum_of_hwm_kb(&self) -> u64 {
        self.hwm_kb.values().sum()
    }

    /// Each process's largest `VmHWM` (KiB) with its [`describe`], in the order of their
    /// process ids (a parent before the children it started, pids not having wrapped).
    pub fn each_hwm_kb(&self) -> Vec<(String, u64)> {
        let mut pids: Vec<u32> = self.hwm_kb.keys().copied().collect();
        pids.sort_unstable();
        pids.iter().map(|pid| (self.names.get(pid).cloned().unwrap_or_default(), self.hwm_kb[pid])).collect()
    }

    /// How many processes were seen in all.
    pub fn processes_seen(&self) -> usize {
        self.hwm_kb.len()
    }
}

/// Sends SIGKILL to each of `pids` (a process that has exited meanwhile is skipped).
pub fn kill_all(pids: &[u32]) {
    for &pid in pids {
        let Ok(pid) = libc::pid_t::try_from(pid) else { continue };
        // SAFETY: kill(2) takes plain integers and touches no memory of this process.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}
