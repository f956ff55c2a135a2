// ht::nn::check_gradients: analytic gradients of a module or a model against
// central finite differences of its forward (the contract is in the header).
#include "ht/nn/gradient_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <unordered_set>

#include "ht/core/error.h"
#include "ht/nn/model.h"
#include "ht/nn/module.h"

namespace ht::nn {

namespace gradient_check_impl {  // a namespace of its own: the unity build shares file-local names

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_options(const GradientCheckOptions& o) {
  HT_CHECK_ARG(std::isfinite(o.step) && o.step > 0.f,
               "gradient check: the step h must be positive and finite, got {} (1e-2 suits values of order 1)", o.step);
  HT_CHECK_ARG(o.atol >= 0.0 && o.rtol >= 0.0 && o.atol + o.rtol > 0.0,
               "gradient check: atol ({}) and rtol ({}) must be >= 0 and not both 0 (no f32 difference is exact)",
               o.atol, o.rtol);
}

void require_cpu(const Tensor& t, const std::string& what) {
  HT_CHECK_ARG(t.defined(),
               "gradient check: {} has no values (a ZeRO-3 parameter not gathered, or an undefined "
               "tensor): check a bare module whose values are present",
               what);
  HT_CHECK_ARG(t.device().is_cpu(),
               "gradient check: {} is on {}; the check runs on the CPU: move the module and "
               "its input there (a CUDA op is checked against its CPU reference instead)",
               what, t.device().str());
}

void require_f32_cpu(const Tensor& t, const std::string& what) {
  require_cpu(t, what);
  HT_CHECK_ARG(t.dtype() == DType::kF32,
               "gradient check: {} is {}; finite differences need f32 (f16 and bf16 "
               "round a step of 1e-2 away): build the module in f32 to check it",
               what, dtype_name(t.dtype()));
}

// Runs prepare, when given, on a new Context, then `fn` with it.
template <typename Fn>
auto with_context(const GradientCheckOptions& o, bool save, Fn&& fn) {
  Context ctx(Device::cpu(), save);
  if (o.prepare) o.prepare(ctx);
  return fn(ctx);
}

// sum_i y_i r_i in double.
double project(const Tensor& y, const std::vector<float>& r) {
  require_f32_cpu(y, "the module's output");
  HT_CHECK_ARG(std::size_t(y.numel()) == r.size(),
               "gradient check: the module's output changed size between forwards ({} elements, then {}): its "
               "forward must be deterministic",
               r.size(), y.numel());
  const float* v = y.data<float>();
  double s = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) s += double(v[i]) * double(r[i]);
  return s;
}

// Up to k distinct flat indices of [0, n), ascending; all of them when k <= 0
// or n <= k. Floyd's algorithm: k draws, whatever n.
std::vector<std::int64_t> pick_elements(std::int64_t n, int k, std::mt19937_64& rng) {
  std::vector<std::int64_t> out;
  if (k <= 0 || n <= k) {
    for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::unordered_set<std::int64_t> chosen;
  for (std::int64_t j = n - k; j < n; ++j) {
    const std::int64_t t = std::uniform_int_distribution<std::int64_t>(0, j)(rng);
    chosen.insert(chosen.count(t) ? j : t);
  }
  out.assign(chosen.begin(), chosen.end());
  std::sort(out.begin(), out.end());
  return out;
}

// Writes a probed value back when the probe ends, also when a forward throws.
class Restore {
 public:
  explicit Restore(float* at) : at_(at), saved_(*at) {}
  ~Restore() { *at_ = saved_; }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;
  float saved() const { return saved_; }

 private:
  float* at_;
  float saved_;
};

// Adds one element's comparison to `c`.
void compare(TensorGradientCheck& c, std::int64_t index, double analytic, double numeric,
             const GradientCheckOptions& o) {
  const double abs_err = std::abs(analytic - numeric);
  const bool finite = std::isfinite(analytic) && std::isfinite(numeric);
  const double rel_err = !finite ? kInf : numeric != 0.0 ? abs_err / std::abs(numeric) : abs_err > 0.0 ? kInf : 0.0;
  const double ratio = !finite ? kInf : abs_err / (o.atol + o.rtol * std::abs(numeric));
  ++c.probed;
  c.max_abs_error = std::max(c.max_abs_error, finite ? abs_err : kInf);
  c.max_rel_error = std::max(c.max_rel_error, rel_err);
  if (c.worst_index < 0 || ratio > c.worst_ratio) {
    c.worst_ratio = ratio;
    c.worst_index = index;
    c.worst_analytic = analytic;
    c.worst_numeric = numeric;
  }
  if (!(ratio <= 1.0)) c.ok = false;
}

// Checks `values` (perturbed in place, restored exactly) against `analytic`
// (undefined: zeros, a parameter that got no gradient) with `scalar`, the
// checked scalar from a forward that does not save.
TensorGradientCheck check_tensor(const std::string& name, const Tensor& values, const Tensor& analytic,
                                 const std::function<double()>& scalar, const GradientCheckOptions& o,
                                 std::uint64_t ordinal) {
  TensorGradientCheck c;
  c.name = name;
  c.numel = values.numel();
  if (analytic.defined()) {
    if (analytic.numel() != values.numel() || analytic.dtype() != DType::kF32 || !analytic.device().is_cpu()) {
      c.problem = fmt::format("its gradient is {}, the values {}: they should match", analytic.str(), values.str());
      c.ok = false;
      return c;
    }
  }
  std::seed_seq seq{std::uint32_t(o.seed), std::uint32_t(o.seed >> 32), std::uint32_t(ordinal)};
  std::mt19937_64 rng(seq);
  float* v = values.data<float>();
  const float* g = analytic.defined() ? analytic.data<float>() : nullptr;
  for (const std::int64_t i : pick_elements(c.numel, o.elements_per_tensor, rng)) {
    double numeric = 0.0;
    {
      Restore keep(v + i);
      const float plus = keep.saved() + o.step, minus = keep.saved() - o.step;
      // The step as f32 holds it: v + h - (v - h) is not 2h exactly.
      const double width = double(plus) - double(minus);
      if (!(width > 0.0)) {
        c.problem = fmt::format(
            "element {} holds {}, where a step of {} does not change an f32: choose a larger "
            "step (GradientCheckOptions::step) or smaller values",
            i, keep.saved(), o.step);
        c.ok = false;
        return c;
      }
      v[i] = plus;
      const double up = scalar();
      v[i] = minus;
      const double down = scalar();
      numeric = (up - down) / width;
    }
    compare(c, i, g ? double(g[i]) : 0.0, numeric, o);
  }
  return c;
}

TensorGradientCheck problem(const std::string& name, const Tensor& values, std::string what) {
  TensorGradientCheck c;
  c.name = name;
  c.numel = values.numel();
  c.problem = std::move(what);
  c.ok = false;
  return c;
}

// What both overloads do around their own forward: checks the options and
// places, runs `analytic` once in a saving Context (it returns the input's
// gradient, maybe undefined, and sets the scalar), then compares the input
// (when checked; `dx_required`: an undefined gradient fails) and every
// parameter with `probe`, the scalar from a forward in a Context that does
// not save. The input is copied when checked: the copy is perturbed, never
// the caller's tensor.
using Analytic = std::function<Tensor(Context&, const Tensor& x, double& scalar)>;
using Probe = std::function<double(Context&, const Tensor& x)>;
GradientCheckResult run(Module& m, const Tensor& x_in, bool dx_required, const GradientCheckOptions& o,
                        const Analytic& analytic, const Probe& probe) {
  check_options(o);
  require_cpu(x_in, "the input");
  const std::vector<Parameter*> params = m.parameters();
  for (const Parameter* p : params) require_f32_cpu(p->data(), fmt::format("parameter {}", p->name()));
  const bool input_checked = o.check_input && x_in.dtype() == DType::kF32;
  const Tensor x = input_checked ? x_in.clone() : x_in;

  GradientCheckResult r;
  r.atol = o.atol, r.rtol = o.rtol, r.step = o.step;
  m.zero_grad();
  const Tensor dx = with_context(o, true, [&](Context& ctx) { return analytic(ctx, x, r.scalar); });
  const std::function<double()> scalar = [&] {
    return with_context(o, false, [&](Context& ctx) { return probe(ctx, x); });
  };

  if (input_checked) {
    if (dx.defined())
      r.tensors.push_back(check_tensor("input", x, dx, scalar, o, 0));
    else if (dx_required)
      r.tensors.push_back(problem("input", x,
                                  "backward returned no gradient for the f32 input (a module's backward "
                                  "returns dL/dx; set check_input false if this one cannot)"));
  }
  // The analytic gradients copied before any probe: the probes' forwards
  // should leave them alone, and the copy makes no such assumption.
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    const Tensor grad = p.raw_grad().defined() ? p.grad().clone() : Tensor();
    r.tensors.push_back(check_tensor(p.name(), p.data(), grad, scalar, o, i + 1));
  }
  r.ok = std::all_of(r.tensors.begin(), r.tensors.end(), [](const TensorGradientCheck& c) { return c.ok; });
  return r;
}

// The projection r of a module's output: uniform in [-1, 1] from the seed.
std::vector<float> projection(std::int64_t n, std::uint64_t seed) {
  std::seed_seq seq{std::uint32_t(seed), std::uint32_t(seed >> 32), 0x70726f6au};  // "proj"
  std::mt19937_64 rng(seq);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  std::vector<float> r(static_cast<std::size_t>(n));
  for (float& ri : r) ri = unit(rng);
  return r;
}

}  // namespace gradient_check_impl

