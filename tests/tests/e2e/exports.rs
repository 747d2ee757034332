//! `hindsight export` of a real recording. trace_processor cannot run here
//! (its Python package downloads the binary on first use, and CI is
//! offline), so the trace is decoded with the generated Perfetto types and
//! its scheduling slices rebuilt as trace_processor builds its `sched`
//! table: they must equal the `cpu_time` view exactly. The pprof profile's
//! totals must equal the folded flame graph's.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;

use hindsight::export::proto::perfetto::{ftrace_event, trace_packet, track_event, Trace};
use hindsight::export::proto::pprof::Profile;
use prost::Message;

use crate::fixture::{bin, load, pingpong, run, settle, shared, sql, sql_count, Recorder, Scratch};

/// `hindsight ARGS`, which must succeed; its stderr.
fn hindsight(args: &[&str], rec: &Path) -> String {
    let out = run(Command::new(bin("hindsight"))
        .args(&args[..2])
        .arg(rec)
        .args(&args[2..]));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "hindsight {args:?}: {stderr}");
    stderr
}

/// A slice of a thread on a CPU: (ts, ts_end, cpu, tid), UTC ns.
type Slice = (i64, i64, i64, i64);

/// The slices trace_processor derives from sched_switch: on each CPU, from
/// a switch to the next, for the thread switched in, when the next switch
/// names it as the one leaving (the `cpu_time` view's rule).
fn slices_of(trace: &Trace) -> Vec<Slice> {
    let mut per_cpu: BTreeMap<u32, Vec<(i64, i32, i32)>> = BTreeMap::new();
    for packet in &trace.packet {
        if let Some(trace_packet::Data::FtraceEvents(bundle)) = &packet.data {
            for event in &bundle.event {
                if let Some(ftrace_event::Event::SchedSwitch(s)) = &event.event {
                    per_cpu.entry(bundle.cpu()).or_default().push((
                        event.timestamp() as i64,
                        s.prev_pid(),
                        s.next_pid(),
                    ));
                }
            }
        }
    }
    let mut slices = Vec::new();
    for (cpu, mut switches) in per_cpu {
        switches.sort_by_key(|s| s.0);
        for pair in switches.windows(2) {
            let ((start, _, tid), (end, leaving, _)) = (pair[0], pair[1]);
            if tid != 0 && leaving == tid {
                slices.push((start, end, i64::from(cpu), i64::from(tid)));
            }
        }
    }
    slices.sort();
    slices
}

