//! A markdown table: a header with each column's alignment, then rows.

use std::fmt::Write as _;

#[derive(Clone, Copy)]
pub enum Align {
    Left,
    Right,
}

pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these (header, alignment) columns.
    pub fn new<S: ToString>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        let (header, align) = columns.into_iter().map(|(h, a)| (h.to_string(), a)).unzip();
        Table {
            header,
            align,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: impl IntoIterator<Item = String>) {
        self.rows.push(cells.into_iter().collect());
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| {} |", self.header.join(" | "));
        let rules: Vec<&str> = self
            .align
            .iter()
            .map(|a| match a {
                Align::Left => "---",
                Align::Right => "---:",
            })
            .collect();
        let _ = writeln!(out, "|{}|", rules.join("|"));
        for r in &self.rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
        out
    }
}

/// The header of a speed-up column: against the one baseline, or each group's.
pub(super) fn speedup_header(a: &crate::analysis::Analysis, what: &str, suffix: &str) -> String {
    match a.comparison_groups().as_slice() {
        [one] => format!("{what} vs `{}`{suffix}", one.baseline),
        _ => format!("{what} vs its group's baseline{suffix}"),
    }
}
