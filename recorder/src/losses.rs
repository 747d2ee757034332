//! The BPF loss counters read into `loss` rows dated by when each loss
//! happened.
//!
//! Every program group counts what it could not send in a per-CPU array of
//! `struct hs_loss` (see `bpf/events.h`): running totals per kind in the
//! last slot, and each second's counts in slot `second % seconds`. Losses
//! come with load, and so does a starved recorder: read at the moment of
//! reading, a storm's losses all land in the one interval after it. Read
//! per second, each loss is dated by the second (boot clock) it happened
//! in. The totals keep the count exact: what a reused second's slot lost
//! before the recorder read it is the totals' remainder, dated when read.
//!
//! The programs count a loss in its second's slot before the totals, and
//! [`GroupLosses`] is given the totals read before the slots: everything in
//! the totals is then also in a slot, unless the slot was reused, so the
//! totals' remainder over what the slots reported is exactly what reuse
//! lost once the programs are detached (and never more before then).

/// One lost count of one kind on one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub cpu: usize,
    pub kind: usize,
    /// Boot-clock second it happened in; `None` for the totals' remainder.
    pub second: Option<u64>,
    pub count: u64,
}

/// One `struct hs_loss` as read from one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slot {
    pub second: u64,
    pub counts: Vec<u64>,
}

impl Slot {
    /// Decodes a `struct hs_loss` of `kinds` counts (native endian);
    /// what is missing reads as zero.
    pub fn parse(bytes: &[u8], kinds: usize) -> Slot {
        let word = |i: usize| {
            bytes
                .get(i * 8..i * 8 + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()))
        };
        Slot {
            second: word(0),
            counts: (0..kinds).map(|k| word(1 + k)).collect(),
        }
    }
}

/// What one group's counters showed at the last reading.
#[derive(Debug, Default)]
pub struct GroupLosses {
    /// Per CPU: the totals slot last read.
    totals: Vec<Vec<u64>>,
    /// Per CPU, per slot: the second's slot as last read.
    seen: Vec<Vec<Slot>>,
    /// Per CPU, per kind: everything reported so far.
    reported: Vec<Vec<u64>>,
}

impl GroupLosses {
    /// Whether totals read now differ from the last ones: only then do
    /// the seconds' slots need reading.
    pub fn changed(&self, totals: &[Vec<u64>]) -> bool {
        self.totals != totals
    }

