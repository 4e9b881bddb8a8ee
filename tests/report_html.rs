//! report.html: the same figures as report.md, and a page a real browser draws — every chart
//! visible, no horizontal scroll at 1280 px. The browser checks use Debian's headless
//! Chromium; `.ci/run` installs it, so under `CI=true` a missing browser fails the test, and
//! elsewhere the test says it was skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::loaderlab;

const QUICK: &str = r#"
[experiment]
name = "html"
seed = 5

[dataset]
kind = "synthetic"
synthetic_size = 512

[loader]
batch_size = 16

[model]
kind = "mlp"

[device]
kind = "cpu"
threads = 1

[protocol]
warmup_steps = 2
timed_steps = 10
rounds = 2
profile_steps = 4
headroom_steps = 6

[matrix]
"loader.workers" = [0, 1]
"#;

fn run_quick(dir: &Path) -> PathBuf {
    let file = dir.join("html.toml");
    std::fs::write(&file, QUICK).unwrap();
    let out = dir.join("results");
    let output = loaderlab()
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The terminal output ends with the report's headline.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or("");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains(&format!("**{last}**")),
        "{last:?} is not the headline"
    );
    out
}

/// Every number of a text, in order: digit runs with their separators ("1,234.5", "0.02").
fn numbers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() || (!cur.is_empty() && (c == '.' || c == ',')) {
            cur.push(c);
        } else if !cur.is_empty() {
            out.push(cur.trim_end_matches(['.', ',']).to_string());
            cur.clear();
        }
    }
    if !cur.is_empty() {
        out.push(cur.trim_end_matches(['.', ',']).to_string());
    }
    out
}

/// The text a reader sees in report.md: link and image targets dropped.
fn markdown_text(md: &str) -> String {
    let mut out = String::new();
    let mut rest = md;
    while let Some(i) = rest.find("](") {
        out.push_str(&rest[..i + 1]);
        let after = &rest[i + 2..];
        rest = after.find(')').map_or("", |j| &after[j + 1..]);
    }
    out.push_str(rest);
    out
}

/// The text a reader sees in report.html: no style, no charts, no tags, entities decoded.
fn html_text(html: &str) -> String {
    let mut s = html.to_string();
    for (open, close) in [
        ("<style", "</style>"),
        ("<svg", "</svg>"),
        ("<head", "</head>"),
    ] {
        while let Some(i) = s.find(open) {
            let j = s[i..].find(close).map_or(s.len(), |j| i + j + close.len());
            s.replace_range(i..j, " ");
        }
    }
    let mut text = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[test]
fn report_html_states_every_figure_of_report_md() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_quick(dir.path());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let (from_md, from_html) = (numbers(&markdown_text(&md)), numbers(&html_text(&html)));
    assert!(from_md.len() > 200, "{} numbers", from_md.len());
    if from_md != from_html {
        let k = from_md
            .iter()
            .zip(&from_html)
            .position(|(a, b)| a != b)
            .unwrap_or(from_md.len().min(from_html.len()));
        panic!(
            "the numbers differ from the {k}th on: md {:?} html {:?}",
            &from_md[k..(k + 8).min(from_md.len())],
            &from_html[k..(k + 8).min(from_html.len())]
        );
    }
    // Self-contained: every chart inline, nothing fetched, nothing to run.
    let charts = md.matches("![").count();
    assert!(charts >= 5, "{charts} charts");
    assert_eq!(html.matches("<figure class=\"chart\"><svg").count(), charts);
    assert!(!html.contains("<script"));
    for attr in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(
            !html.contains(attr),
            "report.html fetches something: {attr}"
        );
    }
    // `report` rebuilds it; `[report] html = false` turns it off and removes the stale page.
    std::fs::remove_file(out.join("report.html")).unwrap();
    loaderlab().arg("report").arg(&out).assert().success();
    assert!(out.join("report.html").is_file());
    let file = dir.path().join("off.toml");
    std::fs::write(&file, format!("{QUICK}\n[report]\nhtml = false\n")).unwrap();
    let off = dir.path().join("off");
    loaderlab()
        .arg(&file)
        .arg("--out")
        .arg(&off)
        .arg("--quiet")
        .assert()
        .success();
    assert!(off.join("report.md").is_file() && !off.join("report.html").exists());
}

