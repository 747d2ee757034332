//! Workload for the stack tests: one thread burns CPU in two named functions
//! for 3:1 of its CPU time, then sleeps in a named function for a known
//! total, then exits, printing its ground truth as JSON: pid, CPU ticks
//! from /proc/self/stat, and the nanoseconds it slept.
//!
//! The end-to-end test compiles this file itself with `rustc -C
//! force-frame-pointers=yes -g` (the kernel walks user stacks by frame
//! pointers only), so it uses nothing but `std`. Its system calls are made
//! inline from the named functions, not through libc (built without frame
//! pointers): the interrupted or blocked instruction is then inside the
//! function whose name the test looks for. Then it naps a few times more
//! through libc (`std::thread::sleep`, libc's `nanosleep`), so that a libc
//! function is the leaf of those off-CPU stacks.
//!
//! Usage: hs-stacks [--burn-ms N] [--naps N] [--nap-ms N]

use std::hint::black_box;
use std::time::Instant;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

#[cfg(target_arch = "x86_64")]
const SYS_NANOSLEEP: usize = 35;
#[cfg(target_arch = "x86_64")]
const SYS_CLOCK_GETTIME: usize = 228;
#[cfg(target_arch = "aarch64")]
const SYS_NANOSLEEP: usize = 101;
#[cfg(target_arch = "aarch64")]
const SYS_CLOCK_GETTIME: usize = 113;
const CLOCK_THREAD_CPUTIME_ID: usize = 3;

/// A two-argument system call, inlined into its caller.
#[inline(always)]
fn syscall2(number: usize, a: usize, b: usize) -> isize {
    let ret: isize;
    // SAFETY: callers pass pointers to live Timespec values the kernel may write.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") number as isize => ret, in("rdi") a, in("rsi") b,
            lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("svc 0", in("x8") number, inlateout("x0") a as isize => ret, in("x1") b,
            options(nostack));
    }
    ret
}

/// This thread's CPU time, ns.
#[inline(always)]
fn thread_cpu_ns() -> u64 {
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    syscall2(
        SYS_CLOCK_GETTIME,
        CLOCK_THREAD_CPUTIME_ID,
        &mut t as *mut Timespec as usize,
    );
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Spins until this thread has used `ns` more CPU time.
#[inline(always)]
fn spin_for(ns: u64) -> u64 {
    let start = thread_cpu_ns();
    let mut x = 1u64;
    loop {
        for _ in 0..20_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let used = thread_cpu_ns() - start;
        if used >= ns {
            return used;
        }
    }
}

#[inline(never)]
fn burn_three_parts(ns: u64) -> u64 {
    spin_for(ns)
}

#[inline(never)]
fn burn_one_part(ns: u64) -> u64 {
    spin_for(ns)
}

/// Sleeps `naps` times `nap_ns`; returns the nanoseconds spent asleep.
#[inline(never)]
fn sleep_in_named_function(naps: u32, nap_ns: u64) -> u64 {
    let mut slept = 0;
    for _ in 0..naps {
        let request = Timespec {
            tv_sec: (nap_ns / 1_000_000_000) as i64,
            tv_nsec: (nap_ns % 1_000_000_000) as i64,
        };
        let start = Instant::now();
        syscall2(SYS_NANOSLEEP, &request as *const Timespec as usize, 0);
        slept += start.elapsed().as_nanos() as u64;
    }
    slept
}

/// utime + stime of this process, in clock ticks (/proc/self/stat fields 14, 15).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let after_comm = &stat[stat.rfind(')').expect("stat has a comm") + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // Field 3 (state) is fields[0], so field N is fields[N - 3].
    fields[14 - 3].parse::<u64>().unwrap() + fields[15 - 3].parse::<u64>().unwrap()
}

fn flag(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let burn_ns = flag(&args, "--burn-ms", 2000) * 1_000_000;
    let naps = flag(&args, "--naps", 10) as u32;
    let nap_ns = flag(&args, "--nap-ms", 100) * 1_000_000;
    // Slices of 30 ms and 10 ms of CPU: 3:1, and fine enough to interleave.
    let (mut three, mut one) = (0u64, 0u64);
    while three + one < burn_ns {
        three += burn_three_parts(30_000_000);
        one += burn_one_part(10_000_000);
    }
    let slept = sleep_in_named_function(naps, nap_ns);
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: sysconf has no preconditions; _SC_CLK_TCK is 2 on Linux.
    extern "C" {
        fn sysconf(name: i32) -> i64;
    }
    let ticks_per_second = unsafe { sysconf(2) };
    println!(
        "{{\"pid\": {}, \"cpu_ticks\": {}, \"ticks_per_second\": {}, \"burn_three_ns\": {three}, \"burn_one_ns\": {one}, \"slept_ns\": {slept}}}",
        std::process::id(),
        cpu_ticks(),
        ticks_per_second
    );
}