    /// The losses since the last call: `totals` per CPU (read first), then
    /// `slots` per slot per CPU (read after).
    pub fn account(&mut self, totals: &[Vec<u64>], slots: &[Vec<Slot>]) -> Vec<Lost> {
        let cpus = totals.len();
        let kinds = totals.first().map_or(0, Vec::len);
        self.seen
            .resize_with(cpus, || vec![Slot::default(); slots.len()]);
        self.reported.resize_with(cpus, || vec![0; kinds]);
        let mut lost = Vec::new();
        for (index, per_cpu) in slots.iter().enumerate() {
            for (cpu, slot) in per_cpu.iter().enumerate().take(cpus) {
                let seen = &mut self.seen[cpu][index];
                for kind in 0..kinds.min(slot.counts.len()) {
                    let before = if seen.second == slot.second {
                        seen.counts.get(kind).copied().unwrap_or(0)
                    } else {
                        0
                    };
                    // Below what was seen only while the program resets the
                    // slot for a new second: nothing new to report then.
                    let count = slot.counts[kind].saturating_sub(before);
                    if count > 0 {
                        lost.push(Lost {
                            cpu,
                            kind,
                            second: Some(slot.second),
                            count,
                        });
                        self.reported[cpu][kind] += count;
                    }
                }
                if seen.second != slot.second
                    || slot.counts.iter().zip(&seen.counts).any(|(n, s)| n > s)
                    || seen.counts.len() != slot.counts.len()
                {
                    *seen = slot.clone();
                }
            }
        }
        for (cpu, per_kind) in totals.iter().enumerate() {
            for (kind, &total) in per_kind.iter().enumerate() {
                let rest = total.saturating_sub(self.reported[cpu][kind]);
                if rest > 0 {
                    lost.push(Lost {
                        cpu,
                        kind,
                        second: None,
                        count: rest,
                    });
                    self.reported[cpu][kind] += rest;
                }
            }
        }
        self.totals = totals.to_vec();
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(second: u64, counts: &[u64]) -> Slot {
        Slot {
            second,
            counts: counts.to_vec(),
        }
    }

    /// One CPU, two kinds, slots for two seconds (indexes `second % 2`).
    fn read(g: &mut GroupLosses, totals: &[u64], slots: [Slot; 2]) -> Vec<Lost> {
        g.account(
            &[totals.to_vec()],
            &slots.into_iter().map(|s| vec![s]).collect::<Vec<_>>(),
        )
    }

    fn lost(kind: usize, second: Option<u64>, count: u64) -> Lost {
        Lost {
            cpu: 0,
            kind,
            second,
            count,
        }
    }

    #[test]
    fn a_loss_read_late_is_dated_by_its_own_second() {
        let mut g = GroupLosses::default();
        // Seconds 10 and 11 lost 5 and 7 of kind 1, read only after both.
        let got = read(&mut g, &[0, 12], [slot(10, &[0, 5]), slot(11, &[0, 7])]);
        assert_eq!(got, [lost(1, Some(10), 5), lost(1, Some(11), 7)]);
        assert!(!g.changed(&[vec![0, 12]]));
        // Second 11 loses 2 more; the same slot is read again: only the 2.
        let got = read(&mut g, &[0, 14], [slot(10, &[0, 5]), slot(11, &[0, 9])]);
        assert_eq!(got, [lost(1, Some(11), 2)]);
    }

    #[test]
    fn a_slot_reused_before_it_was_read_leaves_its_count_to_the_totals() {
        let mut g = GroupLosses::default();
        assert!(read(&mut g, &[0, 0], [slot(0, &[0, 0]), slot(0, &[0, 0])]).is_empty());
        // Second 10 lost 4, second 12 (the same slot) lost 3 before a read:
        // the 4 are dated when read, the 3 by their second.
        let got = read(&mut g, &[0, 7], [slot(12, &[0, 3]), slot(0, &[0, 0])]);
        assert_eq!(got, [lost(1, Some(12), 3), lost(1, None, 4)]);
    }

    #[test]
    fn counts_in_slots_ahead_of_the_totals_are_not_counted_twice() {
        let mut g = GroupLosses::default();
        // A loss landed after the totals were read, before its slot was.
        let got = read(&mut g, &[0, 5], [slot(10, &[0, 6]), slot(0, &[0, 0])]);
        assert_eq!(got, [lost(1, Some(10), 6)]);
        let got = read(&mut g, &[0, 6], [slot(10, &[0, 6]), slot(0, &[0, 0])]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_slot_being_reset_for_a_new_second_reports_nothing_twice() {
        let mut g = GroupLosses::default();
        read(&mut g, &[3, 0], [slot(10, &[3, 0]), slot(0, &[0, 0])]);
        // Caught mid-reset: the old second with its counts half cleared.
        assert!(read(&mut g, &[3, 0], [slot(10, &[0, 0]), slot(0, &[0, 0])]).is_empty());
        let got = read(&mut g, &[4, 0], [slot(12, &[1, 0]), slot(0, &[0, 0])]);
        assert_eq!(got, [lost(0, Some(12), 1)]);
    }

    #[test]
    fn parse_reads_the_second_then_one_count_per_kind() {
        let mut bytes = Vec::new();
        for word in [42u64, 1, 2, 3] {
            bytes.extend_from_slice(&word.to_ne_bytes());
        }
        assert_eq!(Slot::parse(&bytes, 3), slot(42, &[1, 2, 3]));
        assert_eq!(Slot::parse(&bytes[..16], 3), slot(42, &[1, 0, 0]));
    }
}
