//! `[distributed]`: several ranks per node, each with its own loader over its own share of
//! every epoch and its own (stand-in) device, meeting at a barrier after every step — the
//! section's settings, their per-rank overrides and their checks, in one place.

use super::problem::KeyPath;
use super::schema::{DeviceKind, RankOverride, Settings, StorageSection};
use crate::transforms::ops::{CpuWorkSpec, TransformSpec};

/// The most ranks one experiment emulates (a node of 64 GPUs is beyond any machine sold).
pub const MAX_RANKS: u64 = 64;

impl RankOverride {
    /// The rank's transform chain: the condition's, with its `cpu_work` appended.
    pub fn transforms(&self, common: &[TransformSpec]) -> Vec<TransformSpec> {
        let mut chain = common.to_vec();
        if self.cpu_work_us > 0.0 {
            chain.push(TransformSpec::CpuWork(CpuWorkSpec {
                us: self.cpu_work_us,
            }));
        }
        chain
    }
}

/// The sample element the schema lists under `distributed.rank`, so that the raw checks know
/// the keys of a `[[distributed.rank]]` table.
pub fn schema_element() -> toml::Value {
    toml::Value::try_from(RankOverride::default()).expect("a rank override serialises to TOML")
}

/// Every problem with the `[distributed]` section of one condition.
pub fn check(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let d = &s.distributed;
    let key = |name: &str| KeyPath::keys(["distributed", name]);
    if !(1..=MAX_RANKS).contains(&d.ranks) {
        out.push((
            key("ranks"),
            format!("expected 1 to {MAX_RANKS} ranks, found {}", d.ranks),
        ));
    }
    if !(d.allreduce_ms.is_finite() && (0.0..=1e5).contains(&d.allreduce_ms)) {
        out.push((
            key("allreduce_ms"),
            format!(
                "expected milliseconds from 0 to 1e5, found {}",
                d.allreduce_ms
            ),
        ));
    }
    // `auto` is the CPU in a build without CUDA; in a CUDA build the set-up refuses it when it
    // falls back to the CPU.
    let on_cpu = match s.device.kind {
        DeviceKind::Cpu => true,
        DeviceKind::Auto => !cfg!(feature = "cuda"),
        DeviceKind::Cuda => false,
    };
    if d.several() && !s.model.is_stand_in() && on_cpu {
        out.push((
            key("ranks"),
            format!(
                "{} ranks on the CPU need model.kind = \"stand_in\": each rank's device is an \
                 emulated device that holds no core while busy; a real network trained by \
                 several ranks on this machine's CPU would measure the ranks' training \
                 competing for cores, not a node of GPUs (on GPUs, device.kind = \"cuda\" \
                 runs one rank per GPU)",
                d.ranks
            ),
        ));
    }
    if d.allreduce_ms > 0.0 && !s.model.is_stand_in() {
        out.push((
            key("allreduce_ms"),
            "the all-reduce time is added to the stand-in step's device time: it needs \
             model.kind = \"stand_in\""
                .to_string(),
        ));
    }
    for (i, o) in d.rank.iter().enumerate() {
        let at = |name: &str| {
            KeyPath::keys(["distributed", "rank"])
                .index(i)
                .key(name.to_string())
        };
        if o.rank >= d.ranks {
            out.push((
                at("rank"),
                format!(
                    "rank {} does not exist: ranks are numbered 0 to {} (distributed.ranks = {})",
                    o.rank,
                    d.ranks.saturating_sub(1),
                    d.ranks
                ),
            ));
        }
        if d.rank[..i].iter().any(|earlier| earlier.rank == o.rank) {
            out.push((
                at("rank"),
                format!(
                    "rank {} already has a [[distributed.rank]] table: give each rank one",
                    o.rank
                ),
            ));
        }
        if !(o.cpu_work_us.is_finite() && (0.0..=1e7).contains(&o.cpu_work_us)) {
            out.push((
                at("cpu_work_us"),
                format!(
                    "expected microseconds of CPU time per image, 0 to 1e7, found {}",
                    o.cpu_work_us
                ),
            ));
        }
        storage_ranges(&o.storage, &at("storage"), out);
    }
}

/// A `[dataset.storage]` table's ranges (the dataset's, or a rank's at `at`).
pub(super) fn storage_ranges(st: &StorageSection, at: &KeyPath, out: &mut Vec<(KeyPath, String)>) {
    for (name, v) in [
        ("latency_ms", st.latency_ms),
        ("bandwidth_mb_s", st.bandwidth_mb_s),
    ] {
        if !(v.is_finite() && (0.0..=1e6).contains(&v)) {
            out.push((
                at.key(name),
                format!("expected a number from 0 (off) to 1e6, found {v}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        let s: Settings = toml::from_str(text).unwrap();
        let mut out = Vec::new();
        check(&s, &mut out);
        out.iter().map(|(k, m)| format!("{k}: {m}")).collect()
    }

    #[test]
    fn ranks_need_the_stand_in_step_and_overrides_an_existing_rank() {
        let stand_in = "[model]\nkind = \"stand_in\"\nstep_ms = 5\n";
        assert!(problems(&format!("{stand_in}[distributed]\nranks = 4\n")).is_empty());
        let p = problems("[device]\nkind = \"cpu\"\n[distributed]\nranks = 2\n");
        assert!(
            p[0].starts_with("distributed.ranks: 2 ranks on the CPU need"),
            "{p:?}"
        );
        // On GPUs a real network runs one copy per rank.
        assert!(problems("[device]\nkind = \"cuda\"\n[distributed]\nranks = 2\n").is_empty());
        let p = problems(&format!(
            "{stand_in}[distributed]\nranks = 2\n[[distributed.rank]]\nrank = 2\n\
             [[distributed.rank]]\nrank = 0\ncpu_work_us = -1\n[[distributed.rank]]\nrank = 0\n"
        ));
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("distributed.rank[0].rank: rank 2 does not exist"));
        assert!(p[1].starts_with("distributed.rank[1].cpu_work_us"));
        assert!(p[2].starts_with("distributed.rank[2].rank: rank 0 already"));
        let p = problems(&format!("{stand_in}[distributed]\nranks = 0\n"));
        assert!(
            p[0].starts_with("distributed.ranks: expected 1 to 64"),
            "{p:?}"
        );
    }

    #[test]
    fn a_rank_override_appends_its_cpu_work() {
        let o = RankOverride {
            rank: 0,
            cpu_work_us: 300.0,
            storage: StorageSection::default(),
        };
        let chain = o.transforms(&crate::config::seed_transforms());
        assert_eq!(chain.len(), 4);
        assert!(matches!(&chain[3], TransformSpec::CpuWork(c) if c.us == 300.0));
        let none = RankOverride::default().transforms(&crate::config::seed_transforms());
        assert_eq!(none.len(), 3);
    }
}
