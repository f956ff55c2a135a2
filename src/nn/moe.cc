// ht::nn::MoE.
#include "ht/nn/moe.h"

#include "ht/ops/elementwise.h"
#include "ht/ops/index_select.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace ht::nn {
namespace {

// The forward's saved tensors, in this order, then each expert's output.
enum Saved { kLogits, kScores, kChoice, kChosen, kWeights, kPosition, kLosses, kExpertOutputs };

// `count` rows of `src` (width `w`) at `rows`, gathered.
// How many of the token choices `choice` (N, top_k) went to each expert.
std::vector<std::int64_t> choices_per_expert(const Tensor& choice, int experts) {
  std::vector<std::int64_t> counts(std::size_t(experts), 0);
  for (std::int64_t i = 0; i < choice.numel(); ++i) ++counts[std::size_t(choice.data<std::int32_t>()[i])];
  return counts;
}

// The rows `rows` of src (N, width), gathered.
Tensor gather_rows(const Tensor& src, const std::vector<std::int32_t>& rows) {
  Tensor out = Tensor::empty({std::int64_t(rows.size()), src.size(1)}, src.dtype(), src.device());
  if (!rows.empty()) ops::index_select(src, 0, Tensor::from_vector(rows, {std::int64_t(rows.size())}), out);
  return out;
}

}  // namespace

void MoEOptions::validate() const {
  HT_CHECK(dim > 0 && hidden > 0, ErrorKind::kConfig, "MoE: dim {} and hidden {} must be > 0", dim, hidden);
  HT_CHECK(experts >= 1, ErrorKind::kConfig, "MoE: {} experts; give at least 1", experts);
  HT_CHECK(top_k >= 1 && top_k <= experts, ErrorKind::kConfig,
           "MoE: top_k {} must lie in [1, experts] = [1, {}]: a token chooses that many distinct experts", top_k,
           experts);
  HT_CHECK(shared_experts >= 0, ErrorKind::kConfig, "MoE: {} shared experts; give 0 or more", shared_experts);
  HT_CHECK(std::isfinite(capacity_factor) && capacity_factor >= 0, ErrorKind::kConfig,
           "MoE: capacity factor {}; give 0 (dropless) or more", capacity_factor);
  HT_CHECK(std::isfinite(aux_loss_coeff) && aux_loss_coeff >= 0 && std::isfinite(z_loss_coeff) && z_loss_coeff >= 0,
           ErrorKind::kConfig, "MoE: the auxiliary loss coefficients ({}, z {}) must be finite and >= 0",
           aux_loss_coeff, z_loss_coeff);
}

MoE::MoE(std::string name, const MoEOptions& options, Device device)
    : Module(std::move(name)), options_((options.validate(), options)) {
  router_ = &add_module(std::make_unique<Linear>("router", options_.dim, options_.experts, /*bias=*/false, device));
  for (int e = 0; e < options_.experts; ++e)
    experts_.push_back(&add_module(
        std::make_unique<SwiGLUMLP>(fmt::format("expert{}", e), options_.dim, options_.hidden, device)));
  if (options_.shared_experts > 0)
    shared_ = &add_module(
        std::make_unique<SwiGLUMLP>("shared", options_.dim, options_.shared_experts * options_.hidden, device));
}

