// ht::nn::MoE.
#include "ht/nn/moe.h"

#include "ht/ops/cast.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/index_select.h"
#include "ht/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace ht::nn {
namespace {

// The forward's saved tensors, in this order.
// On the host (f32, i32): the routing. On the input's device: the experts'
// outputs, each routed row's token and weight.
enum Saved {
  kLogits,
  kScores,
  kChoice,
  kChosen,
  kWeights,
  kPosition,
  kLosses,
  kExpertOutputs,
  kReceived,
  kTokenOfRow,
  kRowWeight
};

// How many of the token choices `choice` (N, top_k) went to each expert.
std::vector<std::int64_t> choices_per_expert(const Tensor& choice, int experts) {
  std::vector<std::int64_t> counts(std::size_t(experts), 0);
  for (std::int64_t i = 0; i < choice.numel(); ++i) ++counts[std::size_t(choice.data<std::int32_t>()[i])];
  return counts;
}

// The rows `index` (i32, on src's device) names of src (N, width), gathered.
Tensor gather_rows(const Tensor& src, const Tensor& index) {
  Tensor out = Tensor::empty({index.numel(), src.size(1)}, src.dtype(), src.device());
  if (index.numel() > 0) ops::index_select(src, 0, index, out);
  return out;
}

// `values` as a tensor of `shape` on `device` in `dtype` (the host's
// routing decisions going to the device).
template <typename T>
Tensor on_device(const std::vector<T>& values, const Shape& shape, Device device, DType dtype) {
  Tensor host = Tensor::from_vector(values, shape);
  Tensor there = device.is_cpu() ? host : host.to(device);
  if (dtype == there.dtype()) return there;
  Tensor out = Tensor::empty(shape, dtype, device);
  ops::cast(there, out);
  return out;
}

// `t` in f32 on the host (the router's logits and the routing weights'
// gradients, which the host routes by).
Tensor host_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t.to(Device::cpu());
  Tensor f32 = Tensor::empty(t.shape(), DType::kF32, t.device());
  ops::cast(t, f32);
  return f32.to(Device::cpu());
}

// Each of `rows` rows' weight, repeated across `width` columns: the factor
// the rows' outputs take when they are combined (a gather along the
// columns: no kernel of its own).
Tensor row_weights(const std::vector<float>& weights, std::int64_t width, Device device, DType dtype) {
  const std::int64_t rows = std::int64_t(weights.size());
  Tensor column = on_device(weights, {rows, 1}, device, dtype);
  Tensor out = Tensor::empty({rows, width}, dtype, device);
  if (rows > 0) ops::index_select(column, 1, on_device(std::vector<std::int32_t>(std::size_t(width), 0), {width}, device, DType::kI32), out);
  return out;
}

// Where each expert's rows start in rows laid out in expert order:
// offsets[e] = counts[0] + ... + counts[e - 1], with the total last.
std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> offsets(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
  return offsets;
}

// The rows this rank routes and their experts' outputs (or the gradients
// of both) are laid out by global expert, hence by the rank holding it;
// the rows a rank receives, by source rank and then by local expert
// (received[s * local + le] rows from rank s for local expert le). Each
// local expert runs on its rows from every rank at once: the expert-major
// order, by local expert and then by source rank.

// Rows per rank of `ranks`, each the sum of `local` consecutive counts.
std::vector<std::int64_t> rows_per_rank(const std::vector<std::int64_t>& counts, int ranks, int local) {
  std::vector<std::int64_t> out(std::size_t(ranks), 0);
  for (std::size_t i = 0; i < counts.size(); ++i) out[i / std::size_t(local)] += counts[i];
  return out;
}

// Rows per local expert, from every rank: the sum over s of received[s * local + le].
std::vector<std::int64_t> rows_per_local_expert(const std::vector<std::int64_t>& received, int ranks, int local) {
  std::vector<std::int64_t> out(std::size_t(local), 0);
  for (int s = 0; s < ranks; ++s)
    for (int le = 0; le < local; ++le) out[std::size_t(le)] += received[std::size_t(s * local + le)];
  return out;
}

// `rows` (width w) sent over `group`: send[r] rows to rank r, recv[r] rows from rank r.
Tensor exchange(comm::Communicator& group, const Tensor& rows, const std::vector<std::int64_t>& send,
                const std::vector<std::int64_t>& recv) {
  const std::int64_t width = rows.size(1);
  std::vector<std::int64_t> send_elements, recv_elements;
  for (std::int64_t n : send) send_elements.push_back(n * width);
  for (std::int64_t n : recv) recv_elements.push_back(n * width);
  Tensor out = Tensor::empty({std::accumulate(recv.begin(), recv.end(), std::int64_t(0)), width}, rows.dtype(),
                             rows.device());
  group.all_to_all_v(rows, send_elements, out, recv_elements)->wait();
  return out;
}

