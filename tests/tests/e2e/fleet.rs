//! Recordings in a bucket: `hindsight push` to a real S3-compatible server
//! on the loopback (moto, installed by `scripts/install-deps`), and every
//! reader given `s3://` answering exactly as it does on the directories,
//! here and on a real Ballista cluster (`scripts/cluster`) whose executors
//! read the bucket themselves.

use std::{
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::fixture::{bin, pingpong, repo, run, settle, shared, Recorder, Scratch};

/// An S3 server of our own on a free loopback port, stopped on drop.
struct S3Server {
    child: Child,
    endpoint: String,
}

impl S3Server {
    /// Starts moto; with `authenticate`, it checks every request's key
    /// (and knows none, so every key is refused), as a real service does.
    fn start(authenticate: bool) -> S3Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new("python3");
        command
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if authenticate {
            command.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
        }
        let child = command
            .spawn()
            .expect("python3 -m moto.server (scripts/install-deps installs moto[server])");
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not listen on {port}");
            thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The standard AWS environment that points a client at this server.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "hindsight-test".into()),
            ("AWS_SECRET_ACCESS_KEY", "hindsight-test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// Where `hindsight` mirrors `s3://PATH` from this server into `cache`.
    fn cached(&self, cache: &Path, path: &str) -> std::path::PathBuf {
        let host = self.endpoint.trim_start_matches("http://");
        cache.join(format!("s3@{host}")).join(path)
    }

    /// Runs `script` with `s3`, a boto3 client of this server (an S3 client
    /// independent of hindsight's), and returns what it printed.
    fn boto3(&self, script: &str) -> String {
        let script = format!(
            "import boto3\n\
             s3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', \
             aws_access_key_id='k', aws_secret_access_key='k')\n{script}",
            self.endpoint
        );
        let out = run(Command::new("python3").args(["-c", &script]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn create_bucket(&self, bucket: &str) {
        self.boto3(&format!("s3.create_bucket(Bucket='{bucket}')"));
    }

    /// Every key in the bucket, with its size, as boto3 lists them.
    fn keys(&self, bucket: &str) -> Vec<(String, u64)> {
        self.boto3(&format!(
            "for page in s3.get_paginator('list_objects_v2').paginate(Bucket='{bucket}'):\n\
             \x20   for o in page.get('Contents', []): print(o['Key'], o['Size'])"
        ))
        .lines()
        .map(|l| {
            let (key, size) = l.rsplit_once(' ').unwrap();
            (key.to_owned(), size.parse().unwrap())
        })
        .collect()
    }

    fn delete(&self, bucket: &str, key: &str) {
        self.boto3(&format!("s3.delete_object(Bucket='{bucket}', Key='{key}')"));
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local Ballista cluster of two executors started by `scripts/cluster`
/// with `server`'s environment, stopped on drop.
struct Cluster {
    dir: std::path::PathBuf,
    port: u16,
    flag: String,
}

impl Cluster {
    /// Starts it on ports below the ephemeral range (where outgoing
    /// connections of other tests take ports at any moment), all free when
    /// chosen; another start on new ports if one was taken meanwhile.
    fn start(server: &S3Server, dir: &Path) -> Cluster {
        let mut said = String::new();
        for attempt in 0..3u16 {
            let port = free_cluster_ports(attempt);
            let out = run(Command::new(repo().join("scripts/cluster"))
                .args([
                    "up",
                    "--executors",
                    "2",
                    "--port",
                    &port.to_string(),
                    "--dir",
                ])
                .arg(dir)
                .envs(server.env()));
            said = String::from_utf8_lossy(&out.stderr).into_owned();
            if !out.status.success() {
                continue;
            }
            let flag = String::from_utf8(out.stdout).unwrap().trim().to_owned();
            assert_eq!(flag, format!("--cluster df://127.0.0.1:{port}"));
            return Cluster {
                dir: dir.to_owned(),
                port,
                flag,
            };
        }
        panic!("scripts/cluster up failed 3 times: {said}");
    }

    /// `--cluster` and its value, to put before a command's arguments.
    fn args(&self) -> Vec<&str> {
        self.flag.splitn(2, ' ').collect()
    }

    /// How many jobs the scheduler has completed, from its REST API: proof
    /// that a query ran there.
    fn jobs_completed(&self) -> usize {
        let url = format!("http://127.0.0.1:{}/api/jobs", self.port);
        let out = run(Command::new("curl").args(["-fsS", &url]));
        assert!(
            out.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        jobs.as_array()
            .unwrap()
            .iter()
            .filter(|job| job["status"] == "Completed")
            .count()
    }
}

/// A scheduler port P for `scripts/cluster up --executors 2`, such that P
/// and the executors' P+11..P+13 and P+21..P+23 are all free now.
fn free_cluster_ports(attempt: u16) -> u16 {
    let seed = std::process::id() as u16 ^ attempt.wrapping_mul(7919);
    (0..200u16)
        .map(|i| 20_000 + (seed.wrapping_add(i.wrapping_mul(101)) % 12_000) / 30 * 30)
        .find(|&port| {
            [0, 11, 12, 13, 21, 22, 23]
                .iter()
                .all(|offset| TcpListener::bind(("127.0.0.1", port + offset)).is_ok())
        })
        .expect("free ports between 20000 and 32000")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = run(Command::new(repo().join("scripts/cluster"))
            .args(["down", "--dir"])
            .arg(&self.dir));
    }
}

/// `hindsight ARGS` against `server`, with a cache of the test's own.
fn hindsight(server: &S3Server, cache: &Path, args: &[&str]) -> Output {
    run(with_server(
        Command::new(bin("hindsight")).args(args),
        server,
        cache,
    ))
}

/// `hindsight ARGS` on `cluster`, killed after 300 s: a job Ballista loses
/// never ends, and the test should fail rather than hang.
fn hindsight_on(cluster: &Cluster, server: &S3Server, cache: &Path, args: &[&str]) -> Output {
    run(with_server(
        Command::new("timeout")
            .arg("300")
            .arg(bin("hindsight"))
            .args(cluster.args())
            .args(args),
        server,
        cache,
    ))
}

/// `command` with `server`'s credentials and `cache` for its copies.
fn with_server<'c>(command: &'c mut Command, server: &S3Server, cache: &Path) -> &'c mut Command {
    command.envs(server.env()).env("HINDSIGHT_CACHE_DIR", cache)
}

fn stdout_of(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The files of a recording directory a push ships: `recording.json` and
/// every closed chunk, as `path below the directory → size`.
fn shipped_files(dir: &Path) -> Vec<(String, u64)> {
    let mut files = vec![(
        "recording.json".to_owned(),
        std::fs::metadata(dir.join("recording.json")).unwrap().len(),
    )];
    for table in std::fs::read_dir(dir).unwrap().flatten() {
        if !table.path().is_dir() {
            continue;
        }
        for chunk in std::fs::read_dir(table.path()).unwrap().flatten() {
            let name = chunk.file_name().to_string_lossy().into_owned();
            if name.ends_with(".parquet") && !name.starts_with('.') {
                files.push((
                    format!("{}/{name}", table.file_name().to_string_lossy()),
                    chunk.metadata().unwrap().len(),
                ));
            }
        }
    }
    files.sort();
    files
}

fn keys_below(server: &S3Server, bucket: &str, prefix: &str) -> Vec<(String, u64)> {
    let mut keys: Vec<_> = server
        .keys(bucket)
        .into_iter()
        .filter_map(|(k, s)| Some((k.strip_prefix(prefix)?.to_owned(), s)))
        .collect();
    keys.sort();
    keys
}

/// Two hosts' recordings pushed to one bucket (one of them by `push
/// --follow` while it was being written) read back through `s3://` exactly
/// as the two directories read: `sql`, `info`, `top`, the on-CPU flame
/// graph and the atop, faults, NUMA, cachetop, runqlat and timeline
/// reports, here and on a Ballista cluster, whose client downloads no
/// chunk; `report html` and `export perfetto` write the same bytes there.
/// A push interrupted before some files went up sends just those the next
/// time; `--delete` mirrors retention.
#[test]
fn recordings_pushed_to_a_bucket_read_back_as_the_directories_do() {
    let _machine = shared();
    let scratch = Scratch::new();
    let server = S3Server::start(false);
    server.create_bucket("fleet");
    let cache = scratch.dir.path().join("cache");
    let host_a = scratch.dir.path().join("hostA");
    let host_b = scratch.dir.path().join("hostB");

    // Host A: pushed continuously while it records 1 s chunks.
    let recorder = Recorder::start(&host_a, &["--chunk", "1s"]);
    let mut follow = Command::new(bin("hindsight"))
        .args(["push", "--follow", "--interval", "1s"])
        .arg(&host_a)
        .arg("s3://fleet/hosts/hostA")
        .envs(server.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hindsight push --follow");
    // Busy until 3 chunks have closed: a loaded machine rotates late.
    let deadline = Instant::now() + Duration::from_secs(60);
    pingpong(3_000);
    while closed_chunks(&host_a, "sched_switch").len() < 3 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(700));
        pingpong(2_000);
    }
    settle();
    recorder.stop();
    // Two rounds of --follow after the recorder closed its last chunks.
    thread::sleep(Duration::from_millis(2500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(follow.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = follow.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "push --follow ignored SIGTERM");
        thread::sleep(Duration::from_millis(100));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut follow.stderr.take().unwrap(), &mut said).unwrap();
    assert!(status.success(), "push --follow: {status}: {said}");
    let local_a = shipped_files(&host_a);
    assert!(
        local_a
            .iter()
            .filter(|(f, _)| f.starts_with("sched_switch/"))
            .count()
            >= 3,
        "1 s chunks over several seconds: {local_a:?}"
    );
    assert_eq!(
        keys_below(&server, "fleet", "hosts/hostA/"),
        local_a,
        "the bucket holds exactly the closed recording, each file once"
    );

    // Host B: one push, then an interrupted one simulated by losing the
    // last files a push sends (a chunk and recording.json).
    let recorder = Recorder::start(&host_b, &["--chunk", "1s"]);
    pingpong(2_000);
    settle();
    recorder.stop();
    let push_b = |extra: &[&str]| {
        let mut args = vec!["push"];
        args.extend_from_slice(extra);
        args.extend([host_b.to_str().unwrap(), "s3://fleet/hosts/hostB"]);
        stdout_of(hindsight(&server, &cache, &args), "push hostB")
    };
    let local_b = shipped_files(&host_b);
    let first = push_b(&[]);
    assert!(
        first.contains(&format!("{} uploaded", local_b.len())),
        "{first}"
    );
    let switch_chunk = local_b
        .iter()
        .find(|(f, _)| f.starts_with("sched_switch/"))
        .unwrap()
        .0
        .clone();
    server.delete("fleet", &format!("hosts/hostB/{switch_chunk}"));
    server.delete("fleet", "hosts/hostB/recording.json");
    let again = push_b(&[]);
    assert!(
        again.contains("2 uploaded")
            && again.contains(&format!("{} already there", local_b.len() - 2)),
        "{again}"
    );
    assert_eq!(keys_below(&server, "fleet", "hosts/hostB/"), local_b);
    assert!(push_b(&[]).contains("0 uploaded"));

    // Reading the bucket equals reading the directories, here and on a
    // cluster, whether its executors read the bucket or the directories.
    // The cluster's client has a cache of its own, to show it downloads
    // no chunk: the executors read them.
    let cluster = Cluster::start(&server, &scratch.dir.path().join("cluster"));
    let client_cache = scratch.dir.path().join("client-cache");
    let local: Vec<&str> = vec![host_a.to_str().unwrap(), host_b.to_str().unwrap()];
    let compare = |args: &[&str]| {
        let mut over_dirs: Vec<&str> = args.to_vec();
        let mut over_bucket: Vec<&str> = args.to_vec();
        let at = args.iter().position(|a| *a == "REC").unwrap();
        over_dirs.splice(at..=at, local.iter().copied());
        over_bucket.splice(at..=at, ["s3://fleet/hosts"]);
        let expected = stdout_of(
            hindsight(&server, &cache, &over_dirs),
            "over the directories",
        );
        assert!(!expected.trim().is_empty(), "{args:?} printed nothing");
        let got = stdout_of(hindsight(&server, &cache, &over_bucket), "over the bucket");
        assert_eq!(got, expected, "{args:?}");
        for over in [&over_bucket, &over_dirs] {
            let jobs = cluster.jobs_completed();
            let got = stdout_of(
                hindsight_on(&cluster, &server, &client_cache, over),
                "on the cluster",
            );
            assert_eq!(got, expected, "{over:?} on the cluster");
            assert!(
                cluster.jobs_completed() > jobs,
                "{over:?} ran no job on the cluster"
            );
        }
        expected
    };
    let counts = compare(&[
        "sql",
        "REC",
        "SELECT host, count(*) AS switches, min(ts) AS first, max(ts) AS last \
         FROM sched_switch GROUP BY host ORDER BY host",
        "--format",
        "csv",
    ]);
    assert!(
        counts.contains("hostA") && counts.contains("hostB"),
        "{counts}"
    );
    compare(&[
        "report",
        "atop",
        "REC",
        "--interval",
        "1s",
        "--format",
        "csv",
    ]);
    compare(&[
        "report",
        "runqlat",
        "REC",
        "--interval",
        "1s",
        "--format",
        "csv",
    ]);
    compare(&["report", "timeline", "REC", "--format", "csv"]);
    // A UNION ALL whose inputs differ per task: it never ended on a stock
    // Ballista executor (executor/src/main.rs).
    compare(&[
        "report",
        "numa",
        "REC",
        "--interval",
        "1s",
        "--format",
        "csv",
    ]);
    for report in ["faults", "cachetop"] {
        compare(&[
            "report",
            report,
            "REC",
            "--interval",
            "1s",
            "--format",
            "csv",
        ]);
    }
    compare(&["top", "REC", "--at", "+2s"]);
    compare(&["flamegraph", "REC", "--on-cpu"]);
    // The commands that read one recording and write a file: the same
    // bytes on the cluster as here.
    for (command, file) in [
        (&["report", "html"][..], "page.html"),
        (&["export", "perfetto"][..], "trace.pftrace"),
    ] {
        let written = |on_cluster: bool| {
            let out = scratch.dir.path().join(format!("{on_cluster}-{file}"));
            let out_arg = out.to_str().unwrap();
            let args = [command, &["s3://fleet/hosts/hostA", "-o", out_arg]].concat();
            let ran = if on_cluster {
                hindsight_on(&cluster, &server, &client_cache, &args)
            } else {
                hindsight(&server, &cache, &args)
            };
            stdout_of(ran, &format!("{args:?}"));
            std::fs::read(&out).unwrap()
        };
        let here = written(false);
        assert!(here.len() > 1000, "{file}: {} bytes", here.len());
        assert!(here == written(true), "{file} differs on the cluster");
    }
    // A window relative to the two hosts' first and last events together,
    // resolved from the footers near each end before anything is fetched.
    compare(&[
        "report",
        "runqlat",
        "REC",
        "--from",
        "+1s",
        "--to",
        "-1s",
        "--interval",
        "1s",
        "--format",
        "csv",
    ]);
    let info = stdout_of(
        hindsight(&server, &cache, &["info", "s3://fleet/hosts/hostA"]),
        "info over the bucket",
    );
    assert!(info.contains("sched_switch"), "{info}");
    // Shown by where it came from, not only by the cache's copy.
    let first = info.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("recording  s3://fleet/hosts/hostA (copy in "),
        "{first}"
    );
    // On a cluster the rows, bytes and times come from the footers read
    // in the bucket; only the copy's directory differs.
    let info_there = stdout_of(
        hindsight_on(
            &cluster,
            &server,
            &client_cache,
            &["info", "s3://fleet/hosts/hostA"],
        ),
        "info on the cluster",
    );
    let below_first = |text: &str| text.lines().skip(1).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(below_first(&info_there), below_first(&info));

    // A second read downloads nothing; a chunk retention retired on the
    // host leaves the bucket with --delete, and then the cache.
    let before = shipped_files(&server.cached(&cache, "fleet/hosts/hostB"));
    assert_eq!(before, local_b);
    let retired = local_b
        .iter()
        .rfind(|(f, _)| f.starts_with("sched_wakeup/"))
        .unwrap()
        .0
        .clone();
    std::fs::remove_file(host_b.join(&retired)).unwrap();
    let deleted = push_b(&["--delete"]);
    assert!(deleted.contains("1 deleted"), "{deleted}");
    let after_b = shipped_files(&host_b);
    assert_eq!(keys_below(&server, "fleet", "hosts/hostB/"), after_b);
    compare(&[
        "sql",
        "REC",
        "SELECT host, count(*) FROM sched_wakeup GROUP BY host ORDER BY host",
        "--format",
        "csv",
    ]);
    assert_eq!(
        shipped_files(&server.cached(&cache, "fleet/hosts/hostB")),
        after_b
    );
    // For the cluster, the client read the chunks' footers with ranged
    // GETs and downloaded only each host's recording.json.
    for host in ["hostA", "hostB"] {
        let copy = server.cached(&client_cache, &format!("fleet/hosts/{host}"));
        let files: Vec<String> = shipped_files(&copy).into_iter().map(|(f, _)| f).collect();
        assert_eq!(files, ["recording.json"], "{}", copy.display());
    }
}

/// A bucket that does not exist, a key the service refuses, no key at
/// all, and a prefix with no recording are each one line naming the URL
/// and the cause, exit code 2, for push and for a reader.
#[test]
fn a_missing_bucket_or_a_refused_key_is_one_line_and_exit_code_2() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "counters"]);
    settle();
    recorder.stop();
    let cache = scratch.dir.path().join("cache");
    let open = S3Server::start(false);
    open.create_bucket("fleet");
    let checking = S3Server::start(true);
    let expect = |server: &S3Server, env: &[(&str, &str)], args: &[&str], cause: &str| {
        let out = run(Command::new(bin("hindsight"))
            .args(args)
            .envs(server.env())
            .envs(env.iter().copied())
            .env("HINDSIGHT_CACHE_DIR", &cache));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let url = args.iter().find(|a| a.starts_with("s3://")).unwrap();
        assert_eq!(
            stderr.trim(),
            format!("hindsight: {url}: {cause}"),
            "{args:?}"
        );
    };
    let dir = rec.to_str().unwrap();
    expect(
        &open,
        &[],
        &["push", dir, "s3://nobucket/h"],
        "no such bucket",
    );
    expect(&open, &[], &["info", "s3://nobucket/h"], "no such bucket");
    expect(
        &checking,
        &[],
        &["push", dir, "s3://fleet/h"],
        "the access key is not valid (AWS_ACCESS_KEY_ID)",
    );
    expect(
        &checking,
        &[],
        &["report", "atop", "s3://fleet/h"],
        "the access key is not valid (AWS_ACCESS_KEY_ID)",
    );
    expect(
        &open,
        &[],
        &["info", "s3://fleet/empty"],
        "no objects under this prefix",
    );
    // No key in the environment: the client would ask the EC2 metadata
    // service, which is not on the loopback.
    let out = run(Command::new(bin("hindsight"))
        .args(["info", "s3://fleet/h"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_ENDPOINT_URL", &open.endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("HINDSIGHT_CACHE_DIR", &cache));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The pushed recording is untouched by all of it.
    assert!(rec.join("recording.json").exists());
}

/// A command with a time window fetches only the chunks the window needs,
/// once the recording is indexed, and prints what the whole recording
/// gives: the report, the flame graph and the slice over the bucket equal
/// those over the directory. A recording not indexed is fetched whole (its
/// reports pair raw events from any time before the window).
/// The closed chunks of `table` in the recording `dir`, sorted by name.
fn closed_chunks(dir: &Path, table: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(table))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".parquet") && !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_window_fetches_only_the_chunks_it_reads_and_answers_as_the_whole() {
    let _machine = shared();
    let scratch = Scratch::new();
    let server = S3Server::start(false);
    server.create_bucket("fleet");
    let host = scratch.dir.path().join("host");
    let switch_chunks = |dir: &Path| closed_chunks(dir, "sched_switch");
    // Busy until 8 chunks have closed: a loaded machine rotates late.
    let recorder = Recorder::start(&host, &["--chunk", "1s"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while switch_chunks(&host).len() < 8 && Instant::now() < deadline {
        pingpong(2_000);
        thread::sleep(Duration::from_millis(700));
    }
    settle();
    recorder.stop();
    let url = "s3://fleet/win/host";
    let host_arg = host.to_str().unwrap();
    let push = || {
        let cache = scratch.dir.path().join("push-cache");
        stdout_of(hindsight(&server, &cache, &["push", host_arg, url]), "push")
    };
    push();
    let recorded = switch_chunks(&host);
    assert!(recorded.len() >= 8, "8 chunks of 1 s: {recorded:?}");
    // The window: the fifth chunk's second, from the chunk names (the
    // wall-clock times they opened, 20261204T171952.019Z-000004.parquet).
    let opened = |name: &str| {
        let t = &name[..name.find('Z').unwrap()];
        format!(
            "{}-{}-{}T{}:{}:{}Z",
            &t[0..4],
            &t[4..6],
            &t[6..8],
            &t[9..11],
            &t[11..13],
            &t[13..]
        )
    };
    let (from, to) = (opened(&recorded[4]), opened(&recorded[5]));
    let first_and_last = [&recorded[0], recorded.last().unwrap()];
    let mut caches = 0;
    // Runs `args` (REC standing for the recording) over the directory and
    // over the bucket with an empty cache; returns that cache's copy.
    let mut compare = |args: &[&str]| {
        caches += 1;
        let cache = scratch.dir.path().join(format!("cache{caches}"));
        let with = |rec: &str| -> Vec<String> {
            args.iter()
                .map(|a| {
                    if *a == "REC" {
                        rec.to_owned()
                    } else {
                        a.to_string()
                    }
                })
                .collect()
        };
        let over = |rec: &str| {
            let args = with(rec);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            stdout_of(hindsight(&server, &cache, &args), &format!("{args:?}"))
        };
        let expected = over(host_arg);
        let got = over(url);
        assert!(!expected.trim().is_empty(), "{args:?} printed nothing");
        assert_eq!(got, expected, "{args:?}");
        server.cached(&cache, "fleet/win/host")
    };
    let runqlat = [
        "report",
        "runqlat",
        "REC",
        "--from",
        &from,
        "--to",
        &to,
        "--interval",
        "1s",
        "--format",
        "csv",
    ];
    // Not indexed: runqlat pairs raw events, from any time, so the sched
    // tables come whole; the counters only for the window.
    let copy = compare(&runqlat);
    assert_eq!(switch_chunks(&copy), recorded, "sched_switch whole");
    let counters = closed_chunks(&copy, "counter");
    assert!(
        !counters.is_empty() && first_and_last.iter().all(|c| !counters.contains(c)),
        "counter chunks of {recorded:?} fetched for {from}..{to}: {counters:?}"
    );

    let indexed = run(Command::new(bin("hindsight")).args(["index", host_arg]));
    assert!(indexed.status.success(), "{indexed:?}");
    push();
    // Indexed: the window's groups only, the second before it for the
    // first interval's alignment.
    let fetched = switch_chunks(&compare(&runqlat));
    eprintln!("runqlat over {from}..{to}: fetched {fetched:?} of {recorded:?}");
    assert!(
        !fetched.is_empty() && first_and_last.iter().all(|c| !fetched.contains(c)),
        "runqlat over {from}..{to} of {recorded:?} fetched {fetched:?}"
    );
    // Times relative to the recording's ends resolve as over the whole.
    let fetched = switch_chunks(&compare(&[
        "flamegraph",
        "REC",
        "--off-cpu",
        "--from",
        "+3s",
        "--to",
        "+5s",
    ]));
    eprintln!(
        "off-CPU flame graph over 2 s: {} of {}",
        fetched.len(),
        recorded.len()
    );
    // Counters need the sample before the window: nothing is left out of
    // a recording this short, but the times still resolve as the whole's.
    compare(&[
        "report",
        "atop",
        "REC",
        "--from",
        "-3s",
        "--interval",
        "1s",
        "--format",
        "csv",
    ]);
    for (i, rec) in [host_arg, url].iter().enumerate() {
        let out = scratch.dir.path().join(format!("slice{i}"));
        let cache = scratch.dir.path().join(format!("slice-cache{i}"));
        let cut = hindsight(
            &server,
            &cache,
            &[
                "slice",
                rec,
                "--from",
                "+1s",
                "--to",
                "-2s",
                "-o",
                out.to_str().unwrap(),
            ],
        );
        stdout_of(cut, "slice");
    }
    let summary = |i: usize| {
        let out = scratch.dir.path().join(format!("slice{i}"));
        stdout_of(
            hindsight(
                &server,
                &scratch.dir.path().join("unused"),
                &[
                    "sql",
                    out.to_str().unwrap(),
                    "SELECT (SELECT count(*) FROM sched_switch) AS switches, \
                     (SELECT min(ts) FROM sched_switch) AS first, \
                     (SELECT count(*) FROM counter) AS counters, \
                     (SELECT count(*) FROM process) AS processes",
                    "--format",
                    "csv",
                ],
            ),
            "sql over a slice",
        )
    };
    assert_eq!(
        summary(1),
        summary(0),
        "a slice of the bucket is the directory's"
    );
}
