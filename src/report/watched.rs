//! The sections only a watched job's report has (`loaderlab.watch`): what was watched, the job
//! over its run (per epoch), and the user's own spans (`watch.mark`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::table::{Align, Table};
use crate::format::{ms, pct, rate};
use crate::results::{EngineRecord, Raw, WATCH_JSON, WatchInfo, column, f64s, i64s, read_json};

use Align::{Left, Right};

/// The user's spans inside each step, written by `watch.mark` (step, name, ms).
pub const MARKS_CSV: &str = "marks.csv";

/// Whether the folder holds a watched job.
pub fn is_watched(raw: &Raw) -> bool {
    raw.meta
        .conditions
        .iter()
        .any(|c| matches!(c.engine, EngineRecord::Watched { .. }))
}

/// What was watched, in place of an experiment's Setup.
pub fn setup(raw: &Raw) -> String {
    let Ok(info) = read_json::<WatchInfo>(&raw.dir.join(WATCH_JSON)) else {
        return String::new();
    };
    let steps = raw.steps.height();
    let mut t = Table::new([("setting", Left), ("value", Left)]);
    let shown = |v: &Option<u64>| v.map_or("–".into(), |v| v.to_string());
    let ended = match info.finished_unix_s {
        Some(f) => format!(
            "ended in order after {} s",
            f.saturating_sub(info.started_unix_s)
        ),
        None => "did not end in order (the job stopped, or is still running)".into(),
    };
    for (k, v) in [
        ("the job", format!("`{}`", info.command)),
        (
            "loader",
            raw.meta
                .conditions
                .first()
                .map(|c| c.engine.describe())
                .unwrap_or_default(),
        ),
        ("dataset", info.dataset.clone()),
        (
            "transforms (timed by class name)",
            if info.transforms.is_empty() {
                "– (no Compose found on the dataset's `transform`)".into()
            } else {
                info.transforms.join(", ")
            },
        ),
        ("batch size", info.batch_size.to_string()),
        (
            "workers / prefetch / persistent workers / pin memory",
            format!(
                "{} / {} / {} / {}",
                info.workers,
                shown(&info.prefetch_factor),
                info.persistent_workers,
                info.pin_memory
            ),
        ),
        ("device", info.device.clone()),
        (
            "steps",
            format!(
                "{steps} in blocks of {} (each block a run: the CIs are over blocks)",
                info.block_steps
            ),
        ),
        (
            "stage clocks",
            format!(
                "every item's fetch and collate; each transform on one item in {}",
                info.every
            ),
        ),
        ("watch", ended),
    ] {
        t.row([k.to_string(), v]);
    }
    format!("## What was watched\n\n{}\n", t.render())
}

/// The job over its run: per epoch, its steps, img/s, waiting share and the first step's wait
/// (an epoch's start: a DataLoader's workers starting, its first batches).
pub fn over_time(raw: &Raw) -> String {
    let s = &raw.steps;
    let (Ok(epoch), Ok(step), Ok(wait)) = (
        i64s(s, column::EPOCH),
        f64s(s, column::STEP_MS),
        f64s(s, column::BATCH_WAIT_MS),
    ) else {
        return String::new();
    };
    let images = i64s(s, column::IMAGES).unwrap_or_else(|_| vec![0; s.height()]);
    // epoch → (steps, images, step ms, wait ms, first wait ms)
    let mut by: BTreeMap<i64, (u64, i64, f64, f64, f64)> = BTreeMap::new();
    for i in 0..step.len() {
        let e = by.entry(epoch[i]).or_insert((0, 0, 0.0, 0.0, wait[i]));
        e.0 += 1;
        e.1 += images[i];
        e.2 += step[i];
        e.3 += wait[i];
    }
    let mut t = Table::new([
        ("epoch", Right),
        ("steps", Right),
        ("img/s", Right),
        ("waiting share", Right),
        ("first step's wait", Right),
    ]);
    for (e, (n, imgs, step_ms, wait_ms, first)) in &by {
        t.row([
            e.to_string(),
            n.to_string(),
            rate(*imgs as f64 / (step_ms / 1e3)),
            pct(wait_ms / step_ms),
            ms(*first),
        ]);
    }
    let mut md = format!(
        "## The job over its run\n\nPer epoch (as the loop iterated the loader): img/s over the \
         steps' time, the share of it spent waiting for a batch, and the wait of the epoch's \
         first step (a DataLoader without persistent workers starts its workers there). The \
         chart `job` shows every step.\n\n{}\n",
        t.render()
    );
    md.push_str(&marks(raw, step.iter().sum()));
    md
}

/// The user's own spans (`watch.mark`): per name, how often, the median and the share of all
/// step time.
fn marks(raw: &Raw, step_ms_total: f64) -> String {
    let Ok(text) = std::fs::read_to_string(raw.dir.join(MARKS_CSV)) else {
        return String::new();
    };
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let mut f = line.rsplitn(2, ',');
        let (Some(ms), Some(rest)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((_, name)) = rest.split_once(',') else {
            continue;
        };
        if let Ok(v) = ms.parse::<f64>() {
            by.entry(name.to_string()).or_default().push(v);
        }
    }
    if by.is_empty() {
        return String::new();
    }
    let mut t = Table::new([
        ("span", Left),
        ("count", Right),
        ("median", Right),
        ("share of step time", Right),
    ]);
    for (name, mut v) in by {
        v.sort_by(f64::total_cmp);
        let total: f64 = v.iter().sum();
        t.row([
            format!("`{name}`"),
            v.len().to_string(),
            ms(v[v.len() / 2]),
            pct(total / step_ms_total),
        ]);
    }
    let mut md = String::new();
    let _ = write!(
        md,
        "### Your spans\n\nThe spans you marked with `watch.mark(name)` inside the steps.\n\n{}\n",
        t.render()
    );
    md
}
