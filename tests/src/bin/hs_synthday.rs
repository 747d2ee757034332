//! `hs-synthday OUT [HOURS] [SEED] [FIRST_INCIDENT_HOUR]`: a long recording
//! of a busy server with incidents injected at known times, for the
//! timeline's detection benchmark (`bench/timeline.sh`, issue 20) and its
//! quiet-hours test (no incident before `FIRST_INCIDENT_HOUR`, 1 unless
//! given). Prints the injected incidents (the truth) as one JSON array on
//! stdout.
//!
//! Nothing is recorded: a one-second model of a 4-CPU host is played out
//! and written as the recorder would have seen it (`sched_switch`,
//! `sched_wakeup`, `process`, `counter`, `task_stat`, `numa_event`, `loss`),
//! one-minute chunks through the analyzer's chunk writer. The recording
//! starts at midnight UTC so a day shows its cycle.
//!
//! The background is what a real server does: web workers and a database
//! whose load follows the time of day, daemons, a cron job every 5 minutes,
//! a 60 s backup with I/O waits every 15 minutes, a parallel build of
//! short-lived compiler processes every hour at :30, kswapd and compaction
//! bursts. From the second hour (`FIRST_INCIDENT_HOUR`), an incident every
//! 20 minutes (at :05, :25 and :45), cycling through the kinds of [`KINDS`] and strengths 1, 1/2
//! and 1/4 of a gross one, lasting 60, 120 or 180 s. Everything is
//! deterministic for a seed.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use hindsight::chunk_file::{self, Stamp};
use hindsight_schemas::meta::{RecordingMeta, Session, FORMAT};
use hindsight_schemas::tables::{
    COUNTER, LOSS, NUMA_EVENT, PROCESS, SCHED_SWITCH, SCHED_WAKEUP, TASK_STAT,
};
use hindsight_schemas::time::{rfc3339, ClockOffset};
use hindsight_schemas::{layout, Table, SCHEMA_VERSION};
use serde_json::{json, Value};

const S: i64 = 1_000_000_000;
const CPUS: usize = 4;
/// 2026-12-01T00:00:00Z.
const START_NS: i64 = 1_796_083_200 * S;
/// The host booted a day before the recording.
const BOOT_BEFORE_NS: i64 = 86_400 * S;
/// Each CPU's slices lie in [MARGIN, 1 s - MARGIN) of a second.
const MARGIN_NS: i64 = 100_000;
const USER_HZ: f64 = 100.0;
const HOST: &str = "synth";

/// The kinds of incident injected, in the order they cycle.
const KINDS: &[&str] = &[
    "cpu",
    "new_process",
    "memory",
    "cache_thrash",
    "io",
    "numa",
    "lost",
];
const STRENGTHS: &[f64] = &[1.0, 0.5, 0.25];
const DURATIONS_S: &[i64] = &[60, 120, 180];

/// splitmix64: deterministic noise without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [1 - spread, 1 + spread).
    fn around(&mut self, spread: f64) -> f64 {
        1.0 + spread * (2.0 * self.unit() - 1.0)
    }
}

/// How a process behaves each second it lives.
#[derive(Clone, Copy, Default)]
struct Load {
    /// CPU demand of each thread, in CPUs.
    cpu: f64,
    /// Follows the time of day.
    daily: bool,
    /// Relative noise of the demand.
    noise: f64,
    /// Faults per second.
    minflt: f64,
    majflt: f64,
    /// Whether each thread blocks in D after it runs.
    blocks_in_d: bool,
    /// Pages migrated per second (NUMA balancing).
    migrate: f64,
    rss_mb: i64,
}

struct Proc {
    pid: i32,
    comm: String,
    tids: Vec<i32>,
    born: i64,
    /// Second at which it exits; `None` lives on.
    dies: Option<i64>,
    load: Load,
    utime_ns: f64,
    stime_ns: f64,
    minflt: f64,
    majflt: f64,
    switches: i64,
}

