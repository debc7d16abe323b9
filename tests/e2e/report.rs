//! `ridgeline report procurement` and the `--plot` options: every format written, parsed
//! back and checked against the typed result; the HTML page loaded in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use serde_json::Value;

use super::{fixture, run_err, run_json, run_ok};

/// A fresh scratch directory under Cargo's target tmpdir.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A candidate whose name is markup: it must come out escaped everywhere.
const HOSTILE: &str = "<script>alert(1)</script> & \"co\"";

fn hostile_candidate(dir: &Path) -> String {
    let path = dir.join("hostile.toml");
    std::fs::write(
        &path,
        format!(
            "name = {HOSTILE:?}\nsystem = \"dgx-h100\"\nnodes = {{ value = 4, source = \"s\" }}\n\
             [sources]\ns = \"test\"\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// The `<text>` contents of an SVG file (parsing it checks it is well-formed XML).
fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not well-formed: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
        .collect()
}

fn procurement(dir: &Path, extra: &[&str]) -> Value {
    let hostile = hostile_candidate(dir);
    let systems = format!("dgx-a100,dgx-h100,dgx-h200,{hostile}");
    let out = dir.join("report");
    let mut args = vec![
        "report",
        "procurement",
        "--systems",
        &systems,
        "--mix",
        "mlperf-hpc",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    run_json(&args)
}

#[test]
fn procurement_report_in_every_format() {
    let dir = scratch("procurement");
    let v = procurement(&dir, &[]);
    let out = dir.join("report");
    let candidates = v["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 4);

    // Ranking: by time per mix, best first; the mix time is the weighted sum of the
    // workloads' times to solution; costs and energies add up the same way.
    let weights: Vec<f64> = v["mix"]["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["weight"].as_f64().unwrap())
        .collect();
    let mut last = 0.0;
    for (i, c) in candidates.iter().enumerate() {
        assert_eq!(c["rank"].as_u64(), Some(i as u64 + 1), "{}", c["name"]);
        let mix_time = c["mix_time_s"].as_f64().unwrap();
        assert!(mix_time >= last);
        last = mix_time;
        let ws = c["workloads"].as_array().unwrap();
        let sum: f64 = ws
            .iter()
            .zip(&weights)
            .map(|(w, k)| k * w["best"]["time_to_solution_s"].as_f64().unwrap())
            .sum();
        assert!(
            (sum - mix_time).abs() <= 1e-9 * mix_time,
            "{sum} vs {mix_time}"
        );
        let per_day = c["mixes_per_day"].as_f64().unwrap();
        assert!((per_day * mix_time - 86_400.0).abs() < 1e-6);
        for w in ws {
            let best = &w["best"];
            assert_eq!(best["fits"], true);
            assert!(w["largest_batch"].as_u64().unwrap() >= best["local_batch"].as_u64().unwrap());
            // Input bandwidth needed x compute time = input bytes of one step.
            let need = w["storage_needed_bytes_per_s"].as_f64().unwrap();
            assert!(need > 0.0);
        }
        if c["name"] == HOSTILE {
            assert!(c["price_per_node_hour"].is_null() && c["cost_per_mix"].is_null());
        } else {
            // Cost per mix = sum of weight x nodes used x hours x price per node-hour.
            let hourly = c["price_per_node_hour"].as_f64().unwrap();
            let cost: f64 = ws
                .iter()
                .zip(&weights)
                .map(|(w, k)| {
                    let b = &w["best"];
                    k * hourly
                        * b["nodes"].as_f64().unwrap()
                        * b["time_to_solution_s"].as_f64().unwrap()
                        / 3600.0
                })
                .sum();
            let reported = c["cost_per_mix"].as_f64().unwrap();
            assert!(
                (cost - reported).abs() <= 1e-9 * cost,
                "{cost} vs {reported}"
            );
        }
    }
    assert!(!candidates[0]["reasons"].as_array().unwrap().is_empty());

    // Files: one HTML page, Markdown with its figures, a CSV per table, two JSON files.
    for f in [
        "report.html",
        "report.md",
        "report.json",
        "procurement.json",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let linked: Vec<&str> = md
        .lines()
        .filter_map(|l| l.split("](").nth(1)?.strip_suffix(')'))
        .collect();
    assert!(linked.len() >= 10, "{linked:?}");
    for f in &linked {
        assert!(out.join(f).is_file(), "markdown links missing {f}");
    }
    assert!(!md.contains("<script>"), "markdown must escape names");

    // DeepCAM's depthwise convolutions: each prediction says how much of its layers' time
    // the transferred model gave them, and the report says so across the candidates; the
    // mix's other workloads have none.
    let mut shares = Vec::new();
    for c in candidates {
        for w in c["workloads"].as_array().unwrap() {
            let d = &w["best"]["depthwise"];
            if w["workload"] != "deepcam" {
                assert!(d.is_null(), "{} {}", c["name"], w["workload"]);
            } else if !d.is_null() {
                let share = d["share_of_layer_time"].as_f64().unwrap();
                assert!(share > 0.0 && share <= 1.0, "{share}");
                assert!(d["layers"].as_u64().unwrap() > 0);
                shares.push(share);
            }
        }
    }
    assert!(shares.len() >= 3, "{shares:?}");
    let (lo, hi) = shares
        .iter()
        .fold((1.0_f64, 0.0_f64), |(a, b), &s| (a.min(s), b.max(s)));
    let said = format!(
        "take {:.0}-{:.0} % of its layers' time on {} of the {} candidates",
        100.0 * lo,
        100.0 * hi,
        shares.len(),
        candidates.len()
    );
    assert!(md.contains(&said), "{said}");

    // Every plot parses, with its title and series.
    let texts = svg_texts(&out.join("figures/mix-time.svg"));
    assert!(
        texts
            .iter()
            .any(|t| t == "Time per mix `mlperf-hpc`, by workload")
    );
    for series in [
        "cosmoflow-v07 x2",
        "deepcam x2",
        "resnet50 x1",
        "dgx-a100",
        "dgx-h200",
    ] {
        assert!(
            texts.iter().any(|t| t == series),
            "mix-time lacks {series}: {texts:?}"
        );
    }
    let texts = svg_texts(&out.join("figures/deepcam-scaling.svg"));
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Time to solution: deepcam"))
    );
    assert!(
        texts.iter().any(|t| t == HOSTILE),
        "legend shows the name as text"
    );
    let texts = svg_texts(&out.join("figures/resnet50-memory.svg"));
    for series in [
        "activations",
        "parameters",
        "h200-sxm-141gb memory",
        "a100-sxm4-80gb, h100-sxm5-80gb memory",
    ] {
        assert!(
            texts.iter().any(|t| t == series),
            "memory lacks {series}: {texts:?}"
        );
    }

    // Tables: CSV rows match the typed result.
    let mut csv = csv::Reader::from_path(out.join("tables/ranking.csv")).unwrap();
    let headers = csv.headers().unwrap().clone();
    let col = |h: &str| headers.iter().position(|x| x == h).unwrap();
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 4);
    for (row, c) in rows.iter().zip(candidates) {
        assert_eq!(&row[col("candidate")], c["name"].as_str().unwrap());
        let t: f64 = row[col("mix_time_s")].parse().unwrap();
        let want = c["mix_time_s"].as_f64().unwrap();
        assert!((t - want).abs() <= 1e-12 * want, "{t} vs {want}");
    }
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let ranking = &json["sections"][0]["tables"][0];
    assert_eq!(ranking["id"], "ranking");
    assert_eq!(ranking["rows"][0]["candidate"], candidates[0]["name"]);
    assert_eq!(json["sections"][0]["figures"][0]["chart"]["kind"], "bar");

    // HTML: names escaped; no script, no external reference.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(!html.contains("<script"), "user strings must be escaped");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;co&quot;"));
    assert!(html.matches("<svg").count() >= 10);
    for link in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!html.contains(link), "external reference {link}");
    }
}

#[test]
fn procurement_ranking_table_snapshot() {
    let dir = scratch("procurement-snapshot");
    let out = dir.join("r");
    run_ok(&[
        "report",
        "procurement",
        "--systems",
        "dgx-a100,dgx-h100,dgx-h200",
        "--budget",
        "10000000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let ranking = std::fs::read_to_string(out.join("tables/ranking.csv")).unwrap();
    // What a budget of 10 M buys at the example prices: 40, 25 and 20 nodes.
    insta::assert_snapshot!(ranking);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let table: String = md
        .lines()
        .skip_while(|l| !l.starts_with("**Candidates ranked"))
        .take_while(|l| !l.is_empty() || !l.starts_with('#'))
        .take(7)
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(table);
}

#[test]
fn procurement_bad_input_exits_2() {
    let dir = scratch("procurement-bad");
    let out = dir.join("r");
    let out = out.to_str().unwrap();
    let e = run_err(&["report", "procurement", "--systems", "dgx-z9", "--out", out]);
    assert!(e.contains("dgx-z9"), "{e}");
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        "dgx-a100,dgx-a100",
        "--out",
        out,
    ]);
    assert!(e.contains("given twice"), "{e}");
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        "perlmutter-gpu",
        "--budget",
        "1000000",
        "--out",
        out,
    ]);
    assert!(e.contains("no price_per_node"), "{e}");
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        "dgx-a100",
        "--budget=-5",
        "--out",
        out,
    ]);
    assert!(e.contains("not a positive number"), "{e}");
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        "dgx-a100",
        "--budget",
        "1000",
        "--out",
        out,
    ]);
    assert!(e.contains("buys no node"), "{e}");
    let bad_mix = dir.join("mix.toml");
    std::fs::write(
        &bad_mix,
        "name = \"m\"\n[[workload]]\nname = \"deepcam\"\nweight = -1.0\nprecision = \"fp32\"\nbatches = [1]\n",
    )
    .unwrap();
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        "dgx-a100",
        "--mix",
        bad_mix.to_str().unwrap(),
        "--out",
        out,
    ]);
    assert!(
        e.contains("mix.toml") && e.contains("workload[0].weight"),
        "{e}"
    );
    std::fs::write(
        &bad_mix,
        "name = \"m\"\n[[workload]]\nname = \"resnet50\"\nweight = 1.0\nprecision = \"fp32\"\nbatches = [1]\n",
    )
    .unwrap();
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        "dgx-a100",
        "--mix",
        bad_mix.to_str().unwrap(),
        "--out",
        out,
    ]);
    assert!(
        e.contains("workload[0].epochs") && e.contains("no convergence curve"),
        "{e}"
    );
    let bad_offer = dir.join("offer.toml");
    std::fs::write(
        &bad_offer,
        "name = \"x\"\nsystem = \"dgx-h100\"\nnodes = { value = 4, source = \"s\" }\n\
         price_per_node = { value = 1.0, source = \"s\" }\n[sources]\ns = \"t\"\n",
    )
    .unwrap();
    let e = run_err(&[
        "report",
        "procurement",
        "--systems",
        bad_offer.to_str().unwrap(),
        "--out",
        out,
    ]);
    assert!(
        e.contains("offer.toml") && e.contains("lifetime_years"),
        "{e}"
    );
    let e = run_err(&[
        "memory",
        "resnet50",
        "--system",
        "v100",
        "--plot-format",
        "png",
    ]);
    assert!(e.contains("--plot"), "{e}");
}

