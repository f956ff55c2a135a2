// ht::nn::check_gradients: a module's hand-written backward (or a model's
// backward_loss) against central finite differences of its own forward, for
// any nn::Module a user writes. f32 on the CPU.
//
// What is checked. For a Module m and input x, the checked scalar is a fixed
// random projection of the output,
//     S(theta, x) = sum_i y_i r_i,   y = m.forward(ctx, x),
// with r drawn once from options.seed (uniform in [-1, 1], the output's
// shape), so a module without a loss of its own can be checked: backward is
// run once with dy = r, and dS/dv it returns (parameter gradients, and the
// input's) is compared, at chosen elements v, with
//     numeric = (S(v + h) - S(v - h)) / (2h)
// where h is options.step and 2h is taken as the f32 values v + h and v - h
// really differ. For an nn::Model the scalar is its own loss (forward_loss,
// and backward_loss with grad_scale 1), and its input is checked when
// backward_loss returns a gradient for it.
//
// Which elements. Every parameter of m.parameters() (each once, tied ones
// where first registered), and the input when it is f32 and
// options.check_input: up to options.elements_per_tensor distinct elements
// of each, drawn from options.seed (all of a tensor that has no more). The
// same seed probes the same elements.
//
// Tolerance. An element passes when
//     |analytic - numeric| <= atol + rtol * |numeric|;
// NaN or infinity on either side fails. The result says, per tensor, the
// worst absolute and relative error and how close the worst element came to
// its tolerance; it does not assert: a test asserts result.ok and prints
// result.report().
//
// Cost: one forward and backward, then two forwards per probed element:
// 2 x sum over tensors of min(numel, elements_per_tensor) forwards.
//
// What it does to the module. Each probed value is perturbed in place and
// written back bit for bit before the next (also when a forward throws); the
// input is copied, never written. Every parameter's gradient is zeroed
// first and holds the analytic gradient of the checked scalar afterwards.
// The forwards that probe run in a Context that does not save
// (Context(Device::cpu(), false)), as evaluation does; the forward that backward
// follows saves. Each Context is new, and options.prepare is called on it
// before its forward: that is where side inputs go (a padding mask,
// ctx.set_side_input("key_mask", mask)), the same for every forward.
//
// Requirements: the module's forward is deterministic (the same input and
// parameters give the same output); parameters and input on the CPU with
// their values present, parameters f32; the output f32. Check a bare
// module: hooks set by parallel wrappers (gradient reductions, ZeRO-3
// gathers) would run on every forward and backward. Not thread-safe with
// other users of the module. Throws kInvalidArgument for bad options and
// naming what is not f32 or not on the CPU (the output: after the first
// forward); passes on whatever the module's forward or backward throws,
// with every value restored.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ht/core/tensor.h"
#include "ht/nn/context.h"

namespace ht::nn {

class Module;
class Model;

struct GradientCheckOptions {
  /// The finite-difference step h, in the units of the values probed. In f32
  /// a central difference errs by about h^2 |f'''| / 6 (truncation) plus
  /// 6e-8 |S| / h (rounding): 1e-2 suits values and outputs of order 1.
  float step = 1e-2f;
  /// An element passes when |analytic - numeric| <= atol + rtol |numeric|.
  double atol = 1e-3;
  double rtol = 2e-2;
  /// Elements probed per parameter (and per input); a tensor with no more
  /// is probed whole; <= 0 probes every element.
  int elements_per_tensor = 16;
  /// Draws the projection r and the elements probed.
  std::uint64_t seed = 0;
  /// Also check the gradient backward returns for the input, when the input
  /// is f32. A module whose backward returns none then fails (its contract
  /// is to return it); a model's backward_loss may return none (on the
  /// first stage it does), and then the input is not checked.
  bool check_input = true;
  /// Called on every Context before the forward it runs (the one backward
  /// follows and each probe's): sets side inputs such as "key_mask".
  std::function<void(Context&)> prepare;
};

/// One tensor's check: a parameter (by its name) or the input ("input").
struct TensorGradientCheck {
  std::string name;
  std::int64_t numel = 0;   // elements in the tensor
  std::int64_t probed = 0;  // elements compared
  /// Over the probed elements: the largest |analytic - numeric|, and
  /// |analytic - numeric| / |numeric| (infinite where numeric is 0 and
  /// they differ).
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  /// The worst element: the largest |analytic - numeric| / (atol + rtol
  /// |numeric|) (above 1 fails; infinite for a NaN or infinity), its flat
  /// index and both values.
  double worst_ratio = 0.0;
  std::int64_t worst_index = -1;
  double worst_analytic = 0.0;
  double worst_numeric = 0.0;
  /// Why the tensor could not be compared, if it could not ("backward
  /// returned no gradient for the input"); such a tensor fails.
  std::string problem;
  bool ok = true;
};

struct GradientCheckResult {
  /// The input first (when checked), then the parameters in
  /// Module::parameters() order.
  std::vector<TensorGradientCheck> tensors;
  /// Every tensor passed.
  bool ok = true;
  /// The checked scalar at the unperturbed point (the loss, for a model).
  double scalar = 0.0;
  /// The options it ran with (for report()).
  double atol = 0.0, rtol = 0.0, step = 0.0;
  /// A few lines for a person: passed or failed, the rule, then the
  /// failed tensors and the nearest to their tolerance first (at most
  /// `max_tensors`), each with its worst element's index, values and errors:
  ///   gradient check FAILED: 1 of 4 tensors out of tolerance (|analytic - numeric| <= 0.001 + 0.02 |numeric|,
  ///   h 0.01; 36 elements probed, scalar 0.526161)
  ///     scale.weight: 24.7x its tolerance at element 1: analytic 2.02442 numeric 4.04885 (abs 2.02, rel 0.5);
  ///     4 of 4 probed FAILED
  ///     fc.weight: 0.00218x its tolerance at element 5: analytic 0.153079 numeric 0.153088 (...); 16 of 16 probed
  /// (one line per tensor; wrapped here).
  std::string report(int max_tensors = 5) const;
};

/// Checks `module`'s backward at input `x` (see the top). The input may be
/// any dtype (token ids are i32: then only the parameters are checked).
GradientCheckResult check_gradients(Module& module, const Tensor& x, const GradientCheckOptions& options = {});

/// Checks a model's loss gradient: forward_loss(ctx, input, target), then
/// backward_loss(ctx, 1). The model is the last pipeline stage (a whole
/// model is); throws kInvalidArgument for another stage, which has no loss.
GradientCheckResult check_gradients(Model& model, const Tensor& input, const Tensor& target,
                                    const GradientCheckOptions& options = {});

}  // namespace ht::nn
