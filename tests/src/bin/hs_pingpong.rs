//! A workload of known behaviour for the end-to-end tests.
//!
//! Forks two single-threaded children, `hs-ping` and `hs-pong`, that pass
//! one byte back and forth over two pipes `--rounds` times, so each blocks
//! in `read` about once per round. `--pairs N` runs N such pairs at once
//! (a context-switch storm for the overload tests). The parent waits for each child to exit
//! with `waitid(WEXITED | WNOWAIT)`, so the dead child is not reaped yet,
//! reads its context-switch counts from `/proc/<pid>/status` (the kernel's
//! own count, including the final switch of the dead task), then reaps it.
//! Prints one JSON object on stdout with the ground truth.

use std::{fs, thread, time::Duration};

fn check(ret: libc::c_int, what: &str) {
    if ret < 0 {
        eprintln!("hs-pingpong: {what}: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
}

fn set_name(name: &str) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Child body: `first` writes first; each round is one write and one blocking read.
fn child(name: &str, read_fd: i32, write_fd: i32, rounds: u64, first: bool) -> ! {
    set_name(name);
    let mut byte = [0u8; 1];
    for round in 0..rounds {
        if first || round > 0 {
            // SAFETY: writing one byte from a live buffer to our pipe end.
            check(
                unsafe { libc::write(write_fd, byte.as_ptr().cast(), 1) } as i32,
                "write",
            );
        }
        // SAFETY: reading one byte into a live buffer from our pipe end.
        check(
            unsafe { libc::read(read_fd, byte.as_mut_ptr().cast(), 1) } as i32,
            "read",
        );
    }
    if !first {
        // SAFETY: as above; the last answer lets the first child finish.
        check(
            unsafe { libc::write(write_fd, byte.as_ptr().cast(), 1) } as i32,
            "write",
        );
    }
    // SAFETY: _exit skips atexit handlers and stdio flushing that belong to the parent.
    unsafe { libc::_exit(0) }
}

fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc status"))
}

fn main() {
    let rounds: u64 = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let pairs: u64 = std::env::args()
        .skip_while(|a| a != "--pairs")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut children = Vec::new();
    for _ in 0..pairs {
        let mut ab = [0i32; 2];
        let mut ba = [0i32; 2];
        // SAFETY: pipe writes two fds into the arrays we own.
        check(unsafe { libc::pipe(ab.as_mut_ptr()) }, "pipe");
        check(unsafe { libc::pipe(ba.as_mut_ptr()) }, "pipe");
        for (name, read_fd, write_fd, first) in [
            ("hs-ping", ba[0], ab[1], true),
            ("hs-pong", ab[0], ba[1], false),
        ] {
            // SAFETY: this program is single-threaded, so the child may run Rust code after fork.
            let pid = unsafe { libc::fork() };
            check(pid, "fork");
            if pid == 0 {
                child(name, read_fd, write_fd, rounds, first);
            }
            children.push((name, pid));
        }
        // SAFETY: the children hold their own copies; closing ours.
        for fd in ab.into_iter().chain(ba) {
            unsafe { libc::close(fd) };
        }
    }
    let mut results = Vec::new();
    for (name, pid) in children {
        // SAFETY: waitid fills the siginfo we own; WNOWAIT leaves the zombie in place.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        check(
            unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            },
            "waitid",
        );
        // The child is a zombie once waitid returns, but its very last context
        // switch may still be in flight on another CPU: read until it settles.
        let read = || {
            fs::read_to_string(format!("/proc/{pid}/status")).expect("zombie status is readable")
        };
        let mut status = read();
        loop {
            thread::sleep(Duration::from_millis(50));
            let again = read();
            if again == status {
                break;
            }
            status = again;
        }
        let voluntary = status_field(&status, "voluntary_ctxt_switches:");
        let nonvoluntary = status_field(&status, "nonvoluntary_ctxt_switches:");
        // The scheduler's own account of its time on a CPU (sum_exec_runtime).
        let runtime_ns: u64 = fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .expect("zombie schedstat is readable")
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse().ok())
            .expect("schedstat starts with the run time in ns");
        // SAFETY: reaps the child we waited for.
        check(
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) },
            "waitpid",
        );
        results.push(serde_json::json!({
            "name": name, "pid": pid, "tid": pid, "ppid": std::process::id(),
            "voluntary": voluntary, "nonvoluntary": nonvoluntary, "runtime_ns": runtime_ns,
        }));
    }
    println!(
        "{}",
        serde_json::json!({ "pid": std::process::id(), "rounds": rounds, "children": results })
    );
}