#[test]
fn plot_options_write_the_matching_plots() {
    let dir = scratch("plots");
    let d = dir.to_str().unwrap();
    run_ok(&[
        "memory",
        "resnet50",
        "--system",
        "a100-sxm4-40gb",
        "--plot",
        d,
    ]);
    let texts = svg_texts(&dir.join("memory.svg"));
    assert!(texts.iter().any(|t| t == "Memory per device: resnet50"));
    assert!(texts.iter().any(|t| t == "a100-sxm4-40gb memory"));
    assert!(texts.iter().any(|t| t == "last-level cache"));

    run_ok(&[
        "roofline",
        "resnet50",
        "--system",
        "a100-sxm4-40gb",
        "--batch",
        "32",
        "--plot",
        d,
    ]);
    let texts = svg_texts(&dir.join("roofline.svg"));
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Roofline: resnet50 on a100-sxm4-40gb"))
    );
    for series in ["conv", "batch-norm", "fp32 peak 19.5 TFLOP/s, 1555 GB/s"] {
        assert!(
            texts.iter().any(|t| t == series),
            "roofline lacks {series}: {texts:?}"
        );
    }

    run_ok(&[
        "predict",
        "deepcam",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "16",
        "--batch",
        "4",
        "--plot",
        d,
    ]);
    let texts = svg_texts(&dir.join("data-movement.svg"));
    for series in ["gradients", "input samples", "model+activations"] {
        assert!(texts.iter().any(|t| t == series), "movement lacks {series}");
    }
    let texts = svg_texts(&dir.join("step-breakdown.svg"));
    for series in ["compute", "input", "allreduce", "step"] {
        assert!(
            texts.iter().any(|t| t == series),
            "breakdown lacks {series}"
        );
    }

    run_ok(&[
        "scale",
        "deepcam",
        "--system",
        "perlmutter-gpu",
        "--mode",
        "strong",
        "--global-batch",
        "512",
        "--nodes",
        "4,8,16",
        "--plot",
        d,
        "--plot-format",
        "png",
    ]);
    for f in ["scaling.png", "step-breakdown.png"] {
        let bytes = std::fs::read(dir.join(f)).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let reader = decoder.read_info().unwrap();
        assert_eq!(reader.info().width, ridgeline_reports::plot::WIDTH);
    }
    let _ = fixture;
}

