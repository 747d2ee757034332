//! Reads the offset between the kernel's boot clock (what BPF stamps events
//! with) and UTC. The conversion itself lives in `hindsight_schemas::time`.

use hindsight_schemas::time::ClockOffset;

fn read_clock(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// Boot-clock nanoseconds now.
pub fn boot_now_ns() -> u64 {
    read_clock(libc::CLOCK_BOOTTIME) as u64
}

/// UTC nanoseconds now.
pub fn utc_now_ns() -> i64 {
    read_clock(libc::CLOCK_REALTIME) as i64
}

/// Measures `realtime - boottime`, bracketing the realtime read between two
/// boot-clock reads and keeping the tightest of a few tries, so the offset
/// is good to well under a microsecond.
pub fn measure_offset() -> ClockOffset {
    let mut best: Option<(i128, ClockOffset)> = None;
    for _ in 0..5 {
        let before = read_clock(libc::CLOCK_BOOTTIME);
        let real = read_clock(libc::CLOCK_REALTIME);
        let after = read_clock(libc::CLOCK_BOOTTIME);
        let width = after - before;
        let mid = before + width / 2;
        let candidate = ClockOffset {
            at_boot_ns: mid as u64,
            offset_ns: (real - mid) as i64,
        };
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, candidate));
        }
    }
    best.expect("at least one try").1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_turns_boot_clock_into_now() {
        let offset = measure_offset();
        let converted = offset.to_utc_ns(boot_now_ns());
        let now = utc_now_ns();
        assert!(
            (converted - now).abs() < 50_000_000,
            "converted {converted} vs now {now}"
        );
    }
}