/// Debian's Chromium, or None (outside CI: skipped; under CI: a failure).
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let ok = Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            ok.then(|| PathBuf::from(name))
        });
    if found.is_none() {
        common::skip("no chromium on PATH (.ci/run installs Debian's chromium for this test)");
    }
    found
}

fn headless(browser: &Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--force-device-scale-factor=1",
    ]);
    cmd
}

#[test]
fn a_browser_draws_every_chart_without_horizontal_scroll() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = run_quick(dir.path());
    // A probe page lays report.html out 1280 px wide and writes what the layout measured:
    // the page's scroll width and every chart's box. (The probe has a script; the report none.)
    let probe = out.join("probe.html");
    std::fs::write(
        &probe,
        r#"<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="report.html" style="width:1280px;height:900px;border:0"></iframe>
<script>
document.getElementById('f').onload = function () {
  var d = this.contentDocument, w = this.contentWindow;
  var out = {scroll: d.documentElement.scrollWidth, client: d.documentElement.clientWidth,
             height: d.documentElement.scrollHeight, charts: []};
  d.querySelectorAll('figure.chart').forEach(function (f) {
    var r = f.getBoundingClientRect();
    out.charts.push([r.left, r.top + w.scrollY, r.width, r.height]);
  });
  var pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
};
</script></body></html>"#,
    )
    .unwrap();
    let dom = headless(&browser)
        .args([
            "--allow-file-access-from-files",
            "--virtual-time-budget=15000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", probe.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    let json = dom
        .split("<pre id=\"measured\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("the probe measured nothing: {dom}"));
    let m: serde_json::Value = serde_json::from_str(json).unwrap();
    let (scroll, client) = (m["scroll"].as_f64().unwrap(), m["client"].as_f64().unwrap());
    assert_eq!(client, 1280.0, "{m}");
    assert!(
        scroll <= client,
        "the page scrolls sideways: {scroll} px wide in {client}"
    );
    let charts = m["charts"].as_array().unwrap();
    assert!(charts.len() >= 5, "{m}");

    // The screenshot, the page's whole height at 1280 px: every chart's box holds a drawing.
    let height = m["height"].as_f64().unwrap().ceil() as u32;
    let shot = out.join("shot.png");
    let status = headless(&browser)
        .arg(format!("--window-size=1280,{height}"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", out.join("report.html").display()))
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let img = image::open(&shot).unwrap().to_rgb8();
    assert_eq!(img.width(), 1280);
    for (k, c) in charts.iter().enumerate() {
        let v: Vec<f64> = c
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let (x0, y0, w, h) = (v[0] as u32, v[1] as u32, v[2] as u32, v[3] as u32);
        assert!(w > 300 && h > 100, "chart {k} is {w}×{h} px");
        let (mut ink, mut colour, mut total) = (0u64, 0u64, 0u64);
        for y in y0..(y0 + h).min(img.height()) {
            for x in x0..(x0 + w).min(img.width()) {
                let p = img.get_pixel(x, y).0;
                total += 1;
                if p.iter().any(|&c| c < 200) {
                    ink += 1;
                }
                let (lo, hi) = (*p.iter().min().unwrap(), *p.iter().max().unwrap());
                if hi - lo > 60 {
                    colour += 1;
                }
            }
        }
        let share = ink as f64 / total.max(1) as f64;
        assert!(
            share > 0.01 && colour > 50,
            "chart {k} at {v:?} looks blank: {share} of its pixels inked, {colour} coloured"
        );
    }
}
