//! Real-kernel tests of the faults, numa and cache groups: load and attach
//! them, cause activity whose size the test knows, and check what the probes
//! saw. They need root, which CI has: nothing here is skipped.

use std::{
    collections::HashMap, fs::File, io::Write, mem::MaybeUninit, os::fd::AsRawFd, process::Command,
};

use arrow::{
    array::{Array, AsArray},
    datatypes::{Int32Type, Int64Type, TimestampNanosecondType, UInt64Type},
    record_batch::RecordBatch,
};
use hindsight_schemas::time::ClockOffset;
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};

use crate::{
    bpf::{
        load_cache, load_faults, load_numa, load_samples, load_sched, load_tasks, ring_maps,
        sched::types::hs_kind, TracepointCatalog,
    },
    cache::drain_page_cache,
    decode::Decoder,
    rows::{AllRows, PageCacheRows},
};

const OFFSET: ClockOffset = ClockOffset {
    at_boot_ns: 0,
    offset_ns: 0,
};

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Every record waiting in `ring`, decoded.
fn drain_rings(rings: &[&dyn MapCore]) -> AllRows {
    drain_rings_by_kind(rings).0
}

/// [`drain_rings`], and how many records of each kind they held.
fn drain_rings_by_kind(rings: &[&dyn MapCore]) -> (AllRows, HashMap<u32, usize>) {
    let mut decoder = Decoder::new(OFFSET);
    let mut rows = AllRows::default();
    let mut kinds = HashMap::new();
    for ring in rings {
        let mut builder = RingBufferBuilder::new();
        builder
            .add(*ring, |data: &[u8]| {
                let kind = decoder
                    .decode(data, &mut rows)
                    .expect("a record we can decode");
                *kinds.entry(kind).or_default() += 1;
                0
            })
            .unwrap();
        builder.build().unwrap().consume().unwrap();
    }
    (rows, kinds)
}

/// Sum over CPUs of one kind's ring-full counter.
fn lost(map: &dyn MapCore, kind: u32) -> u64 {
    map.lookup_percpu(&kind.to_ne_bytes(), MapFlags::ANY)
        .unwrap()
        .unwrap_or_default()
        .iter()
        .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap()))
        .sum()
}

#[test]
fn every_fresh_page_written_is_a_page_fault_row() {
    const PAGES: usize = 2000;
    let catalog = TracepointCatalog::load().unwrap();
    let mut object = MaybeUninit::uninit();
    let probes = load_faults(&mut object, 32 << 20, 1, &catalog).unwrap();
    assert!(probes.skipped.is_empty(), "{:?}", probes.skipped);

    let page = page_size();
    let len = PAGES * page;
    // SAFETY: a fresh private anonymous mapping, written only within its length.
    let base = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        // One fault per page: no transparent huge page behind our back.
        libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        for i in 0..PAGES {
            p.cast::<u8>().add(i * page).write_volatile(1);
        }
        p as u64
    };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let rows = &mut drain_rings(&ring_maps(&probes.rings).collect::<Vec<_>>()).page_fault;
    let b: RecordBatch = rows.finish();
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };

    let tids = b.column_by_name("tid").unwrap().as_primitive::<Int32Type>();
    let pids = b.column_by_name("pid").unwrap().as_primitive::<Int32Type>();
    let addresses = b
        .column_by_name("address")
        .unwrap()
        .as_primitive::<UInt64Type>();
    let kernel = b.column_by_name("kernel").unwrap().as_boolean();
    let errors = b
        .column_by_name("error_code")
        .unwrap()
        .as_primitive::<Int32Type>();
    let ours: Vec<usize> = (0..b.num_rows())
        .filter(|&r| {
            tids.value(r) == tid && (base..base + len as u64).contains(&addresses.value(r))
        })
        .collect();
    let of_pid = (0..b.num_rows())
        .filter(|&r| pids.value(r) == std::process::id() as i32)
        .count();
    let ring_full = lost(&probes.skel.maps.fault_lost, 6);
    assert_eq!(ring_full, 0, "the ring overflowed");
    assert_eq!(
        ours.len(),
        PAGES,
        "faults on our pages, of {} rows",
        b.num_rows()
    );
    assert!(of_pid >= PAGES);
    for r in ours {
        assert!(!kernel.value(r));
        // A user-mode write to a page not present: error code bits 1 and 2.
        assert_eq!(
            errors.value(r) & 0x7,
            0x6,
            "error code {:#x}",
            errors.value(r)
        );
    }
}

