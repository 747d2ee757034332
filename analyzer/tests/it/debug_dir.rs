//! `--debug-dir` on a synthetic `frame` table and a real debug file: what
//! the recorder left unnamed is named, what it named from a symbol table
//! alone gains file and line, and its own names stay.

use std::path::Path;
use std::process::Command;

use hindsight_schemas::tables::FRAME;
use serde_json::{json, Value};

use crate::fixture::{hindsight, stderr, stdout, Fixture};

/// `program` compiled with `-g` into `dir`.
fn compile(dir: &Path, program: &str) -> std::path::PathBuf {
    let source = dir.join("prog.c");
    std::fs::write(&source, program).unwrap();
    let exe = dir.join("prog");
    let status = Command::new("cc")
        .args(["-O0", "-g", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .expect("cc runs");
    assert!(status.success());
    exe
}

/// The GNU build id of `exe`, by `readelf -n`.
fn build_id(exe: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(exe).output().unwrap();
    (String::from_utf8(out.stdout).unwrap().lines())
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .expect("a build id")
        .to_string()
}

/// The ELF address of the middle of `function` in `exe`, by `nm -S`.
fn middle_of(exe: &Path, function: &str) -> u64 {
    let out = Command::new("nm").arg("-S").arg(exe).output().unwrap();
    (String::from_utf8(out.stdout).unwrap().lines())
        .find_map(|line| {
            let [address, size, _, name] = line.split_whitespace().collect::<Vec<_>>()[..] else {
                return None;
            };
            (name == function).then(|| {
                u64::from_str_radix(address, 16).unwrap()
                    + u64::from_str_radix(size, 16).unwrap() / 2
            })
        })
        .unwrap_or_else(|| panic!("no {function} in nm's list"))
}

fn rows(out: &std::process::Output) -> Vec<Value> {
    assert!(out.status.success(), "{}", stderr(out));
    (stdout(out).lines())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn frames_named_from_a_symbol_table_gain_file_and_line_from_a_debug_file() {
    let fx = Fixture::new();
    let build = fx.path("build");
    std::fs::create_dir_all(&build).unwrap();
    let exe = compile(
        &build,
        "int twice(int x) {\n  return 2 * x;\n}\n\nint thrice(int x) {\n  return 3 * x;\n}\n\n\
         int main(int argc, char **argv) {\n  return twice(argc) + thrice(argc);\n}\n",
    );
    let id = build_id(&exe);
    let debug = fx.path("debug");
    let linked = debug
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(linked.parent().unwrap()).unwrap();
    std::fs::copy(&exe, &linked).unwrap();

    // 1: named from a symbol table (no file); 2: not named; 3: named with
    // a file of its own, which the debug file must not replace; 4: a kernel
    // frame.
    let rec = fx.recording("rec", "web1");
    let user = |frame_id: i64, function: Option<&str>, file: Option<&str>, at: &str| {
        json!({"frame_id": frame_id, "kind": "user", "module": "/opt/app/prog", "build_id": id,
               "elf_address": middle_of(&exe, at), "function": function, "file": file,
               "line": file.map(|_| 1)})
    };
    rec.chunk(
        &FRAME,
        "a-000001.parquet",
        &[
            user(1, Some("twice"), None, "twice"),
            user(2, None, None, "thrice"),
            user(3, Some("main"), Some("recorded.c"), "main"),
            json!({"frame_id": 4, "kind": "kernel", "address": 4096, "module": "[kernel]",
                   "function": "schedule"}),
        ],
    );
    let query = "SELECT frame_id, function, file, line FROM frame ORDER BY frame_id";
    let sql = |extra: &[&str]| {
        let mut args = vec!["sql", "--format", "json"];
        args.extend_from_slice(extra);
        args.extend([rec.dir.to_str().unwrap(), query]);
        rows(&hindsight(args))
    };

    let named = sql(&["--debug-dir", debug.to_str().unwrap()]);
    let source_line = |row: &Value| {
        (
            row["function"].as_str().map(str::to_owned),
            row["file"].as_str().map(|f| f.ends_with("/build/prog.c")),
            row["line"].as_i64(),
        )
    };
    assert_eq!(
        named.iter().map(source_line).collect::<Vec<_>>(),
        [
            (Some("twice".into()), Some(true), Some(2)),
            (Some("thrice".into()), Some(true), Some(6)),
            (Some("main".into()), Some(false), Some(1)),
            (Some("schedule".into()), None, None),
        ],
        "{named:?}"
    );
    // The recording is not changed.
    let bare = sql(&[]);
    assert_eq!(bare[0]["file"], Value::Null, "{bare:?}");
    assert_eq!(bare[1]["function"], Value::Null, "{bare:?}");
}
