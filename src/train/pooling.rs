//! candle's max poolings: the CPU path of the networks' pooling layers, and the reference the
//! CUDA pooling kernels are checked against on first use (`cuda/pool.rs`). A leaf of `train`.

use candle_core::{Result, Tensor};

/// 2×2 max pooling with stride 2, as two reductions over a reshaped view.
///
/// Not `Tensor::max_pool2d`: candle 0.11.1's backward for it multiplies the gradient by the
/// window's share of maxima (¼ for a unique maximum) instead of passing it through, so every
/// layer below a pooling received ¼ of its gradient (caught by the PyTorch gradient fixture).
/// The reductions' backward routes the gradient to the maximum, as PyTorch does; exact ties
/// are shared, which after ReLU only happens at zero, where ReLU's gradient is zero anyway.
/// An odd last row or column is dropped first, as PyTorch's floor mode does.
pub fn max_pool_2x2(x: &Tensor) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    let x = if h % 2 == 1 || w % 2 == 1 {
        x.narrow(2, 0, h / 2 * 2)?.narrow(3, 0, w / 2 * 2)?
    } else {
        x.clone()
    };
    x.reshape((n, c, h / 2, 2, w / 2, 2))?.max(5)?.max(3)
}

/// ResNet's stem pooling: 3×3 windows, stride 2, padding 1, over a ReLU's output.
///
/// Because the input is ≥ 0, zero padding gives the same maxima as PyTorch's −∞ padding. Each
/// of the nine window offsets is a strided view (a narrow, then every other row and column
/// through a reshape), and the maximum over the nine stacked views routes the gradient as
/// [`max_pool_2x2`] does.
pub fn max_pool_3x3_s2(x: &Tensor) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    let (oh, ow) = ((h - 1) / 2 + 1, (w - 1) / 2 + 1);
    // Rows -1 .. 2·oh: one before (the padding) and enough after for every window offset.
    let x = x
        .pad_with_zeros(2, 1, 2 * oh + 2 - h - 1)?
        .pad_with_zeros(3, 1, 2 * ow + 2 - w - 1)?;
    let mut views = Vec::with_capacity(9);
    for dy in 0..3 {
        let rows = x
            .narrow(2, dy, 2 * oh)?
            .reshape((n, c, oh, 2, 2 * ow + 2))?
            .narrow(3, 0, 1)?
            .squeeze(3)?;
        for dx in 0..3 {
            views.push(
                rows.narrow(3, dx, 2 * ow)?
                    .reshape((n, c, oh, ow, 2))?
                    .narrow(4, 0, 1)?
                    .squeeze(4)?,
            );
        }
    }
    Tensor::stack(&views, 0)?.max(0)
}