/// What the kernel counts system-wide beyond the processes, per second.
#[derive(Default)]
struct Extra {
    pgscan_kswapd: f64,
    pgsteal_kswapd: f64,
    pgscan_direct: f64,
    pgsteal_direct: f64,
    pgmajfault: f64,
    numa_miss: f64,
    psi_memory_some: f64,
    psi_memory_full: f64,
    psi_io_some: f64,
    lost: i64,
}

/// A thread's time on a CPU within a second, ns from its start, and the
/// state it leaves in.
#[derive(Clone, Copy)]
struct Slice(i64, i64, usize, i32, &'static str);

/// A process's counts at a snapshot, its extra threads' included.
#[derive(Default)]
struct Totals {
    utime_ns: f64,
    stime_ns: f64,
    minflt: f64,
    majflt: f64,
    switches: i64,
    threads: usize,
    comm: String,
    born: i64,
    rss_mb: i64,
    ends: bool,
}

struct Injection {
    kind: &'static str,
    strength: f64,
    start: i64,
    end: i64,
    pid: i32,
    comm: String,
}

/// The load of the time of day: lowest at 03:00, highest at 15:00.
fn daily(second: i64) -> f64 {
    let hours = (second % 86_400) as f64 / 3600.0;
    0.55 + 0.45 * (std::f64::consts::TAU * (hours - 9.0) / 24.0).sin()
}

struct World {
    rng: Rng,
    procs: Vec<Proc>,
    next_pid: i32,
    rows: BTreeMap<&'static str, Vec<Value>>,
    counters: BTreeMap<(&'static str, &'static str), f64>,
    truth: Vec<Injection>,
}

impl World {
    fn spawn(
        &mut self,
        comm: &str,
        threads: usize,
        born: i64,
        dies: Option<i64>,
        load: Load,
    ) -> i32 {
        let pid = self.next_pid;
        self.next_pid += threads as i32 + 1;
        let tids: Vec<i32> = (0..threads as i32).map(|k| pid + k).collect();
        let ts = START_NS + born * S;
        let event = if born == 0 { "scan" } else { "exec" };
        for &tid in &tids {
            self.push(
                &PROCESS,
                json!({"ts": ts, "event": event, "pid": pid, "tid": tid, "ppid": 1, "comm": comm,
                       "cmdline": format!("/usr/bin/{comm}")}),
            );
        }
        self.procs.push(Proc {
            pid,
            comm: comm.into(),
            tids,
            born,
            dies,
            load,
            utime_ns: 0.0,
            stime_ns: 0.0,
            minflt: 0.0,
            majflt: 0.0,
            switches: 0,
        });
        pid
    }

    fn push(&mut self, table: &'static Table, row: Value) {
        self.rows.entry(table.name).or_default().push(row);
    }

    fn count(&mut self, source: &'static str, name: &'static str, by: f64) {
        *self.counters.entry((source, name)).or_default() += by;
    }

    /// The background's processes at `second` (recurring jobs start here).
    fn background(&mut self, second: i64) {
        if second % 300 == 10 {
            let load = Load {
                cpu: 0.3,
                noise: 0.3,
                minflt: 2000.0,
                rss_mb: 20,
                ..Load::default()
            };
            self.spawn("logrotate", 1, second, Some(second + 15), load);
        }
        if second % 900 == 420 {
            let load = Load {
                cpu: 0.1,
                noise: 0.5,
                majflt: 40.0,
                minflt: 500.0,
                blocks_in_d: true,
                rss_mb: 50,
                ..Load::default()
            };
            self.spawn("backup", 1, second, Some(second + 60), load);
        }
        // The hourly build: two compiler processes at a time, 20 s each, for 6 minutes.
        let into_hour = second % 3600;
        if (1800..1800 + 360).contains(&into_hour) && into_hour % 20 == 0 {
            for _ in 0..2 {
                let load = Load {
                    cpu: 0.9,
                    noise: 0.1,
                    minflt: 15_000.0,
                    majflt: 5.0,
                    rss_mb: 300,
                    ..Load::default()
                };
                self.spawn("cc1", 1, second, Some(second + 20), load);
            }
        }
    }

    fn background_extra(&mut self, second: i64) -> Extra {
        let load = daily(second);
        let mut extra = Extra {
            pgmajfault: 5.0 * self.rng.unit(),
            numa_miss: 50.0 * self.rng.around(0.5),
            psi_memory_some: 0.002 * self.rng.unit(),
            ..Extra::default()
        };
        // kswapd wakes now and then, more often when busy.
        if self.rng.unit() < 0.02 * load {
            let pages = 3000.0 * self.rng.around(0.7);
            extra.pgscan_kswapd = pages;
            extra.pgsteal_kswapd = 0.8 * pages;
            extra.psi_memory_some += 0.01;
        }
        extra
    }

    /// Starts the incident of the `k`th injection at `second`.
    fn inject(&mut self, k: usize, second: i64) {
        let kind = KINDS[k % KINDS.len()];
        let strength = STRENGTHS[(k / KINDS.len()) % STRENGTHS.len()];
        let duration = DURATIONS_S[k % DURATIONS_S.len()];
        let end = second + duration;
        let s = strength;
        let (pid, comm) = match kind {
            // An existing service gets busy: more threads, all runnable.
            "cpu" => {
                let load = Load {
                    cpu: 1.0,
                    noise: 0.05,
                    minflt: 100.0,
                    rss_mb: 0,
                    ..Load::default()
                };
                let threads = (6.0 * s).ceil() as usize;
                let db = self
                    .procs
                    .iter()
                    .find(|p| p.comm == "postgres")
                    .map(|p| p.pid);
                let pid = db.expect("postgres runs from the start");
                // Its extra threads: a process of its own pid would be another
                // series; they join postgres as new tids.
                let base = self.next_pid;
                self.next_pid += threads as i32;
                let helper = Proc {
                    pid,
                    comm: "postgres".into(),
                    tids: (0..threads as i32).map(|t| base + t).collect(),
                    born: second,
                    dies: Some(end),
                    load,
                    utime_ns: 0.0,
                    stime_ns: 0.0,
                    minflt: 0.0,
                    majflt: 0.0,
                    switches: 0,
                };
                self.procs.push(helper);
                (pid, "postgres".to_string())
            }
            "new_process" => {
                let load = Load {
                    cpu: 0.9 * s,
                    noise: 0.05,
                    minflt: 50.0,
                    rss_mb: 100,
                    ..Load::default()
                };
                (
                    self.spawn("xmrig", 2, second, Some(end), load),
                    "xmrig".into(),
                )
            }
            "memory" => {
                let load = Load {
                    cpu: 0.5,
                    noise: 0.2,
                    minflt: 150_000.0 * s,
                    majflt: 200.0 * s,
                    rss_mb: 8000,
                    ..Load::default()
                };
                (
                    self.spawn("etl-load", 1, second, Some(end), load),
                    "etl-load".into(),
                )
            }
            "cache_thrash" => {
                let load = Load {
                    cpu: 0.2,
                    noise: 0.2,
                    minflt: 500.0,
                    majflt: 3000.0 * s,
                    blocks_in_d: true,
                    rss_mb: 2000,
                    ..Load::default()
                };
                (
                    self.spawn("reporter", 1, second, Some(end), load),
                    "reporter".into(),
                )
            }
            "io" => {
                let load = Load {
                    cpu: 0.05,
                    noise: 0.3,
                    blocks_in_d: true,
                    rss_mb: 30,
                    ..Load::default()
                };
                let threads = (4.0 * s).ceil() as usize;
                (
                    self.spawn("rsync", threads, second, Some(end), load),
                    "rsync".into(),
                )
            }
            "numa" => {
                let load = Load {
                    cpu: 0.6,
                    noise: 0.1,
                    migrate: 20_000.0 * s,
                    rss_mb: 4000,
                    ..Load::default()
                };
                (
                    self.spawn("numa-app", 2, second, Some(end), load),
                    "numa-app".into(),
                )
            }
            "lost" => (0, String::new()),
            _ => unreachable!("KINDS"),
        };
        self.truth.push(Injection {
            kind,
            strength,
            start: second,
            end,
            pid,
            comm,
        });
    }

    /// Forgets the processes gone by `second`, once their final rows are
    /// written; a process's extra threads leave their counts to it.
    fn reap(&mut self, second: i64) {
        let gone = |p: &Proc| p.dies.is_some_and(|d| d <= second);
        for k in 0..self.procs.len() {
            let p = &self.procs[k];
            if !gone(p) || p.tids[0] == p.pid {
                continue;
            }
            let (pid, counts) = (
                p.pid,
                (p.utime_ns, p.stime_ns, p.minflt, p.majflt, p.switches),
            );
            if let Some(main) = self
                .procs
                .iter_mut()
                .find(|m| m.pid == pid && m.tids[0] == pid)
            {
                main.utime_ns += counts.0;
                main.stime_ns += counts.1;
                main.minflt += counts.2;
                main.majflt += counts.3;
                main.switches += counts.4;
            }
        }
        self.procs.retain(|p| !gone(p));
    }

    /// The system-wide part of the incidents under way at `second`.
    fn incident_extra(&self, second: i64, extra: &mut Extra) {
        for inj in self
            .truth
            .iter()
            .filter(|i| (i.start..i.end).contains(&second))
        {
            let s = inj.strength;
            match inj.kind {
                "memory" => {
                    extra.pgscan_direct += 20_000.0 * s;
                    extra.pgsteal_direct += 15_000.0 * s;
                    extra.pgscan_kswapd += 40_000.0 * s;
                    extra.pgsteal_kswapd += 30_000.0 * s;
                    extra.pgmajfault += 1000.0 * s;
                    extra.psi_memory_some += 0.4 * s;
                    extra.psi_memory_full += 0.15 * s;
                }
                "cache_thrash" => {
                    extra.pgscan_kswapd += 30_000.0 * s;
                    extra.pgsteal_kswapd += 28_000.0 * s;
                    extra.psi_memory_some += 0.1 * s;
                }
                "lost" => extra.lost += (50_000.0 * s) as i64,
                _ => {}
            }
        }
    }

    /// Plays `second` out: schedules every live thread on the CPUs and
    /// writes its switches, wakeups, counters and snapshots.
    fn play(&mut self, second: i64, extra: Extra) {
        let t0 = START_NS + second * S;
        let load = daily(second);
        // (proc index, tid, demand, granted, blocks in D)
        let mut threads: Vec<(usize, i32, f64, f64, bool)> = Vec::new();
        for (i, p) in self.procs.iter().enumerate() {
            if p.born > second || p.dies.is_some_and(|d| d <= second) {
                continue;
            }
            for &tid in &p.tids {
                let mut demand = p.load.cpu * self.rng.around(p.load.noise);
                if p.load.daily {
                    demand *= load;
                }
                let demand = demand.clamp(0.0, 0.998);
                if demand > 0.0005 {
                    threads.push((i, tid, demand, demand, p.load.blocks_in_d));
                }
            }
        }
        let total: f64 = threads.iter().map(|t| t.2).sum();
        let capacity = CPUS as f64 * 0.998;
        if total > capacity {
            for t in &mut threads {
                t.3 = t.2 * capacity / total;
            }
        }
        // The least delayed first, so that a thread's wait fits before its slice.
        threads.sort_by(|a, b| (a.2 - a.3).total_cmp(&(b.2 - b.3)));
        let span = S - 2 * MARGIN_NS;
        let (mut cpu, mut pos) = (0usize, MARGIN_NS);
        let mut slices: Vec<Vec<Slice>> = vec![Vec::new(); CPUS];
        let mut wakeups: Vec<(i64, usize, i32, usize)> = Vec::new();
        let mut cpu_wait_s = 0.0;
        let mut d_threads = 0.0;
        for &(i, tid, demand, granted, in_d) in &threads {
            let ns = ((granted * span as f64) as i64).max(20_000);
            let wait = (((demand - granted) * S as f64) as i64).max(30_000);
            cpu_wait_s += wait as f64 / S as f64;
            let state = if in_d { "D" } else { "S" };
            if in_d {
                d_threads += 1.0 - granted;
            }
            let end = pos + ns;
            if end <= MARGIN_NS + span || cpu + 1 == CPUS {
                let end = end.min(MARGIN_NS + span);
                slices[cpu].push(Slice(pos, end, i, tid, state));
                wakeups.push(((pos - wait).max(MARGIN_NS / 2), i, tid, cpu));
                pos = end;
            } else {
                // McNaughton's wrap: the rest runs first on the next CPU.
                let rest = end - (MARGIN_NS + span);
                slices[cpu + 1].push(Slice(MARGIN_NS, MARGIN_NS + rest, i, tid, "S"));
                wakeups.push((MARGIN_NS / 2, i, tid, cpu + 1));
                slices[cpu].push(Slice(pos, MARGIN_NS + span, i, tid, state));
                wakeups.push(((pos - wait).max(MARGIN_NS + rest + 1000), i, tid, cpu));
                cpu += 1;
                pos = MARGIN_NS + rest;
            }
            if pos >= MARGIN_NS + span && cpu + 1 < CPUS {
                cpu += 1;
                pos = MARGIN_NS;
            }
        }
        let mut switches = 0i64;
        let mut busy_s = 0.0;
        for (c, list) in slices.iter().enumerate() {
            let mut prev: Option<(usize, i32, &str)> = None;
            let mut prev_end = 0;
            for &Slice(start, end, i, tid, state) in list {
                busy_s += (end - start) as f64 / S as f64;
                if let Some((pi, ptid, pstate)) = prev {
                    if prev_end == start {
                        self.switch(t0 + start, c, (pi, ptid, pstate), Some(i), tid);
                    } else {
                        self.switch(t0 + prev_end, c, (pi, ptid, pstate), None, 0);
                        self.switch_in(t0 + start, c, i, tid);
                    }
                    switches += 1;
                } else {
                    self.switch_in(t0 + start, c, i, tid);
                }
                switches += 1;
                let p = &mut self.procs[i];
                let on = (end - start) as f64;
                p.utime_ns += 0.8 * on;
                p.stime_ns += 0.2 * on;
                p.switches += 1;
                prev = Some((i, tid, state));
                prev_end = end;
            }
            if let Some(p) = prev {
                self.switch(t0 + prev_end, c, p, None, 0);
                switches += 1;
            }
        }
        for (ts, i, tid, target) in wakeups {
            let (pid, comm) = (self.procs[i].pid, self.procs[i].comm.clone());
            self.push(
                &SCHED_WAKEUP,
                json!({"ts": t0 + ts, "cpu": target, "tid": tid, "pid": pid, "comm": comm,
                       "target_cpu": target, "waker_tid": 0, "waker_pid": 0, "new_task": false, "prio": 120}),
            );
        }

        // Faults and migrations of each live process.
        let mut minflt = 0.0;
        let mut majflt = 0.0;
        let mut migrated = 0.0;
        let mut numa_rows = Vec::new();
        for p in &mut self.procs {
            if p.born > second || p.dies.is_some_and(|d| d <= second) {
                continue;
            }
            let scale = if p.load.daily { load } else { 1.0 };
            let min = p.load.minflt * scale * self.rng.around(0.3);
            let maj = p.load.majflt * scale * self.rng.around(0.3);
            p.minflt += min;
            p.majflt += maj;
            minflt += min;
            majflt += maj;
            if p.load.migrate > 0.0 {
                let pages = (p.load.migrate * self.rng.around(0.3)) as i64;
                migrated += pages as f64;
                numa_rows.push(json!({"ts": t0 + S / 2, "kind": "migrate_pages", "tid": p.tids[0],
                    "pid": p.pid, "pages_succeeded": pages, "pages_failed": 0, "reason": "numa_misplaced",
                    "comm": p.comm}));
            }
        }
        // Compaction now and then moves a few pages, by kcompactd.
        if self.rng.unit() < 0.01 {
            let pages = (200.0 + 1800.0 * self.rng.unit()) as i64;
            migrated += pages as f64;
            numa_rows.push(json!({"ts": t0 + S / 2, "kind": "migrate_pages", "tid": 60, "pid": 60,
                "pages_succeeded": pages, "pages_failed": 0, "reason": "compaction", "comm": "kcompactd0"}));
        }
        for row in numa_rows {
            self.push(&NUMA_EVENT, row);
        }

        let iowait = d_threads.min(CPUS as f64 - busy_s).max(0.0);
        self.count("stat", "user", 0.8 * busy_s * USER_HZ);
        self.count("stat", "system", 0.2 * busy_s * USER_HZ);
        self.count("stat", "iowait", iowait * USER_HZ);
        self.count("stat", "idle", (CPUS as f64 - busy_s - iowait) * USER_HZ);
        self.count("stat", "ctxt", switches as f64);
        self.count("vmstat", "pgfault", minflt + majflt + extra.pgmajfault);
        self.count("vmstat", "pgmajfault", majflt + extra.pgmajfault);
        self.count("vmstat", "pgscan_kswapd", extra.pgscan_kswapd);
        self.count("vmstat", "pgsteal_kswapd", extra.pgsteal_kswapd);
        self.count("vmstat", "pgscan_direct", extra.pgscan_direct);
        self.count("vmstat", "pgsteal_direct", extra.pgsteal_direct);
        self.count("vmstat", "pgmigrate_success", migrated);
        self.count("vmstat", "numa_pages_migrated", migrated);
        self.count("vmstat", "numa_miss", extra.numa_miss);
        self.count("pressure", "cpu_some_total", cpu_wait_s.min(1.0) * 1e6);
        self.count(
            "pressure",
            "memory_some_total",
            extra.psi_memory_some.min(1.0) * 1e6,
        );
        self.count(
            "pressure",
            "memory_full_total",
            extra.psi_memory_full.min(1.0) * 1e6,
        );
        let io = (extra.psi_io_some + d_threads).min(1.0);
        self.count("pressure", "io_some_total", io * 1e6);
        let counters: Vec<Value> = self
            .counters
            .iter()
            .map(|((source, name), value)| {
                json!({"ts": t0 + S / 2, "source": source, "name": name, "scope": null, "value": *value as i64})
            })
            .collect();
        for row in counters {
            self.push(&COUNTER, row);
        }
        if extra.lost > 0 {
            self.push(
                &LOSS,
                json!({"ts": t0 + S, "cpu": 0, "source": "ring_full:sched_switch", "lost": extra.lost}),
            );
        }
        self.snapshots(second);
    }

    /// Every 10 s a snapshot of each live process; its final row when it ends.
    fn snapshots(&mut self, second: i64) {
        let mut rows = Vec::new();
        // Helper threads of a process (the "cpu" injection) add to its totals.
        let mut totals: BTreeMap<i32, Totals> = BTreeMap::new();
        for p in &self.procs {
            let alive = p.born <= second && p.dies.is_none_or(|d| d > second + 1);
            let ends = p.dies == Some(second + 1);
            // A helper's counts are its process's, alive or not.
            if !(alive || ends) && p.tids[0] == p.pid {
                continue;
            }
            let t = totals.entry(p.pid).or_default();
            t.utime_ns += p.utime_ns;
            t.stime_ns += p.stime_ns;
            t.minflt += p.minflt;
            t.majflt += p.majflt;
            t.switches += p.switches;
            t.threads += p.tids.len();
            t.rss_mb += p.load.rss_mb;
            // A helper's end is not its process's.
            if p.tids[0] == p.pid {
                t.comm = p.comm.clone();
                t.born = p.born;
                t.ends = ends;
            }
        }
        for (pid, t) in totals {
            if !(t.ends || second % 10 == 0) {
                continue;
            }
            rows.push(json!({
                "ts": START_NS + (second + 1) * S - if t.ends { S / 4 } else { 0 },
                "pid": pid, "comm": t.comm, "state": if t.ends { "X" } else { "S" },
                "utime_ns": t.utime_ns as i64, "stime_ns": t.stime_ns as i64,
                "minflt": t.minflt as i64, "majflt": t.majflt as i64,
                "rss_bytes": if t.ends { 0 } else { t.rss_mb << 20 }, "vsize_bytes": (t.rss_mb << 20) * 2,
                "threads": t.threads, "nvcsw": t.switches, "nivcsw": 0, "ppid": 1,
                "start_time_ns": BOOT_BEFORE_NS + t.born * S,
            }));
        }
        for row in rows {
            self.push(&TASK_STAT, row);
        }
    }

    /// `prev` leaves CPU `cpu` in its state; `next` (a process index) or the idle task takes it.
    fn switch(
        &mut self,
        ts: i64,
        cpu: usize,
        prev: (usize, i32, &str),
        next: Option<usize>,
        next_tid: i32,
    ) {
        let p = &self.procs[prev.0];
        let (next_pid, next_comm, next_tid) = match next {
            Some(n) => (self.procs[n].pid, self.procs[n].comm.clone(), next_tid),
            None => (0, format!("swapper/{cpu}"), 0),
        };
        let row = json!({"ts": ts, "cpu": cpu, "prev_tid": prev.1, "prev_pid": p.pid, "prev_comm": p.comm,
            "prev_state": prev.2, "prev_prio": 120, "next_tid": next_tid, "next_pid": next_pid,
            "next_comm": next_comm, "next_prio": 120});
        self.push(&SCHED_SWITCH, row);
    }

    /// The idle task leaves CPU `cpu` for `tid` of process index `i`.
    fn switch_in(&mut self, ts: i64, cpu: usize, i: usize, tid: i32) {
        let p = &self.procs[i];
        let row = json!({"ts": ts, "cpu": cpu, "prev_tid": 0, "prev_pid": 0, "prev_comm": format!("swapper/{cpu}"),
            "prev_state": "R", "prev_prio": 120, "next_tid": tid, "next_pid": p.pid,
            "next_comm": p.comm, "next_prio": 120});
        self.push(&SCHED_SWITCH, row);
    }

    /// Writes the rows gathered so far as the chunks of the minute starting at `minute_ns`.
    fn flush(&mut self, out: &Path, minute_ns: i64, seq: u64, stamp: &Stamp) -> Result<()> {
        for table in [
            &SCHED_SWITCH,
            &SCHED_WAKEUP,
            &PROCESS,
            &COUNTER,
            &TASK_STAT,
            &NUMA_EVENT,
            &LOSS,
        ] {
            let dir = out.join(table.name);
            fs::create_dir_all(&dir)?;
            let Some(mut rows) = self.rows.remove(table.name) else {
                continue;
            };
            rows.sort_by(|a, b| {
                table
                    .sort_key
                    .iter()
                    .map(|k| compare(&a[*k], &b[*k]))
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let batch = chunk_file::batch_from_json(table, &rows)?;
            let name = layout::chunk_file_name(minute_ns, seq);
            let temp = dir.join(layout::temp_file_name(&name));
            let mut writer = chunk_file::create(&temp, table, stamp)?;
            writer.write(&batch)?;
            chunk_file::commit(writer, &temp, &dir.join(&name))?;
        }
        Ok(())
    }
}

fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.as_str().unwrap_or("").cmp(b.as_str().unwrap_or("")),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: hs-synthday OUT [HOURS] [SEED] [FIRST_INCIDENT_HOUR]";
    let (out, rest) = args.split_first().context(usage)?;
    if rest.len() > 3 {
        bail!(usage);
    }
    let number = |i: usize, name: &str, default: i64| -> Result<i64> {
        rest.get(i).map_or(Ok(default), |v| {
            v.parse().with_context(|| format!("{name}: {v}"))
        })
    };
    let (hours, seed, first_incident_hour) = (
        number(0, "HOURS", 8)?,
        number(1, "SEED", 1)?,
        number(2, "FIRST_INCIDENT_HOUR", 1)?,
    );
    let seed = u64::try_from(seed).context("SEED")?;
    let out = PathBuf::from(out);
    if out.exists() {
        bail!(
            "{} exists; hs-synthday writes a new recording",
            out.display()
        );
    }
    fs::create_dir_all(&out)?;
    let seconds: i64 = hours * 3600;
    let session = Session {
        started: rfc3339(START_NS),
        stopped: Some(rfc3339(START_NS + seconds * S)),
        boot_id: "synthday".into(),
        kernel: "6.1.0-synth".into(),
        cpus: CPUS as u32,
        numa_nodes: 2,
        recorder_version: "synthday".into(),
        command_line: vec!["synthday".into()],
        events: vec![
            "sched".into(),
            "numa".into(),
            "counters".into(),
            "tasks".into(),
        ],
        chunk_ns: 60 * S as u64,
        clock_offsets: vec![ClockOffset {
            at_boot_ns: BOOT_BEFORE_NS as u64,
            offset_ns: START_NS - BOOT_BEFORE_NS,
        }],
        counter_interval_ns: S as u64,
        task_interval_ns: 10 * S as u64,
        ..Default::default()
    };
    let meta = RecordingMeta {
        format: FORMAT.into(),
        schema_version: SCHEMA_VERSION,
        host: HOST.into(),
        sessions: vec![session],
        retired: Vec::new(),
        slice_of: None,
    };
    fs::write(out.join(layout::RECORDING_FILE), meta.to_json())?;
    let stamp = Stamp {
        host: HOST.into(),
        boot_id: "synthday".into(),
        recorder_version: "synthday".into(),
    };

    let mut world = World {
        rng: Rng(seed),
        procs: Vec::new(),
        next_pid: 1000,
        rows: BTreeMap::new(),
        counters: BTreeMap::new(),
        truth: Vec::new(),
    };
    let web = Load {
        cpu: 0.25,
        daily: true,
        noise: 0.4,
        minflt: 300.0,
        rss_mb: 200,
        ..Load::default()
    };
    for _ in 0..4 {
        world.spawn("nginx", 1, 0, None, web);
    }
    let db = Load {
        cpu: 0.2,
        daily: true,
        noise: 0.4,
        minflt: 800.0,
        majflt: 2.0,
        rss_mb: 4000,
        ..Load::default()
    };
    world.spawn("postgres", 3, 0, None, db);
    let daemon = |cpu: f64| Load {
        cpu,
        noise: 0.8,
        minflt: 20.0,
        rss_mb: 30,
        ..Load::default()
    };
    world.spawn("systemd-journal", 1, 0, None, daemon(0.01));
    world.spawn("sshd", 1, 0, None, daemon(0.002));
    world.spawn("node_exporter", 2, 0, None, daemon(0.01));
    world.spawn("redis-server", 1, 0, None, daemon(0.05));

    let mut injected = 0;
    for second in 0..seconds {
        world.background(second);
        let mut extra = world.background_extra(second);
        if second >= first_incident_hour * 3600 && second % 1200 == 300 {
            world.inject(injected, second);
            injected += 1;
        }
        world.incident_extra(second, &mut extra);
        world.play(second, extra);
        if second % 60 == 59 {
            let minute = second / 60;
            world.flush(&out, START_NS + minute * 60 * S, minute as u64 + 1, &stamp)?;
            world.reap(second);
        }
    }
    let truth: Vec<Value> = world
        .truth
        .iter()
        .map(|i| {
            json!({"kind": i.kind, "strength": i.strength, "start": rfc3339(START_NS + i.start * S),
                   "end": rfc3339(START_NS + i.end * S), "pid": i.pid, "comm": i.comm})
        })
        .collect();
    println!("{}", serde_json::to_string_pretty(&truth)?);
    Ok(())
}
