//! The documentation holds together: README.md stays a page a newcomer reads in five minutes
//! (at most 300 lines), every relative link in README.md and docs/ leads to a file that exists,
//! and every experiment file they name exists and validates.

use std::path::{Path, PathBuf};

mod common;
use common::loaderlab;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds no page");
    pages.extend(docs);
    pages
}

/// The targets of a page's markdown links, `[text](target)`, outside code spans and blocks.
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
        // Drop inline code spans: a `[x](y)` inside backticks is not a link.
        let mut plain = String::new();
        for (k, part) in line.split('`').enumerate() {
            if k % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn the_readme_is_short_and_every_relative_link_resolves() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines (at most 300)");
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
                || target.starts_with('#')
            {
                continue;
            }
            let file = target.split('#').next().unwrap_or_default();
            let path = page.parent().unwrap().join(file);
            checked += 1;
            if !path.exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(checked >= 10, "only {checked} relative links found");
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
    // Every page of docs/ is reachable from the README.
    for page in &pages()[1..] {
        let name = page.file_name().unwrap().to_str().unwrap();
        assert!(
            readme.contains(&format!("(docs/{name})")),
            "README.md does not link docs/{name}"
        );
    }
}

#[test]
fn every_experiment_file_the_documentation_names_exists_and_validates() {
    let mut named: Vec<String> = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("experiments/") {
            let tail = &rest[at + "experiments/".len()..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if tail[name.len()..].starts_with(".toml") && !name.is_empty() {
                named.push(format!("experiments/{name}.toml"));
            }
            rest = tail;
        }
        // The README also lists the examples by their file names alone.
        if page.ends_with("README.md") {
            for word in text.split(|c: char| c == '`' || c.is_whitespace() || c == ',') {
                if word.ends_with(".toml") && root().join("experiments").join(word).is_file() {
                    named.push(format!("experiments/{word}"));
                }
            }
        }
    }
    named.sort();
    named.dedup();
    assert!(named.len() >= 10, "{named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|n| !Path::new(&root().join(n)).is_file())
        .collect();
    assert!(missing.is_empty(), "named but missing: {missing:?}");
    let output = loaderlab()
        .arg("validate")
        .args(named.iter().map(|n| root().join(n)))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
