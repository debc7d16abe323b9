//! Element-wise activations and their derivatives, shared by the sequence ops, the mixture of
//! experts and the executor's element-wise kernels.

/// `sqrt(2 / pi)`, of GELU's tanh approximation.
const GELU_C: f32 = 0.797_884_6;

/// GELU, tanh approximation (GPT-2's `gelu_new`; within 1e-3 of the exact form).
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (GELU_C * (x + 0.044_715 * x * x * x)).tanh())
}

/// The derivative of [`gelu`].
pub(crate) fn gelu_grad(x: f32) -> f32 {
    let t = (GELU_C * (x + 0.044_715 * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * 0.044_715 * x * x)
}

/// SiLU, `x sigma(x)`.
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// The derivative of [`silu`].
pub(crate) fn silu_grad(x: f32) -> f32 {
    let s = 1.0 / (1.0 + (-x).exp());
    s * (1.0 + x * (1.0 - s))
}
