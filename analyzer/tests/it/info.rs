//! `info`: file, row and byte counts, time range and losses from footers.

use hindsight::Recording;
use hindsight_schemas::tables::LOSS;
use serde_json::json;

use crate::fixture::{hindsight, stdout, t, Fixture};
use crate::sql::switches;

#[test]
fn counts_and_time_range_match_the_fixture() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let summary = summarize(&rec.dir);
    assert_eq!(summary.host, "web1");
    assert_eq!(summary.kernel.as_deref(), Some("6.18.0-test"));
    assert_eq!(summary.start.as_deref(), Some("2023-11-14T22:13:20Z"));
    assert_eq!(summary.end.as_deref(), Some("2023-11-14T22:13:20.005Z"));
    let tables: Vec<_> = summary
        .tables
        .iter()
        .map(|t| (t.name.as_str(), t.files, t.rows))
        .collect();
    assert_eq!(
        tables,
        [
            ("sched_switch", 2, 6),
            ("sched_wakeup", 0, 0),
            ("process", 0, 0),
            ("counter", 0, 0),
            ("task_stat", 0, 0),
            ("page_fault", 0, 0),
            ("numa_event", 0, 0),
            ("page_cache", 0, 0),
            ("cpu_sample", 0, 0),
            ("stack", 0, 0),
            ("frame", 0, 0),
            ("loss", 0, 0),
            ("cpu_slice", 0, 0),
            ("off_cpu_interval", 0, 0),
            ("runq_wait", 0, 0),
            ("thread_second", 0, 0)
        ]
    );
    // Bytes: the two chunk files on disk, not the hidden temporary.
    let switch = &summary.tables[0];
    let on_disk: u64 = [
        "20231114T221320.000Z-000001.parquet",
        "20231114T221320.004Z-000002.parquet",
    ]
    .iter()
    .map(|name| {
        let path = rec.dir.join("sched_switch").join(name);
        std::fs::metadata(path).unwrap().len()
    })
    .sum();
    assert_eq!(switch.bytes, on_disk);
    assert_eq!(switch.bytes_per_row, Some(on_disk as f64 / 6.0));
    assert_eq!(summary.lost, 0);
    assert_eq!(summary.skipped_probes, ["sched:sched_stick_numa"]);

    let out = hindsight(["info".as_ref(), rec.dir.as_os_str()]);
    assert!(out.status.success());
    let text = stdout(&out);
    for line in [
        "host       web1",
        "no events lost",
        "time       2023-11-14T22:13:20Z .. 2023-11-14T22:13:20.005Z",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
}

#[test]
fn losses_are_summed_by_source() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    rec.chunk(
        &LOSS,
        "20231114T221320.000Z-000001.parquet",
        &[
            json!({"ts": t(10), "cpu": 0, "source": "ring_full:sched_switch", "lost": 5}),
            json!({"ts": t(20), "cpu": 1, "source": "ring_full:sched_switch", "lost": 7}),
            json!({"ts": t(20), "source": "late:counter", "lost": 1}),
        ],
    );
    let summary = summarize(&rec.dir);
    // Events and skipped timer rounds are kept apart.
    assert_eq!((summary.lost, summary.late_rounds), (12, 1));
    let by_source: Vec<_> = summary
        .lost_by_source
        .iter()
        .map(|l| (l.source.as_str(), l.lost))
        .collect();
    assert_eq!(
        by_source,
        [("ring_full:sched_switch", 12), ("late:counter", 1)]
    );
    // When: the first and last interval with a loss of each source.
    let switch = &summary.lost_by_source[0];
    assert_eq!(
        (switch.first.as_str(), switch.last.as_str()),
        ("2023-11-14T22:13:20.010Z", "2023-11-14T22:13:20.020Z")
    );
    assert_eq!(summary.end.as_deref(), Some("2023-11-14T22:13:20.020Z"));

    let out = hindsight([
        "info".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        rec.dir.as_os_str(),
    ]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(
        (json["lost"].clone(), json["late_rounds"].clone()),
        (json!(12), json!(1))
    );
    let loss = json["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "loss")
        .unwrap();
    assert_eq!(loss["rows"], 3);
}

fn summarize(dir: &std::path::Path) -> hindsight::info::Summary {
    let rec = Recording::open(dir).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(hindsight::info::summarize(&rec, 2))
        .unwrap()
}

#[test]
fn a_reopen_reads_the_footers_of_new_and_changed_chunks_only() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let first = Recording::open(&rec.dir).unwrap();
    let dir = rec.dir.join("sched_switch");
    let chunk = dir.join("20231114T221320.000Z-000001.parquet");
    let bytes = std::fs::read(&chunk).unwrap();
    let rows = |r: &Recording| -> Vec<u64> {
        let files = r.table("sched_switch").unwrap();
        files.chunks.iter().map(|c| c.rows).collect()
    };

    // Its footer is not read again: made unreadable at the same size, the
    // chunk still counts what it did.
    std::fs::write(&chunk, vec![0u8; bytes.len()]).unwrap();
    let again = Recording::open_reusing(&rec.dir, Some(&first)).unwrap();
    assert_eq!(rows(&again), rows(&first));
    // A chunk of another size is read again, and here found broken.
    std::fs::write(&chunk, vec![0u8; bytes.len() + 1]).unwrap();
    let err = Recording::open_reusing(&rec.dir, Some(&first)).unwrap_err();
    assert!(
        err.to_string().contains("20231114T221320.000Z-000001"),
        "{err}"
    );
    // A chunk closed since is read.
    std::fs::write(&chunk, &bytes).unwrap();
    let second = dir.join("20231114T221320.004Z-000002.parquet");
    std::fs::copy(&second, dir.join("20231114T221320.009Z-000003.parquet")).unwrap();
    let grown = Recording::open_reusing(&rec.dir, Some(&first)).unwrap();
    let mut expected = rows(&first);
    expected.push(expected[1]);
    assert_eq!(rows(&grown), expected);
}
