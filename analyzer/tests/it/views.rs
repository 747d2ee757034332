//! The helper views (`cpu_time`, `off_cpu`, `runq_latency`, `counter_rate`)
//! against a scheduler simulated here, which knows the true answers.

use std::collections::BTreeMap;

use hindsight_schemas::tables::{COUNTER, SCHED_SWITCH, SCHED_WAKEUP};
use hindsight_schemas::VIEWS;
use serde_json::{json, Value};

use crate::fixture::{hindsight, stderr, t, Fixture, Rec};

/// A tiny deterministic generator, so the schedule is the same every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// What the simulation knows: per thread, the on-CPU time of its completed
/// slices, its off-CPU time by state, and every wait to run (after a
/// wakeup or a preemption).
#[derive(Default)]
struct Truth {
    on_cpu_ns: BTreeMap<i32, i64>,
    off_cpu_ns: BTreeMap<(i32, String), i64>,
    latencies_ns: Vec<(i32, i64)>,
}

/// Two CPUs, threads 11..=15 of process 10 and idle; 400 switches at
/// random moments. A thread switched out sleeping (`S`) is woken at a
/// random moment before it next runs; one preempted (`R`) is not woken.
/// Half the threads leaving a CPU were also woken a moment before, while
/// still on it (the kernel reports such wakeups): those start no wait.
fn simulate(rec: &Rec, one_file: bool) -> Truth {
    let mut rng = Lcg(42);
    let mut truth = Truth::default();
    let mut running = [0i32, 0i32]; // tid on each CPU
    let mut since = [0i64, 0i64]; // when it was switched in (ms)
    let mut started = [false, false]; // whether that switch-in was recorded
    let mut off: BTreeMap<i32, (i64, String)> = BTreeMap::new(); // switched out at, state
    let mut switches = Vec::new();
    let mut wakeups = Vec::new();
    let mut now = 0i64;
    for _ in 0..400 {
        now += 1 + rng.next(7) as i64;
        let cpu = rng.next(2) as usize;
        let other = running[1 - cpu];
        let candidates: Vec<i32> = (11..=15)
            .filter(|&tid| tid != other && tid != running[cpu])
            .chain([0])
            .filter(|&tid| tid != running[cpu])
            .collect();
        let next = candidates[rng.next(candidates.len() as u64) as usize];
        let prev = running[cpu];
        let state = if rng.next(3) == 0 { "R" } else { "S" };
        if prev != 0 && started[cpu] && since[cpu] < now - 1 && rng.next(2) == 0 {
            wakeups.push(wakeup(now - 1, prev, cpu));
        }
        if prev != 0 {
            if started[cpu] {
                *truth.on_cpu_ns.entry(prev).or_default() += (now - since[cpu]) * 1_000_000;
            }
            off.insert(prev, (now, state.to_string()));
        }
        if next != 0 {
            if let Some((out_at, out_state)) = off.remove(&next) {
                *truth
                    .off_cpu_ns
                    .entry((next, out_state.clone()))
                    .or_default() += (now - out_at) * 1_000_000;
                if out_state == "S" {
                    // Woken somewhere in (out_at, now]; the run follows at `now`.
                    let woken = out_at + 1 + rng.next((now - out_at).max(1) as u64) as i64;
                    let woken = woken.min(now);
                    wakeups.push(wakeup(woken, next, cpu));
                    truth.latencies_ns.push((next, (now - woken) * 1_000_000));
                } else {
                    // Preempted: it waited from its switch-out.
                    truth.latencies_ns.push((next, (now - out_at) * 1_000_000));
                }
            }
        }
        let pid = |tid: i32| if tid == 0 { 0 } else { 10 };
        let comm = |tid: i32| {
            if tid == 0 {
                "swapper".to_string()
            } else {
                format!("w{tid}")
            }
        };
        switches.push(json!({"ts": t(now), "cpu": cpu, "prev_tid": prev, "prev_pid": pid(prev),
            "prev_comm": comm(prev), "prev_state": if prev == 0 { "R" } else { state }, "prev_prio": 120,
            "next_tid": next, "next_pid": pid(next), "next_comm": comm(next), "next_prio": 120}));
        running[cpu] = next;
        since[cpu] = now;
        started[cpu] = true;
    }
    // Two chunks (or one), split mid-way, as a recording that rolled a file; each
    // in row groups sorted by CPU and time, as the recorder flushes them
    // (a reader that took the file for sorted as a whole paired switches
    // of different row groups and summed 632 % of a CPU for one thread).
    if one_file {
        rec.chunk_as_recorded(
            &SCHED_SWITCH,
            "20231114T221320.000Z-000001.parquet",
            &switches,
            64,
        );
    } else {
        let (a, b) = switches.split_at(switches.len() / 2);
        rec.chunk_as_recorded(&SCHED_SWITCH, "20231114T221320.000Z-000001.parquet", a, 64);
        rec.chunk_as_recorded(&SCHED_SWITCH, "20231114T221320.500Z-000002.parquet", b, 64);
    }
    wakeups.sort_by_key(|w| w["ts"].as_i64());
    rec.chunk(
        &SCHED_WAKEUP,
        "20231114T221320.000Z-000001.parquet",
        &wakeups,
    );
    truth
}

