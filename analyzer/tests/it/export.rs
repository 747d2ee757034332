//! `export pprof` and `export perfetto` on synthetic recordings: decoded
//! with the generated types, compared with the folded flame graph and with
//! the rows written.

use std::collections::BTreeMap;
use std::io::Read;

use hindsight::export::perfetto::state_letter;
use hindsight::export::proto::perfetto::{
    debug_annotation, ftrace_event, trace_packet, track_descriptor, track_event, Trace,
};
use hindsight::export::proto::pprof::Profile;
use hindsight_schemas::tables::{COUNTER, NUMA_EVENT, PAGE_FAULT, PROCESS, SCHED_WAKEUP};
use prost::Message;
use serde_json::json;

use crate::fixture::{hindsight, meta, stderr, t, Fixture, Rec};
use crate::flamegraph::{folded, recording};

/// The flame graph's recording, its session sampling at 100 Hz.
fn sampled_recording(fx: &Fixture) -> Rec {
    let rec = recording(fx);
    let mut m = meta(&rec.host);
    m.sessions[0].sample_frequency = 100;
    m.sessions[0].off_cpu_stacks = true;
    rec.write_meta(&m);
    rec
}

fn export(rec: &Rec, fx: &Fixture, args: &[&str], file: &str) -> Vec<u8> {
    let path = fx.path(file);
    let mut all = vec!["export", args[0], rec.dir.to_str().unwrap()];
    all.extend_from_slice(&args[1..]);
    all.extend_from_slice(&["-o", path.to_str().unwrap()]);
    let out = hindsight(&all);
    assert!(out.status.success(), "{all:?}: {}", stderr(&out));
    std::fs::read(&path).unwrap()
}

fn profile(bytes: &[u8]) -> Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("gzip");
    Profile::decode(raw.as_slice()).expect("a pprof Profile")
}

/// The profile folded back into `root;...;leaf weight` lines, sorted, the
/// way the flame graph prints them (weights of equal stacks added).
fn refolded(p: &Profile, value: usize) -> String {
    let mut lines: BTreeMap<String, i64> = BTreeMap::new();
    for sample in &p.sample {
        let names: Vec<&str> = sample
            .location_id
            .iter()
            .rev()
            .map(|id| {
                let location = p.location.iter().find(|l| l.id == *id).expect("location");
                let function = p
                    .function
                    .iter()
                    .find(|f| f.id == location.line[0].function_id)
                    .expect("function");
                p.string_table[function.name as usize].as_str()
            })
            .collect();
        *lines.entry(names.join(";")).or_default() += sample.value[value];
    }
    lines.iter().map(|(s, w)| format!("{s} {w}\n")).collect()
}

fn sample_types(p: &Profile) -> Vec<(String, String)> {
    p.sample_type
        .iter()
        .map(|t| {
            (
                p.string_table[t.ty as usize].clone(),
                p.string_table[t.unit as usize].clone(),
            )
        })
        .collect()
}

#[test]
fn pprof_holds_the_flame_graphs_stacks_and_totals() {
    let fx = Fixture::new();
    let rec = sampled_recording(&fx);
    for (filters, file) in [
        (vec![], "all.pb.gz"),
        (vec!["--comm", "other"], "other.pb.gz"),
        (
            vec!["--pid", "7", "--to", "2023-11-14T22:13:20.002Z"],
            "window.pb.gz",
        ),
    ] {
        let mut args = vec!["pprof", "--on-cpu"];
        args.extend_from_slice(&filters);
        let p = profile(&export(&rec, &fx, &args, file));
        let mut flame = vec!["--on-cpu"];
        flame.extend_from_slice(&filters);
        let expected = folded(&rec, &flame);
        assert!(!expected.is_empty(), "{filters:?}");
        assert_eq!(refolded(&p, 0), expected, "{filters:?}");
        assert_eq!(
            sample_types(&p),
            [
                ("samples".into(), "count".into()),
                ("cpu".into(), "nanoseconds".into())
            ]
        );
        // 100 Hz: each sample is 10 ms of CPU.
        assert_eq!(p.period, 10_000_000);
        for s in &p.sample {
            assert_eq!(s.value[1], s.value[0] * 10_000_000);
        }
    }
    let total = |text: &str| -> i64 {
        text.lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
            .sum()
    };
    let all = profile(&std::fs::read(fx.path("all.pb.gz")).unwrap());
    let samples: i64 = all.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(samples, total(&folded(&rec, &["--on-cpu"])));
    assert_eq!(samples, 6, "every sample row of the fixture");
}