// Received rows from source-major order to expert-major order, or back.
Tensor regroup(const Tensor& rows, const std::vector<std::int64_t>& received, int ranks, int local,
               bool to_expert_major) {
  std::vector<std::int64_t> expert_major(received.size());
  for (int s = 0; s < ranks; ++s)
    for (int le = 0; le < local; ++le) expert_major[std::size_t(le * ranks + s)] = received[std::size_t(s * local + le)];
  const std::vector<std::int64_t> at_source = offsets_of(received), at_expert = offsets_of(expert_major);
  Tensor out = Tensor::empty(rows.shape(), rows.dtype(), rows.device());
  for (int s = 0; s < ranks; ++s)
    for (int le = 0; le < local; ++le) {
      const std::int64_t n = received[std::size_t(s * local + le)];
      if (n == 0) continue;
      std::int64_t from = at_source[std::size_t(s * local + le)], to = at_expert[std::size_t(le * ranks + s)];
      if (!to_expert_major) std::swap(from, to);
      out.slice(to, to + n).copy_from(rows.slice(from, from + n));
    }
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
  HT_CHECK(std::isfinite(bias_update_rate) && bias_update_rate >= 0, ErrorKind::kConfig,
           "MoE: the bias update rate {}; give 0 (no bias) or more (DeepSeek-V3 uses 0.001)", bias_update_rate);
  HT_CHECK(std::isfinite(aux_loss_coeff) && aux_loss_coeff >= 0 && std::isfinite(z_loss_coeff) && z_loss_coeff >= 0,
           ErrorKind::kConfig, "MoE: the auxiliary loss coefficients ({}, z {}) must be finite and >= 0",
           aux_loss_coeff, z_loss_coeff);
}

MoE::MoE(std::string name, const MoEOptions& options, Device device, const ExpertParallel& ep)
    : Module(std::move(name)), options_((options.validate(), options)), ep_(ep),
      bias_(std::size_t(options_.experts), 0.f) {
  HT_CHECK(options_.experts % ep_.size() == 0, ErrorKind::kConfig,
           "MoE '{}': {} experts do not split evenly over {} expert-parallel ranks; choose an ep that divides {}",
           this->name(), options_.experts, ep_.size(), options_.experts);
  router_ = &add_module(std::make_unique<Linear>("router", options_.dim, options_.experts, /*bias=*/false, device));
  for (int e = first_local_expert(); e < first_local_expert() + local_experts(); ++e) {
    experts_.push_back(&add_module(
        std::make_unique<SwiGLUMLP>(fmt::format("expert{}", e), options_.dim, options_.hidden, device)));
    for (Parameter* p : experts_.back()->parameters()) p->layout().expert = true;
  }
  if (options_.shared_experts > 0)
    shared_ = &add_module(
        std::make_unique<SwiGLUMLP>("shared", options_.dim, options_.shared_experts * options_.hidden, device));
}

SwiGLUMLP& MoE::expert(int e) {
  const int le = e - first_local_expert();
  HT_CHECK(le >= 0 && le < local_experts(), ErrorKind::kOutOfRange,
           "MoE '{}': expert {} is not on this rank, which holds experts {} to {} of {} (expert-parallel rank {} of {})",
           name(), e, first_local_expert(), first_local_expert() + local_experts() - 1, options_.experts, ep_.rank(),
           ep_.size());
  return *experts_[std::size_t(le)];
}

void MoE::set_expert_bias(std::vector<float> bias) {
  HT_CHECK(bias.size() == bias_.size(), ErrorKind::kShapeMismatch, "MoE '{}': a routing bias of {} values for {} experts",
           name(), bias.size(), bias_.size());
  bias_ = std::move(bias);
}

void balance_bias_step(std::vector<float>& bias, float rate, const std::vector<std::int64_t>& tokens_per_expert) {
  if (rate == 0.f) return;
  HT_CHECK(tokens_per_expert.size() == bias.size(), ErrorKind::kShapeMismatch,
           "MoE bias update: the loads of {} experts for a bias of {}", tokens_per_expert.size(), bias.size());
  const double mean = double(std::accumulate(tokens_per_expert.begin(), tokens_per_expert.end(), std::int64_t(0))) /
                      double(bias.size());
  for (std::size_t e = 0; e < bias.size(); ++e) {
    const double load = double(tokens_per_expert[e]);
    bias[e] += rate * float((mean > load) - (mean < load));
  }
}

