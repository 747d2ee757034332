//! Shared test fixture: paths of the workspace binaries, a recorder process
//! that is started, waited for and stopped like a user would, and queries.

use std::{
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, ChildStderr, Command, Output, Stdio},
    sync::{RwLock, RwLockReadGuard, RwLockWriteGuard},
    thread,
    time::Duration,
};

/// Tests run in parallel threads. Most only count their own processes'
/// events, but a few compare system-wide counters to a tight bound and need
/// the machine quiet of the other tests: they hold [`quiet`], the rest [`shared`].
static MACHINE: RwLock<()> = RwLock::new(());

pub fn shared() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn quiet() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// A binary of this workspace, built next to the test binary.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`)",
        path.display()
    );
    path
}

/// The release build of a binary of this workspace (`scripts/test` builds
/// the recorder's): what a figure stated for the shipped build is checked on.
pub fn release_bin(name: &str) -> PathBuf {
    let debug = bin(name);
    let target = debug
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/<binary>");
    let path = target.join("release").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo build --release -p hindsight-record` (scripts/test does)",
        path.display()
    );
    path
}

/// `--ring-size` for a test that counts a 20,000-round ping-pong's every
/// switch: twice the default. The two processes often share a CPU, so one
/// CPU's ring (half of the size on 2 CPUs) takes most of the storm, and the
/// debug recorder under test drains slower than the release one. At the
/// default, fresh-clone runs lost 1,494 of 19,999 switches (the kill -9
/// test) and 486 switches and 277 wakeups (the wakeup test, 2 runs of 34,
/// on a busy machine), all counted in `loss`; the release recorder lost none.
pub const EXACT_COUNT_RING: &str = "8M";

/// A fresh directory per test; the recording goes in `rec/` below it.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            dir: tempfile::Builder::new()
                .prefix("hindsight-e2e-")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn rec(&self) -> PathBuf {
        self.dir.path().join("rec")
    }
}

/// A running `hindsight-record`.
pub struct Recorder {
    child: Child,
    stderr: BufReader<ChildStderr>,
    pub log: String,
}

impl Recorder {
    /// Starts recording into `dir` and returns once the probes are attached.
    pub fn start(dir: &Path, extra: &[&str]) -> Recorder {
        Self::start_with_env(dir, extra, &[])
    }

    pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Recorder {
        let mut command = Command::new(bin("hindsight-record"));
        command.envs(env.iter().copied());
        Self::start_command(command, dir, extra)
    }

    /// Starts the release build (`release_bin`): for tests whose claim is
    /// about the shipped recorder's own cost, such as a quiet stretch that
    /// must stay quiet. The debug build's first second of recording costs
    /// about 0.45 s of CPU (symbolizing the first stacks unoptimized; the
    /// release build about 0.1 s), which on 2 CPUs is a real 20-point rise
    /// of `cpu_busy` in a 5 s interval that second dominates.
    pub fn start_release(dir: &Path, extra: &[&str]) -> Recorder {
        Self::start_command(Command::new(release_bin("hindsight-record")), dir, extra)
    }

    /// Starts `command` (the recorder, or a wrapper such as `setpriv` that
    /// execs it) with `--output dir` and `extra` appended.
    pub fn start_command(mut command: Command, dir: &Path, extra: &[&str]) -> Recorder {
        let mut child = command
            .arg("--output")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hindsight-record");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut log = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("hindsight-record exited ({status}) before recording:\n{log}");
            }
            log.push_str(&line);
            if line.starts_with("hindsight-record: recording ") {
                break;
            }
        }
        Recorder { child, stderr, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Gives the recorder's main thread (the one that reads /proc on its
    /// timers) nice -20, for tests that check what those timers sample
    /// rather than whether they keep time: on a saturated 2-CPU machine a
    /// nice -20 workload, or a dozen compilers, can hold a nice-0 recorder
    /// off the CPU for seconds, and the missed rounds (recorded as `late:`
    /// losses) would leave the workload unsampled.
    pub fn keep_on_time(&self) {
        // SAFETY: setpriority on our own child; PRIO_PROCESS with a pid
        // renices that one thread (the recorder's main thread).
        let ret = unsafe { libc::setpriority(libc::PRIO_PROCESS, self.pid() as libc::id_t, -20) };
        assert_eq!(
            ret,
            0,
            "renice the recorder: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Sends SIGINT and waits; asserts a clean exit and returns everything it said.
    pub fn stop(self) -> String {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        self.finish()
    }

    /// Waits for a recorder started with `--duration` to end by itself.
    pub fn finish(mut self) -> String {
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        self.log.push_str(&rest);
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "hindsight-record failed ({status}):\n{}",
            self.log
        );
        std::mem::take(&mut self.log)
    }
}

impl Recorder {
    /// Waits (at most `limit`) for a recorder expected to stop by itself
    /// with an error; returns its exit status and everything it said.
    pub fn exit_within(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let deadline = std::time::Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "hindsight-record still running after {limit:?}:\n{}",
                self.log
            );
            thread::sleep(Duration::from_millis(100));
        };
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        self.log.push_str(&rest);
        (status, std::mem::take(&mut self.log))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // A failed assertion must not leave BPF programs attached by a stray recorder.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command, returning its output whatever the exit status.
pub fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"))
}

/// Runs `command`, which must succeed: its stdout.
pub fn succeed(command: &mut Command) -> String {
    let out = run(command);
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `hindsight ARGS`, which must succeed: its stdout.
pub fn hindsight_stdout(args: &[&str]) -> String {
    succeed(Command::new(bin("hindsight")).args(args))
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The rows of a report's tables (its table format, as a person reads it)
/// whose first cell is `first`: each row's cells, which the layout
/// separates by two spaces or more.
pub fn table_rows(table: &str, first: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|line| {
            line.trim()
                .split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.first().map(String::as_str) == Some(first))
        .collect()
}

/// A count as the reports' tables print it (`49,155`), read back.
pub fn table_count(cell: &str) -> i64 {
    cell.trim_start_matches('~')
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a count"))
}

/// `hindsight sql DIR QUERY --format json`, parsed into one JSON value a row.
pub fn sql(dir: &Path, query: &str) -> Vec<serde_json::Value> {
    let out = run(Command::new(bin("hindsight"))
        .arg("sql")
        .arg(dir)
        .arg(query)
        .args(["--format", "json"]));
    assert!(
        out.status.success(),
        "hindsight sql failed: {}\nquery: {query}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// A single integer result of a query.
pub fn sql_count(dir: &Path, query: &str) -> i64 {
    let rows = sql(dir, query);
    assert_eq!(rows.len(), 1, "expected one row from {query}: {rows:?}");
    let value = rows[0]
        .as_object()
        .and_then(|o| o.values().next())
        .cloned()
        .unwrap();
    value
        .as_i64()
        .unwrap_or_else(|| panic!("not an integer: {value}"))
}

/// Runs `hs-load MODE ARGS...` and returns what it printed.
pub fn load(args: &[&str]) -> serde_json::Value {
    let out = run(Command::new(bin("hs-load")).args(args));
    assert!(
        out.status.success(),
        "hs-load {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("hs-load prints JSON")
}

/// Runs hs-load to its end and reaps it with wait4: its JSON, and the
/// kernel's account of its whole life as its parent gets it (getrusage of
/// a child), the reference for a process's totals.
#[allow(clippy::zombie_processes, reason = "reaped by wait4, for its rusage")]
pub fn load_reaped(args: &[&str]) -> (serde_json::Value, libc::rusage) {
    let mut child = Command::new(bin("hs-load"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn hs-load");
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    // Its standard output closes as it exits, after the kernel's
    // sched_process_exit and before its parent can reap it.
    let closed_utc_ns = utc_now_ns();
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: wait4 fills the status and rusage we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "hs-load {args:?} failed: status {status:#x}"
    );
    let mut json: serde_json::Value = serde_json::from_slice(&out).expect("hs-load prints JSON");
    json["pid"] = pid.into();
    json["closed_utc_ns"] = closed_utc_ns.into();
    (json, usage)
}

/// UTC nanoseconds now, the clock recordings use.
pub fn utc_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// CPU seconds that a thread's slices, as the tracepoints bound them, may
/// hold but its own CPU time does not, since boot, summed over CPUs; read
/// before and after a workload, the difference bounds what was hidden:
/// - steal: the hypervisor took the CPU away (the `steal` column of
///   /proc/stat, to 1/USER_HZ per CPU); the kernel's task clock leaves it out
///   of the thread's time (PARAVIRT_TIME_ACCOUNTING);
/// - pid 1's CPU time: on these VMs pid 1 is the VM's agent, and the
///   sched_switch tracepoints that fire while its threads are on a CPU
///   reach no tracer (bpftrace saw 0 of its 33 switch-outs in 10 s here), so
///   its run is seen as part of the slice it interrupted. Elsewhere pid 1 is
///   init, idle and visible, and this adds nothing.
pub fn hidden_cpu_seconds() -> f64 {
    let init = stat_fields("/proc/1/stat");
    // utime and stime, fields 14 and 15.
    let agent = ticks(init[11..13].iter().map(String::as_str));
    steal_seconds() + agent / clock_ticks_per_second()
}

/// The fields of a `/proc/<pid>/stat` (or a thread's) after `(comm)`, which
/// may hold spaces and parentheses: index 0 is field 3 (the state), index
/// `n` field `n + 3` in proc(5)'s numbering. `None` once the task is gone.
pub fn stat_fields_if_any(path: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    let after_comm = stat.rsplit_once(") ")?.1;
    Some(after_comm.split_whitespace().map(str::to_owned).collect())
}

/// [`stat_fields_if_any`] of a task that must still be there.
pub fn stat_fields(path: &str) -> Vec<String> {
    stat_fields_if_any(path).unwrap_or_else(|| panic!("{path} is gone or unreadable"))
}

/// CPU seconds the hypervisor has taken from this machine since boot,
/// summed over CPUs (the `steal` column of /proc/stat's `cpu` line).
pub fn steal_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let cpu_line = stat.lines().next().expect("the cpu line");
    ticks(cpu_line.split_whitespace().skip(8).take(1)) / clock_ticks_per_second()
}

/// The sum of tick counts.
fn ticks<'a>(counts: impl Iterator<Item = &'a str>) -> f64 {
    counts
        .map(|v| v.parse::<f64>().expect("a tick count"))
        .sum()
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads no memory of ours.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// Runs the ping-pong workload and returns its ground-truth JSON.
pub fn pingpong(rounds: u64) -> serde_json::Value {
    let out = run(Command::new(bin("hs-pingpong")).args(["--rounds", &rounds.to_string()]));
    assert!(
        out.status.success(),
        "hs-pingpong failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("hs-pingpong prints JSON")
}

/// Gives the recorder a moment to drain what the kernel has queued.
pub fn settle() {
    thread::sleep(Duration::from_millis(300));
}