GradientCheckResult check_gradients(Module& module, const Tensor& x, const GradientCheckOptions& options) {
  namespace impl = gradient_check_impl;
  std::vector<float> r;  // drawn at the first forward, when the output's size is known
  return impl::run(
      module, x, /*dx_required=*/true, options,
      [&](Context& ctx, const Tensor& input, double& scalar) {
        const Tensor y = module.forward(ctx, input);
        impl::require_f32_cpu(y, "the module's output");
        r = impl::projection(y.numel(), options.seed);
        scalar = impl::project(y, r);
        return module.backward(ctx, Tensor::from_vector(r, y.shape()));  // dS/dy = r
      },
      [&](Context& ctx, const Tensor& input) { return impl::project(module.forward(ctx, input), r); });
}

GradientCheckResult check_gradients(Model& model, const Tensor& input, const Tensor& target,
                                    const GradientCheckOptions& options) {
  HT_CHECK_ARG(model.last_stage(),
               "gradient check: the model is pipeline stage {} of {}, which has no loss: check the whole model (one "
               "stage), or the last stage",
               model.stage().rank, model.stage().size);
  gradient_check_impl::require_cpu(target, "the target");
  return gradient_check_impl::run(
      model, input, /*dx_required=*/false, options,
      [&](Context& ctx, const Tensor& x, double& loss) {
        loss = model.forward_loss(ctx, x, target).value;
        return model.backward_loss(ctx, 1.f);
      },
      [&](Context& ctx, const Tensor& x) { return model.forward_loss(ctx, x, target).value; });
}