#[test]
fn pprof_off_cpu_weighs_nanoseconds_like_the_flame_graph() {
    let fx = Fixture::new();
    let rec = sampled_recording(&fx);
    let p = profile(&export(&rec, &fx, &["pprof", "--off-cpu"], "off.pb.gz"));
    assert_eq!(sample_types(&p), [("off_cpu".into(), "nanoseconds".into())]);
    assert_eq!(refolded(&p, 0), folded(&rec, &["--off-cpu"]));
    assert!(refolded(&p, 0).contains("app;main;work:inner;schedule_[k] 4000000\n"));
}

/// The flame graph's recording plus wakeups, processes, counters, faults
/// and NUMA events.
fn traced_recording(fx: &Fixture) -> Rec {
    let rec = sampled_recording(fx);
    rec.chunk(
        &SCHED_WAKEUP,
        "a-000001.parquet",
        &[
            json!({"ts": t(12), "cpu": 1, "tid": 7, "pid": 7, "comm": "app", "target_cpu": 0, "waker_tid": 8, "waker_pid": 8, "new_task": false, "prio": 120}),
            json!({"ts": t(14), "cpu": 0, "tid": 9, "pid": 7, "comm": "app-worker", "target_cpu": 1, "waker_tid": 7, "waker_pid": 7, "new_task": true, "prio": 120}),
        ],
    );
    rec.chunk(
        &PROCESS,
        "a-000001.parquet",
        &[
            json!({"ts": t(0), "event": "scan", "pid": 7, "tid": 7, "ppid": 1, "comm": "app", "cmdline": "/usr/bin/app --serve"}),
            json!({"ts": t(14), "event": "fork", "pid": 7, "tid": 9, "ppid": 1, "comm": "app-worker"}),
        ],
    );
    let counter = |ms: i64, name: &str, scope: Option<&str>, value: i64| json!({"ts": t(ms), "source": "vmstat", "name": name, "scope": scope, "value": value});
    rec.chunk(
        &COUNTER,
        "a-000001.parquet",
        &[
            counter(0, "pgfault", None, 100),
            counter(10, "pgfault", None, 150),
            counter(0, "nr_free_pages", Some("node0"), 7),
        ],
    );
    rec.chunk(
        &PAGE_FAULT,
        "a-000001.parquet",
        &[json!({"ts": t(5), "cpu": 0, "tid": 7, "pid": 7, "address": 4096u64, "ip": 8192u64, "error_code": 6, "kernel": false, "comm": "app"})],
    );
    rec.chunk(
        &NUMA_EVENT,
        "a-000001.parquet",
        &[
            json!({"ts": t(6), "kind": "move_numa", "tid": 8, "pid": 8, "src_cpu": 0, "dst_cpu": 1, "src_nid": 0, "dst_nid": 1, "comm": "other"}),
            json!({"ts": t(7), "kind": "migrate_pages", "pages_succeeded": 12, "pages_failed": 0, "reason": "numa_misplaced"}),
        ],
    );
    rec
}

