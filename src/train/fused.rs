//! The host side of the fused multi-tensor optimizer kernel (`kernels/optim.cu`, launched by
//! `cuda/optim.rs` in a CUDA build): its parameter blocks, field for field as the kernel reads
//! them, each step's scalars, and the checks that make a launch sound. Built in every build, so
//! its tests run on machines without CUDA.

use crate::config::{OptimizerKind, OptimizerSection};

/// As in optim.cu.
pub const MAX_TENSORS: usize = 32;
pub const CHUNK: u64 = 4096;

/// optim.cu's `TensorList`, field for field (`#[repr(C)]`: 1,416 bytes, no padding).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TensorList {
    pub p: [u64; MAX_TENSORS],
    pub g: [u64; MAX_TENSORS],
    pub m: [u64; MAX_TENSORS],
    pub v: [u64; MAX_TENSORS],
    pub n: [u64; MAX_TENSORS],
    pub first_block: [u32; MAX_TENSORS + 1],
    pub count: u32,
}

/// optim.cu's `AdamArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamArgs {
    beta1: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    inv_bc2_sqrt: f32,
    eps: f32,
    step_size: f32,
    weight_decay: f32,
    decay_factor: f32,
    l2: i32,
    decoupled: i32,
}

/// optim.cu's `SgdArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdArgs {
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    l2: i32,
    use_momentum: i32,
    nesterov: i32,
}

/// One step's rule with its scalars, each computed in f64 and rounded to f32 exactly as
/// candle's path rounds it (a tensor times an f64 is an affine op with an f32 factor).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    Adam(AdamArgs),
    Sgd(SgdArgs),
}

impl Rule {
    /// The rule of `o` at step `step` (1 for the first).
    pub fn at(o: &OptimizerSection, step: i32) -> Rule {
        let (lr, wd) = (o.lr, o.weight_decay);
        match o.kind {
            OptimizerKind::Adam | OptimizerKind::Adamw => {
                let [b1, b2] = o.betas;
                let bc1 = 1.0 - b1.powi(step);
                let bc2_sqrt = (1.0 - b2.powi(step)).sqrt();
                let adamw = o.kind == OptimizerKind::Adamw;
                Rule::Adam(AdamArgs {
                    beta1: b1 as f32,
                    one_minus_beta1: (1.0 - b1) as f32,
                    beta2: b2 as f32,
                    one_minus_beta2: (1.0 - b2) as f32,
                    inv_bc2_sqrt: (1.0 / bc2_sqrt) as f32,
                    eps: o.eps as f32,
                    step_size: (lr / bc1) as f32,
                    weight_decay: wd as f32,
                    decay_factor: (1.0 - lr * wd) as f32,
                    l2: i32::from(!adamw && wd != 0.0),
                    decoupled: i32::from(adamw && wd != 0.0),
                })
            }
            OptimizerKind::Sgd => Rule::Sgd(SgdArgs {
                lr: lr as f32,
                momentum: o.momentum as f32,
                weight_decay: wd as f32,
                l2: i32::from(wd != 0.0),
                use_momentum: i32::from(o.momentum != 0.0),
                nesterov: i32::from(o.nesterov),
            }),
        }
    }

    /// Whether the rule keeps a first buffer (moment or momentum) and a second moment.
    pub fn buffers(o: &OptimizerSection) -> (bool, bool) {
        match o.kind {
            OptimizerKind::Adam | OptimizerKind::Adamw => (true, true),
            OptimizerKind::Sgd => (o.momentum != 0.0, false),
        }
    }
}

impl TensorList {
    pub fn empty() -> TensorList {
        TensorList {
            p: [0; MAX_TENSORS],
            g: [0; MAX_TENSORS],
            m: [0; MAX_TENSORS],
            v: [0; MAX_TENSORS],
            n: [0; MAX_TENSORS],
            first_block: [0; MAX_TENSORS + 1],
            count: 0,
        }
    }
}

