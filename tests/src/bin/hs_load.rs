//! Workloads of known size for the end-to-end tests, one mode per run:
//!
//! - `touch PAGES PAUSE_MS`: sleep, then mmap and write PAGES fresh pages
//!   (exactly one minor fault each), then sleep again, so snapshots taken
//!   before and after bound the faults.
//! - `burn SECONDS`: spin on one CPU for SECONDS of wall time, at nice -20.
//! - `sleep SECONDS`: sleep.
//! - `read FILE`: read FILE once with plain read(2) calls of 64 KiB.
//! - `evict FILE`: fsync FILE and drop it from the page cache (POSIX_FADV_DONTNEED).
//! - `fault-storm SECONDS MIB`: for SECONDS, fault in the pages of a MIB
//!   mapping in a fresh random order, drop them (MADV_DONTNEED) and again:
//!   page faults by the million whose addresses do not compress, so a
//!   recording of them grows fast (for the retention tests).
//! - `sync-writes SECONDS FILE`: for SECONDS, append 4 KiB to FILE and
//!   fdatasync it, again and again: a process that spends its time in
//!   D state waiting for the disk (an I/O stall). Prints `syncs`.
//! - `cold-reads SECONDS FILE`: for SECONDS, drop FILE from the page cache,
//!   map it with readahead off (MADV_RANDOM) and read one byte of every
//!   page: a major fault per page, each a read from disk (the page cache
//!   thrashing). Prints `major_faults` (getrusage).
//! - `tick COUNT PERIOD_US`: at nice -20 (like `burn`), sleep until each of COUNT
//!   deadlines PERIOD_US apart (absolute, 1 ns timer slack) and measure how late
//!   it ran after each: the ground truth of its run-queue latency (plus the
//!   timer's few microseconds). A deadline already past when it gets there is
//!   not slept for (no wakeup) and not measured: `late_ns` has one entry per sleep.
//!   Also prints the kernel's own account of its run-queue waits between its
//!   first and last sleep: `run_delay_ns` (/proc/self/schedstat), from
//!   `start_utc_ns` to `end_utc_ns`.
//!
//! - `jit SECONDS`: after a 500 ms pause, spin for SECONDS in machine code
//!   it copied into anonymous executable memory, as JIT-compiled code runs
//!   (x86-64 only): CPU samples whose leaf only a perf map could name. Then
//!   it stays alive until its standard input closes (its perf map is read
//!   while it lives, which the caller decides).
//!
//! - `numa-stray MIB SECONDS`: the misplaced-memory problem NUMA balancing
//!   exists for. It places a MIB mapping on node 1 (`mbind` MPOL_BIND,
//!   every page written once), frees it of the binding (MPOL_DEFAULT: the
//!   pages stay where they are), then writes one byte of every page,
//!   again and again, for SECONDS, from wherever it runs (run it with
//!   `HS_LOAD_CPU=0`, a CPU of node 0). Prints the node of every page
//!   (`move_pages`) after placing and at the end: `on_node_before`,
//!   `on_node_after` (pages per node), and `on_no_node_before`,
//!   `on_no_node_after` (pages still on no node after a second of asking
//!   again), with `no_node_statuses_after` (how many of those had each
//!   status `move_pages` gave, e.g. `{"-2": 12}` for `-ENOENT`).
//!
//! With `HS_LOAD_CPU=N` in the environment it first pins itself to CPU N;
//! with `HS_LOAD_NAME=NAME` it names itself NAME (its comm, 15 bytes at most).
//!
//! Prints one JSON object with what it did (pid, pages, ...) on stdout.

use std::{
    fs::File,
    io::Read,
    os::fd::AsRawFd,
    thread,
    time::{Duration, Instant},
};

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// A fresh anonymous private read-write mapping of `size` bytes.
fn anonymous_mapping(size: usize) -> *mut libc::c_void {
    // SAFETY: mmap of anonymous memory has no preconditions; checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(
        ptr,
        libc::MAP_FAILED,
        "mmap of {size} bytes: {}",
        std::io::Error::last_os_error()
    );
    ptr
}

