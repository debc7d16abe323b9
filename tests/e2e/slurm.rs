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
    let node = slurm("sinfo", &["--noheader", "--format=%N"])
        .trim()
        .to_owned();
    let partition = slurm("sinfo", &["--noheader", "--format=%P"])
        .trim()
        .trim_end_matches('*')
        .to_owned();
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
            assert_eq!(s["partition"], partition.as_str(), "{s}");
            jobs.push(s["job_id"].as_str().unwrap().to_owned());
            records += 1;
        }
        assert!(records > 0, "{}: no records", file.display());
    }
    // Each task is a job of its own; its records all carry its id.
    jobs.dedup();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
}
