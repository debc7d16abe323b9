//! Measurement under a real Slurm: `scripts/test` starts a one-node cluster on this machine
//! (`scripts/slurm-local`) and sets `SLURM_CONF` and `RIDGELINE_REQUIRE_SLURM=1`, so there
//! these tests must run; elsewhere they run where `SLURM_CONF` names a cluster, and skip
//! with a note where nothing does.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::QUICK;

/// The cluster's configuration, or `None` (with a note) where there is none to test on.
fn cluster() -> Option<String> {
    let conf = std::env::var("SLURM_CONF")
        .ok()
        .filter(|c| Path::new(c).is_file());
    if conf.is_none() {
        assert!(
            std::env::var_os("RIDGELINE_REQUIRE_SLURM").is_none(),
            "RIDGELINE_REQUIRE_SLURM is set but SLURM_CONF names no file: start the test \
             cluster with scripts/slurm-local start"
        );
        eprintln!("skipping: no Slurm cluster (scripts/slurm-local start, then SLURM_CONF)");
    }
    conf
}

/// Runs a Slurm command and returns its standard output.
fn slurm(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A fresh folder for one test's job files.
fn job_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ridgeline-slurm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A job array of two tasks, each measuring into its own records file under `sbatch`:
/// every record says which job, task, node and partition made it.
#[test]
fn a_job_array_measures_and_its_records_say_where() {
    if cluster().is_none() {
        return;
    }
    let dir = job_dir("array");
    let script = dir.join("job.sh");
    let quick = QUICK.join(" ");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\nset -euo pipefail\n\"{}\" measure stream --kernel copy --size 4K \
             {quick} --out \"{}/records-$SLURM_ARRAY_TASK_ID.jsonl\"\n",
            env!("CARGO_BIN_EXE_ridgeline"),
            dir.display()
        ),
    )
    .unwrap();
    let output = dir.join("slurm-%A_%a.out");
    let job = slurm(
        "sbatch",
        &[
            "--parsable",
            "--wait",
            "--array=0-1",
            "--ntasks=1",
            "--output",
            output.to_str().unwrap(),
            script.to_str().unwrap(),
        ],
    );
    let array_job = job.trim().split(';').next().unwrap().to_owned();
    let node = slurm("sinfo", &["--noheader", "--format=%N", "--partition=local"])
        .trim()
        .to_owned();
    let partition = "local";
    let mut jobs = Vec::new();
    for task in ["0", "1"] {
        let file = dir.join(format!("records-{task}.jsonl"));
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (the task wrote none)", file.display()));
        let mut records = 0;
        for line in text.lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            let s = &r["env"]["slurm"];
            assert_eq!(s["array_job_id"], array_job.as_str(), "{s}");
            assert_eq!(s["array_task_id"], task, "{s}");
            assert_eq!(s["node"], node.as_str(), "{s}");
            assert_eq!(s["partition"], partition, "{s}");
            jobs.push(s["job_id"].as_str().unwrap().to_owned());
            records += 1;
        }
        assert!(records > 0, "{}: no records", file.display());
    }
    // Each task is a job of its own; its records all carry its id.
    jobs.dedup();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
}

/// The records of a JSON Lines file.
fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The ids of `records`, each asserted to appear once.
fn unique_ids(records: &[serde_json::Value]) -> std::collections::BTreeSet<String> {
    let mut ids = std::collections::BTreeSet::new();
    for r in records {
        let id = r["id"].as_str().unwrap().to_owned();
        assert!(ids.insert(id.clone()), "{id} is recorded twice");
    }
    ids
}