fn touch(pages: usize, pause: Duration) -> serde_json::Value {
    thread::sleep(pause);
    let size = pages * page_size();
    let ptr = anonymous_mapping(size);
    // Huge pages would fault 512 pages at once: ask for small ones, one fault a page.
    // SAFETY: advising on the mapping we just made.
    unsafe { libc::madvise(ptr, size, libc::MADV_NOHUGEPAGE) };
    let base = ptr.cast::<u8>();
    for page in 0..pages {
        // SAFETY: every offset is inside the mapping; one write per page faults it in.
        unsafe { base.add(page * page_size()).write_volatile(1) };
    }
    thread::sleep(pause);
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(ptr, size) };
    serde_json::json!({ "pages": pages })
}

/// Pages of `pages` (addresses) per NUMA node, as `move_pages` finds them,
/// and how many it found on none, per status it gave them: a page the
/// kernel is migrating at that moment has a migration entry, not a node
/// (`-ENOENT`), so a pass that meets one waits a little and asks again
/// before counting it as such. (CI once saw 19,456 of 32,768 pages on no
/// node after a second of asking; their statuses say why next time.)
fn pages_per_node(pages: &[*mut libc::c_void]) -> (Vec<u64>, std::collections::BTreeMap<i32, u64>) {
    let mut status = vec![0i32; pages.len()];
    for _attempt in 0..50 {
        // SAFETY: move_pages with no target nodes only reports the node of
        // each page into `status`, which has one slot per page.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0,
                pages.len(),
                pages.as_ptr(),
                std::ptr::null::<i32>(),
                status.as_mut_ptr(),
                0,
            )
        };
        assert_eq!(ret, 0, "move_pages: {}", std::io::Error::last_os_error());
        if status.iter().all(|&node| node >= 0) {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let mut per_node = Vec::new();
    let mut statuses = std::collections::BTreeMap::new();
    for &node in &status {
        let Ok(node) = usize::try_from(node) else {
            *statuses.entry(node).or_insert(0) += 1;
            continue;
        };
        if per_node.len() <= node {
            per_node.resize(node + 1, 0);
        }
        per_node[node] += 1;
    }
    (per_node, statuses)
}

fn numa_stray(mib: usize, seconds: f64) -> serde_json::Value {
    let size = mib << 20;
    let base = anonymous_mapping(size);
    let policy = |mode: i32, nodes: u64| {
        let mask = [nodes, 0u64];
        // SAFETY: mbind over our own mapping; the mask outlives the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                base,
                size,
                mode,
                if nodes == 0 {
                    std::ptr::null()
                } else {
                    mask.as_ptr()
                },
                if nodes == 0 { 0 } else { 65 },
                0,
            )
        };
        assert_eq!(ret, 0, "mbind: {}", std::io::Error::last_os_error());
    };
    const MPOL_DEFAULT: i32 = 0;
    const MPOL_BIND: i32 = 2;
    policy(MPOL_BIND, 1 << 1);
    let step = page_size();
    let pages: Vec<*mut libc::c_void> = (0..size / step)
        // SAFETY: every offset is inside the mapping.
        .map(|i| unsafe { base.cast::<u8>().add(i * step) }.cast())
        .collect();
    let write_all = |value: u8| {
        for &page in &pages {
            // SAFETY: a byte inside our read-write mapping.
            unsafe { std::ptr::write_volatile(page.cast::<u8>(), value) };
        }
    };
    write_all(1);
    let (before, no_node_before) = pages_per_node(&pages);
    policy(MPOL_DEFAULT, 0);
    let started = Instant::now();
    let mut passes = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        passes += 1;
        write_all(passes as u8);
    }
    let (after, no_node_after) = pages_per_node(&pages);
    serde_json::json!({
        "pages": pages.len(),
        "passes": passes,
        "on_node_before": before,
        "on_node_after": after,
        "on_no_node_before": no_node_before.values().sum::<u64>(),
        "on_no_node_after": no_node_after.values().sum::<u64>(),
        "no_node_statuses_after": no_node_after
            .iter()
            .map(|(status, pages)| (status.to_string(), serde_json::Value::from(*pages)))
            .collect::<serde_json::Map<_, _>>(),
    })
}