#[test]
fn every_numa_probe_attaches() {
    let catalog = TracepointCatalog::load().unwrap();
    // reason is the last of the eight arguments on this kernel (6.13+).
    assert_eq!(catalog.arg_count("mm_migrate_pages"), Some(8));
    assert_eq!(catalog.arg_count("sched_move_numa"), Some(3));
    let mut object = MaybeUninit::uninit();
    let probes = load_numa(&mut object, 1 << 16, &catalog).unwrap();
    assert!(probes.skipped.is_empty(), "{:?}", probes.skipped);
    assert_eq!(probes.attached(), 4);
}

/// The page-cache counts of one process in a drained batch.
fn counts_of(b: &RecordBatch, pid: u32) -> Option<(i64, i64)> {
    let pids = b.column_by_name("pid").unwrap().as_primitive::<Int32Type>();
    let accesses = b
        .column_by_name("accesses")
        .unwrap()
        .as_primitive::<Int64Type>();
    let misses = b
        .column_by_name("misses")
        .unwrap()
        .as_primitive::<Int64Type>();
    (0..b.num_rows())
        .find(|&r| pids.value(r) == pid as i32)
        .map(|r| (accesses.value(r), misses.value(r)))
}

/// Reads `path` whole in a child process (dd, 1 MiB reads, as `cat` or a
/// copy would), returns its pid.
fn read_in_child(path: &std::path::Path) -> u32 {
    let mut child = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["of=/dev/null", "bs=1M", "status=none"])
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    pid
}

/// Drains `map` into rows stamped `ts` and returns them; the count the
/// drain reports is the rows it appended.
fn drain(map: &dyn MapCore, ts: i64, rows: &mut PageCacheRows) -> RecordBatch {
    let appended = drain_page_cache(map, ts, rows).unwrap();
    let batch = rows.finish();
    assert_eq!(
        appended,
        batch.num_rows(),
        "rows the drain says it appended"
    );
    batch
}

#[test]
fn a_cold_read_misses_and_a_warm_read_hits() {
    const PAGES: i64 = 2000;
    let catalog = TracepointCatalog::load().unwrap();
    let mut object = MaybeUninit::uninit();
    let probes = load_cache(&mut object, &catalog).unwrap();
    assert!(probes.skipped.is_empty(), "{:?}", probes.skipped);
    let map = &probes.skel.maps.cache_counts;

    // Beside the test binary, on the build's disk: /tmp may be a tmpfs,
    // whose pages cannot be evicted to be read back from storage.
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
    let path = dir.path().join("cold");
    let mut file = File::create(&path).unwrap();
    file.write_all(&vec![7u8; PAGES as usize * page_size()])
        .unwrap();
    file.sync_all().unwrap();
    // SAFETY: advice on a file we own; 0, 0 is the whole file.
    let advised = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(advised, 0);
    drop(file);

    let mut rows = PageCacheRows::new();
    drain(map, 0, &mut rows);

    // dd's own start (mapping its binary and libraries, all cached) is
    // page-cache accesses too: measure it on an empty file and subtract.
    let empty = dir.path().join("empty");
    File::create(&empty).unwrap();
    let baseline = read_in_child(&empty);
    let (start_accesses, start_misses) =
        counts_of(&drain(map, 1, &mut rows), baseline).unwrap_or((0, 0));

    let cold = read_in_child(&path);
    let batch = drain(map, 2, &mut rows);
    assert!(batch.num_rows() > 0);
    let (accesses, misses) = counts_of(&batch, cold).expect("a row for the cold reader");
    let (accesses, misses) = (accesses - start_accesses, misses - start_misses);
    let slack = PAGES / 10 + 8;
    assert!(
        (misses - PAGES).abs() <= slack,
        "cold read: {misses} misses for {PAGES} pages"
    );
    assert!(
        (accesses - PAGES).abs() <= slack,
        "cold read: {accesses} accesses for {PAGES} pages"
    );

    let warm = read_in_child(&path);
    let (accesses, misses) =
        counts_of(&drain(map, 3, &mut rows), warm).expect("a row for the warm reader");
    let (accesses, misses) = (accesses - start_accesses, misses - start_misses);
    assert!(misses <= 8, "warm read: {misses} misses");
    assert!(
        (accesses - PAGES).abs() <= slack,
        "warm read: {accesses} accesses for {PAGES} pages (dd's start: {start_accesses})"
    );
    let lost_entries = lost(&probes.skel.maps.cache_lost, 8);
    assert_eq!(lost_entries, 0);
}

