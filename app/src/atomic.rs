//! Outputs written whole or not at all. A file goes into a temporary file beside it, then
//! is renamed over it; a report directory is filled beside its target, then exchanged with
//! it. A kill at any point leaves the old output or the new one, never a torn file or a
//! directory that mixes the two.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The directory a path lives in (`.` for a bare file name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The file name of `path` (`output` for a path without one).
fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned())
}

/// The prefix of the staging file or directory of the output `name` written by this
/// process: `.NAME.PID.` (the process id tells a live writer's from a killed one's).
fn staging_prefix(name: &str) -> String {
    format!(".{name}.{}.", std::process::id())
}

/// Removes what an earlier, killed writer of the output `name` left in `dir`: its staging
/// files and directories (`.NAME.PID.XXXXXX`) whose process is gone. A live writer's (another
/// process writing the same output now) is left alone. Errors are ignored: a leftover that
/// cannot be removed does no harm.
fn clean_leftovers(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let path = entry.path();
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}

/// Whether process `pid` runs (Linux: `/proc/PID` exists; elsewhere every process is taken
/// to run, and nothing is removed).
fn alive(pid: u32) -> bool {
    if Path::new("/proc/self").exists() {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// Writes `path` through `fill`, atomically. A path that is a device, a pipe or a socket
/// (`/dev/null`, `/dev/stdout`, a named pipe) is written in place: renaming a file over it
/// would replace it (as root, `--out /dev/null` once turned `/dev/null` into a plain file).
/// A directory is an error.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = parent(path);
    let context = || format!("cannot write `{}`", path.display());
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.is_dir() {
            bail!("`{}` is a directory: name a file to write", path.display());
        }
        if !meta.is_file() {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(context)?;
            let mut out = std::io::BufWriter::new(file);
            fill(&mut out).with_context(context)?;
            out.flush().with_context(context)?;
            return Ok(());
        }
    }
    let name = file_name(path);
    clean_leftovers(&dir, &name);
    let mut tmp = tempfile::Builder::new()
        .prefix(&staging_prefix(&name))
        .suffix(".tmp")
        .tempfile_in(&dir)
        .with_context(context)?;
    let mut out = std::io::BufWriter::new(tmp.as_file_mut());
    fill(&mut out).with_context(context)?;
    out.flush().with_context(context)?;
    drop(out);
    tmp.as_file().sync_all().with_context(context)?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(context)?;
    Ok(())
}

/// Writes `bytes` to `path`, atomically.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    write_with(path, |w| w.write_all(bytes.as_ref()))
}

/// Fills a fresh directory through `fill` and puts it at `path` in one step. An existing
/// `path` must be empty or an earlier report (it holds `report.json`): it is exchanged with
/// the new one and removed, so no file of the old report survives beside the new ones, and
/// no unrelated directory is ever replaced.
pub fn directory<T>(path: &Path, fill: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let exists = path.exists();
    if exists {
        if !path.is_dir() {
            bail!("`{}` exists and is not a directory", path.display());
        }
        let mut entries = std::fs::read_dir(path)
            .with_context(|| format!("cannot read directory `{}`", path.display()))?;
        if entries.next().is_some() && !path.join("report.json").is_file() {
            bail!(
                "`{}` is neither empty nor an earlier report (no report.json): choose a new \
                 or empty directory, so that nothing else in it is replaced",
                path.display()
            );
        }
    }
    let dir = parent(path);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create directory `{}`", dir.display()))?;
    let name = file_name(path);
    clean_leftovers(&dir, &name);
    let tmp = tempfile::Builder::new()
        .prefix(&staging_prefix(&name))
        .tempdir_in(&dir)
        .with_context(|| format!("cannot create a directory in `{}`", dir.display()))?;
    let value = fill(tmp.path())?;
    let fresh = tmp.keep();
    let placed = if exists {
        exchange(&fresh, path)
    } else {
        std::fs::rename(&fresh, path)
    };
    if let Err(e) = placed {
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(e).with_context(|| format!("cannot put the report at `{}`", path.display()));
    }
    if exists {
        // `fresh` now holds the old report.
        std::fs::remove_dir_all(&fresh).with_context(|| {
            format!(
                "cannot remove the earlier report, now at `{}`",
                fresh.display()
            )
        })?;
    }
    Ok(value)
}

