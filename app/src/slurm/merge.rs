//! Joining a job array's records files into its campaign's by the one resume rule: each
//! record once, a half-written last line and a measurement cut short dropped, and every
//! task that did not finish named with its node.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use ridgeline_measure::{RecordWriter, read_resumable};

/// Task `i`'s records file in the campaign's folder `dir`.
pub fn task_file(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("records-{i}.jsonl"))
}

/// Task `i`'s exit file: its status and node, written as it ends.
pub fn exit_file(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("task-{i}.exit"))
}

/// How an array task ended, from the exit file it writes as it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskStatus {
    /// It ran to the end of its share.
    Done {
        /// The node it ran on.
        node: String,
    },
    /// It exited with an error.
    Failed {
        /// Its exit status.
        code: i32,
        /// The node it ran on.
        node: String,
    },
    /// It wrote no exit file: cancelled, past its time limit, killed with its node, or not
    /// started.
    Unfinished,
}

/// One task's file, as the merge found it.
#[derive(Debug, Clone)]
pub struct TaskFile {
    /// The task's index in the array.
    pub task: u32,
    /// Its records file.
    pub path: PathBuf,
    /// Complete records in it (none where it is missing).
    pub records: usize,
    /// Of those, records the campaign's file did not hold yet.
    pub merged: usize,
    /// A half-written last line that was left out: its number.
    pub torn_line: Option<usize>,
    /// A measurement cut short that was left out: its first line and records.
    pub partial: Option<(usize, usize)>,
    /// How the task ended.
    pub status: TaskStatus,
    /// Why the file could not be read (another schema, a line that is not a record):
    /// nothing of it is merged.
    pub unreadable: Option<String>,
}

/// What [`merge`] did.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The campaign's records file.
    pub out: PathBuf,
    /// Records it held before.
    pub before: usize,
    /// Each task's file.
    pub tasks: Vec<TaskFile>,
}

impl Merged {
    /// Records the merge added.
    pub fn added(&self) -> usize {
        self.tasks.iter().map(|t| t.merged).sum()
    }

    /// What the merge did, task by task; an error with the same and what keeps the
    /// campaign from being whole where something does ([`problems`](Self::problems)).
    pub fn report(&self, dir: &Path) -> Result<String> {
        let mut text = format!(
            "Merged {} new record(s) into {} (it held {}):\n",
            self.added(),
            self.out.display(),
            self.before
        );
        for t in &self.tasks {
            let status = match &t.status {
                TaskStatus::Done { node } => format!("done on {node}"),
                TaskStatus::Failed { code, node } => format!("FAILED on {node} (exit {code})"),
                TaskStatus::Unfinished => "did not finish".to_owned(),
            };
            let mut dropped = vec![String::new()];
            if let Some(line) = t.torn_line {
                dropped.push(format!("a half-written line {line} left out"));
            }
            if let Some((line, n)) = t.partial {
                dropped.push(format!(
                    "{n} records of a measurement cut short from line {line} left out"
                ));
            }
            text += &format!(
                "  task {}: {status}; {} record(s), {} new{}\n",
                t.task,
                t.records,
                t.merged,
                dropped.join("; ")
            );
        }
        let problems = self.problems(dir);
        if !problems.is_empty() {
            bail!(
                "{text}the campaign is not whole; what was measured is merged, and submitting \
                 it again with --resume measures the rest:\n  {}",
                problems.join("\n  ")
            );
        }
        Ok(text)
    }

    /// What keeps the campaign from being whole, one line per task: a task that failed or
    /// did not finish, a file that could not be read. Empty when every task is done.
    pub fn problems(&self, dir: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        for t in &self.tasks {
            let log = dir.join(format!("task-{}.out", t.task));
            if let Some(why) = &t.unreadable {
                lines.push(format!(
                    "task {}: not merged: {why}. Move the file aside and submit the campaign \
                     again with --resume to measure its share with this ridgeline",
                    t.task
                ));
            }
            match &t.status {
                TaskStatus::Done { .. } => {}
                TaskStatus::Failed { code, node } => lines.push(format!(
                    "task {} failed on node {node} (exit status {code}); its log is {}",
                    t.task,
                    log.display()
                )),
                TaskStatus::Unfinished => lines.push(format!(
                    "task {} did not finish (cancelled, past its time limit, or its node \
                     failed); its log, if it started, is {}",
                    t.task,
                    log.display()
                )),
            }
        }
        lines
    }
}

/// Joins the records files of the `tasks` tasks in `dir` into `out` (created, or resumed by
/// the one rule): a record whose id `out` holds is skipped, so merging twice, or after a
/// resubmission, adds only what is new. A file that cannot be read is reported, not
/// merged, and the others still are: nothing written is lost.
pub fn merge(dir: &Path, tasks: u32, out: &Path) -> Result<Merged> {
    if !dir.is_dir() {
        bail!(
            "{}: no such folder: give the folder of a Slurm campaign (the records file's \
             name with `.slurm`, beside it)",
            dir.display()
        );
    }
    if tasks == 0 {
        bail!("--tasks 0: a job array has at least one task");
    }
    let (mut writer, found) = RecordWriter::open(out, true)?;
    let mut merged = Merged {
        out: out.to_owned(),
        before: found.records,
        tasks: Vec::new(),
    };
    for task in 0..tasks {
        let path = task_file(dir, task);
        let mut file = TaskFile {
            task,
            path: path.clone(),
            records: 0,
            merged: 0,
            torn_line: None,
            partial: None,
            status: status(&exit_file(dir, task))?,
            unreadable: None,
        };
        if path.exists() {
            match read_resumable(&path) {
                Ok((records, resumed)) => {
                    let new: Vec<_> = records
                        .iter()
                        .filter(|r| !writer.has(&r.id))
                        .cloned()
                        .collect();
                    writer.write(&new)?;
                    file.records = records.len();
                    file.merged = new.len();
                    file.torn_line = resumed.torn_line;
                    file.partial = resumed.partial;
                }
                Err(e) => file.unreadable = Some(e.to_string()),
            }
        }
        merged.tasks.push(file);
    }
    Ok(merged)
}

/// A task's status from its exit file (`exit=0 node=nid001 job=42`).
fn status(path: &Path) -> Result<TaskStatus> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(TaskStatus::Unfinished);
    };
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let node = field("node").unwrap_or("unknown").to_owned();
    match field("exit").map(str::parse::<i32>) {
        Some(Ok(0)) => Ok(TaskStatus::Done { node }),
        Some(Ok(code)) => Ok(TaskStatus::Failed { code, node }),
        _ => bail!(
            "{}: `{}` is not a task's exit file (`exit=STATUS node=NAME job=ID`): the array's \
             script writes it; delete it and submit the campaign again with --resume",
            path.display(),
            text.trim()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_file_says_how_the_task_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("task-0.exit");
        assert_eq!(status(&path).unwrap(), TaskStatus::Unfinished);
        std::fs::write(&path, "exit=0 node=nid001 job=42\n").unwrap();
        assert_eq!(
            status(&path).unwrap(),
            TaskStatus::Done {
                node: "nid001".into()
            }
        );
        std::fs::write(&path, "exit=137 node=nid002 job=43\n").unwrap();
        assert_eq!(
            status(&path).unwrap(),
            TaskStatus::Failed {
                code: 137,
                node: "nid002".into()
            }
        );
        std::fs::write(&path, "garbage").unwrap();
        let e = status(&path).unwrap_err().to_string();
        assert!(e.contains("task-0.exit") && e.contains("garbage"), "{e}");
    }
}