/// Every buffer the kernel writes (p, m, v) overlaps no other buffer of the launch.
pub fn check_disjoint(l: &TensorList) -> Result<(), String> {
    let n = l.count as usize;
    let mut ranges: Vec<(u64, u64, bool)> = Vec::with_capacity(4 * n);
    for i in 0..n {
        let len = 4 * l.n[i];
        for (ptr, written) in [
            (l.p[i], true),
            (l.g[i], false),
            (l.m[i], true),
            (l.v[i], true),
        ] {
            if ptr != 0 && len > 0 {
                ranges.push((ptr, ptr + len, written));
            }
        }
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        let ((_, end, a), (start, _, b)) = (w[0], w[1]);
        if start < end && (a || b) {
            return Err("two of the update's buffers overlap".into());
        }
    }
    Ok(())
}

/// The buffers the rule reads are there.
pub fn check_buffers(l: &TensorList, rule: Rule) -> Result<(), String> {
    let n = l.count as usize;
    let (first, second) = match rule {
        Rule::Adam(_) => (true, true),
        Rule::Sgd(a) => (a.use_momentum != 0, false),
    };
    let missing = (0..n).any(|i| (first && l.m[i] == 0) || (second && l.v[i] == 0));
    if missing {
        return Err("a state buffer the rule needs is missing".into());
    }
    Ok(())
}

/// optim.cu's arithmetic on the host, statement for statement (f32, no fused multiply-adds),
/// for tests: it must agree with candle's path bit for bit on the CPU.
#[cfg(test)]
pub fn emulate(rule: Rule, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    for i in 0..p.len() {
        let mut pi = p[i];
        let mut gi = g[i];
        match rule {
            Rule::Adam(a) => {
                if a.l2 != 0 {
                    gi += pi * a.weight_decay;
                }
                if a.decoupled != 0 {
                    pi *= a.decay_factor;
                }
                let mi = m[i] * a.beta1 + gi * a.one_minus_beta1;
                let vi = v[i] * a.beta2 + (gi * gi) * a.one_minus_beta2;
                let denom = vi.sqrt() * a.inv_bc2_sqrt + a.eps;
                p[i] = pi - (mi / denom) * a.step_size;
                m[i] = mi;
                v[i] = vi;
            }
            Rule::Sgd(a) => {
                if a.l2 != 0 {
                    gi += pi * a.weight_decay;
                }
                if a.use_momentum != 0 {
                    let b = m[i] * a.momentum + gi;
                    m[i] = b;
                    gi = if a.nesterov != 0 {
                        gi + b * a.momentum
                    } else {
                        b
                    };
                }
                p[i] = pi - gi * a.lr;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_parameters_have_optim_cu_s_layout() {
        assert_eq!(std::mem::size_of::<TensorList>(), 5 * 8 * 32 + 4 * 33 + 4);
        assert_eq!(std::mem::size_of::<AdamArgs>(), 44);
        assert_eq!(std::mem::size_of::<SgdArgs>(), 24);
    }

    #[test]
    fn overlapping_written_buffers_are_refused() {
        let mut l = TensorList::empty();
        l.count = 2;
        l.n[..2].copy_from_slice(&[10, 10]);
        l.p[..2].copy_from_slice(&[1000, 2000]);
        l.g[..2].copy_from_slice(&[3000, 4000]);
        assert!(check_disjoint(&l).is_ok());
        l.g[1] = 1020; // inside p[0] (40 bytes from 1000)
        assert!(check_disjoint(&l).is_err());
        l.g[1] = 4000;
        l.m[..2].copy_from_slice(&[5000, 5000]);
        assert!(check_disjoint(&l).is_err());
        let sgd = Rule::at(
            &OptimizerSection {
                kind: OptimizerKind::Sgd,
                momentum: 0.9,
                ..OptimizerSection::default()
            },
            1,
        );
        l.m = [0; MAX_TENSORS];
        assert!(check_buffers(&l, sgd).is_err());
    }
}