/// Runs `ridgeline` in `dir` with `args`: its exit code, stdout and stderr.
fn ridgeline_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ridgeline"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `measure stream` of `kernels` x `sizes` (each case a few samples), as arguments.
fn stream_campaign(kernels: &str, sizes: &str, min_time: &str) -> Vec<String> {
    [
        "measure",
        "stream",
        "--kernel",
        kernels,
        "--size",
        sizes,
        "--warmup",
        "0s",
        "--min-time",
        min_time,
        "--min-samples",
        "3",
        "--threads",
        "1",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `--slurm` submits a campaign to each partition as a job array and a merge job: each
/// task measures its share into a file of its own, the merge joins them into the
/// partition's records file with every case once, and `--calibrate` describes the
/// partition from its node and calibrates a profile of it; `report procurement` compares
/// the calibrated partitions with a datasheet candidate.
#[test]
fn a_campaign_per_partition_is_merged_calibrated_and_compared() {
    if cluster().is_none() {
        return;
    }
    let dir = job_dir("campaign");
    let mut args = stream_campaign("copy,triad", "4K,16K,64K,100M", "0s");
    args.extend(
        [
            "--out",
            "s.jsonl",
            "--slurm",
            "--partition",
            "local,debug",
            "--tasks",
            "2",
            "--calibrate",
            "--wait",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = ridgeline_in(&dir, &args);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("partition local: job array") && err.contains("partition debug: job array"),
        "{err}"
    );
    let cpus = slurm("sinfo", &["--noheader", "--format=%c", "--partition=local"]);
    for partition in ["local", "debug"] {
        assert!(
            out.contains(&format!(
                "Merged: 8 records in {}",
                dir.join(format!("s-{partition}.jsonl")).display()
            )),
            "{out}"
        );
        let merged = records(&dir.join(format!("s-{partition}.jsonl")));
        assert_eq!(unique_ids(&merged).len(), 8);
        // Each task measured its own share: cases 0, 2, 4, 6 and 1, 3, 5, 7.
        for task in ["0", "1"] {
            let share = records(&dir.join(format!("s-{partition}.slurm/records-{task}.jsonl")));
            assert_eq!(share.len(), 4, "{partition}: task {task}");
            assert!(
                share
                    .iter()
                    .all(|r| r["env"]["slurm"]["array_task_id"] == task
                        && r["env"]["slurm"]["partition"] == partition)
            );
        }
        // The partition, described from its node.
        let system = dir.join(format!("s-{partition}.slurm/system.toml"));
        let text = std::fs::read_to_string(&system).unwrap();
        assert!(text.contains("# assumed: memory bandwidth"), "{text}");
        let (_, shown, _) = ridgeline_in(
            &dir,
            &[
                "system",
                "show",
                system.to_str().unwrap(),
                "--format",
                "json",
            ],
        );
        let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(shown["name"], format!("ridgeline-test-{partition}"));
        assert_eq!(shown["device"]["cores"]["value"].to_string(), cpus.trim());
        assert_eq!(shown["cluster"]["nodes"]["value"], 1);
    }
    let (code, out, err) = ridgeline_in(
        &dir,
        &[
            "report",
            "procurement",
            "--systems",
            "s-local.profile.toml,s-debug.profile.toml,dgx-h100",
            "--out",
            "report",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let report = std::fs::read_to_string(dir.join("report/procurement.json")).unwrap();
    for name in [
        "ridgeline-test-local (calibrated)",
        "ridgeline-test-debug (calibrated)",
        "dgx-h100",
    ] {
        assert!(report.contains(name), "{name} not in {report}");
    }
}

/// A campaign cancelled with `scancel` part-way and submitted again with `--resume` ends
/// with every case recorded once: what the first submission measured is kept, not measured
/// again, and a half-written last line (a task killed mid-write) is dropped.
#[test]
fn a_cancelled_campaign_resumes_with_nothing_lost_or_twice() {
    if cluster().is_none() {
        return;
    }
    let dir = job_dir("cancel");
    let mut args = stream_campaign("copy,scale,add,triad", "4K,16K,64K,256K", "300ms");
    args.extend(["--out", "c.jsonl", "--slurm", "--tasks", "2"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = ridgeline_in(&dir, &args);
    assert_eq!(code, 0, "{out}\n{err}");
    let id_after = |words: &str| {
        out.split(words)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no `{words}` in {out}"))
            .to_owned()
    };
    let ids = [id_after("job array "), id_after("merge job ")];
    // Cancel once task 0 has recorded something, before it is done.
    let first = dir.join("c.slurm/records-0.jsonl");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&first).map_or(0, |t| t.lines().count()) == 0 {
        assert!(
            start.elapsed().as_secs() < 300,
            "task 0 recorded nothing: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    slurm("scancel", &[ids[0].as_str(), ids[1].as_str()]);
    while !slurm("squeue", &["--noheader", "--format=%i"])
        .trim()
        .is_empty()
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let before = records(&first);
    assert!(
        before.len() < 8,
        "task 0 finished before the cancel: {}",
        before.len()
    );
    // A task killed mid-write leaves half a line.
    let mut text = std::fs::read_to_string(&first).unwrap();
    text.push_str("{\"schema_version\": 2, \"id\": \"str");
    std::fs::write(&first, text).unwrap();
    let mut again = args.clone();
    again.extend(["--resume", "--wait"]);
    let (code, out, err) = ridgeline_in(&dir, &again);
    assert_eq!(code, 0, "{out}\n{err}");
    let merged = records(&dir.join("c.jsonl"));
    assert_eq!(unique_ids(&merged).len(), 16, "every case once");
    // What the first submission measured was kept, not measured again.
    let after = records(&first);
    assert_eq!(after[..before.len()], before[..]);
    let merge_log = std::fs::read_to_string(dir.join("c.slurm/merge.out")).unwrap();
    assert!(merge_log.contains("task 0: done"), "{merge_log}");
    let task_log = std::fs::read_to_string(dir.join("c.slurm/task-0.out")).unwrap();
    assert!(task_log.contains("interrupted write"), "{task_log}");
}

/// A task that fails on its node: the merge job fails, naming the task, the node and its
/// log, and `--wait` exits 2 with that.
#[test]
fn a_task_that_fails_on_its_node_is_named() {
    if cluster().is_none() {
        return;
    }
    let dir = job_dir("fails");
    let (code, out, err) = ridgeline_in(
        &dir,
        &[
            "measure", "gemm", "--size", "64", "--device", "cuda:99", "--out", "g.jsonl",
            "--slurm", "--wait",
        ],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    let node = slurm("sinfo", &["--noheader", "--format=%N", "--partition=local"]);
    assert!(
        err.contains(&format!(
            "task 0 failed on node {} (exit status 2)",
            node.trim()
        )) && err.contains("task-0.out")
            && err.contains("--resume"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// An unknown partition is refused before anything is submitted, with the partitions
/// there are.
#[test]
fn an_unknown_partition_is_refused_with_those_there_are() {
    if cluster().is_none() {
        return;
    }
    let dir = job_dir("partition");
    for args in [
        &[
            "measure",
            "gemm",
            "--size",
            "64",
            "--out",
            "g.jsonl",
            "--slurm",
            "--partition",
            "nosuch",
        ][..],
        &["system", "from-slurm", "--partition", "nosuch"][..],
    ] {
        let (code, out, err) = ridgeline_in(&dir, args);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains("no partition `nosuch`") && err.contains("local"),
            "{err}"
        );
    }
    assert!(!dir.join("g.slurm").exists(), "nothing submitted");
}

/// Where Slurm is not installed, `--slurm` and `system from-slurm` say so and what to do
/// instead; `--emit-slurm` still writes the scripts. (Runs everywhere: PATH is emptied.)
#[test]
fn without_slurm_the_commands_say_what_to_do() {
    let dir = job_dir("none");
    for args in [
        &[
            "measure", "stream", "--size", "4K", "--out", "s.jsonl", "--slurm",
        ][..],
        &["system", "from-slurm"][..],
        &["measure", "comm", "--slurm", "--dir", "comm"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ridgeline"))
            .current_dir(&dir)
            .env("PATH", "/nonexistent")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("is not on PATH: this machine has no Slurm client")
                && err.contains("--emit-slurm"),
            "{args:?}: {err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ridgeline"))
        .current_dir(&dir)
        .env("PATH", "/nonexistent")
        .args([
            "measure",
            "suite",
            "--budget",
            "2m",
            "--out",
            "s.jsonl",
            "--emit-slurm",
            "--tasks",
            "4",
            "--partition",
            "cpu,gpu",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "s-cpu.slurm/task.sh =====",
        "s-gpu.slurm/merge.sh",
        "#SBATCH --array=0-3",
        "measure suite --budget 2m --shard \"$i/4\"",
        "--out \"$DIR/records-$i.jsonl\" --resume",
        "s-gpu.jsonl",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
}

/// `measure merge` on a campaign whose task 1 wrote a records file of another schema and
/// failed, and whose task 2 never finished: task 0's records are merged, nothing is
/// deleted, and the error names each task, node, file and line.
#[test]
fn a_merge_names_a_file_of_another_schema_and_every_unfinished_task() {
    let dir = job_dir("merge");
    let campaign = dir.join("m.slurm");
    std::fs::create_dir_all(&campaign).unwrap();
    let good = campaign.join("records-0.jsonl");
    let quick = QUICK;
    let mut args = vec![
        "measure",
        "stream",
        "--kernel",
        "copy",
        "--size",
        "4K,16K",
        "--threads",
        "1",
    ];
    args.extend(quick);
    args.extend(["--out", good.to_str().unwrap()]);
    let (code, _, err) = ridgeline_in(&dir, &args);
    assert_eq!(code, 0, "{err}");
    std::fs::write(campaign.join("task-0.exit"), "exit=0 node=n1 job=5\n").unwrap();
    let other = std::fs::read_to_string(&good)
        .unwrap()
        .replace("\"schema_version\":2", "\"schema_version\":99");
    std::fs::write(campaign.join("records-1.jsonl"), &other).unwrap();
    std::fs::write(campaign.join("task-1.exit"), "exit=1 node=n2 job=6\n").unwrap();
    let (code, out, err) = ridgeline_in(
        &dir,
        &[
            "measure", "merge", "m.slurm", "--tasks", "3", "--out", "m.jsonl",
        ],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    for part in [
        "task 1: not merged: m.slurm/records-1.jsonl, line 1",
        "schema_version 99",
        "task 1 failed on node n2 (exit status 1)",
        "task 2 did not finish",
        "--resume",
    ] {
        assert!(err.contains(part), "missing `{part}` in\n{err}");
    }
    assert_eq!(
        records(&dir.join("m.jsonl")).len(),
        2,
        "task 0's records merged"
    );
    assert_eq!(
        std::fs::read_to_string(campaign.join("records-1.jsonl")).unwrap(),
        other
    );
    // Merged again: nothing is added twice.
    let (code, _, _) = ridgeline_in(
        &dir,
        &[
            "measure", "merge", "m.slurm", "--tasks", "1", "--out", "m.jsonl",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(records(&dir.join("m.jsonl")).len(), 2);
}

/// `measure comm --slurm` submits the MPI campaign: its ranks start under `srun` over the
/// PMI this Slurm and Open MPI share, rank 0 records the ping-pong, allreduce and
/// all-to-all, and the job calibrates LogGP and validates the allreduce model. Where the
/// MPI library shares no PMI with Slurm (here: an `ompi_info` that lists none), the ranks
/// start under `mpirun` inside the allocation instead. Needs the `mpi` feature.
#[cfg(feature = "mpi")]
#[test]
fn the_mpi_campaign_runs_as_a_slurm_job() {
    if cluster().is_none() {
        return;
    }
    let srun = slurm("srun", &["--mpi=list"]);
    if srun.contains("pmix") {
        let log = comm_campaign("comm-pmix", None);
        assert!(log.contains("ranks start with: srun --mpi=pmix"), "{log}");
    }
    // An MPI built without a PMI Slurm speaks: mpirun inside the allocation.
    let bin = job_dir("comm-fake-bin");
    let fake = bin.join("ompi_info");
    std::fs::write(&fake, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let log = comm_campaign("comm-mpirun", Some(&bin));
    assert!(log.contains("ranks start with: mpirun"), "{log}");
}

/// Runs the communication campaign under Slurm on one node of two ranks, with `path`
/// first on PATH, checks what it made, and returns its log.
#[cfg(feature = "mpi")]
fn comm_campaign(name: &str, path: Option<&Path>) -> String {
    let dir = job_dir(name);
    let mut search = std::env::var("PATH").unwrap_or_default();
    if let Some(p) = path {
        search = format!("{}:{search}", p.display());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ridgeline"))
        .current_dir(&dir)
        .env("PATH", search)
        .env(
            "RIDGELINE_COMM_FLAGS",
            "--sizes 1K,4K,16K,64K --warmup 0s --min-time 0s --min-samples 3",
        )
        // Open MPI's mpirun refuses root without these (the tests may run as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args([
            "measure",
            "comm",
            "--slurm",
            "--dir",
            "comm",
            "--nodes",
            "1",
            "--ranks-per-node",
            "2",
            "--time",
            "00:10:00",
            "--wait",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let comm = dir.join("comm");
    let log: String = std::fs::read_dir(&comm)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            p.extension()
                .is_some_and(|x| x == "out")
                .then(|| std::fs::read_to_string(p).unwrap())
        })
        .collect();
    assert!(out.status.success(), "{stdout}\n{stderr}\n{log}");
    let job = stdout
        .split("Slurm job ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("{stdout}"))
        .to_owned();
    for bench in ["pingpong", "allreduce", "alltoall"] {
        let rs = records(&comm.join(format!("{bench}.jsonl")));
        assert!(!rs.is_empty(), "{bench}");
        assert!(
            rs.iter()
                .all(|r| r["env"]["slurm"]["job_id"] == job.as_str()),
            "{bench}: {job}"
        );
    }
    assert!(comm.join("profile.toml").is_file(), "{log}");
    assert!(
        std::fs::read_to_string(comm.join("validation.txt"))
            .unwrap()
            .contains("allreduce"),
        "{log}"
    );
    log
}
