// ht::nn::GPT: model assembly, initialisation, loss and sampling.
#include "ht/nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ht/ops/cross_entropy.h"
#include "ht/ops/matmul.h"

namespace ht::nn {
namespace {

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

}  // namespace

void GPTConfig::validate() const {
  HT_CHECK(vocab_size > 0 && context > 0 && n_layer > 0 && n_head > 0 && n_embd > 0, ErrorKind::kConfig,
           "GPT config {}: every size must be positive", str());
  HT_CHECK(n_embd % n_head == 0, ErrorKind::kConfig, "GPT config: n_head={} does not divide n_embd={}: choose n_head in {{{}}}",
           n_head, n_embd, fmt::join(divisors(n_embd), ","));
}

void GPTConfig::validate_parallel(int tp, int pp) const {
  validate();
  HT_CHECK(tp > 0 && pp > 0, ErrorKind::kConfig, "--tp ({}) and --pp ({}) must be positive", tp, pp);
  HT_CHECK(n_head % tp == 0, ErrorKind::kConfig,
           "GPT config {}: n_head={} does not split over --tp {}: choose --tp in {{{}}} or another --n-head", str(),
           n_head, tp, fmt::join(divisors(n_head), ","));
  HT_CHECK(vocab_size % tp == 0, ErrorKind::kConfig,
           "GPT config {}: vocab_size={} does not split over --tp {} (vocab-parallel embedding): choose a --vocab-size "
           "divisible by {}",
           str(), vocab_size, tp, tp);
  HT_CHECK(n_layer >= pp, ErrorKind::kConfig,
           "GPT config {}: {} layers cannot fill {} pipeline stages (one block per stage at least): lower --pp to <= {}",
           str(), n_layer, pp, n_layer);
}

std::pair<int, int> stage_blocks(int n_layer, int stage, int stages) {
  HT_CHECK_ARG(stages > 0 && stage >= 0 && stage < stages, "stage {} outside a pipeline of {}", stage, stages);
  const int base = n_layer / stages, extra = n_layer % stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

std::int64_t GPTConfig::num_parameters() const {
  const std::int64_t c = n_embd;
  const std::int64_t per_block = 2 * 2 * c + (3 * c * c + 3 * c) + (c * c + c) + (4 * c * c + 4 * c) + (4 * c * c + c);
  return vocab_size * c + context * c + n_layer * per_block + 2 * c;
}

double GPTConfig::flops_per_token(std::int64_t seq_len) const {
  const double n = double(num_parameters() - context * n_embd);  // positions are a lookup, not a matmul
  return 6.0 * n + 12.0 * double(n_layer) * double(seq_len) * double(n_embd);
}

std::string GPTConfig::str() const {
  return fmt::format("L{} H{} C{} V{} T{}", n_layer, n_head, n_embd, vocab_size, context);
}

GPT::GPT(const GPTConfig& config, Device device, TensorParallel tp, PipelineStage stage, bool defer_storage)
    : Module("gpt"), config_(config), device_(device), tp_(tp), stage_(stage) {
  config.validate_parallel(tp.size(), stage.size);
  HT_CHECK_ARG(stage.rank >= 0 && stage.rank < stage.size, "pipeline stage {} outside {} stages", stage.rank,
               stage.size);
  // Children named as in GPT-2 ("wte", "h.3.attn.c_attn.weight", "ln_f.weight"):
  // the embedding and head register their parameters without a prefix.
  // Each module as built: its parameters' storage released when deferred.
  auto built = [defer_storage](auto& module) -> auto& {
    if (defer_storage)
      for (Parameter* p : module.parameters()) p->release_data();
    return module;
  };
  if (first_stage())
    embedding_ = &built(
        add_module(std::make_unique<Embedding>("", config.vocab_size, config.context, config.n_embd, device, tp)));
  const auto [first, last] = stage_blocks(config.n_layer, stage.rank, stage.size);
  for (int i = first; i < last; ++i)
    blocks_.push_back(&built(
        add_module(std::make_unique<Block>(fmt::format("h.{}", i), config.n_embd, config.n_head, device, tp))));
  if (last_stage()) {
    ln_f_ = &built(add_module(std::make_unique<LayerNorm>("ln_f", config.n_embd, device)));
    if (first_stage()) {
      // The head reuses the token embedding: two gradient contributions per backward.
      head_ = &add_module(std::make_unique<LMHead>(embedding_->token_weight(), tp));
      embedding_->token_weight().set_uses(2);
    } else {
      head_ = &built(add_module(std::make_unique<LMHead>(config.vocab_size, config.n_embd, device, tp)));
    }
  }
}

Embedding& GPT::embedding() {
  HT_CHECK_ARG(embedding_, "GPT: stage {} of {} holds no embedding (the first stage does)", stage_.rank, stage_.size);
  return *embedding_;
}

LayerNorm& GPT::ln_f() {
  HT_CHECK_ARG(ln_f_, "GPT: stage {} of {} holds no final norm (the last stage does)", stage_.rank, stage_.size);
  return *ln_f_;
}

LMHead& GPT::head() {
  HT_CHECK_ARG(head_, "GPT: stage {} of {} holds no output head (the last stage does)", stage_.rank, stage_.size);
  return *head_;
}

void GPT::init_weights(std::uint64_t seed) {
  for (Parameter* p : parameters()) p->data().copy_from(initial_value(*p, seed));
}

Tensor GPT::initial_value(const Parameter& p, std::uint64_t seed) const {
  const std::string& n = p.name();
  const float residual_std = 0.02f / std::sqrt(2.f * float(config_.n_layer));
  // The full tensor is drawn and this rank's part cut from it, so the values
  // do not depend on the tensor-parallel layout either.
  Tensor host = Tensor::empty(p.full_shape(), DType::kF32);
  float* v = host.data<float>();
  const std::int64_t count = host.numel();
  if (ends_with(n, ".bias")) {
    std::fill(v, v + count, 0.f);
  } else if (n.find("ln_") != std::string::npos) {
    std::fill(v, v + count, 1.f);
  } else {
    const float std = ends_with(n, "c_proj.weight") ? residual_std : 0.02f;
    // Element i is the normal draw from counters 2i+1 and 2i+2 of its
    // tensor's stream, so blocks are drawn in parallel with the values of
    // one sequential pass (Box-Muller made weight init the larger part of
    // building a 124M model: 3-4 s on one thread).
    const std::uint64_t stream = seed ^ fnv1a(n);
    constexpr std::int64_t kBlock = std::int64_t(1) << 16;
#pragma omp parallel for schedule(static) if (count > kBlock)
    for (std::int64_t b = 0; b < count; b += kBlock) {
      Rng rng(stream);
      rng.set_state(stream, 2 * std::uint64_t(b));
      const std::int64_t e = std::min(count, b + kBlock);
      for (std::int64_t i = b; i < e; ++i) v[i] = std * rng.normal();
    }
  }
  return tp_part_of(host, p.layout());
}

Tensor GPT::forward_impl(Context& ctx, const Tensor& input) {
  Tensor x;
  if (first_stage()) {
    HT_CHECK(input.ndim() == 2 && input.dtype() == DType::kI32, ErrorKind::kShapeMismatch,
             "GPT: tokens must be (B, T) i32, got {} {}", shape_str(input.shape()), dtype_name(input.dtype()));
    HT_CHECK(input.size(1) <= config_.context, ErrorKind::kShapeMismatch,
             "GPT: sequence length {} exceeds the model's context {}; shorten the sequence or raise --context",
             input.size(1), config_.context);
    x = embedding_->forward(ctx, input);
  } else {
    HT_CHECK(input.ndim() == 3 && input.size(2) == config_.n_embd && is_floating(input.dtype()),
             ErrorKind::kShapeMismatch, "GPT stage {}: input activations must be (B, T, {}) floats, got {} {}",
             stage_.rank, config_.n_embd, shape_str(input.shape()), dtype_name(input.dtype()));
    x = input;
  }
  for (Block* b : blocks_) x = b->forward(ctx, x);
  if (!last_stage()) return x;
  return head_->forward(ctx, ln_f_->forward(ctx, x));
}

Tensor GPT::backward_impl(Context& ctx, const Tensor& dy) {
  Tensor dx = last_stage() ? ln_f_->backward(ctx, head_->backward(ctx, dy)) : dy;
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(ctx, dx);
  return first_stage() ? embedding_->backward(ctx, dx) : dx;
}

float GPT::vocab_parallel_loss(const Tensor& logits2, const Tensor& targets1, Tensor& lse) {
  // Each rank reduces its vocabulary columns to (log-sum-exp, target logit)
  // per row; one all-gather of those 2N numbers gives every rank the full
  // softmax normaliser and target logit without gathering any logits.
  const std::int64_t n = logits2.size(0);
  const int tp = tp_.size();
  const ops::VocabShard shard{.start = tp_.rank() * (config_.vocab_size / tp), .size = config_.vocab_size};
  Tensor stats = Tensor::empty({2 * n}, DType::kF32, logits2.device());
  Tensor local_lse = stats.slice(0, n), target_logit = stats.slice(n, 2 * n);
  ops::cross_entropy_shard_forward(logits2, targets1, shard, local_lse, target_logit);
  Tensor all = Tensor::empty({tp * 2 * n}, DType::kF32, logits2.device());
  tp_.group->all_gather(stats, all)->wait();
  const std::vector<float> v = all.to_vector<float>();
  std::vector<float> global(static_cast<std::size_t>(n));
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    float m = -INFINITY;
    for (int r = 0; r < tp; ++r) m = std::max(m, v[std::size_t(r * 2 * n + i)]);
    double sum = 0.0, target = 0.0;
    for (int r = 0; r < tp; ++r) {
      sum += std::exp(double(v[std::size_t(r * 2 * n + i)]) - double(m));
      target += v[std::size_t(r * 2 * n + n + i)];
    }
    const double row_lse = double(m) + std::log(sum);
    global[std::size_t(i)] = float(row_lse);
    total += row_lse - target;
  }
  lse = Tensor::from_vector(global, {n}).to(logits2.device());
  return float(total / double(std::max<std::int64_t>(n, 1)));
}

float GPT::forward_loss(Context& ctx, const Tensor& input, const Tensor& targets) {
  HT_CHECK(last_stage(), ErrorKind::kInvalidArgument,
           "GPT::forward_loss runs on the last pipeline stage; stage {} of {} ends in activations", stage_.rank,
           stage_.size);
  HT_CHECK(targets.ndim() == 2 && targets.size(0) == input.size(0) && targets.size(1) == input.size(1),
           ErrorKind::kShapeMismatch, "GPT: targets {} must be (B, T) of the input {}", shape_str(targets.shape()),
           shape_str(input.shape()));
  Tensor logits = forward(ctx, input);
  const Tensor logits2 = logits.flatten_rows();
  const Tensor targets1 = targets.view({-1});
  Tensor lse = Tensor::empty({logits2.size(0)}, DType::kF32, input.device());
  float loss = 0.f;
  if (tp_.size() > 1) {
    loss = vocab_parallel_loss(logits2, targets1, lse);
  } else {
    Tensor losses = Tensor::empty({logits2.size(0)}, DType::kF32, input.device());
    ops::cross_entropy_forward(logits2, targets1, losses, lse);
    double total = 0.0;
    for (float l : losses.to_vector<float>()) total += l;
    loss = float(total / double(std::max<std::int64_t>(losses.numel(), 1)));
  }
  if (ctx.saving()) ctx.save(this, {logits, targets1, lse});
  return loss;
}

Tensor GPT::backward_loss(Context& ctx, float loss_scale) {
  const auto& s = ctx.saved(this);
  HT_CHECK(s.size() == 3, ErrorKind::kInvalidArgument,
           "GPT::backward_loss needs a forward_loss in the same context first");
  Tensor logits = s[0];
  const Tensor targets = s[1], lse = s[2];
  Tensor logits2 = logits.flatten_rows();
  const float dloss = loss_scale / float(std::max<std::int64_t>(logits2.size(0), 1));
  ops::VocabShard shard;
  if (tp_.size() > 1) shard = {.start = tp_.rank() * (config_.vocab_size / tp_.size()), .size = config_.vocab_size};
  ops::cross_entropy_backward(logits2, targets, lse, dloss, logits2, shard);  // in place: logits become dlogits
  return backward(ctx, logits);
}

std::vector<std::int32_t> GPT::generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                        Rng& rng) {
  HT_CHECK_ARG(!prompt.empty(), "GPT::generate needs a non-empty prompt");
  HT_CHECK(tp_.size() == 1 && stage_.size == 1, ErrorKind::kNotSupported,
           "GPT::generate needs the whole model in one process (tp={}, pp={}); gather the parameters into a "
           "single-process GPT first",
           tp_.size(), stage_.size);
  std::vector<std::int32_t> seq = prompt;
  for (int step = 0; step < count; ++step) {
    const std::int64_t t = std::min<std::int64_t>(std::int64_t(seq.size()), config_.context);
    std::vector<std::int32_t> window(seq.end() - t, seq.end());
    Context ctx(device_, /*save_for_backward=*/false);
    Tensor tokens = Tensor::from_vector(window, {1, t}).to(device_);
    Tensor logits = forward(ctx, tokens);
    std::vector<float> last = logits[0][t - 1].to_vector<float>();
    std::int32_t next = 0;
    if (temperature <= 0.f) {
      next = std::int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    } else {
      const float mx = *std::max_element(last.begin(), last.end());
      double sum = 0.0;
      for (float& l : last) sum += (l = std::exp((l - mx) / temperature));
      double u = double(rng.uniform()) * sum;
      next = std::int32_t(last.size() - 1);
      for (std::size_t i = 0; i < last.size(); ++i) {
        u -= last[i];
        if (u <= 0.0) {
          next = std::int32_t(i);
          break;
        }
      }
    }
    seq.push_back(next);
  }
  return std::vector<std::int32_t>(seq.begin() + std::ptrdiff_t(prompt.size()), seq.end());
}

}  // namespace ht::nn