Tensor MoE::forward_impl(Context& ctx, const Tensor& x) {
  HT_CHECK(x.device().is_cpu() && x.dtype() == DType::kF32, ErrorKind::kNotSupported,
           "MoE '{}': the routing runs on the host, in f32, so far; got {} on {}: train a model with MoE layers on "
           "the CPU in fp32",
           name(), dtype_name(x.dtype()), x.device().str());
  HT_CHECK(x.ndim() >= 1 && x.size(-1) == options_.dim, ErrorKind::kShapeMismatch,
           "MoE '{}': input {} does not end in the width {}", name(), shape_str(x.shape()), options_.dim);
  const Tensor x2 = x.flatten_rows();
  const std::int64_t n = x2.size(0), width = options_.dim;
  const int experts = options_.experts, k = options_.top_k;
  const Tensor logits = router_->forward(ctx, x2);
  const float* l = logits.data<float>();

  // Scores, and each token's top_k experts by score (ties: the lower index).
  Tensor scores = Tensor::empty({n, experts}, DType::kF32);
  Tensor choice = Tensor::empty({n, k}, DType::kI32), chosen = Tensor::empty({n, k}, DType::kF32),
         weights = Tensor::empty({n, k}, DType::kF32), position = Tensor::empty({n, k}, DType::kI32);
  float* s = scores.data<float>();
  std::int32_t* c = choice.data<std::int32_t>();
  float* raw = chosen.data<float>();
  float* w = weights.data<float>();
  std::vector<std::vector<std::int32_t>> rows(std::size_t(experts), std::vector<std::int32_t>{});
  std::int32_t* pos = position.data<std::int32_t>();
  std::vector<int> order(static_cast<std::size_t>(experts));
  double z_sum = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    const float* lt = l + t * experts;
    float* st = s + t * experts;
    const float top = *std::max_element(lt, lt + experts);
    float sum = 0;
    for (int e = 0; e < experts; ++e) sum += std::exp(lt[e] - top);
    const float lse = top + std::log(sum);
    z_sum += double(lse) * double(lse);
    for (int e = 0; e < experts; ++e)
      st[e] = options_.score == RouterScore::kSoftmax ? std::exp(lt[e] - lse) : 1.f / (1.f + std::exp(-lt[e]));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return st[a] > st[b] || (st[a] == st[b] && a < b); });
    float picked = 0;
    for (int j = 0; j < k; ++j) picked += st[order[std::size_t(j)]];
    for (int j = 0; j < k; ++j) {
      const int e = order[std::size_t(j)];
      c[t * k + j] = e;
      raw[t * k + j] = st[e];
      w[t * k + j] = options_.renormalize ? st[e] / picked : st[e];
    }
  }
  // Each expert's rows, in token order; with a capacity, a sequence's
  // choices of an expert past it are dropped (position -1), in order of
  // position and then of score.
  const std::int64_t sequence = x.ndim() >= 3 ? x.size(-2) : n;
  const std::int64_t capacity =
      options_.capacity_factor > 0
          ? std::int64_t(std::ceil(double(options_.capacity_factor) * double(sequence * k) / double(experts)))
          : n * k;
  std::vector<std::int64_t> taken(static_cast<std::size_t>(experts), 0);
  routing_.dropped = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    if (t % sequence == 0) std::fill(taken.begin(), taken.end(), 0);
    for (int j = 0; j < k; ++j) {
      const int e = c[t * k + j];
      if (taken[std::size_t(e)]++ >= capacity) {
        pos[t * k + j] = -1;
        ++routing_.dropped;
        continue;
      }
      pos[t * k + j] = std::int32_t(rows[std::size_t(e)].size());
      rows[std::size_t(e)].push_back(std::int32_t(t));
    }
  }

  // The auxiliary losses' values (their gradients come in backward); f_e
  // counts the router's choices, dropped or not.
  routing_.choice.assign(c, c + n * k);
  routing_.tokens_per_expert.assign(std::size_t(experts), 0);
  const std::vector<std::int64_t> choices = choices_per_expert(choice, experts);
  double balance = 0;
  for (int e = 0; e < experts; ++e) {
    routing_.tokens_per_expert[std::size_t(e)] = std::int64_t(rows[std::size_t(e)].size());
    double p = 0;
    for (std::int64_t t = 0; t < n; ++t) {
      const float* st = s + t * experts;
      const double norm = options_.score == RouterScore::kSoftmax ? 1.0 : std::accumulate(st, st + experts, 0.0);
      p += double(st[e]) / norm;
    }
    const double f = double(choices[std::size_t(e)]) / double(std::max<std::int64_t>(n * k, 1));
    balance += f * p / double(std::max<std::int64_t>(n, 1));
  }
  routing_.aux_loss = float(options_.aux_loss_coeff * experts * balance);
  routing_.z_loss = float(options_.z_loss_coeff * z_sum / double(std::max<std::int64_t>(n, 1)));

  // Every expert runs, on the rows that chose it (none, for some): each
  // parameter's gradient is then ready after backward, as data
  // parallelism's hooks expect.
  std::vector<Tensor> saved{logits,   scores,
                            choice,   chosen,
                            weights,  position,
                            Tensor::from_vector(std::vector<float>{routing_.aux_loss, routing_.z_loss}, {2})};
  std::vector<Tensor> outputs;
  for (int e = 0; e < experts; ++e)
    outputs.push_back(experts_[std::size_t(e)]->forward(ctx, gather_rows(x2, rows[std::size_t(e)])));
  Tensor y = Tensor::zeros({n, width}, DType::kF32);
  if (shared_) y.copy_from(shared_->forward(ctx, x2));
  float* yp = y.data<float>();
  for (std::int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      if (pos[t * k + j] < 0) continue;  // dropped
      const float* o = outputs[std::size_t(c[t * k + j])].data<float>() + std::int64_t(pos[t * k + j]) * width;
      const float wj = w[t * k + j];
      float* yt = yp + t * width;
      for (std::int64_t i = 0; i < width; ++i) yt[i] += wj * o[i];
    }
  if (ctx.saving()) {
    saved.insert(saved.end(), outputs.begin(), outputs.end());
    ctx.save(this, std::move(saved));
  }
  return y.view(x.shape());
}