void MoE::update_expert_bias(const std::vector<std::int64_t>& tokens_per_expert) {
  balance_bias_step(bias_, options_.bias_update_rate, tokens_per_expert);
}

Tensor MoE::run_experts(Context& ctx, const Tensor& rows, const std::vector<std::int64_t>& counts,
                        std::vector<std::int64_t>& received) {
  const int ranks = ep_.size(), local = local_experts();
  Tensor in = rows;  // the local experts' rows, expert-major
  std::vector<std::int64_t> send, recv;
  if (ranks == 1) {
    received = counts;
  } else {
    std::vector<std::int32_t> wanted(counts.begin(), counts.end());
    Tensor counts_in = Tensor::empty({std::int64_t(counts.size())}, DType::kI32);
    const std::vector<std::int64_t> per_rank(std::size_t(ranks), local);
    ep_.group->all_to_all_v(Tensor::from_vector(wanted, {std::int64_t(wanted.size())}), per_rank, counts_in, per_rank)
        ->wait();
    received.assign(counts_in.data<std::int32_t>(), counts_in.data<std::int32_t>() + counts_in.numel());
    send = rows_per_rank(counts, ranks, local), recv = rows_per_rank(received, ranks, local);
    in = regroup(exchange(*ep_.group, rows, send, recv), received, ranks, local, /*to_expert_major=*/true);
  }
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  const std::vector<std::int64_t> at = offsets_of(rows_per_local_expert(received, ranks, local));
  for (int le = 0; le < local; ++le) {
    const std::int64_t lo = at[std::size_t(le)], hi = at[std::size_t(le) + 1];
    out.slice(lo, hi).copy_from(experts_[std::size_t(le)]->forward(ctx, in.slice(lo, hi)));
  }
  if (ranks == 1) return out;
  return exchange(*ep_.group, regroup(out, received, ranks, local, /*to_expert_major=*/false), recv, send);
}

Tensor MoE::experts_backward(Context& ctx, const Tensor& drows, const std::vector<std::int64_t>& counts,
                             const std::vector<std::int64_t>& received) {
  const int ranks = ep_.size(), local = local_experts();
  const std::vector<std::int64_t> send = rows_per_rank(counts, ranks, local), recv = rows_per_rank(received, ranks, local);
  const Tensor din =
      ranks == 1 ? drows : regroup(exchange(*ep_.group, drows, send, recv), received, ranks, local, true);
  const std::vector<std::int64_t> at = offsets_of(rows_per_local_expert(received, ranks, local));
  Tensor dx = Tensor::empty(din.shape(), din.dtype(), din.device());
  for (int le = local - 1; le >= 0; --le) {  // the reverse of the forward's order
    const std::int64_t lo = at[std::size_t(le)], hi = at[std::size_t(le) + 1];
    dx.slice(lo, hi).copy_from(experts_[std::size_t(le)]->backward(ctx, din.slice(lo, hi)));
  }
  if (ranks == 1) return dx;
  return exchange(*ep_.group, regroup(dx, received, ranks, local, false), recv, send);
}

