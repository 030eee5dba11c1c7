//! Who had the machine's cores during a measurement: each process's (or this process's
//! threads') time on a CPU and time waiting for one (runnable, not running), from
//! `/proc/.../schedstat` in nanoseconds. A measurement slower than its neighbours shows here
//! whether its processes did more work or waited for cores that another process held, and
//! which process that was. Also a whole process's CPU with its reaped children's
//! ([`with_children`]). Linux only; where `/proc` cannot be read, every figure is empty.
//! The life-cycle benchmark and the pipeline benchmark (`benches/pipeline.rs`, by `#[path]`)
//! both read it here.

use std::collections::HashMap;

/// One process's or thread's counters: its name, nanoseconds on a CPU, nanoseconds waiting
/// for one, and of its time on a CPU, the part in the kernel (`stat`'s stime, in nanoseconds
/// though counted in 10 ms ticks).
#[derive(Clone, Default)]
pub(crate) struct Sched {
    pub(crate) name: String,
    pub(crate) run_ns: u64,
    pub(crate) wait_ns: u64,
    pub(crate) kernel_ns: u64,
}

/// Every process now, by pid, each with every thread's time summed: a process's own
/// `schedstat` counts its main thread only, which for a multi-threaded server (RabbitMQ's
/// `beam.smp`) is next to nothing.
pub(crate) fn processes() -> HashMap<u32, Sched> {
    let mut all = read_dir("/proc");
    for (pid, sched) in &mut all {
        let threads = read_dir(&format!("/proc/{pid}/task"));
        if !threads.is_empty() {
            sched.run_ns = threads.values().map(|t| t.run_ns).sum();
            sched.wait_ns = threads.values().map(|t| t.wait_ns).sum();
        }
    }
    all
}

/// This process's threads now, by id.
pub(crate) fn threads() -> HashMap<u32, Sched> {
    read_dir("/proc/self/task")
}

fn read_dir(dir: &str) -> HashMap<u32, Sched> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((pid, read(&e.path())?))
        })
        .collect()
}

/// `stat`'s name, and its fields from field 3 (the state) on.
fn split_stat(stat: &str) -> Option<(&str, Vec<&str>)> {
    // pid (comm) ...: the name may hold spaces and parentheses; the last ')' ends it.
    let close = stat.rfind(')')?;
    let name = stat.get(stat.find('(')? + 1..close)?;
    Some((name, stat.get(close + 2..)?.split(' ').collect()))
}

/// A process's whole CPU time so far, every thread's and that of the children it has reaped
/// (`stat`'s utime, stime, cutime and cstime: fields 14–17, in USER_HZ, 100 a second on
/// Linux); zero where it cannot be read.
pub(crate) fn with_children(pid: u32) -> std::time::Duration {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, fields) = split_stat(&stat)?;
            fields
                .get(11..15)?
                .iter()
                .map(|f| f.parse::<u64>().ok())
                .sum::<Option<u64>>()
        })
        .unwrap_or(0);
    std::time::Duration::from_millis(ticks * 10)
}

fn read(dir: &std::path::Path) -> Option<Sched> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let (name, fields) = split_stat(&stat)?;
    // stime is field 15 of stat(5), in USER_HZ (100 a second on Linux).
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let name = name.to_string();
    let sched = std::fs::read_to_string(dir.join("schedstat")).ok()?;
    let mut fields = sched.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some(Sched {
        name,
        run_ns: fields.next()??,
        wait_ns: fields.next()??,
        kernel_ns: stime * 10_000_000,
    })
}

/// What each entry spent between two snapshots, by id; one that came meanwhile counts from 0.
pub(crate) fn spent(
    before: &HashMap<u32, Sched>,
    after: &HashMap<u32, Sched>,
) -> HashMap<u32, Sched> {
    let zero = Sched::default();
    after
        .iter()
        .map(|(id, a)| {
            let b = before.get(id).unwrap_or(&zero);
            let spent = Sched {
                name: a.name.clone(),
                run_ns: a.run_ns.saturating_sub(b.run_ns),
                wait_ns: a.wait_ns.saturating_sub(b.wait_ns),
                kernel_ns: a.kernel_ns.saturating_sub(b.kernel_ns),
            };
            (*id, spent)
        })
        .collect()
}

/// Time on a CPU between two snapshots of the entries whose name `matches`.
pub(crate) fn run_time(
    before: &HashMap<u32, Sched>,
    after: &HashMap<u32, Sched>,
    matches: impl Fn(&str) -> bool,
) -> std::time::Duration {
    let ns = spent(before, after)
        .values()
        .filter(|s| matches(&s.name))
        .map(|s| s.run_ns)
        .sum();
    std::time::Duration::from_nanos(ns)
}
