//! CPU feature tokens. A value of [`Avx2`] can only be made by [`Avx2::detect`], which checks the
//! CPU at run time, so a function that takes one may enter AVX2 code: the proof travels with the
//! call instead of resting on a flag that a caller promises to have checked.

/// Proof that this CPU has AVX2 (zero-sized; copy it freely).
#[derive(Debug, Clone, Copy)]
pub struct Avx2(());

impl Avx2 {
    /// `Some` where the CPU has AVX2.
    pub fn detect() -> Option<Avx2> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Some(Avx2(()));
        }
        None
    }
}

/// The instruction set a kernel is compiled for. Kernels generic over it ask for the AVX2
/// token; monomorphised for [`Portable`] those paths fold away, for [`Avx2`] (inlined into a
/// `#[target_feature(enable = "avx2")]` function) the rest of the kernel vectorises with AVX2.
pub trait Isa: Copy {
    fn avx2(self) -> Option<Avx2>;
}

/// Baseline code for any CPU: no AVX2 paths.
#[derive(Debug, Clone, Copy)]
pub struct Portable;

impl Isa for Portable {
    fn avx2(self) -> Option<Avx2> {
        None
    }
}

impl Isa for Avx2 {
    fn avx2(self) -> Option<Avx2> {
        Some(self)
    }
}
