//! `report.html`: report.md as one self-contained page — the same text, tables and figures
//! (rendered from the same markdown, so every number is the same string), its charts inlined
//! as SVG (PNG as a data URI where only PNG was drawn), CSS in the page, no script and no
//! external URL. Wide tables scroll inside their own box, so the page itself never scrolls
//! sideways on a laptop screen; the print style drops the boxes and keeps tables whole.

use std::path::Path;

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

const STYLE: &str = r#"
:root { color-scheme: light; }
body { margin: 0; background: #fff; color: #1b1b1b;
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 1.7em; margin: 0.2em 0 0.6em; }
h2 { font-size: 1.3em; margin: 1.8em 0 0.5em; padding-bottom: 0.2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.1em; margin: 1.4em 0 0.4em; }
p, li { overflow-wrap: anywhere; }
main > p:first-of-type strong, .headline { font-size: 1.08em; }
code { font: 0.9em ui-monospace, "DejaVu Sans Mono", monospace; background: #f3f3f3;
  padding: 0.05em 0.3em; border-radius: 3px; }
pre { background: #f6f6f6; padding: 10px 12px; overflow-x: auto; border-radius: 4px; }
pre code { background: none; padding: 0; }
.wide { overflow-x: auto; margin: 0.8em 0; }
table { border-collapse: collapse; font-size: 0.88em; }
th, td { border: 1px solid #d6d6d6; padding: 4px 8px; vertical-align: top; }
th { background: #f2f4f7; text-align: left; }
td[style*="right"], th[style*="right"] { font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
figure.chart { margin: 1em 0 0.3em; }
figure.chart svg, figure.chart img { display: block; max-width: 100%; height: auto; }
blockquote { margin: 1em 0; padding: 0.2em 1em; border-left: 4px solid #e0a030; background: #fff8e8; }
@media print {
  main { max-width: none; padding: 0; }
  .wide { overflow: visible; }
  table { font-size: 0.75em; }
  tr, figure.chart { break-inside: avoid; }
  h2 { break-after: avoid; }
}
"#;

/// report.md rendered as a page; chart paths are read relative to `dir`.
pub fn page(md: &str, dir: &Path, title: &str) -> String {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    let mut events: Vec<Event> = Vec::new();
    let mut in_image = false;
    // An external link's address, shown after its text instead of linked: nothing in the
    // page points off it.
    let mut external: Option<String> = None;
    for event in Parser::new_ext(md, options) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) if dest_url.contains("://") => {
                external = Some(dest_url.to_string());
            }
            Event::End(TagEnd::Link) if external.is_some() => {
                let url = external.take().unwrap_or_default();
                let shown = url.split("://").nth(1).unwrap_or(&url).to_string();
                events.push(Event::Text(CowStr::from(format!(" ({shown})"))));
            }
            Event::Start(Tag::Image { dest_url, .. }) => {
                in_image = true;
                events.push(Event::Html(CowStr::from(chart(dir, &dest_url))));
            }
            Event::End(TagEnd::Image) => in_image = false,
            // The image's alt text: the chart carries its own title.
            _ if in_image => {}
            Event::Start(Tag::Table(a)) => {
                events.push(Event::Html(CowStr::from("<div class=\"wide\">")));
                events.push(Event::Start(Tag::Table(a)));
            }
            Event::End(TagEnd::Table) => {
                events.push(Event::End(TagEnd::Table));
                events.push(Event::Html(CowStr::from("</div>")));
            }
            other => events.push(other),
        }
    }
    let mut body = String::new();
    html::push_html(&mut body, events.into_iter());
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{body}</main>\n\
         </body>\n</html>\n",
        escape(title)
    )
}

/// A chart file as inline markup: the SVG itself, or a PNG as a data URI.
fn chart(dir: &Path, src: &str) -> String {
    let path = dir.join(src);
    let inner = if src.ends_with(".svg") {
        std::fs::read_to_string(&path).ok().map(|svg| {
            // An XML declaration is not allowed inside HTML.
            match svg.find("<svg") {
                Some(i) => svg[i..].to_string(),
                None => svg,
            }
        })
    } else {
        std::fs::read(&path).ok().map(|png| {
            format!(
                "<img alt=\"{}\" src=\"data:image/png;base64,{}\">",
                escape(src),
                base64(&png)
            )
        })
    };
    match inner {
        Some(markup) => format!("<figure class=\"chart\">{markup}</figure>"),
        None => format!("<p><em>(chart {} missing)</em></p>", escape(src)),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn a_page_inlines_its_charts_and_wraps_its_tables() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("charts")).unwrap();
        std::fs::write(
            dir.path().join("charts/a.svg"),
            "<?xml version=\"1.0\"?>\n<svg width=\"10\" height=\"10\"><rect/></svg>",
        )
        .unwrap();
        let md = "# T\n\n**1.234×** <b> [P](https://p.dev)\n\n| a | b |\n|---|--:|\n| x | 1.5 |\n\n![a](charts/a.svg)\n\n![b](charts/b.svg)\n";
        let page = page(md, dir.path(), "T & co");
        assert!(page.contains("<title>T &amp; co</title>"));
        assert!(page.contains("<figure class=\"chart\"><svg width=\"10\""));
        assert!(!page.contains("<?xml"));
        assert!(page.contains("<div class=\"wide\"><table>"));
        assert!(page.contains("<strong>1.234×</strong>"));
        assert!(page.contains("(chart charts/b.svg missing)"));
        assert!(page.contains("P (p.dev)") && !page.contains("href=\"https"));
        assert!(!page.contains("<script"));
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    }
}
