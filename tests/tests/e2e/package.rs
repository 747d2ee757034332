//! The Debian package (`scripts/package`) on a fresh Debian root with no
//! Rust toolchain (`tests/deb/fresh-root`, chrooted in a mount namespace of
//! its own): apt installs it with its dependencies, enables the service,
//! and the service's own command line records every context switch of a
//! known workload, as `/proc` counted them. The test packs the debug
//! binaries CI has built: the packaging is under test, not the optimizer.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::fixture::{bin, repo, run, shared, succeed, Scratch};

/// The build id of an ELF file, from `readelf -n`.
fn build_id(elf: &Path) -> String {
    succeed(Command::new("readelf").arg("-n").arg(elf))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build id", elf.display()))
        .to_owned()
}

fn has_section(elf: &Path, section: &str) -> bool {
    succeed(Command::new("readelf").arg("-S").arg(elf))
        .split_whitespace()
        .any(|word| word == section)
}

#[test]
fn the_debian_package_installs_enables_and_records_on_a_fresh_debian() {
    let _machine = shared();
    let scratch = Scratch::new();
    let repo = repo();
    // The profile directory of the binaries this test runs (target/debug).
    let profile_dir = bin("hindsight")
        .parent()
        .expect("target/<profile>")
        .to_path_buf();
    let target = profile_dir.parent().expect("target/").to_path_buf();
    let built = succeed(
        Command::new(repo.join("scripts/package"))
            .args(["--profile", "debug", "--no-build"])
            .env("CARGO_TARGET_DIR", &target),
    );
    let debs: Vec<PathBuf> = built.lines().map(PathBuf::from).collect();
    assert_eq!(debs.len(), 2, "{built}");

    // Each binary ships without its DWARF, which the dbgsym package holds
    // under the binary's build id.
    let unpacked = scratch.dir.path().join("unpacked");
    for deb in &debs {
        succeed(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&unpacked));
    }
    for name in ["hindsight", "hindsight-record"] {
        let shipped = unpacked.join("usr/bin").join(name);
        assert!(!has_section(&shipped, ".debug_info"), "{name} has DWARF");
        // Packed relative relocations (the binaries' build.rs): glibc loads
        // them since 2.36, so Depends must say so (checked below).
        assert!(has_section(&shipped, ".relr.dyn"), "{name} has no DT_RELR");
        let id = build_id(&shipped);
        let debug = unpacked.join(format!(
            "usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ));
        assert!(has_section(&debug, ".debug_info"), "{}", debug.display());
        assert_eq!(build_id(&profile_dir.join(name)), id, "{name}");
    }
    let control = succeed(Command::new("dpkg-deb").arg("-f").arg(&debs[0]));
    let depends = control
        .lines()
        .find_map(|l| l.strip_prefix("Depends: "))
        .unwrap_or_else(|| panic!("no Depends: {control}"));
    for package in ["libc6 (>= ", "libelf1", "zlib1g"] {
        assert!(depends.contains(package), "Depends: {depends}");
    }
    let glibc: Vec<u32> = depends
        .split("libc6 (>= ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(|version| version.split('.').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    assert!(glibc >= vec![2, 36], "Depends: {depends}");

    // A fresh Debian root, the packages and the workload in its /tmp/deb.
    let root = scratch.dir.path().join("root");
    succeed(Command::new(repo.join("tests/deb/fresh-root")).arg(&root));
    let work = root.join("tmp/deb");
    fs::create_dir_all(&work).unwrap();
    for file in debs.iter().chain([&bin("hs-pingpong")]) {
        fs::copy(file, work.join(file.file_name().unwrap())).unwrap();
    }
    fs::copy(repo.join("tests/deb/in-root.sh"), work.join("in-root.sh")).unwrap();
    // The mounts live and die with the namespace: nothing of this
    // machine's /sys or /dev stays under the scratch directory.
    let inside = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "set -e; root=\"$1\"
             mount -t proc proc \"$root/proc\"
             mount --rbind /sys \"$root/sys\"
             mount --rbind /dev \"$root/dev\"
             chroot \"$root\" /bin/sh /tmp/deb/in-root.sh",
        )
        .arg("sh")
        .arg(&root));
    let read = |name: &str| fs::read_to_string(work.join(name)).unwrap_or_default();
    assert!(
        inside.status.success(),
        "in the fresh root: {}\n--- apt.log (end)\n{}\n--- record.log\n{}",
        String::from_utf8_lossy(&inside.stderr),
        read("apt.log")
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n"),
        read("record.log"),
    );

    assert_eq!(
        read("no-rust").trim(),
        "none",
        "a Rust toolchain in the root"
    );
    assert_eq!(
        read("enabled").trim(),
        "/lib/systemd/system/hindsight-record.service",
        "enabled on install"
    );
    assert!(
        read("exec-start").starts_with("/usr/bin/hindsight-record --output /var/lib/hindsight/rec"),
        "{}",
        read("exec-start")
    );
    let man = read("man-pages");
    for page in [
        "hindsight.1.gz",
        "hindsight-record.1.gz",
        "hindsight-report-atop.1.gz",
    ] {
        assert!(man.lines().any(|l| l == page), "{page} in {man}");
    }

    // The service's command line recorded every switch of the workload.
    let log = read("record.log");
    assert_eq!(read("record.status").trim(), "0", "{log}");
    assert!(
        read("info.txt").contains("sched_switch"),
        "{}",
        read("info.txt")
    );
    let switches: HashMap<i64, i64> = read("switches.csv")
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (tid, n) = l.split_once(',')?;
            Some((tid.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    let truth: serde_json::Value = serde_json::from_str(&read("pingpong.json")).unwrap();
    for child in truth["children"].as_array().unwrap() {
        let tid = child["tid"].as_i64().unwrap();
        let kernel = child["voluntary"].as_i64().unwrap() + child["nonvoluntary"].as_i64().unwrap();
        // A round passes without a switch when the other child's byte is
        // already there (one child preempted, 608 + 1,391 switches in a CI run).
        assert!(
            kernel >= 1000,
            "the workload switches in about every one of its 2,000 rounds: {child}"
        );
        assert_eq!(
            switches.get(&tid),
            Some(&kernel),
            "switches of {child}: {log}"
        );
    }

    // Remove keeps the recording and, as debhelper does, the admin's
    // enablement under a mask (a reinstall restores it, nothing starts the
    // unit meanwhile); purge takes all three.
    assert_eq!(
        read("after-remove"),
        "/var/lib/hindsight/rec\n\
         /etc/systemd/system/hindsight-record.service\n\
         /etc/systemd/system/multi-user.target.wants/hindsight-record.service\n",
        "left by remove"
    );
    assert_eq!(read("after-purge"), "", "left by purge");
}
