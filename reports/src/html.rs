//! Self-contained HTML: one file with its style sheet and every plot inline as SVG. It
//! loads nothing (a Content-Security-Policy forbids every fetch), runs no script, and works
//! offline and from e-mail attachments. Every piece of text — titles, system and workload
//! names, table cells — is escaped.

use std::fmt::Write as _;

use crate::report::{Artifact, Report, ReportRenderer, ReportTable};
use crate::table::Align;
use crate::{Error, plot};

/// Renders a report as `report.html`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Html;

/// The page's style: readable, printable, no external fonts.
const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#1b1f24;margin:0;background:#fafafa}
main{max-width:1080px;margin:0 auto;padding:24px 32px 48px;background:#fff}
h1{font-size:1.7em;margin:0.2em 0 0.4em}h2{font-size:1.3em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:4px}
p{line-height:1.5}
dl{display:grid;grid-template-columns:max-content auto;gap:4px 16px}dt{font-weight:600}dd{margin:0}
div.table{overflow-x:auto;max-width:100%;margin:12px 0 20px}
table{border-collapse:collapse;font-size:0.92em}
caption{text-align:left;font-weight:600;padding-bottom:6px}
th,td{border-bottom:1px solid #e3e3e3;padding:4px 10px}th{background:#f3f4f6;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:16px 0 28px}figure svg{max-width:100%;height:auto;display:block}
figcaption{font-size:0.9em;color:#444;margin-top:4px}
footer{margin-top:40px;font-size:0.85em;color:#666}
@media print{body{background:#fff}main{padding:0}figure{break-inside:avoid}}
";

/// Escapes text for HTML element content and double-quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn table(out: &mut String, t: &ReportTable) {
    // A table wider than the page scrolls inside its box rather than running off it.
    let _ = writeln!(out, "<div class=\"table\">\n<table id=\"table-{}\">", t.id);
    let _ = writeln!(out, "<caption>{}</caption>", escape(&t.caption));
    out.push_str("<thead><tr>");
    for c in &t.human.columns {
        let _ = write!(out, "<th scope=\"col\">{}</th>", escape(&c.header));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.human.rows {
        out.push_str("<tr>");
        for (cell, c) in row.iter().zip(&t.human.columns) {
            let class = match c.align {
                Align::Right => " class=\"num\"",
                Align::Left => "",
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</div>\n");
}

impl ReportRenderer for Html {
    fn render(&self, report: &Report) -> Result<Vec<Artifact>, Error> {
        report.check()?;
        let mut out = String::new();
        out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        out.push_str(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
             style-src 'unsafe-inline'; img-src data:\">\n",
        );
        out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
        let _ = writeln!(out, "<title>{}</title>", escape(&report.title));
        let _ = writeln!(out, "<style>\n{STYLE}</style>\n</head>\n<body>\n<main>");
        let _ = writeln!(out, "<h1>{}</h1>", escape(&report.title));
        for p in &report.intro {
            let _ = writeln!(out, "<p>{}</p>", escape(p));
        }
        for s in &report.sections {
            out.push_str("<section>\n");
            let _ = writeln!(out, "<h2>{}</h2>", escape(&s.heading));
            for p in &s.paragraphs {
                let _ = writeln!(out, "<p>{}</p>", escape(p));
            }
            if !s.facts.is_empty() {
                out.push_str("<dl>\n");
                for (k, v) in &s.facts {
                    let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
                }
                out.push_str("</dl>\n");
            }
            for t in &s.tables {
                table(&mut out, t);
            }
            for f in &s.figures {
                let svg = plot::svg(&f.chart)?;
                let _ = writeln!(out, "<figure id=\"figure-{}\">", f.id);
                // The SVG is plotters' output: its text is escaped by the SVG backend, and
                // it carries no script.
                out.push_str(svg.trim());
                let _ = writeln!(
                    out,
                    "\n<figcaption>{}</figcaption>\n</figure>",
                    escape(&f.caption)
                );
            }
            out.push_str("</section>\n");
        }
        let _ = writeln!(out, "<footer>{}</footer>", escape(&report.provenance));
        out.push_str("</main>\n</body>\n</html>\n");
        Ok(vec![Artifact::text("report.html", out)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    fn page() -> String {
        let files = Html.render(&fixture::report()).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].name, "report.html");
        String::from_utf8(files[0].bytes.clone()).unwrap()
    }

    #[test]
    fn user_strings_are_escaped() {
        let page = page();
        assert!(!page.contains("<b>fast</b>"), "raw markup leaked");
        assert!(page.contains("&lt;b&gt;fast&lt;/b&gt; &amp; co"));
        assert!(page.contains("<title>Procurement: mix &lt;1&gt;</title>"));
    }

    #[test]
    fn self_contained_with_inline_plots() {
        let page = page();
        assert!(page.contains("default-src 'none'"));
        assert!(!page.contains("<script"));
        for link in ["src=\"http", "href=\"http", "url(http", "@import"] {
            assert!(!page.contains(link), "external reference `{link}`");
        }
        assert_eq!(page.matches("<svg").count(), 1);
        assert!(page.contains("<figure id=\"figure-time\">"));
    }

    #[test]
    fn html_snapshot_without_plots() {
        let mut r = fixture::report();
        r.sections[0].figures.clear();
        let files = Html.render(&r).unwrap();
        let page = String::from_utf8(files[0].bytes.clone()).unwrap();
        let body = &page[page.find("<body>").unwrap()..];
        insta::assert_snapshot!(body);
    }
}