#[test]
fn perfetto_trace_decodes_with_every_kind_of_row() {
    let fx = Fixture::new();
    let rec = traced_recording(&fx);
    let trace = Trace::decode(export(&rec, &fx, &["perfetto"], "t.pftrace").as_slice())
        .expect("a Perfetto Trace");
    let packets = &trace.packet;

    // Scheduling: every switch on its CPU, states back to letters.
    let mut switches = Vec::new();
    let mut wakeups = Vec::new();
    for p in packets {
        if let Some(trace_packet::Data::FtraceEvents(bundle)) = &p.data {
            for e in &bundle.event {
                let ts = (e.timestamp.unwrap() as i64 - t(0)) / 1_000_000;
                match e.event.as_ref().unwrap() {
                    ftrace_event::Event::SchedSwitch(s) => switches.push((
                        ts,
                        bundle.cpu.unwrap(),
                        s.prev_pid.unwrap(),
                        state_letter(s.prev_state.unwrap()),
                        s.next_pid.unwrap(),
                        s.next_comm.clone().unwrap(),
                    )),
                    ftrace_event::Event::SchedWakeup(w) => {
                        wakeups.push((ts, bundle.cpu.unwrap(), w.pid.unwrap(), false, e.pid))
                    }
                    ftrace_event::Event::SchedWakeupNew(w) => {
                        wakeups.push((ts, bundle.cpu.unwrap(), w.pid.unwrap(), true, e.pid))
                    }
                }
            }
        }
    }
    // Bundles are per CPU: order across them is the reader's to restore.
    switches.sort();
    wakeups.sort();
    assert_eq!(
        switches,
        [
            (10, 0, 7, "S", 8, "other".to_string()),
            (13, 0, 8, "S", 7, "app".into()),
            (20, 0, 7, "S", 0, "swapper/0".into()),
            (21, 1, 0, "S", 7, "app".into()),
        ]
    );
    assert_eq!(
        wakeups,
        [(12, 1, 7, false, Some(8)), (14, 0, 9, true, Some(7))]
    );

    // Names: the process's command line, threads with their process.
    let tree = packets
        .iter()
        .find_map(|p| match &p.data {
            Some(trace_packet::Data::ProcessTree(tree)) => Some(tree),
            _ => None,
        })
        .expect("a process tree");
    let app = tree.processes.iter().find(|p| p.pid == Some(7)).unwrap();
    assert_eq!(app.cmdline, ["/usr/bin/app", "--serve"]);
    let threads: Vec<(i32, i32, &str)> = tree
        .threads
        .iter()
        .map(|t| (t.tid(), t.tgid(), t.name()))
        .collect();
    assert_eq!(
        threads,
        [(7, 7, "app"), (8, 8, "other"), (9, 7, "app-worker")]
    );

    // Counters: a track per series under its source, raw values.
    let mut names: BTreeMap<u64, (String, Option<u64>, bool)> = BTreeMap::new();
    let mut values: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut instants: Vec<(String, Option<u64>, Vec<String>)> = Vec::new();
    for p in packets {
        match &p.data {
            Some(trace_packet::Data::TrackDescriptor(d)) => {
                let name = match &d.static_or_dynamic_name {
                    Some(track_descriptor::StaticOrDynamicName::Name(n)) => n.clone(),
                    _ => format!("thread {}", d.thread.as_ref().unwrap().tid()),
                };
                names.insert(d.uuid(), (name, d.parent_uuid, d.counter.is_some()));
            }
            Some(trace_packet::Data::TrackEvent(e)) => {
                assert!(p.optional_trusted_packet_sequence_id.is_some());
                match e.r#type() {
                    track_event::Type::Counter => {
                        let Some(track_event::CounterValueField::CounterValue(v)) =
                            e.counter_value_field
                        else {
                            panic!("{e:?}")
                        };
                        values
                            .entry(names[&e.track_uuid()].0.clone())
                            .or_default()
                            .push(v);
                    }
                    track_event::Type::Instant => {
                        let Some(track_event::NameField::Name(name)) = &e.name_field else {
                            panic!("{e:?}")
                        };
                        let args = e
                            .debug_annotations
                            .iter()
                            .map(|a| match (&a.name_field, &a.value) {
                                (
                                    Some(debug_annotation::NameField::Name(n)),
                                    Some(debug_annotation::Value::IntValue(v)),
                                ) => format!("{n}={v}"),
                                (Some(debug_annotation::NameField::Name(n)), Some(v)) => {
                                    format!("{n}={v:?}")
                                }
                                other => panic!("{other:?}"),
                            })
                            .collect();
                        instants.push((name.clone(), e.track_uuid, args));
                    }
                    other => panic!("{other:?}"),
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        values,
        BTreeMap::from([
            ("nr_free_pages node0".to_string(), vec![7]),
            ("pgfault".to_string(), vec![100, 150]),
        ])
    );
    let vmstat = names.iter().find(|(_, n)| n.0 == "vmstat").unwrap().0;
    for series in ["pgfault", "nr_free_pages node0"] {
        let track = names.values().find(|n| n.0 == series).unwrap();
        assert_eq!((track.1, track.2), (Some(*vmstat), true), "{series}");
    }
    let on = |uuid: Option<u64>| names[&uuid.unwrap()].0.clone();
    let instants: Vec<(String, String, Vec<String>)> = instants
        .into_iter()
        .map(|(n, track, args)| (n, on(track), args))
        .collect();
    assert_eq!(
        instants,
        [
            (
                "page fault".to_string(),
                "thread 7".to_string(),
                vec![
                    "address=PointerValue(4096)".to_string(),
                    "ip=PointerValue(8192)".into(),
                    "error_code=6".into(),
                    "write=BoolValue(true)".into()
                ]
            ),
            (
                "move_numa".into(),
                "thread 8".into(),
                ["src_cpu=0", "dst_cpu=1", "src_nid=0", "dst_nid=1"]
                    .map(String::from)
                    .to_vec()
            ),
            (
                "migrate_pages".into(),
                "NUMA events".into(),
                vec![
                    "pages_succeeded=12".to_string(),
                    "pages_failed=0".into(),
                    "reason=StringValue(\"numa_misplaced\")".into()
                ]
            ),
        ]
    );

    // Samples: interned callstacks, root first, named as in the flame graph.
    let interned = packets
        .iter()
        .find_map(|p| p.interned_data.as_ref())
        .expect("interned stacks");
    let function = |frame_iid: u64| {
        let frame = interned
            .frames
            .iter()
            .find(|f| f.iid() == frame_iid)
            .unwrap();
        let name = interned
            .function_names
            .iter()
            .find(|n| n.iid() == frame.function_name_id())
            .unwrap();
        String::from_utf8(name.str().to_vec()).unwrap()
    };
    let mut sampled: BTreeMap<String, i64> = BTreeMap::new();
    for p in packets {
        if let Some(trace_packet::Data::PerfSample(s)) = &p.data {
            let comm = if s.tid() == 7 { "app" } else { "other" };
            let mut stack = vec![comm.to_string()];
            if let Some(iid) = s.callstack_iid {
                let callstack = interned.callstacks.iter().find(|c| c.iid() == iid).unwrap();
                stack.extend(callstack.frame_ids.iter().map(|f| function(*f)));
            }
            *sampled.entry(stack.join(";")).or_default() += 1;
        }
    }
    let sampled: String = sampled.iter().map(|(s, n)| format!("{s} {n}\n")).collect();
    assert_eq!(sampled, folded(&rec, &["--on-cpu"]));
}

#[test]
fn exports_refuse_bad_input_in_one_line_and_leave_no_partial_file() {
    let fx = Fixture::new();
    let out = fx.path("t.pftrace");
    let missing = fx.path("nope");
    let run = hindsight([
        "export",
        "perfetto",
        missing.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    let err = stderr(&run);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
    assert!(!out.exists());

    // A window outside the recording fails after the output was opened:
    // nothing is left behind, not even the hidden partial file.
    let rec = sampled_recording(&fx);
    let run = hindsight([
        "export",
        "pprof",
        rec.dir.to_str().unwrap(),
        "--on-cpu",
        "--from",
        "2023-11-14T22:20:00Z",
        "--to",
        "2023-11-14T22:10:00Z",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    let leftovers: Vec<_> = std::fs::read_dir(fx.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("pftrace"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let usage = hindsight(["export", "pprof", rec.dir.to_str().unwrap(), "-o", "x"]);
    assert_eq!(
        usage.status.code(),
        Some(2),
        "--on-cpu or --off-cpu is required"
    );
}