fn fault_storm(seconds: f64, mib: usize) -> serde_json::Value {
    let pages = (mib << 20) / page_size();
    let size = pages * page_size();
    let ptr = anonymous_mapping(size);
    // SAFETY: advising on the mapping we just made: one fault a page.
    unsafe { libc::madvise(ptr, size, libc::MADV_NOHUGEPAGE) };
    let base = ptr.cast::<u8>();
    let mut order: Vec<usize> = (0..pages).collect();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut rounds = 0u64;
    while Instant::now() < end {
        for i in (1..pages).rev() {
            order.swap(i, next() as usize % (i + 1));
        }
        for &page in &order {
            // SAFETY: every offset is inside the mapping.
            unsafe { base.add(page * page_size()).write_volatile(1) };
        }
        // SAFETY: dropping the pages of our own mapping, so they fault again.
        unsafe { libc::madvise(ptr, size, libc::MADV_DONTNEED) };
        rounds += 1;
    }
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(ptr, size) };
    serde_json::json!({ "faults": rounds * pages as u64 })
}

fn sync_writes(seconds: f64, path: &str) -> serde_json::Value {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open file to write");
    let block = [0x5au8; 4096];
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut syncs = 0u64;
    while Instant::now() < end {
        file.write_all(&block).expect("write");
        file.sync_data().expect("fdatasync");
        syncs += 1;
    }
    serde_json::json!({ "syncs": syncs })
}

fn major_faults() -> i64 {
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_majflt
}

fn cold_reads(seconds: f64, path: &str) -> serde_json::Value {
    let file = File::open(path).expect("open file to read");
    let size = file.metadata().expect("stat").len() as usize;
    assert!(size >= page_size(), "{path} is under a page");
    let before = major_faults();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut sum = 0u64;
    while Instant::now() < end {
        // SAFETY: advising the kernel about a file descriptor we hold open.
        let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(ret, 0, "posix_fadvise");
        // SAFETY: a private read-only mapping of the file we hold; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap of {path}");
        // SAFETY: advising on the mapping we just made.
        unsafe { libc::madvise(ptr, size, libc::MADV_RANDOM) };
        for offset in (0..size).step_by(page_size()) {
            if Instant::now() >= end {
                break;
            }
            // SAFETY: every offset is inside the mapping.
            sum += u64::from(unsafe { ptr.cast::<u8>().add(offset).read_volatile() });
        }
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(ptr, size) };
    }
    serde_json::json!({ "major_faults": major_faults() - before, "sum": sum })
}

fn burn(seconds: f64) -> serde_json::Value {
    // On a shared 2-core machine other work would take part of "our" core;
    // nice -20 (we run as root) makes "burns one full core" actually true.
    // SAFETY: setpriority on our own process.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
    let started = Instant::now();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
    serde_json::json!({ "seconds": seconds, "cpu_seconds": cpu, "wall_seconds": started.elapsed().as_secs_f64() })
}

fn read(path: &str) -> serde_json::Value {
    let mut file = File::open(path).expect("open file to read");
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0usize;
    loop {
        let n = file.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        total += n;
    }
    serde_json::json!({ "bytes": total, "pages": total.div_ceil(page_size()) })
}

fn evict(path: &str) -> serde_json::Value {
    let file = File::open(path).expect("open file to evict");
    file.sync_all().expect("fsync");
    // SAFETY: advising the kernel about a file descriptor we hold open.
    let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(ret, 0, "posix_fadvise");
    serde_json::json!({ "evicted": path })
}