/// One node or not, compaction migrates pages: writing `compact_memory`
/// runs it in the writing thread, which must show as `migrate_pages` rows
/// with the kernel's reason name.
#[test]
fn compaction_shows_as_migrate_pages_rows() {
    let catalog = TracepointCatalog::load().unwrap();
    let mut object = MaybeUninit::uninit();
    let probes = load_numa(&mut object, 1 << 20, &catalog).unwrap();
    std::fs::write("/proc/sys/vm/compact_memory", "1").unwrap();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let b = drain_rings(&[&probes.skel.maps.numa_events])
        .numa_event
        .finish();
    let tids = b.column_by_name("tid").unwrap().as_primitive::<Int32Type>();
    let kinds = b
        .column_by_name("kind")
        .unwrap()
        .as_dictionary::<Int32Type>();
    let reasons = b
        .column_by_name("reason")
        .unwrap()
        .as_dictionary::<Int32Type>();
    let src_cpu = b.column_by_name("src_cpu").unwrap();
    let name = |d: &arrow::array::DictionaryArray<Int32Type>, r: usize| {
        d.values()
            .as_string::<i32>()
            .value(d.keys().value(r) as usize)
            .to_string()
    };
    let ours: Vec<usize> = (0..b.num_rows())
        .filter(|&r| tids.value(r) == tid)
        .collect();
    assert!(
        !ours.is_empty(),
        "no migrate_pages row of ours among {}",
        b.num_rows()
    );
    for r in ours {
        assert_eq!(
            (name(kinds, r), name(reasons, r)),
            ("migrate_pages".to_string(), "compaction".to_string())
        );
        assert!(src_cpu.is_null(r));
    }
    assert_eq!(lost(&probes.skel.maps.numa_lost, 7), 0);
}

/// The kernel's count of skipped runs is read for every program the
/// recorder loads, in every group, chosen as the recorder chooses them (the
/// ones left to load): a program it could not read would hide that loss.
#[test]
fn every_programs_skipped_runs_can_be_read() {
    use libbpf_rs::skel::Skel as _;
    let catalog = TracepointCatalog::load().unwrap();
    let mut objects: [MaybeUninit<_>; 6] = std::array::from_fn(|_| MaybeUninit::uninit());
    let [sched, faults, numa, cache, tasks, samples] = &mut objects;
    let sched = load_sched(sched, 1 << 20, crate::bpf::OffCpuStacks::Unwound, &catalog).unwrap();
    let faults = load_faults(faults, 1 << 20, 1, &catalog).unwrap();
    let numa = load_numa(numa, 1 << 16, &catalog).unwrap();
    let cache = load_cache(cache, &catalog).unwrap();
    let tasks = load_tasks(tasks, &catalog).unwrap();
    let online = online_cpus();
    let samples = load_samples(samples, 1 << 20, 49, true, &online).unwrap();
    let groups = [
        ("sched", sched.skel.object()),
        ("faults", faults.skel.object()),
        ("numa", numa.skel.object()),
        ("cache", cache.skel.object()),
        ("tasks", tasks.skel.object()),
        ("cpu", samples.skel.object()),
    ];
    for (group, object) in groups {
        let programs: Vec<_> = object.progs().filter(|p| p.autoload()).collect();
        assert!(!programs.is_empty(), "{group}: no program loaded");
        for program in &programs {
            let misses = crate::recorder::recursion_misses(program);
            assert!(misses.is_some(), "{group}: {:?}", program.name());
        }
    }
}