Tensor MoE::forward_impl(Context& ctx, const Tensor& x) {
  HT_CHECK(x.ndim() >= 1 && x.size(-1) == options_.dim, ErrorKind::kShapeMismatch,
           "MoE '{}': input {} does not end in the width {}", name(), shape_str(x.shape()), options_.dim);
  const Tensor x2 = x.flatten_rows();
  const std::int64_t n = x2.size(0), width = options_.dim;
  const int experts = options_.experts, k = options_.top_k;
  // The router's logits go to the host, which routes (N x E values).
  const Tensor logits = host_f32(router_->forward(ctx, x2));
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
    // Chosen by the biased score (the bias is zero without balancing by it).
    const float* b = bias_.data();
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int i, int j) {
      const float si = st[i] + b[i], sj = st[j] + b[j];
      return si > sj || (si == sj && i < j);
    });
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

  // Every local expert runs, on the rows that chose it (none, for some):
  // each parameter's gradient is then ready after backward, as data
  // parallelism's hooks expect.
  std::vector<Tensor> saved{logits,   scores,
                            choice,   chosen,
                            weights,  position,
                            Tensor::from_vector(std::vector<float>{routing_.aux_loss, routing_.z_loss}, {2})};
  // The routed rows, by expert: the token of each, and its weight.
  std::vector<std::int32_t> routed;
  for (const std::vector<std::int32_t>& r : rows) routed.insert(routed.end(), r.begin(), r.end());
  const std::vector<std::int64_t>& counts = routing_.tokens_per_expert;
  const std::vector<std::int64_t> at = offsets_of(counts);
  std::vector<float> weight_of_row(routed.size());
  for (std::int64_t i = 0; i < n * k; ++i)
    if (pos[i] >= 0) weight_of_row[std::size_t(at[std::size_t(c[i])] + pos[i])] = w[i];
  const Device device = x2.device();
  const Tensor token_of_row = on_device(routed, {std::int64_t(routed.size())}, device, DType::kI32);
  const Tensor row_weight = row_weights(weight_of_row, width, device, x2.dtype());
  std::vector<std::int64_t> received;
  const Tensor outputs = run_experts(ctx, gather_rows(x2, token_of_row), counts, received);
  // y = the weighted outputs added into their tokens' rows (in row order:
  // by expert, then by token), then the shared experts' output.
  Tensor weighted = Tensor::empty(outputs.shape(), outputs.dtype(), device);
  ops::mul(outputs, row_weight, weighted);
  Tensor y = Tensor::empty({n, width}, x2.dtype(), device);
  ops::index_select_backward(weighted, 0, token_of_row, y);
  if (shared_) ops::add(y, shared_->forward(ctx, x2), y);
  if (ctx.saving()) {
    saved.push_back(outputs);
    saved.push_back(Tensor::from_vector(std::vector<std::int32_t>(received.begin(), received.end()),
                                        {std::int64_t(received.size())}));
    saved.push_back(token_of_row);
    saved.push_back(row_weight);
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
  const float* s = scores.data<float>();
  const std::int32_t* c = saved[kChoice].data<std::int32_t>();
  const float* raw = saved[kChosen].data<float>();
  const float* w = saved[kWeights].data<float>();
  const std::int32_t* pos = saved[kPosition].data<std::int32_t>();

  // Each routed row's output gradient (its token's, times its weight) and
  // the gradient of its weight (the output's dot product with it, summed
  // in double), on the device; the weights' gradients go to the host.
  std::vector<std::int64_t> counts(std::size_t(experts), 0);
  for (std::int64_t i = 0; i < n * k; ++i)
    if (pos[i] >= 0) ++counts[std::size_t(c[i])];
  const std::vector<std::int64_t> at = offsets_of(counts);
  const Tensor &outputs = saved[kExpertOutputs], &token_of_row = saved[kTokenOfRow];
  const Tensor token_grads = gather_rows(dy2, token_of_row);
  Tensor products = Tensor::empty(outputs.shape(), outputs.dtype(), outputs.device());
  ops::mul(token_grads, outputs, products);
  Tensor dots = Tensor::empty({outputs.size(0)}, outputs.dtype(), outputs.device());
  ops::reduce(products, 1, ops::Reduction::kSum, dots);
  const Tensor dot_of_row = host_f32(dots);
  std::vector<float> dw(static_cast<std::size_t>(n * k), 0.f);  // dropped: no output, no gradient through its weight
  for (std::int64_t i = 0; i < n * k; ++i)
    if (pos[i] >= 0) dw[std::size_t(i)] = dot_of_row.data<float>()[at[std::size_t(c[i])] + pos[i]];
  Tensor drows = Tensor::empty(outputs.shape(), outputs.dtype(), outputs.device());
  ops::mul(token_grads, saved[kRowWeight], drows);

  // The experts' input gradients, added into the tokens' rows; the shared
  // experts' and the router's after, in the reverse order of the forward.
  const std::int32_t* got = saved[kReceived].data<std::int32_t>();
  const std::vector<std::int64_t> received(got, got + saved[kReceived].numel());
  const Tensor din = experts_backward(ctx, drows, counts, received);
  Tensor dx = Tensor::empty({n, width}, dy2.dtype(), dy2.device());
  ops::index_select_backward(din, 0, token_of_row, dx);
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
  const Tensor dlogits_there = dy2.device().is_cpu() && dy2.dtype() == DType::kF32
                                   ? dlogits
                                   : on_device(dlogits.to_vector<float>(), {n, experts}, dy2.device(), dy2.dtype());
  ops::add(dx, router_->backward(ctx, dlogits_there), dx);
  return dx.view(dy.shape());
}

MoEStepLoad MoE::take_step_load() {
  MoEStepLoad load = std::exchange(step_load_, {});
  load.tokens_per_expert.resize(std::size_t(options_.experts), 0);
  return load;
}

}  // namespace ht::nn