fn tick(count: usize, period: Duration) -> serde_json::Value {
    // The default 50 us of timer slack would blur the latencies measured.
    // SAFETY: prctl on our own thread with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    // The same weight as `burn`'s hogs, so a wait is their slices, not starvation.
    // SAFETY: setpriority on our own process.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
    let now = || {
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: clock_gettime fills the struct we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
    };
    let period = period.as_nanos() as i64;
    let (start_utc_ns, run_delay_before) = (utc_ns(), run_delay_ns());
    let mut deadline = now();
    let mut late_ns = Vec::with_capacity(count);
    for _ in 0..count {
        deadline += period;
        if now() >= deadline {
            continue;
        }
        let ts = libc::timespec {
            tv_sec: deadline / 1_000_000_000,
            tv_nsec: deadline % 1_000_000_000,
        };
        // SAFETY: an absolute sleep on a timespec we own; EINTR just ends it early.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        late_ns.push(now() - deadline);
    }
    let (end_utc_ns, run_delay_after) = (utc_ns(), run_delay_ns());
    serde_json::json!({
        "late_ns": late_ns,
        "run_delay_ns": run_delay_after - run_delay_before,
        "start_utc_ns": start_utc_ns,
        "end_utc_ns": end_utc_ns,
    })
}

/// Spins for `seconds` in code copied to an anonymous executable mapping.
#[cfg(target_arch = "x86_64")]
fn jit(seconds: f64) -> serde_json::Value {
    // mov rcx, 1_000_000; dec rcx; jnz -5; ret
    let mut code = vec![0x48, 0xb9];
    code.extend_from_slice(&1_000_000u64.to_le_bytes());
    code.extend_from_slice(&[0x48, 0xff, 0xc9, 0x75, 0xfb, 0xc3]);
    // SAFETY: a fresh private anonymous mapping, written before it is run;
    // the code only counts down a register and returns.
    let spin: extern "C" fn() = unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            page_size(),
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(page, libc::MAP_FAILED, "mmap an executable page");
        std::ptr::copy_nonoverlapping(code.as_ptr(), page.cast::<u8>(), code.len());
        std::mem::transmute::<*mut libc::c_void, extern "C" fn()>(page)
    };
    thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        spin();
    }
    std::io::stdin()
        .read_to_end(&mut Vec::new())
        .expect("read standard input");
    serde_json::json!({ "address": spin as usize })
}

/// Time this thread has waited runnable on a run queue (schedstat field 2).
fn run_delay_ns() -> i64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    text.split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("schedstat run_delay")
}

fn utc_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Pins this process to one CPU.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity act on ours.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let ret = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(ret, 0, "sched_setaffinity to CPU {cpu}");
    }
}

fn main() {
    if let Ok(cpu) = std::env::var("HS_LOAD_CPU") {
        pin(cpu.parse().expect("HS_LOAD_CPU is a CPU number"));
    }
    if let Ok(name) = std::env::var("HS_LOAD_NAME") {
        let name = std::ffi::CString::new(name).expect("a name without NUL");
        // SAFETY: PR_SET_NAME reads the NUL-terminated name we own.
        let ret = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
        assert_eq!(ret, 0, "prctl(PR_SET_NAME)");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| {
        args.get(i)
            .unwrap_or_else(|| panic!("usage: see the top of hs_load.rs"))
    };
    let mut result = match arg(0).as_str() {
        "touch" => touch(
            arg(1).parse().unwrap(),
            Duration::from_millis(arg(2).parse().unwrap()),
        ),
        "burn" => burn(arg(1).parse().unwrap()),
        "fault-storm" => fault_storm(arg(1).parse().unwrap(), arg(2).parse().unwrap()),
        "sleep" => {
            thread::sleep(Duration::from_secs_f64(arg(1).parse().unwrap()));
            serde_json::json!({})
        }
        "numa-stray" => numa_stray(arg(1).parse().unwrap(), arg(2).parse().unwrap()),
        "read" => read(arg(1)),
        "sync-writes" => sync_writes(arg(1).parse().unwrap(), arg(2)),
        "cold-reads" => cold_reads(arg(1).parse().unwrap(), arg(2)),
        "evict" => evict(arg(1)),
        "tick" => tick(
            arg(1).parse().unwrap(),
            Duration::from_micros(arg(2).parse().unwrap()),
        ),
        #[cfg(target_arch = "x86_64")]
        "jit" => jit(arg(1).parse().unwrap()),
        other => panic!("unknown mode {other}"),
    };
    result["pid"] = std::process::id().into();
    println!("{result}");
}
