//! Who had the machine's cores during a measurement: each process's time on a CPU and time
//! waiting for one (runnable, not running), from `/proc/<pid>/schedstat` in nanoseconds. A
//! measurement slower than its neighbours shows here whether its processes did more work or
//! waited for cores that another process held, and which process that was. Linux only; where
//! `/proc` cannot be read, every figure is empty.

use std::collections::HashMap;

/// One process's counters: its name, nanoseconds on a CPU, nanoseconds waiting for one, and
/// of its time on a CPU, the part in the kernel (`stat`'s stime, in nanoseconds though counted
/// in 10 ms ticks).
#[derive(Clone)]
pub(crate) struct Sched {
    pub(crate) name: String,
    pub(crate) run_ns: u64,
    pub(crate) wait_ns: u64,
    pub(crate) kernel_ns: u64,
}

/// Every process now, by pid. A process's `schedstat` counts its main thread only: enough for
/// single-threaded servers (every PostgreSQL process), not for this one (see [`own_threads`]).
pub(crate) fn processes() -> HashMap<u32, Sched> {
    read_dir("/proc")
}

/// This process's threads, summed.
pub(crate) fn own_threads() -> (u64, u64) {
    read_dir("/proc/self/task")
        .values()
        .fold((0, 0), |(r, w), s| (r + s.run_ns, w + s.wait_ns))
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

fn read(dir: &std::path::Path) -> Option<Sched> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // pid (comm) ...: the name may hold spaces and parentheses; the last ')' ends it.
    let close = stat.rfind(')')?;
    let name = stat.get(stat.find('(')? + 1..close)?.to_string();
    // After the name: stime is field 15 of stat(5), in USER_HZ (100 a second on Linux).
    let stime: u64 = stat.get(close + 2..)?.split(' ').nth(12)?.parse().ok()?;
    let sched = std::fs::read_to_string(dir.join("schedstat")).ok()?;
    let mut fields = sched.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some(Sched {
        name,
        run_ns: fields.next()??,
        wait_ns: fields.next()??,
        kernel_ns: stime * 10_000_000,
    })
}

/// What each process spent between two snapshots, by pid; a process that came meanwhile
/// counts from 0.
pub(crate) fn spent(
    before: &HashMap<u32, Sched>,
    after: &HashMap<u32, Sched>,
) -> HashMap<u32, Sched> {
    after
        .iter()
        .map(|(pid, a)| {
            let zero = Sched {
                name: String::new(),
                run_ns: 0,
                wait_ns: 0,
                kernel_ns: 0,
            };
            let b = before.get(pid).unwrap_or(&zero);
            let spent = Sched {
                name: a.name.clone(),
                run_ns: a.run_ns.saturating_sub(b.run_ns),
                wait_ns: a.wait_ns.saturating_sub(b.wait_ns),
                kernel_ns: a.kernel_ns.saturating_sub(b.kernel_ns),
            };
            (*pid, spent)
        })
        .collect()
}