#[test]
fn workload_report() {
    let dir = scratch("workload-report");
    let out = dir.join("r");
    let v = run_json(&[
        "report",
        "workload",
        "resnet50",
        "--system",
        "dgx-h100",
        "--nodes",
        "4",
        "--batch",
        "64",
        "--epochs",
        "90",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(v["nodes"], 4);
    assert_eq!(v["global_batch"], 4 * 8 * 64);
    let figures = [
        ("timeline", "resnet50 on dgx-h100: one step, simulated"),
        ("memory", "Memory per device: resnet50"),
        (
            "roofline",
            "Roofline: resnet50 on dgx-h100 (h100-sxm5-80gb), batch 64, fp32",
        ),
        (
            "data-movement",
            "Data movement per sample: resnet50 on dgx-h100",
        ),
        (
            "step-breakdown",
            "Step time: resnet50 on dgx-h100 x 4 nodes",
        ),
        (
            "weak-scaling",
            "Weak scaling: resnet50 on dgx-h100, batch 64",
        ),
    ];
    for (id, title) in figures {
        let texts = svg_texts(&out.join(format!("figures/{id}.svg")));
        assert!(texts.iter().any(|t| t == title), "{id}: {texts:?}");
    }
    // Weak scaling: one row per power of two up to the 32 nodes of the system.
    let mut csv = csv::Reader::from_path(out.join("tables/weak-scaling.csv")).unwrap();
    let nodes: Vec<String> = csv.records().map(|r| r.unwrap()[0].to_owned()).collect();
    assert_eq!(nodes, ["1", "2", "4", "8", "16", "32"]);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), figures.len());
}