/// A `sched_wakeup` row of thread `tid` (process 10) onto `cpu`.
fn wakeup(ms: i64, tid: i32, cpu: usize) -> Value {
    json!({"ts": t(ms), "cpu": 1 - cpu, "tid": tid, "pid": 10, "comm": format!("w{tid}"),
        "target_cpu": cpu, "waker_tid": 0, "waker_pid": 0, "new_task": false, "prio": 120})
}

fn rows(rec: &Rec, sql: &str) -> Vec<Value> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ctx = hindsight::open_context(std::slice::from_ref(&rec.dir))
            .await
            .unwrap();
        let batches = hindsight::query_batches(&ctx, sql).await.unwrap();
        hindsight::output::json_rows(&batches)
            .unwrap()
            .into_iter()
            .map(Value::Object)
            .collect()
    })
}

/// Nanoseconds on CPU per thread, as `cpu_time` sums them.
fn on_cpu_by_tid(rec: &Rec) -> BTreeMap<i32, i64> {
    rows(
        rec,
        "SELECT tid, sum(dur_ns) AS ns FROM cpu_time GROUP BY tid",
    )
    .iter()
    .map(|r| (r["tid"].as_i64().unwrap() as i32, r["ns"].as_i64().unwrap()))
    .collect()
}

#[test]
fn cpu_time_sums_equal_the_simulated_on_cpu_time() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let truth = simulate(&rec, false);
    assert_eq!(on_cpu_by_tid(&rec), truth.on_cpu_ns);
    assert!(truth.on_cpu_ns.len() == 5, "every thread ran");
}

/// One chunk of many row groups, each sorted by CPU and time: DataFusion
/// takes the first row group's declared order for the file's, and paired
/// switches across row groups (negative slices, 632 % of a CPU).
#[test]
fn cpu_time_of_one_chunk_in_sorted_row_groups_equals_the_simulation() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let truth = simulate(&rec, true);
    let per_cpu = rows(
        &rec,
        "SELECT cpu, count(*) AS n, min(dur_ns) AS shortest FROM cpu_time GROUP BY cpu",
    );
    assert_eq!(per_cpu.len(), 2, "one group per CPU: {per_cpu:?}");
    assert!(
        per_cpu.iter().all(|r| r["shortest"].as_i64() >= Some(0)),
        "{per_cpu:?}"
    );
    assert_eq!(on_cpu_by_tid(&rec), truth.on_cpu_ns);
}

#[test]
fn off_cpu_sums_per_state_equal_the_simulation() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let truth = simulate(&rec, false);
    let got: BTreeMap<(i32, String), i64> = rows(
        &rec,
        "SELECT tid, state, sum(dur_ns) AS ns FROM off_cpu GROUP BY tid, state",
    )
    .iter()
    .map(|r| {
        (
            (
                r["tid"].as_i64().unwrap() as i32,
                r["state"].as_str().unwrap().to_string(),
            ),
            r["ns"].as_i64().unwrap(),
        )
    })
    .collect();
    assert_eq!(got, truth.off_cpu_ns);
}

