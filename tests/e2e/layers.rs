//! The code's layers: within each crate, no file uses another that (through any chain of
//! files) uses it back. A file's uses are the `crate::`, `super::`, `self::` and child-module
//! paths (in `use` items and in its code) outside `#[cfg(test)]` modules (unit tests may reach up to build their
//! inputs); a path through a `pub use` re-export counts as a use of the file that defines
//! the item. `mod` declarations are not uses, nor is a module's `pub use` of its own
//! children's items (its public face) where its code does not name them (a glob
//! re-export's names are not known, so it never counts).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates, by their source directories.
const CRATES: [&str; 6] = [
    "model/src",
    "measure/src",
    "calibrate/src",
    "reports/src",
    "app/src",
    "src",
];

type Module = Vec<String>;

/// A crate's files by module path (`lib.rs`, `main.rs` and `mod.rs` name their directory).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let files: Vec<PathBuf> = crate::files_under(src)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = rel.iter().map(|s| s.to_str().unwrap().to_owned()).collect();
            if matches!(
                module.last().map(String::as_str),
                Some("lib" | "main" | "mod")
            ) {
                module.pop();
            }
            (module, path)
        })
        .collect()
}

/// `text` without comments, string and character literals, and `#[cfg(test)]` modules.
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !chars[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: `r"..."` or `r#"..."#` with as many hashes.
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let close: Vec<char> = close.chars().collect();
            i += 2 + hashes;
            while i < chars.len() && !chars[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            while i < chars.len() && !(chars[i] == '\'' && i > 0 && chars[i - 1] != '\\') {
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    strip_test_modules(&out)
}

/// `text` without the modules a `#[cfg(test)]` gates (attributes between allowed).
fn strip_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let mut item = after.trim_start();
        while item.starts_with("#[") {
            item = item[item.find(']').unwrap() + 1..].trim_start();
        }
        let head = item.split('{').next().unwrap_or("");
        let is_module = head.split_whitespace().any(|w| w == "mod") && !head.contains(';');
        if !is_module {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = item.find('{').unwrap();
        let mut depth = 0;
        let mut end = item.len();
        for (i, c) in item[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The paths of a use tree (`a::{b, c::{d, e as f}}` is `a::b`, `a::c::d`, `a::c::e`), each
/// with the name it binds.
fn expand(tree: &str) -> Vec<(String, String)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), a.trim()),
            None => (tree, tree.rsplit("::").next().unwrap_or(tree)),
        };
        return vec![(path.to_owned(), alias.to_owned())];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|i| {
            expand(i)
                .into_iter()
                .map(|(p, a)| {
                    let path = if p == "self" {
                        prefix.trim_end_matches("::").to_owned()
                    } else {
                        format!("{prefix}{p}")
                    };
                    let alias = if a == "self" {
                        prefix
                            .trim_end_matches("::")
                            .rsplit("::")
                            .next()
                            .unwrap()
                            .to_owned()
                    } else {
                        a
                    };
                    (path, alias)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One file's `use` trees (with whether each is `pub`) and its other paths, each with the
/// number of inline `mod name { ... }` blocks around it.
struct Uses {
    trees: Vec<(bool, String, usize)>,
    inline: Vec<(String, usize)>,
    /// The code outside `use` items.
    outside: String,
}

/// The inline modules open at each byte of `code`.
fn module_depths(code: &str) -> Vec<usize> {
    let mut out = Vec::with_capacity(code.len());
    let mut stack: Vec<bool> = Vec::new();
    let mut last_words: Vec<&str> = Vec::new();
    let mut word_start = None;
    for (i, c) in code.char_indices() {
        let ident = c.is_alphanumeric() || c == '_';
        match (ident, word_start) {
            (true, None) => word_start = Some(i),
            (false, Some(start)) => {
                last_words.push(&code[start..i]);
                if last_words.len() > 2 {
                    last_words.remove(0);
                }
                word_start = None;
            }
            _ => {}
        }
        match c {
            '{' => {
                stack.push(last_words.first() == Some(&"mod") && last_words.len() == 2);
                last_words.clear();
            }
            '}' => {
                stack.pop();
                last_words.clear();
            }
            ';' | '(' | ')' | '=' | ',' => last_words.clear(),
            _ => {}
        }
        for _ in 0..c.len_utf8() {
            out.push(stack.iter().filter(|m| **m).count());
        }
    }
    out.push(0);
    out
}

/// Where the next `use` item starts in `code`: the word `use`, but not a precise-capturing
/// bound's `use<..>` (`impl Fn() + use<>`).
fn find_use_item(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = find_word(&code[from..], "use") {
        let at = from + at;
        if !code[at + 3..].trim_start().starts_with('<') {
            return Some(at);
        }
        from = at + 3;
    }
    None
}

fn uses(code: &str, children: &[String]) -> Uses {
    let depths = module_depths(code);
    let depth_at = |rest: &str, at: usize| depths[code.len() - rest.len() + at];
    let mut trees = Vec::new();
    let mut rest = code;
    while let Some(at) = find_use_item(rest) {
        let depth = depth_at(rest, at);
        let before = rest[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let after = &rest[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        let tree: String = after[..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        trees.push((
            public,
            tree.replace(":: ", "::").replace(" ::", "::"),
            depth,
        ));
        rest = &after[end..];
    }
    // The other paths, outside the `use` items already read.
    // (blanked to spaces, so positions stay those of `code`).
    let mut outside = String::new();
    let mut rest = code;
    while let Some(at) = find_use_item(rest) {
        outside.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').map_or(rest.len(), |e| e + 1);
        outside.extend(std::iter::repeat_n(' ', end));
        rest = &rest[end..];
    }
    outside.push_str(rest);
    let mut inline = Vec::new();
    let starts = ["crate", "super", "self"]
        .into_iter()
        .map(str::to_owned)
        .chain(children.iter().cloned())
        .map(|s| format!("{s}::"));
    for start in starts {
        let start = start.as_str();
        let mut rest = outside.as_str();
        while let Some(at) = find_word(rest, start.trim_end_matches("::")) {
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            if tail.starts_with(start) {
                let depth = depths[outside.len() - rest.len() + at];
                inline.push((tail[..len].trim_end_matches(':').to_owned(), depth));
            }
            rest = &rest[at + len.max(1)..];
        }
    }
    Uses {
        trees,
        inline,
        outside,
    }
}

/// Where `word` occurs on its own (not inside an identifier).
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let before = text[..at].chars().next_back().is_some_and(ident);
        let after = text[at + word.len()..].chars().next().is_some_and(ident);
        if !before && !after {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// A crate's file graph: each file's uses of the others, and the paths behind each.
struct Graph {
    files: BTreeMap<Module, PathBuf>,
    /// `pub use` names of each module: name -> the path it re-exports (resolved from there).
    exports: BTreeMap<Module, BTreeMap<String, String>>,
    uses: BTreeMap<Module, Uses>,
}

impl Graph {
    fn new(src: &Path) -> Graph {
        let files = modules(src);
        let mut exports = BTreeMap::new();
        let mut all = BTreeMap::new();
        for (module, path) in &files {
            let children: Vec<String> = files
                .keys()
                .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
                .map(|m| m[module.len()].clone())
                .collect();
            let u = uses(&code(&std::fs::read_to_string(path).unwrap()), &children);
            let mut names = BTreeMap::new();
            for (public, tree, inside) in &u.trees {
                if *public && *inside == 0 {
                    // A glob re-export names nothing; a use through it is a use of the file.
                    for (p, alias) in expand(tree).into_iter().filter(|(_, a)| a != "*") {
                        names.insert(alias, p);
                    }
                }
            }
            exports.insert(module.clone(), names);
            all.insert(module.clone(), u);
        }
        Graph {
            files,
            exports,
            uses: all,
        }
    }

    /// The file `path`, written in `from` inside `inside` inline modules, leads to; `None`
    /// outside the crate.
    fn resolve(&self, from: &Module, path: &str, inside: usize, depth: usize) -> Option<Module> {
        let segments: Vec<&str> = path.split("::").map(str::trim).collect();
        let (mut at, rest): (Module, &[&str]) = match segments[0] {
            "crate" => (Vec::new(), &segments[1..]),
            "self" if inside > 0 => return Some(from.clone()),
            "self" => (from.clone(), &segments[1..]),
            "super" => {
                let mut m = from.clone();
                let mut i = 0;
                while segments.get(i) == Some(&"super") {
                    // The first `inside` of them leave inline modules of this file.
                    if i >= inside {
                        m.pop();
                    }
                    i += 1;
                }
                if i <= inside {
                    return Some(from.clone());
                }
                (m, &segments[i..])
            }
            _ if inside > 0 => return None,
            first => {
                let mut child = from.clone();
                child.push(first.to_owned());
                if !self.files.contains_key(&child) {
                    return None;
                }
                (from.clone(), &segments[..])
            }
        };
        for s in rest {
            let mut next = at.clone();
            next.push((*s).to_owned());
            if self.files.contains_key(&next) {
                at = next;
                continue;
            }
            // An item of `at`, or one it re-exports from elsewhere.
            if depth < 8
                && let Some(target) = self.exports.get(&at).and_then(|e| e.get(*s))
                && let Some(defined) = self.resolve(&at, target, 0, depth + 1)
            {
                return Some(defined);
            }
            break;
        }
        Some(at)
    }

    /// Each file's uses of the other files, with the paths that make each.
    fn edges(&self) -> BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> {
        let mut out: BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> = BTreeMap::new();
        for (module, u) in &self.uses {
            let paths = u
                .trees
                .iter()
                .flat_map(|(public, t, inside)| {
                    // A re-export the module's own code does not name (a glob's names are
                    // not known: it counts as unnamed).
                    expand(t).into_iter().map(move |(p, alias)| {
                        let facade = *public
                            && *inside == 0
                            && (alias == "*" || find_word(&u.outside, &alias).is_none());
                        (p, *inside, facade)
                    })
                })
                .chain(
                    u.inline
                        .iter()
                        .map(|(p, inside)| (p.clone(), *inside, false)),
                );
            let entry = out.entry(module.clone()).or_default();
            for (p, inside, facade) in paths {
                if let Some(target) = self.resolve(module, &p, inside, 0)
                    && &target != module
                    // A module's re-exports of its own children are its public face.
                    && !(facade && target.starts_with(module))
                {
                    entry.entry(target).or_default().insert(p);
                }
            }
        }
        out
    }
}

/// The strongly connected components of more than one file (Tarjan).
fn loops(edges: &BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.edges.get(v).into_iter().flat_map(BTreeMap::keys) {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The loops of the crate at `src`, described file by file.
fn crate_loops(root: &Path, src: &str) -> Vec<String> {
    let graph = Graph::new(&root.join(src));
    let edges = graph.edges();
    let name = |m: &Module| {
        graph.files[m]
            .strip_prefix(root)
            .unwrap()
            .display()
            .to_string()
    };
    loops(&edges)
        .into_iter()
        .map(|component| {
            let mut text = format!("{} files use each other in a loop:", component.len());
            for a in &component {
                for (b, paths) in &edges[a] {
                    if component.contains(b) {
                        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
                        text.push_str(&format!(
                            "\n  {} -> {} ({})",
                            name(a),
                            name(b),
                            paths.join(", ")
                        ));
                    }
                }
            }
            text
        })
        .collect()
}

#[test]
fn no_file_of_a_crate_uses_another_in_a_loop() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found: Vec<String> = CRATES.iter().flat_map(|c| crate_loops(&root, c)).collect();
    assert!(
        found.is_empty(),
        "move what both files use to a module below them:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_layer_check_sees_uses_through_every_kind_of_path() {
    let dir = crate::faults::scratch("layers");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use c::Thing;\n");
    write("b/mod.rs", "pub mod d;\n");
    // a -> c through a use tree, c -> a and c -> b::d through inline paths, b::d -> c
    // through `super::super`; a comment's and a test module's uses of b are no uses, nor
    // is a precise-capturing bound (`+ use<>`).
    write("a.rs", "use crate::{c::{self, Other}};\n// use crate::b;\n");
    write("b/d.rs", "fn f() { super::super::c::g(); }\n");
    write(
        "c.rs",
        "fn g() -> crate::a::X { todo() }\nfn h(_: crate::b::d::D) {}\n\
         fn k() -> impl Fn() -> u8 + use<> { let v = 1; move || v }\n\
         #[cfg(test)]\n#[allow(unused)]\nmod tests { use crate::b; }\n",
    );
    let found = crate_loops(&dir, "src");
    assert_eq!(found.len(), 1, "{found:?}");
    let text = &found[0];
    assert!(text.starts_with("3 files"), "{text}");
    for edge in [
        "src/a.rs -> src/c.rs (crate::c, crate::c::Other)",
        "src/b/d.rs -> src/c.rs (super::super::c::g)",
        "src/c.rs -> src/a.rs (crate::a::X)",
        "src/c.rs -> src/b/d.rs (crate::b::d::D)",
    ] {
        assert!(text.contains(edge), "{edge} not in {text}");
    }
    assert!(!text.contains("src/b/mod.rs"), "{text}");

    // A use of the crate root's re-export is a use of the file that defines the item.
    write("a.rs", "use crate::Thing;\npub fn f() {}\n");
    write("b/d.rs", "fn f() {}\n");
    write("c.rs", "pub struct Thing;\n");
    assert_eq!(crate_loops(&dir, "src"), Vec::<String>::new());
    write("c.rs", "pub struct Thing;\nfn g() { crate::a::f(); }\n");
    let found = crate_loops(&dir, "src");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("src/a.rs -> src/c.rs (crate::Thing)"),
        "{}",
        found[0]
    );
}

/// The lines of every Rust file under `dir`.
fn lines_under(dir: &Path) -> usize {
    crate::files_under(dir)
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum()
}

#[test]
fn the_binary_only_dispatches_and_only_its_output_module_prints() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The flags grow with the commands (the Slurm ones added about 180 lines); what a
    // command does stays in app.
    let lines = lines_under(&root.join("src"));
    assert!(
        lines <= 3_700,
        "src/ has {lines} lines: build what a command shows in app (app/src/views/), and keep \
         the binary to flags, one app call and printing"
    );
    let commands = root.join("src/commands");
    for entry in std::fs::read_dir(&commands).unwrap() {
        let path = entry.unwrap().path();
        let text = code(&std::fs::read_to_string(&path).unwrap());
        for word in ["println", "eprintln", "print", "eprint"] {
            assert!(
                find_word(&text, &format!("{word}!")).is_none(),
                "{}: prints with {word}!; print through src/output.rs",
                path.display()
            );
        }
    }
}