/// Touching every page of a cached, mapped file faults on a few pages and
/// maps the rest around them: `accesses` counts the faults, `fault_around`
/// the windows, and neither is dressed up as the other.
#[test]
fn mmap_faults_are_accesses_and_their_windows_are_fault_around() {
    const PAGES: usize = 512;
    let catalog = TracepointCatalog::load().unwrap();
    let mut object = MaybeUninit::uninit();
    let probes = load_cache(&mut object, &catalog).unwrap();
    let map = &probes.skel.maps.cache_counts;
    // On the build's disk: a tmpfs file faults through shmem, not filemap.
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
    let path = dir.path().join("mapped");
    std::fs::write(&path, vec![3u8; PAGES * page_size()]).unwrap();
    let file = File::open(&path).unwrap();
    let len = PAGES * page_size();
    // A child that maps the (cached) file and reads one byte per page; fork
    // keeps its counts apart from this process's other threads.
    // SAFETY: the child only maps, reads and exits: async-signal-safe.
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            );
            if base == libc::MAP_FAILED {
                libc::_exit(1);
            }
            let mut sum = 0u8;
            for page in 0..PAGES {
                sum |= std::ptr::read_volatile(base.cast::<u8>().add(page * page_size()));
            }
            libc::_exit(i32::from(sum == 0));
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child we forked.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let mut rows = PageCacheRows::new();
    drain_page_cache(map, 0, &mut rows).unwrap();
    let batch = rows.finish();
    let pids = batch
        .column_by_name("pid")
        .unwrap()
        .as_primitive::<Int32Type>();
    let row = (0..batch.num_rows())
        .find(|&r| pids.value(r) == child)
        .expect("a row for the child");
    let value = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap()
            .as_primitive::<Int64Type>()
            .value(row)
    };
    let (accesses, around, misses) = (value("accesses"), value("fault_around"), value("misses"));
    assert_eq!(misses, 0, "the file was cached");
    // Measured: 1 filemap fault and windows of 240 pages for 512 pages
    // touched (a large folio is mapped whole, past its window). Before the
    // windows were kept apart, they were 241 "accesses".
    assert!(
        (1..PAGES as i64 / 4).contains(&accesses),
        "{accesses} accesses for {PAGES} mapped pages: fault-around is not a lookup per page"
    );
    // Every page is cached and one thread touches each once: a window is
    // only taken for a page not yet mapped, and it maps the whole window
    // (within the mapping), so no page is in two windows.
    assert!(
        (1..=PAGES as i64).contains(&around),
        "{around} pages in fault-around windows for {PAGES} mapped pages"
    );
}

/// The CPUs online now.
fn online_cpus() -> Vec<u32> {
    crate::procfs::parse_cpu_list(
        &std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap(),
    )
}

/// Keeps the calling thread on `cpu`.
fn pin_to(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(libc::sched_setaffinity(0, size_of_val(&set), &set), 0);
    }
}

/// Context switches the calling thread has made, as the kernel counts them
/// (voluntary and involuntary).
fn thread_switches() -> i64 {
    // SAFETY: getrusage fills the rusage we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
        0
    );
    usage.ru_nvcsw + usage.ru_nivcsw
}

