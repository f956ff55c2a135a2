// ht::nn::GPT: model assembly, initialisation, loss and sampling.
#include "ht/nn/gpt.h"

#include <algorithm>
#include <cmath>

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

GPT::GPT(const GPTConfig& config, Device device) : Module("gpt"), config_(config), device_(device) {
  config.validate();
  // Children named as in GPT-2 ("wte", "h.3.attn.c_attn.weight", "ln_f.weight"):
  // the embedding registers its parameters without a prefix of its own.
  embedding_ = &add_module(std::make_unique<Embedding>("", config.vocab_size, config.context, config.n_embd, device));
  for (int i = 0; i < config.n_layer; ++i)
    blocks_.push_back(&add_module(std::make_unique<Block>(fmt::format("h.{}", i), config.n_embd, config.n_head, device)));
  ln_f_ = &add_module(std::make_unique<LayerNorm>("ln_f", config.n_embd, device));
  // The output head reuses the token embedding: two gradient contributions per backward.
  embedding_->token_weight().set_uses(2);
}

void GPT::init_weights(std::uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.f * float(config_.n_layer));
  for (Parameter* p : parameters()) {
    const std::string& n = p->name();
    Tensor host = Tensor::empty(p->data().shape(), DType::kF32);
    float* v = host.data<float>();
    const std::int64_t count = host.numel();
    if (ends_with(n, ".bias")) {
      std::fill(v, v + count, 0.f);
    } else if (n.find("ln_") != std::string::npos) {
      std::fill(v, v + count, 1.f);
    } else {
      const float std = ends_with(n, "c_proj.weight") ? residual_std : 0.02f;
      Rng rng(seed ^ fnv1a(n));
      for (std::int64_t i = 0; i < count; ++i) v[i] = std * rng.normal();
    }
    p->data().copy_from(host);
  }
}

Tensor GPT::forward_impl(Context& ctx, const Tensor& tokens) {
  HT_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::kI32, ErrorKind::kShapeMismatch,
           "GPT: tokens must be (B, T) i32, got {} {}", shape_str(tokens.shape()), dtype_name(tokens.dtype()));
  HT_CHECK(tokens.size(1) <= config_.context, ErrorKind::kShapeMismatch,
           "GPT: sequence length {} exceeds the model's context {}; shorten the sequence or raise --context",
           tokens.size(1), config_.context);
  Tensor x = embedding_->forward(ctx, tokens);
  for (Block* b : blocks_) x = b->forward(ctx, x);
  Tensor h = ln_f_->forward(ctx, x);
  const std::int64_t b = tokens.size(0), t = tokens.size(1);
  Tensor logits = Tensor::empty({b, t, config_.vocab_size}, DType::kF32, tokens.device());
  Tensor logits2 = logits.flatten_rows();
  ops::matmul(h.flatten_rows(), embedding_->token_weight().data(), logits2, {.trans_b = true});
  ctx.save(this, {h});
  return logits;
}

Tensor GPT::backward_impl(Context& ctx, const Tensor& dlogits) {
  const Tensor h = ctx.saved(this).at(0).flatten_rows();
  const Tensor dl = dlogits.flatten_rows();
  Parameter& wte = embedding_->token_weight();
  wte.allocate_grad();
  ops::matmul(dl, h, wte.grad(), {.trans_a = true, .beta = 1.f});  // dwte += dlogits^T h
  wte.mark_grad_ready();
  Tensor dh = Tensor::empty(ctx.saved(this).at(0).shape(), DType::kF32, dlogits.device());
  Tensor dh2 = dh.flatten_rows();
  ops::matmul(dl, wte.data(), dh2);
  Tensor dx = ln_f_->backward(ctx, dh);
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(ctx, dx);
  return embedding_->backward(ctx, dx);
}

float GPT::forward_loss(Context& ctx, const Tensor& tokens, const Tensor& targets) {
  HT_CHECK(targets.shape() == tokens.shape(), ErrorKind::kShapeMismatch,
           "GPT: targets {} must have the shape of tokens {}", shape_str(targets.shape()), shape_str(tokens.shape()));
  Tensor logits = forward(ctx, tokens);
  const Tensor logits2 = logits.flatten_rows();
  const Tensor targets1 = targets.view({-1});
  Tensor losses = Tensor::empty({logits2.size(0)}, DType::kF32, tokens.device());
  Tensor lse = Tensor::empty({logits2.size(0)}, DType::kF32, tokens.device());
  ops::cross_entropy_forward(logits2, targets1, losses, lse);
  // The loss tensors are kept alongside h (saved by forward_impl) for backward_loss.
  std::vector<Tensor> saved = ctx.saving() ? ctx.saved(this) : std::vector<Tensor>{};
  saved.insert(saved.end(), {logits, targets1, lse});
  ctx.save(this, std::move(saved));
  double total = 0.0;
  for (float l : losses.to_vector<float>()) total += l;
  return float(total / double(std::max<std::int64_t>(losses.numel(), 1)));
}

void GPT::backward_loss(Context& ctx, float loss_scale) {
  const auto& s = ctx.saved(this);
  HT_CHECK(s.size() == 4, ErrorKind::kInvalidArgument,
           "GPT::backward_loss needs a forward_loss in the same context first");
  Tensor logits = s[1];
  const Tensor targets = s[2], lse = s[3];
  Tensor logits2 = logits.flatten_rows();
  const float dloss = loss_scale / float(std::max<std::int64_t>(logits2.size(0), 1));
  ops::cross_entropy_backward(logits2, targets, lse, dloss, logits2);  // in place: logits become dlogits
  backward(ctx, logits);
}

std::vector<std::int32_t> GPT::generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                        Rng& rng) {
  HT_CHECK_ARG(!prompt.empty(), "GPT::generate needs a non-empty prompt");
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