/// Swaps two directories in one step (`renameat2` with `RENAME_EXCHANGE`); where the file
/// system cannot, moves the old one aside first.
fn exchange(fresh: &Path, path: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, fresh, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(_) => {
            let aside = fresh.with_extension("old");
            std::fs::rename(path, &aside)?;
            std::fs::rename(fresh, path)?;
            std::fs::rename(&aside, fresh)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ridgeline-atomic-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A named pipe stays a pipe and gets the bytes, as `/dev/null` stays a device: an
    /// output that is not a plain file is written in place, never renamed over. A
    /// directory is refused.
    #[cfg(unix)]
    #[test]
    fn a_pipe_or_device_is_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("fifo");
        let fifo = dir.join("out.fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            // No mkfifo here: nothing to check the pipe with.
            return;
        }
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        write(&fifo, "through the pipe\n").unwrap();
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the pipe was replaced: {kind:?}");
        assert_eq!(reader.join().unwrap(), "through the pipe\n");
        let err = format!("{:#}", write(&dir, "x").unwrap_err());
        assert!(err.contains("is a directory"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = scratch("file");
        let path = dir.join("out.csv");
        write(&path, "old\n").unwrap();
        let err = write_with(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("killed"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\n");
        write(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_report_directory_is_replaced_whole() {
        let dir = scratch("dir");
        let out = dir.join("report");
        directory(&out, |d| {
            write(&d.join("report.json"), "{}")?;
            write(&d.join("old-only.csv"), "x")
        })
        .unwrap();
        // A failing fill leaves the old report as it was.
        let err: Result<()> = directory(&out, |d| {
            write(&d.join("report.json"), "{\"new\": true}")?;
            bail!("killed")
        });
        assert!(err.is_err());
        assert!(out.join("old-only.csv").is_file());
        directory(&out, |d| write(&d.join("report.json"), "{\"new\": true}")).unwrap();
        assert!(
            !out.join("old-only.csv").exists(),
            "nothing of the old report is mixed in"
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary directory left"
        );
        // A directory that is not a report is never replaced.
        let other = dir.join("home");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("thesis.tex"), "x").unwrap();
        let err = directory(&other, |_| Ok(())).unwrap_err().to_string();
        assert!(err.contains("neither empty nor an earlier report"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// What a killed writer left (a staging file or directory of a process that is gone)
    /// goes with the next write of the same output; a live process's, and other outputs',
    /// stay (issue 43, item 23).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_killed_writers_leftovers_are_removed() {
        let dir = scratch("leftovers");
        // No process has a pid above the kernel's limit (at most 2^22).
        let dead = 4_194_305 + std::process::id() % 1000;
        let live = 1; // init
        let stale = [
            dir.join(format!(".out.csv.{dead}.Ab3xYz.tmp")),
            dir.join(format!(".report.{dead}.Qw9Er1")),
        ];
        let kept = [
            dir.join(format!(".out.csv.{live}.Zz1Zz1.tmp")),
            dir.join(format!(".other.csv.{dead}.Ab3xYz.tmp")),
        ];
        std::fs::write(&stale[0], "half").unwrap();
        std::fs::create_dir_all(stale[1].join("tables")).unwrap();
        for k in &kept {
            std::fs::write(k, "x").unwrap();
        }
        write(&dir.join("out.csv"), "new\n").unwrap();
        directory(&dir.join("report"), |d| write(&d.join("report.json"), "{}")).unwrap();
        for s in &stale {
            assert!(!s.exists(), "{} left", s.display());
        }
        for k in &kept {
            assert!(k.exists(), "{} removed", k.display());
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
