//! A ceiling on the process's heap, behind the memory pool.
//!
//! `--memory-limit` bounds what DataFusion's operators account for: sorts,
//! joins and aggregations spill past it. Some do not account for all they
//! hold: DataFusion 55's `max` over a struct grew to 23.2 GiB of this
//! 24 GiB machine on a day's `thread_second`, until the kernel's OOM killer
//! chose a process to kill, which on a laptop need not be this one. So the
//! binary's allocator ([`BoundedHeap`], installed by `main.rs`) counts the
//! bytes it has handed out, and once they pass [`ceiling_for`] the limit,
//! the process stops with one line on stderr and exit code 1, before the
//! machine runs short.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// Bytes handed out and not yet given back, all threads' counts flushed.
static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// This thread's count not yet added to [`LIVE`]: one shared counter
    /// touched at every allocation cost the day's timeline a quarter more
    /// CPU, its cache line going back and forth between the workers.
    static UNFLUSHED: Cell<isize> = const { Cell::new(0) };
}

/// How far a thread's count may run before it is added to [`LIVE`]: the
/// ceiling is checked that much late, per thread.
const FLUSH_BYTES: isize = 1 << 20;

/// Past this many live bytes the process stops; none until [`set_ceiling`].
static CEILING: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The `--memory-limit` the ceiling was derived from, for the message.
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The heap a process with memory limit `limit` may hold in all: four
/// times the limit, and at least 1 GiB more than it. The analyzer's own
/// structures, Parquet readers and batches in flight come on top of what
/// the pool accounts (a day's timeline peaked at 0.5 GiB with the default
/// 1 GiB limit); four times is far from any of that, and far below the
/// memory of a machine that runs with such a limit.
pub fn ceiling_for(limit: u64) -> u64 {
    limit.saturating_mul(4).max(limit.saturating_add(1 << 30))
}

/// Sets the ceiling from `--memory-limit`.
pub fn set_ceiling(limit: u64) {
    let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    LIMIT.store(to_usize(limit), Ordering::Relaxed);
    CEILING.store(to_usize(ceiling_for(limit)), Ordering::Relaxed);
}

/// The system allocator, counting.
#[derive(Debug)]
pub struct BoundedHeap;

impl BoundedHeap {
    /// Counts `delta` bytes more (or fewer); stops the process past the
    /// ceiling.
    fn count(delta: isize) {
        let flush = UNFLUSHED
            .try_with(|unflushed| {
                let total = unflushed.get().saturating_add(delta);
                if total.abs() < FLUSH_BYTES {
                    unflushed.set(total);
                    0
                } else {
                    unflushed.set(0);
                    total
                }
            })
            .unwrap_or(delta);
        if flush != 0 {
            let live = LIVE
                .fetch_add(flush, Ordering::Relaxed)
                .saturating_add(flush);
            // (Negative for a while when one thread frees what another's
            // unflushed count still holds.)
            match usize::try_from(live) {
                Ok(live) if flush > 0 && live > CEILING.load(Ordering::Relaxed) => {
                    over_ceiling(live)
                }
                _ => {}
            }
        }
    }

    /// Counts `size` more bytes before `allocate` takes them (so the
    /// ceiling stops the process before, not after), and no more if it
    /// failed.
    fn counted(size: usize, allocate: impl FnOnce() -> *mut u8) -> *mut u8 {
        Self::count(bytes(size));
        let ptr = allocate();
        if ptr.is_null() {
            Self::count(-bytes(size));
        }
        ptr
    }
}

fn bytes(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every call is passed on to `System` with the same arguments; the
// counting around it neither allocates nor touches the memory.
unsafe impl GlobalAlloc for BoundedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        Self::counted(layout.size(), || unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        Self::counted(layout.size(), || unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) };
        Self::count(-bytes(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let resize = || unsafe { System.realloc(ptr, layout, new_size) };
        match new_size.checked_sub(layout.size()) {
            Some(grown) => Self::counted(grown, resize),
            None => {
                let new = resize();
                if !new.is_null() {
                    Self::count(-bytes(layout.size() - new_size));
                }
                new
            }
        }
    }
}

/// Says why on stderr and ends the process at once: from inside the
/// allocator nothing may allocate, unwind or run destructors, so the line
/// is formatted on the stack and written with write(2), and the process
/// leaves with _exit(2). Files being written are left as temporaries (the
/// exports and `index` rename theirs only once complete).
#[cold]
fn over_ceiling(live: usize) -> ! {
    let mut line = StackLine::default();
    let _ = std::fmt::write(
        &mut line,
        format_args!(
            "hindsight: stopped: the query held {} of memory, over the {} this process allows \
             with --memory-limit {} (memory DataFusion does not account for, such as max() over \
             structs, or the raw views' windows before `hindsight index`); narrow it (--from/--to, \
             fewer columns or groups), index the recording, or raise --memory-limit\n",
            Size(live),
            Size(CEILING.load(Ordering::Relaxed)),
            Size(LIMIT.load(Ordering::Relaxed)),
        ),
    );
    // SAFETY: a valid buffer and length; _exit ends the process without
    // running anything of it.
    unsafe {
        libc::write(2, line.buf.as_ptr().cast(), line.len);
        libc::_exit(1)
    }
}

/// Bytes as people read them: GiB from 1 GiB, else MiB.
struct Size(usize);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let mib = self.0 as f64 / f64::from(1u32 << 20);
        if mib >= 1024.0 {
            write!(f, "{:.1} GiB", mib / 1024.0)
        } else {
            write!(f, "{mib:.0} MiB")
        }
    }
}

/// A line formatted without the heap, cut at its capacity.
struct StackLine {
    buf: [u8; 640],
    len: usize,
}

impl Default for StackLine {
    fn default() -> Self {
        StackLine {
            buf: [0; 640],
            len: 0,
        }
    }
}

impl std::fmt::Write for StackLine {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_four_times_the_limit_and_1_gib_over_it_at_least() {
        assert_eq!(ceiling_for(1 << 30), 4 << 30);
        assert_eq!(ceiling_for(16 << 20), (16 << 20) + (1 << 30));
        assert_eq!(ceiling_for(8 << 30), 32 << 30);
        assert_eq!(ceiling_for(u64::MAX), u64::MAX);
    }

    #[test]
    fn sizes_read_in_mib_under_a_gib() {
        assert_eq!(Size(16 << 20).to_string(), "16 MiB");
        assert_eq!(Size((4 << 30) + (200 << 20)).to_string(), "4.2 GiB");
    }

    #[test]
    fn a_line_longer_than_its_buffer_is_cut() {
        let mut line = StackLine::default();
        let long = "x".repeat(700);
        std::fmt::Write::write_str(&mut line, &long).unwrap();
        assert_eq!(line.len, 640);
    }
}