std::string GradientCheckResult::report(int max_tensors) const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::int64_t probed = 0;
  int failed = 0;
  for (const TensorGradientCheck& c : tensors) probed += c.probed, failed += c.ok ? 0 : 1;
  std::string out = fmt::format(
      "gradient check {}: {} of {} tensors out of tolerance (|analytic - numeric| <= {:g} + {:g} |numeric|, h {:g}; "
      "{} elements probed, scalar {:.6g})\n",
      ok ? "passed" : "FAILED", failed, tensors.size(), atol, rtol, step, probed, scalar);
  // Failures first, then the nearest to their tolerance.
  std::vector<const TensorGradientCheck*> order;
  for (const TensorGradientCheck& c : tensors) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](const TensorGradientCheck* a, const TensorGradientCheck* b) {
    if (a->ok != b->ok) return !a->ok;
    return a->worst_ratio > b->worst_ratio;
  });
  for (int i = 0; i < int(order.size()) && i < max_tensors; ++i) {
    const TensorGradientCheck& c = *order[std::size_t(i)];
    const double diff = std::abs(c.worst_analytic - c.worst_numeric);
    if (!c.problem.empty())
      out += fmt::format("  {}: {}\n", c.name, c.problem);
    else if (c.probed == 0)
      out += fmt::format("  {}: no elements\n", c.name);
    else
      out += fmt::format(
          "  {}: {:.3g}x its tolerance at element {}: analytic {:.6g} numeric {:.6g} (abs {:.3g}, rel {:.3g}); {} of "
          "{} probed{}\n",
          c.name, c.worst_ratio, c.worst_index, c.worst_analytic, c.worst_numeric, diff,
          c.worst_numeric != 0.0 ? diff / std::abs(c.worst_numeric)
          : diff > 0.0           ? kInf
                                 : 0.0,
          c.probed, c.numel, c.ok ? "" : " FAILED");
  }
  if (int(order.size()) > max_tensors)
    out += fmt::format("  ... and {} more tensors{}\n", int(order.size()) - max_tensors,
                       failed > max_tensors ? fmt::format(" ({} of them failed)", failed - max_tensors) : "");
  return out;
}

}  // namespace ht::nn