/// The Chromium binary, or `None` where it is not installed (then the test says so; CI
/// sets `RIDGELINE_REQUIRE_CHROMIUM=1` and installs it, so there it must run).
fn chromium() -> Option<String> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Process::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("RIDGELINE_REQUIRE_CHROMIUM").is_none(),
            "RIDGELINE_REQUIRE_CHROMIUM is set but no chromium binary was found"
        );
        eprintln!("skipping: no chromium binary (apt-get install chromium)");
    }
    found.map(str::to_owned)
}

/// Runs headless Chromium on `page` with `extra` flags; returns stderr, and the requests
/// the page made to anything but `file:` and `data:` URLs (from Chromium's net log).
fn browse(
    chrome: &str,
    page: &Path,
    extra: &[&str],
    netlog: &Path,
) -> (String, String, Vec<String>) {
    let out = Process::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--log-net-log={}", netlog.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log: Value = serde_json::from_str(&std::fs::read_to_string(netlog).unwrap()).unwrap();
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].clone();
    // Requests the page makes carry the file:// network isolation key; the browser's own
    // background requests do not.
    let requests = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == start_job)
        .filter(|e| {
            e["params"]["network_isolation_key"]
                .as_str()
                .is_some_and(|k| k.starts_with("file://"))
        })
        .filter_map(|e| e["params"]["url"].as_str())
        .filter(|u| !u.starts_with("file:") && !u.starts_with("data:"))
        .map(str::to_owned)
        .collect();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        requests,
    )
}

/// Checks every figure in the page after load and writes the verdict into the DOM.
const CHECKER: &str = r"<script>
window.addEventListener('load', () => {
  const figures = [...document.querySelectorAll('figure')].map(f => {
    const svg = f.querySelector('svg');
    const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const style = svg ? getComputedStyle(svg) : {display: 'none', visibility: 'hidden'};
    return {id: f.id, width: r.width, height: r.height, display: style.display,
            visibility: style.visibility, texts: svg ? svg.querySelectorAll('text').length : 0};
  });
  const resources = performance.getEntriesByType('resource').map(e => e.name);
  // A table is cut where it reaches past the page's column and its box does not scroll.
  const page = document.querySelector('main').getBoundingClientRect();
  const tables = [...document.querySelectorAll('table')].map(t => {
    const box = t.parentElement;
    const r = box.getBoundingClientRect();
    return {id: t.id, right: r.right, page: page.right, wide: t.scrollWidth > box.clientWidth,
            scrolls: getComputedStyle(box).overflowX === 'auto'};
  });
  const pre = document.createElement('pre');
  pre.id = 'ridgeline-check';
  pre.textContent = JSON.stringify({figures, tables, resources});
  document.body.appendChild(pre);
});
</script>";