#[test]
fn perfetto_slices_equal_cpu_time_and_pprof_totals_equal_the_flame_graph() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(
        &rec,
        &[
            "--events",
            "sched,cpu,counters,faults",
            "--frequency",
            "199",
            "--chunk",
            "1s",
        ],
    );
    let burner = load(&["burn", "1"]);
    let ping = pingpong(500);
    load(&["touch", "2000", "100"]);
    settle();
    recorder.stop();

    // Perfetto: every switch, and exactly the cpu_time slices.
    let trace_path = scratch.dir.path().join("trace.pftrace");
    let summary = hindsight(
        &["export", "perfetto", "-o", trace_path.to_str().unwrap()],
        &rec,
    );
    let trace = Trace::decode(std::fs::read(&trace_path).unwrap().as_slice())
        .expect("the export decodes as a Perfetto Trace");
    let switches: usize = trace
        .packet
        .iter()
        .filter_map(|p| match &p.data {
            Some(trace_packet::Data::FtraceEvents(b)) => Some(
                b.event
                    .iter()
                    .filter(|e| matches!(e.event, Some(ftrace_event::Event::SchedSwitch(_))))
                    .count(),
            ),
            _ => None,
        })
        .sum();
    assert_eq!(
        switches as i64,
        sql_count(&rec, "SELECT count(*) FROM sched_switch")
    );
    // Both sorted, neither deduplicated: a slice twice in either differs.
    let mut expected: Vec<Slice> = sql(
        &rec,
        "SELECT CAST(ts AS BIGINT) AS ts, CAST(ts_end AS BIGINT) AS ts_end, cpu, tid FROM cpu_time",
    )
    .iter()
    .map(|r| {
        let n = |k: &str| r[k].as_i64().unwrap();
        (n("ts"), n("ts_end"), n("cpu"), n("tid"))
    })
    .collect();
    expected.sort();
    let slices = slices_of(&trace);
    eprint!("{} slices; {summary}", slices.len());
    assert!(slices.len() > 1000, "{} slices: {summary}", slices.len());
    assert_eq!(slices.len(), expected.len(), "{summary}");
    assert!(
        slices == expected,
        "the trace's slices differ from cpu_time"
    );

    // The workloads' threads are named, under their process.
    let tree = trace
        .packet
        .iter()
        .find_map(|p| match &p.data {
            Some(trace_packet::Data::ProcessTree(t)) => Some(t),
            _ => None,
        })
        .expect("a process tree");
    for (pid, name) in [(&burner["pid"], "hs-load"), (&ping["pid"], "hs-pingpong")] {
        let pid = pid.as_i64().unwrap() as i32;
        assert!(
            tree.threads
                .iter()
                .any(|t| t.tgid() == pid && t.name() == name),
            "no thread named {name} in process {pid}"
        );
    }
    // Every counter sample and every recorded fault, once.
    let (mut counter_values, mut faults, mut samples, mut with_stack) = (0i64, 0i64, 0i64, 0i64);
    for p in &trace.packet {
        match &p.data {
            Some(trace_packet::Data::TrackEvent(e)) if e.r#type() == track_event::Type::Counter => {
                counter_values += 1
            }
            Some(trace_packet::Data::TrackEvent(e)) if e.r#type() == track_event::Type::Instant => {
                faults += 1
            }
            Some(trace_packet::Data::PerfSample(s)) => {
                samples += 1;
                with_stack += i64::from(s.callstack_iid.is_some());
            }
            _ => {}
        }
    }
    assert_eq!(
        counter_values,
        sql_count(&rec, "SELECT count(*) FROM counter")
    );
    let recorded_faults = sql_count(&rec, "SELECT count(*) FROM page_fault");
    assert!(recorded_faults > 0, "the touch workload faulted");
    assert_eq!(faults, recorded_faults);
    assert_eq!(samples, sql_count(&rec, "SELECT count(*) FROM cpu_sample"));
    let stacked = sql_count(
        &rec,
        "SELECT count(*) FROM cpu_sample WHERE stack_id IS NOT NULL",
    );
    assert!(stacked > 0, "no sample has a stack");
    assert_eq!(with_stack, stacked, "samples with a callstack");

    // pprof: the flame graph's totals, overall and for the burner.
    let burner_pid = burner["pid"].as_i64().unwrap().to_string();
    for filters in [vec![], vec!["--pid", burner_pid.as_str()]] {
        let pprof_path = scratch.dir.path().join("cpu.pb.gz");
        let mut args = vec![
            "export",
            "pprof",
            "--on-cpu",
            "-o",
            pprof_path.to_str().unwrap(),
        ];
        args.extend_from_slice(&filters);
        hindsight(&args, &rec);
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&pprof_path).unwrap())
            .read_to_end(&mut raw)
            .unwrap();
        let profile = Profile::decode(raw.as_slice()).expect("a pprof Profile");
        let total: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
        let cpu_ns: i64 = profile.sample.iter().map(|s| s.value[1]).sum();
        let mut flame = vec!["flamegraph", "--on-cpu"];
        flame.extend_from_slice(&filters);
        let out = run(Command::new(bin("hindsight"))
            .args(&flame[..1])
            .arg(&rec)
            .args(&flame[1..]));
        let mut folded: BTreeMap<String, i64> = BTreeMap::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let (stack, weight) = line.rsplit_once(' ').unwrap();
            *folded.entry(stack.to_string()).or_default() += weight.parse::<i64>().unwrap();
        }
        let folded_total: i64 = folded.values().sum();
        assert!(folded_total > 0, "{filters:?}: samples were taken");
        assert_eq!(total, folded_total, "{filters:?}");
        // Stack by stack: the profile's samples are leaf first, the
        // thread's name as their root, as folded lines are root first.
        let mut profiled: BTreeMap<String, i64> = BTreeMap::new();
        for sample in &profile.sample {
            let frames: Vec<&str> = sample
                .location_id
                .iter()
                .rev()
                .map(|id| {
                    let location = &profile.location[*id as usize - 1];
                    let function = &profile.function[location.line[0].function_id as usize - 1];
                    profile.string_table[function.name as usize].as_str()
                })
                .collect();
            *profiled.entry(frames.join(";")).or_default() += sample.value[0];
        }
        let differ: Vec<_> = folded
            .iter()
            .filter(|(stack, weight)| profiled.get(*stack) != Some(weight))
            .take(3)
            .collect();
        assert!(
            profiled.len() == folded.len() && differ.is_empty(),
            "{filters:?}: {} stacks in the profile, {} folded; first that differ: {differ:?}",
            profiled.len(),
            folded.len()
        );
        assert_eq!(cpu_ns, total * (1_000_000_000 / 199), "{filters:?}");
    }
}