Tensor MoE::backward_impl(Context& ctx, const Tensor& dy) {
  const std::vector<Tensor>& saved = ctx.saved(this);
  const Tensor &scores = saved[kScores], &logits = saved[kLogits];
  const std::int64_t n = scores.size(0), width = options_.dim;
  const int experts = options_.experts, k = options_.top_k;
  const bool aux = options_.aux_loss_coeff > 0 || options_.z_loss_coeff > 0;
  HT_CHECK(!aux || ctx.aux_loss_grad_scale(), ErrorKind::kNotSupported,
           "MoE '{}': its auxiliary losses need the factor the model's loss gradient takes "
           "(Context::set_aux_loss_grad_scale), and this backward has none: set it where you drive the model, or "
           "give aux_loss_coeff and z_loss_coeff 0",
           name());
  const float aux_scale = aux ? *ctx.aux_loss_grad_scale() : 0.f;
  if (aux) ctx.note_aux_loss_grads();
  step_load_.tokens_per_expert.resize(std::size_t(options_.experts), 0);
  for (std::int64_t i = 0; i < saved[kChoice].numel(); ++i) {
    if (saved[kPosition].data<std::int32_t>()[i] < 0)
      ++step_load_.dropped;
    else
      ++step_load_.tokens_per_expert[std::size_t(saved[kChoice].data<std::int32_t>()[i])];
  }
  step_load_.aux_loss += saved[kLosses].data<float>()[0];
  step_load_.z_loss += saved[kLosses].data<float>()[1];
  ++step_load_.micro_batches;
  const Tensor dy2 = dy.flatten_rows();
  const float* g = dy2.data<float>();
  const float* s = scores.data<float>();
  const std::int32_t* c = saved[kChoice].data<std::int32_t>();
  const float* raw = saved[kChosen].data<float>();
  const float* w = saved[kWeights].data<float>();
  const std::int32_t* pos = saved[kPosition].data<std::int32_t>();

  // The chosen weights' gradients, and each expert's output gradient.
  std::vector<float> dw(static_cast<std::size_t>(n * k));
  std::vector<Tensor> dys;
  std::vector<std::vector<std::int32_t>> rows(std::size_t(experts), std::vector<std::int32_t>{});
  for (int e = 0; e < experts; ++e) dys.push_back(Tensor::empty({saved[kExpertOutputs + e].size(0), width}, DType::kF32));
  for (std::int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = c[t * k + j];
      const std::int64_t at = pos[t * k + j];
      if (at < 0) {  // dropped: no output, no gradient through its weight
        dw[std::size_t(t * k + j)] = 0.f;
        continue;
      }
      const float* o = saved[std::size_t(kExpertOutputs + e)].data<float>() + at * width;
      const float* gt = g + t * width;
      float* de = dys[std::size_t(e)].data<float>() + at * width;
      double dot = 0;
      for (std::int64_t i = 0; i < width; ++i) {
        dot += double(gt[i]) * double(o[i]);
        de[i] = w[t * k + j] * gt[i];
      }
      dw[std::size_t(t * k + j)] = float(dot);
      rows[std::size_t(e)].push_back(std::int32_t(t));
    }

  // The experts' input gradients, added into the tokens' rows; the shared
  // experts' and the router's after, in the reverse order of the forward.
  Tensor dx = Tensor::zeros({n, width}, DType::kF32);
  float* dxp = dx.data<float>();
  for (int e = experts - 1; e >= 0; --e) {
    const Tensor de = experts_[std::size_t(e)]->backward(ctx, dys[std::size_t(e)]);
    const float* d = de.data<float>();
    const std::vector<std::int32_t>& r = rows[std::size_t(e)];
    for (std::size_t i = 0; i < r.size(); ++i) {
      float* row = dxp + std::int64_t(r[i]) * width;
      for (std::int64_t q = 0; q < width; ++q) row[q] += d[std::int64_t(i) * width + q];
    }
  }
  if (shared_) ops::add(dx, shared_->backward(ctx, dy2), dx);

  // The scores' gradients: from the chosen weights, then from the
  // load-balancing loss through P; then the logits', with the z-loss's.
  std::vector<double> dscore(static_cast<std::size_t>(n * experts), 0.0);
  for (std::int64_t t = 0; t < n; ++t) {
    double picked = 0, mixed = 0;
    for (int j = 0; j < k; ++j) {
      picked += raw[t * k + j];
      mixed += double(dw[std::size_t(t * k + j)]) * w[t * k + j];
    }
    for (int j = 0; j < k; ++j) {
      const double d = dw[std::size_t(t * k + j)];
      dscore[std::size_t(t * experts + c[t * k + j])] += options_.renormalize ? (d - mixed) / picked : d;
    }
  }
  const double tokens = double(std::max<std::int64_t>(n, 1));
  const std::vector<std::int64_t> choices = choices_per_expert(saved[kChoice], experts);
  // dLoss/dp_te: coefficient x E x f_e / N, the same for every token; f_e
  // from this forward's choices (not last_routing(): a pipeline holds
  // several in flight).
  std::vector<double> dp(static_cast<std::size_t>(experts));
  for (int e = 0; e < experts; ++e)
    dp[std::size_t(e)] = double(aux_scale) * options_.aux_loss_coeff * experts *
                         (double(choices[std::size_t(e)]) / (tokens * k)) / tokens;
  if (options_.aux_loss_coeff > 0)
    for (std::int64_t t = 0; t < n; ++t) {
      const float* st = s + t * experts;
      double* dt = dscore.data() + t * experts;
      if (options_.score == RouterScore::kSoftmax) {
        for (int e = 0; e < experts; ++e) dt[e] += dp[std::size_t(e)];
      } else {  // p = s / sum(s)
        const double sum = std::accumulate(st, st + experts, 0.0);
        double mixed = 0;
        for (int e = 0; e < experts; ++e) mixed += dp[std::size_t(e)] * st[e] / sum;
        for (int e = 0; e < experts; ++e) dt[e] += (dp[std::size_t(e)] - mixed) / sum;
      }
    }
  Tensor dlogits = Tensor::empty({n, experts}, DType::kF32);
  float* dl = dlogits.data<float>();
  const float* l = logits.data<float>();
  for (std::int64_t t = 0; t < n; ++t) {
    const float* st = s + t * experts;
    const double* dt = dscore.data() + t * experts;
    if (options_.score == RouterScore::kSoftmax) {
      double mixed = 0;
      for (int e = 0; e < experts; ++e) mixed += dt[e] * st[e];
      for (int e = 0; e < experts; ++e) dl[t * experts + e] = float(st[e] * (dt[e] - mixed));
    } else {
      for (int e = 0; e < experts; ++e) dl[t * experts + e] = float(dt[e] * st[e] * (1.0 - st[e]));
    }
    if (options_.z_loss_coeff > 0) {
      const float* lt = l + t * experts;
      const double top = *std::max_element(lt, lt + experts);
      double sum = 0;
      for (int e = 0; e < experts; ++e) sum += std::exp(double(lt[e]) - top);
      const double lse = top + std::log(sum);
      for (int e = 0; e < experts; ++e)
        dl[t * experts + e] += float(double(aux_scale) * options_.z_loss_coeff * 2.0 * lse *
                                     std::exp(double(lt[e]) - lse) / tokens);
    }
  }
  ops::add(dx, router_->backward(ctx, dlogits), dx);
  return dx.view(dy.shape());
}

MoEStepLoad MoE::take_step_load() {
  MoEStepLoad load = std::exchange(step_load_, {});
  load.tokens_per_expert.resize(std::size_t(options_.experts), 0);
  return load;
}

}  // namespace ht::nn