/// Each CPU's switches go to its own ring: a thread pinned to each CPU
/// sleeps a known number of times, and every ring holds only the records of
/// the CPUs it was given (CPU `i % rings`), every switch the kernel counted
/// for its thread among them.
#[test]
fn each_cpu_writes_its_own_ring() {
    const SLEEPS: usize = 500;
    let catalog = TracepointCatalog::load().unwrap();
    let mut object = MaybeUninit::uninit();
    let probes = load_sched(&mut object, 4 << 20, crate::bpf::OffCpuStacks::No, &catalog).unwrap();
    let online = online_cpus();
    let count = probes.rings.len();
    assert_eq!(
        count,
        crate::bpf::cpu_ring_layout(4 << 20, libbpf_rs::num_possible_cpus().unwrap()).0
    );
    assert!(
        count >= online.len().min(16),
        "{count} rings for CPUs {online:?}"
    );

    let sleepers: Vec<(u32, i32, i64)> = std::thread::scope(|scope| {
        let threads: Vec<_> = online
            .iter()
            .map(|&cpu| {
                scope.spawn(move || {
                    pin_to(cpu);
                    // A sleep whose timer fires before the thread gets to
                    // schedule (a vCPU held by the hypervisor for 50 µs)
                    // returns without a switch: the kernel's count is the truth.
                    let before = thread_switches();
                    for _ in 0..SLEEPS {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    let switched = thread_switches() - before;
                    // SAFETY: gettid has no preconditions.
                    (cpu, unsafe { libc::gettid() }, switched)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    probes.links.detach();

    for (index, ring) in probes.rings.iter().enumerate() {
        let b = drain_rings(&[ring]).sched_switch.finish();
        let cpus = b.column_by_name("cpu").unwrap().as_primitive::<Int32Type>();
        let tids = b
            .column_by_name("prev_tid")
            .unwrap()
            .as_primitive::<Int32Type>();
        assert!(b.num_rows() > 0, "ring {index} of {count} is empty");
        for row in 0..b.num_rows() {
            assert_eq!(
                cpus.value(row) as usize % count,
                index,
                "ring {index} of {count}"
            );
        }
        for &(cpu, tid, switched) in sleepers
            .iter()
            .filter(|(cpu, _, _)| *cpu as usize % count == index)
        {
            let slept = (0..b.num_rows()).filter(|&r| tids.value(r) == tid).count() as i64;
            assert!(
                switched >= SLEEPS as i64 * 9 / 10 && slept >= switched,
                "CPU {cpu}'s thread left its CPU {slept} times in ring {index}, \
                 {switched} by the kernel's count in {SLEEPS} sleeps"
            );
        }
    }
    assert_eq!(
        lost(&probes.skel.maps.sched_lost, 1),
        0,
        "a ring overflowed"
    );
}

/// A thread's comm goes with a CPU's switches and wakeups once, then again
/// when it changes: a thread pinned to one CPU sleeps a known number of
/// times under one name, then under another, and every one of its rows
/// carries the name it had, though most records came without it.
#[test]
fn a_comm_is_sent_once_a_cpu_and_again_when_it_changes() {
    const SLEEPS: usize = 300;
    let catalog = TracepointCatalog::load().unwrap();
    let mut object = MaybeUninit::uninit();
    let probes = load_sched(&mut object, 4 << 20, crate::bpf::OffCpuStacks::No, &catalog).unwrap();
    let online = online_cpus();
    let cpu = *online.last().unwrap();
    let tid = std::thread::spawn(move || {
        pin_to(cpu);
        for name in [c"hs-comm-first", c"hs-comm-second"] {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string.
            assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }, 0);
            for _ in 0..SLEEPS {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    })
    .join()
    .unwrap();
    probes.links.detach();

    let rings: Vec<&dyn MapCore> = ring_maps(&probes.rings).collect();
    let (mut rows, kinds) = drain_rings_by_kind(&rings);
    let names_of = |b: &RecordBatch, tid_column: &str, comm_column: &str| -> Vec<String> {
        let tids = b
            .column_by_name(tid_column)
            .unwrap()
            .as_primitive::<Int32Type>();
        let ts = b
            .column_by_name("ts")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        let comm = b
            .column_by_name(comm_column)
            .unwrap()
            .as_dictionary::<Int32Type>();
        let values = comm.values().as_string::<i32>();
        // In time order: a wakeup may be made on another CPU, in another ring.
        let mut rows: Vec<usize> = (0..b.num_rows())
            .filter(|&r| tids.value(r) == tid)
            .collect();
        rows.sort_by_key(|&r| ts.value(r));
        rows.iter()
            .map(|&r| values.value(comm.keys().value(r) as usize).to_owned())
            .collect()
    };
    let switches = rows.sched_switch.finish();
    let wakeups = rows.sched_wakeup.finish();
    for (names, what) in [
        (names_of(&switches, "prev_tid", "prev_comm"), "left its CPU"),
        (names_of(&switches, "next_tid", "next_comm"), "took its CPU"),
        (names_of(&wakeups, "tid", "comm"), "was woken"),
    ] {
        // A sleep whose timer fires before the thread gets to schedule()
        // leaves no switch: most, not all, of them show.
        let most = SLEEPS * 9 / 10;
        let count = |name: &str| names.iter().filter(|n| *n == name).count();
        assert!(
            count("hs-comm-first") >= most && count("hs-comm-second") >= most,
            "the thread {what} as {} and {} (of {SLEEPS} sleeps each)",
            count("hs-comm-first"),
            count("hs-comm-second")
        );
        let renamed = names.iter().position(|n| n == "hs-comm-second").unwrap();
        assert!(
            names[renamed..].iter().all(|n| n == "hs-comm-second"),
            "the thread {what} under its old name after the new one"
        );
    }
    let count = |kind: hs_kind| kinds.get(&kind.0).copied().unwrap_or(0);
    let (whole, cut) = (
        count(hs_kind::HS_KIND_SWITCH),
        count(hs_kind::HS_KIND_SWITCH_NAMED_BEFORE),
    );
    assert!(
        cut >= SLEEPS && cut > whole,
        "{cut} switches sent without their comms, {whole} with them"
    );
    assert!(
        count(hs_kind::HS_KIND_WAKEUP_NAMED_BEFORE) >= SLEEPS / 2,
        "{kinds:?}"
    );
}
