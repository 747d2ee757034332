//! What one of framehop's rule caches allocates, counted by this test
//! binary's own allocator (its one test runs alone in its process, so no
//! other thread's allocations are counted), against what the unwinder's
//! memory budget charges for it.

use std::sync::atomic::Ordering;

mod common;
use common::{Counting, LIVE_BYTES};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn the_budget_charges_a_rule_cache_what_it_allocates() {
    const CACHES: usize = 64;
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let caches: Vec<framehop::x86_64::CacheX86_64> = (0..CACHES)
        .map(|_| framehop::x86_64::CacheX86_64::new())
        .collect();
    let each = (LIVE_BYTES.load(Ordering::Relaxed) - before) / CACHES;
    drop(caches);
    let charged = hindsight_record::unwind::RULE_CACHE_BYTES;
    eprintln!("a rule cache allocates {each} bytes; the budget charges {charged}");
    assert!(
        each <= charged && charged <= each + each / 8,
        "a rule cache allocates {each} bytes, the budget charges {charged}"
    );
}