/// The kernel now and then puts a thread on a CPU with no `sched_switch`
/// (and events get lost): the thread is next seen leaving a CPU. Its time
/// off the CPU then ends at that CPU's last switch before it left, the
/// earliest it can have come back, in the view and in the derived table.
#[test]
fn an_unseen_switch_in_ends_off_cpu_time_at_the_cpus_last_switch() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let sw = |ms: i64, cpu: i32, prev: i32, state: &str, next: i32| {
        json!({"ts": t(ms), "cpu": cpu, "prev_tid": prev, "prev_pid": prev, "prev_comm": format!("t{prev}"),
               "prev_state": state, "prev_prio": 120, "next_tid": next, "next_pid": next,
               "next_comm": format!("t{next}"), "next_prio": 120, "stack_id": null})
    };
    rec.chunk(
        &SCHED_SWITCH,
        "20231114T221320.000Z-000001.parquet",
        &[
            // 7 sleeps on CPU 0; 9 takes CPU 1 at 30; 7 comes back there
            // unseen and leaves at 40: off the CPU 10..30 at least.
            sw(10, 0, 7, "S", 0),
            sw(30, 1, 0, "R", 9),
            sw(40, 1, 7, "S", 9),
            // Seen coming back: 40..50 exactly.
            sw(50, 0, 0, "R", 7),
            sw(60, 0, 7, "S", 0),
            // Back unseen on the CPU it left, with nothing switched between:
            // no time is known to have passed, and no row says so.
            sw(70, 0, 7, "S", 0),
            sw(80, 0, 0, "R", 7),
        ],
    );
    let expected = vec![(10, 30, 1), (40, 50, 0), (70, 80, 0)];
    let intervals = |table: &str| -> Vec<(i64, i64, i64)> {
        rows(
            &rec,
            &format!(
                "SELECT CAST(ts AS BIGINT) AS ts, CAST(ts_end AS BIGINT) AS ts_end, next_cpu FROM {table} \
                 WHERE tid = 7 ORDER BY ts"
            ),
        )
        .iter()
        .map(|r| {
            let ms = |c: &str| (r[c].as_i64().unwrap() - t(0)) / 1_000_000;
            (ms("ts"), ms("ts_end"), r["next_cpu"].as_i64().unwrap())
        })
        .collect()
    };
    assert_eq!(intervals("off_cpu"), expected);
    let out = hindsight(["index", rec.dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(intervals("off_cpu_interval"), expected);
}

#[test]
fn runq_latency_is_wakeup_or_preemption_to_next_run() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let mut truth = simulate(&rec, false).latencies_ns;
    let mut got: Vec<(i32, i64)> = rows(&rec, "SELECT tid, latency_ns FROM runq_latency")
        .iter()
        .map(|r| {
            (
                r["tid"].as_i64().unwrap() as i32,
                r["latency_ns"].as_i64().unwrap(),
            )
        })
        .collect();
    truth.sort();
    got.sort();
    assert!(!truth.is_empty());
    assert_eq!(got, truth);
}

#[test]
fn counter_rate_is_per_sample_deltas_and_bins_with_date_bin() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    // pgfault every 2 s: +100, +300, then a reset (reboot), then +50.
    let values = [1000, 1100, 1400, 10, 60];
    let counters: Vec<Value> = values
        .iter()
        .enumerate()
        .map(|(k, v)| {
            json!({"ts": t(2000 * k as i64), "source": "vmstat", "name": "pgfault", "scope": null, "value": v})
        })
        .collect();
    rec.chunk(&COUNTER, "20231114T221320.000Z-000001.parquet", &counters);
    let got = rows(
        &rec,
        "SELECT delta, rate, seconds FROM counter_rate WHERE name = 'pgfault' ORDER BY ts",
    );
    let got: Vec<(i64, f64, f64)> = got
        .iter()
        .map(|r| {
            (
                r["delta"].as_i64().unwrap(),
                r["rate"].as_f64().unwrap(),
                r["seconds"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (100, 50.0, 2.0),
            (300, 150.0, 2.0),
            (0, 0.0, 2.0),
            (50, 25.0, 2.0)
        ]
    );
    let binned = rows(
        &rec,
        "SELECT date_bin(INTERVAL '4 seconds', ts) AS t, sum(delta) AS d FROM counter_rate GROUP BY 1 ORDER BY 1",
    );
    let binned: Vec<i64> = binned.iter().map(|r| r["d"].as_i64().unwrap()).collect();
    assert_eq!(binned, [100, 300, 50]);
}

#[test]
fn every_view_has_the_columns_schemas_declares() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ctx = hindsight::open_context(std::slice::from_ref(&rec.dir))
            .await
            .unwrap();
        for view in VIEWS {
            let df = ctx.table(view.name).await.unwrap();
            let schema = df.schema();
            let got: Vec<(String, String)> = schema
                .fields()
                .iter()
                // DataFusion's VARCHAR is Utf8View; both read as text.
                .map(|f| {
                    (
                        f.name().clone(),
                        f.data_type().to_string().replace("Utf8View", "Utf8"),
                    )
                })
                .collect();
            let want: Vec<(String, String)> = view
                .columns
                .iter()
                .map(|c| (c.name.to_string(), c.kind.data_type().to_string()))
                .collect();
            assert_eq!(got, want, "view {}", view.name);
        }
    });
}
