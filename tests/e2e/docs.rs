//! The documents: every relative link of the README, the guide and the other Markdown pages
//! leads to a file that exists (and to a heading of it where it names one), the README stays
//! a front page, the book's table of contents names every page, and the command-line
//! reference is the current binary's.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown pages a reader follows links through.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![
        root().join("README.md"),
        root().join("CHANGELOG.md"),
        root().join("data/README.md"),
        root().join("scripts/README.md"),
    ];
    for dir in ["docs", "docs/guide", "docs/reference"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// The `(target)` of every `[text](target)` in `text` outside code blocks and spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans hold brackets that are no links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as
/// `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> Vec<String> {
    std::fs::read_to_string(page)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_of_the_documents_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no file)", page.display()));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&target).iter().any(|a| a == anchor)
            {
                broken.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_page_that_links_every_guide_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines: the guide holds the rest"
    );
    for entry in std::fs::read_dir(root().join("docs/guide")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            readme.contains(&format!("(docs/guide/{name})")),
            "README.md does not link docs/guide/{name}"
        );
    }
}

#[test]
fn links_are_read_outside_code_and_anchors_follow_github() {
    assert_eq!(
        links("see [a](x.md) and `[b](y.md)`\n```\n[c](z.md)\n```\n[d](w.md#top)"),
        ["x.md", "w.md#top"]
    );
    assert_eq!(
        slug("`ridgeline measure comm` and the step simulator (MPI)"),
        "ridgeline-measure-comm-and-the-step-simulator-mpi"
    );
}

#[test]
fn the_books_contents_name_every_page_once() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let listed = links(&summary);
    let book = root().join("docs");
    for page in pages().iter().filter(|p| p.starts_with(&book)) {
        let name = page.strip_prefix(&book).unwrap().to_str().unwrap();
        if name == "SUMMARY.md" {
            continue;
        }
        let times = listed.iter().filter(|l| *l == name).count();
        assert_eq!(
            times, 1,
            "docs/SUMMARY.md lists docs/{name} {times} times, not once"
        );
    }
}

#[test]
fn the_command_line_reference_is_the_binarys() {
    let dir = crate::faults::scratch("manual");
    crate::run_ok(&["manual", "--out", dir.to_str().unwrap()]);
    let checked_in = root().join("docs/reference");
    let stale = "docs/reference is not the current command line's: run `cargo run --release \
                 -- manual --out docs/reference` and commit it";
    for sub in ["", "man1"] {
        let names = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d.join(sub))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&dir), names(&checked_in), "{stale}");
        for name in names(&dir) {
            let path = Path::new(sub).join(&name);
            if dir.join(&path).is_file() {
                let new = std::fs::read_to_string(dir.join(&path)).unwrap();
                let old = std::fs::read_to_string(checked_in.join(&path)).unwrap();
                assert!(new == old, "{}: {stale}", path.display());
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Paths that comments cite in other repositories, each named beside it: NCCL's tuning
/// model (NVIDIA/nccl) and NeuSight's measured kernels (trsharm25/NeuSight).
const ELSEWHERE: [&str; 2] = [
    "src/graph/tuning.cc",
    "scripts/asplos/data/dataset/train/collect",
];

/// The repository's paths a comment line cites: tokens that begin with a top-level folder
/// (`docs/...`, `data/...`) or name a capitalised Markdown file (`ARCHITECTURE.md`);
/// placeholders (`NAME`, `<op>`) and globs end a token.
fn cited(line: &str) -> Vec<String> {
    const TOP: [&str; 10] = [
        "docs/",
        "data/",
        "scripts/",
        "tests/",
        "model/",
        "measure/",
        "calibrate/",
        "reports/",
        "app/",
        "src/",
    ];
    let mut out = Vec::new();
    let token_char = |c: char| c.is_alphanumeric() || "_./-".contains(c);
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let starts = !line[..at].chars().next_back().is_some_and(token_char) && token_char(c);
        if !starts {
            i += 1;
            continue;
        }
        let end = line[at..]
            .find(|c: char| !token_char(c))
            .map_or(line.len(), |e| at + e);
        let token = line[at..end].trim_end_matches(['.', '-']);
        let placeholder = line[end..].starts_with(['<', '{', '*'])
            || token.contains('/')
                && token.split('/').any(|s| {
                    let stem = s.split('.').next().unwrap_or_default();
                    stem.len() > 1 && stem.chars().all(|c| c.is_ascii_uppercase())
                });
        let markdown = !token.contains('/')
            && token.ends_with(".md")
            && token.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if !placeholder && (TOP.iter().any(|t| token.starts_with(t)) || markdown) {
            out.push(token.to_owned());
        }
        i += line[at..end].chars().count().max(1);
    }
    out
}

#[test]
fn every_comment_cites_a_file_that_exists() {
    let mut missing = Vec::new();
    let mut stack: Vec<PathBuf> = [
        "model",
        "measure",
        "calibrate",
        "reports",
        "app",
        "src",
        "tests",
    ]
    .iter()
    .map(|d| root().join(d))
    .collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["snapshots", "fixtures", "target"].contains(&name.as_str()) {
                    stack.push(path);
                }
                continue;
            }
            // Generated from other projects' schemas: their comments are theirs.
            if !name.ends_with(".rs") || name == "proto.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let Some(comment) = line.trim_start().strip_prefix("//") else {
                    continue;
                };
                for token in cited(comment) {
                    let found = root().join(&token).exists()
                        || (!token.contains('/') && root().join("docs").join(&token).exists())
                        || ELSEWHERE.contains(&token.as_str());
                    if !found {
                        missing.push(format!("{}:{}: {token}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "comments cite files the repository lacks:\n{}",
        missing.join("\n")
    );
}

#[test]
fn citations_are_read_as_a_reader_would() {
    assert_eq!(
        cited(" see docs/guide/predict.md, data/catalog/stacks/NAME.toml and STYLE.md."),
        ["docs/guide/predict.md", "STYLE.md"]
    );
    assert_eq!(
        cited(" the `tests/fixtures/onnx/<name>.onnx` files"),
        Vec::<String>::new()
    );
    assert_eq!(
        cited(" model/src/onnx.rs's importer"),
        ["model/src/onnx.rs"]
    );
}

#[test]
fn data_is_the_catalog_apart_from_the_evidence_and_no_two_catalog_files_share_a_name() {
    let mut top: Vec<String> = std::fs::read_dir(root().join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(
        top,
        ["README.md", "catalog", "evidence"],
        "data/ holds two folders"
    );
    let mut seen: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for path in crate::files_under(&root().join("data/catalog")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(first) = seen.insert(name.clone(), path.clone()) {
            panic!(
                "{} and {} share a name: name a transformer's configuration NAME.config.toml, \
                 a candidate's offer NAME.offer.toml",
                first.display(),
                path.display()
            );
        }
    }
}