#[test]
fn html_report_in_headless_chromium() {
    let Some(chrome) = chromium() else {
        return;
    };
    let dir = scratch("chromium");
    procurement(&dir, &[]);
    let page = dir.join("report/report.html");
    let html = std::fs::read_to_string(&page).unwrap();

    // The page as written: no console message of any kind (CSP violations and failed loads
    // are console errors), no request leaves the machine; a screenshot for the record.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("procurement-report.png");
    let _ = std::fs::remove_file(&shot);
    let (_, stderr, requests) = browse(
        &chrome,
        &page,
        &[
            "--window-size=1280,2400",
            &format!("--screenshot={}", shot.display()),
        ],
        &dir.join("netlog-page.json"),
    );
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(requests.is_empty(), "network requests: {requests:?}");
    let png = std::fs::read(&shot).expect("screenshot written");
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.width, 1280);
    let channels = info.color_type.samples();
    let ink = buf
        .chunks(channels)
        .filter(|p| p.iter().take(3).any(|&c| c < 200))
        .count();
    assert!(ink > 20_000, "screenshot nearly blank: {ink} dark pixels");
    eprintln!("screenshot: {}", shot.display());

    // The same page without its Content-Security-Policy (so nothing is blocked that would
    // otherwise be fetched) and with a checker script: every figure is laid out and
    // visible, and the page loaded no resource at all.
    let csp_start = html
        .find("<meta http-equiv=\"Content-Security-Policy\"")
        .unwrap();
    let csp_end = csp_start + html[csp_start..].find('>').unwrap() + 1;
    let checked = format!(
        "{}{}",
        &html[..csp_start],
        html[csp_end..].replace("</body>", &format!("{CHECKER}</body>"))
    );
    let check_page = dir.join("report/check.html");
    std::fs::write(&check_page, checked).unwrap();
    let (dom, stderr, requests) = browse(
        &chrome,
        &check_page,
        &["--window-size=1280,2400", "--dump-dom"],
        &dir.join("netlog-check.json"),
    );
    assert!(
        requests.is_empty(),
        "network requests without CSP: {requests:?}"
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") && l.contains("Uncaught"))
        .collect();
    assert!(errors.is_empty(), "script errors: {errors:#?}");
    let start = dom
        .find("<pre id=\"ridgeline-check\">")
        .expect("checker ran")
        + 26;
    let end = start + dom[start..].find("</pre>").unwrap();
    let verdict: Value = serde_json::from_str(&dom[start..end].replace("&quot;", "\"")).unwrap();
    assert_eq!(
        verdict["resources"].as_array().unwrap().len(),
        0,
        "{verdict}"
    );
    // At a 1200-pixel window no table runs off the page: each stays in the column, and one
    // wider than it scrolls in its box.
    let (narrow, stderr, _) = browse(
        &chrome,
        &check_page,
        &["--window-size=1200,2400", "--dump-dom"],
        &dir.join("netlog-narrow.json"),
    );
    assert!(!stderr.contains("Uncaught"), "script errors: {stderr}");
    let start = narrow
        .find("<pre id=\"ridgeline-check\">")
        .expect("checker ran")
        + 26;
    let end = start + narrow[start..].find("</pre>").unwrap();
    let at_1200: Value = serde_json::from_str(&narrow[start..end].replace("&quot;", "\"")).unwrap();
    let tables = at_1200["tables"].as_array().unwrap();
    assert!(!tables.is_empty(), "{at_1200}");
    for t in tables {
        assert!(
            t["right"].as_f64().unwrap() <= t["page"].as_f64().unwrap() + 0.5,
            "table runs off the page: {t}"
        );
        assert!(
            t["scrolls"].as_bool().unwrap(),
            "table box does not scroll: {t}"
        );
    }
    let figures = verdict["figures"].as_array().unwrap();
    let written = std::fs::read_dir(dir.join("report/figures"))
        .unwrap()
        .count();
    assert_eq!(figures.len(), written, "every plot is in the page");
    for f in figures {
        assert!(
            f["width"].as_f64().unwrap() > 300.0 && f["height"].as_f64().unwrap() > 150.0,
            "figure too small or hidden: {f}"
        );
        assert_eq!(f["display"], "block", "{f}");
        assert_eq!(f["visibility"], "visible", "{f}");
        assert!(f["texts"].as_u64().unwrap() > 3, "figure without text: {f}");
    }
}
