//! The runner's page: one HTML file with every picture inline (base64 PNG), readable
//! offline and easy to send.

use std::fmt::Write;

use base64::Engine;

use super::RunReport;

fn data_uri(png: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page: the benchmark table, then one row per image.
pub fn page(
    report: &RunReport,
    methods: &[String],
    pictures: &[(Vec<u8>, Vec<Vec<u8>>)],
) -> String {
    let mut s = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Spore explanations</title>\n<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:center}img{image-rendering:pixelated}</style></head><body>\n<h1>Explanations</h1>\n",
    );
    let metrics: Vec<String> = {
        let mut m: Vec<String> = report
            .means
            .values()
            .flat_map(|v| v.keys().cloned())
            .collect();
        m.sort();
        m.dedup();
        m
    };
    s.push_str("<h2>Benchmarks (mean over images; higher is better)</h2>\n<table><tr><th>method</th><th>ms per image</th>");
    for m in &metrics {
        let _ = write!(s, "<th>{}</th>", escape(m));
    }
    s.push_str("</tr>\n");
    for method in methods {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{:.1}</td>",
            escape(method),
            report.millis.get(method).copied().unwrap_or(0.0)
        );
        for m in &metrics {
            match report.means.get(method).and_then(|v| v.get(m)) {
                Some(v) => {
                    let _ = write!(s, "<td>{v:.3}</td>");
                }
                None => s.push_str("<td></td>"),
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n<h2>Images</h2>\n<table><tr><th>image</th><th>prediction</th>");
    for m in methods {
        let _ = write!(s, "<th>{}</th>", escape(m));
    }
    s.push_str("</tr>\n");
    for ((name, class, p), (original, maps)) in report.predictions.iter().zip(pictures) {
        let _ = write!(
            s,
            "<tr><td><img src=\"{}\" alt=\"{}\"><br>{}</td><td>{} ({:.3})</td>",
            data_uri(original),
            escape(name),
            escape(name),
            escape(class),
            p
        );
        for png in maps {
            let _ = write!(s, "<td><img src=\"{}\"></td>", data_uri(png));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n</body></html>\n");
    s
}
