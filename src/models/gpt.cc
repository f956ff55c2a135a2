// ht::models::GPT: model assembly, initialisation, loss and sampling.
#include "ht/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ht/ops/cross_entropy.h"
#include "ht/ops/matmul.h"
#include "ht/parallel/tables.h"

namespace ht::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void GPTConfig::validate() const {
  HT_CHECK(vocab_size > 0 && context > 0 && n_layer > 0 && n_head > 0 && n_embd > 0 && vocab_multiple > 0,
           ErrorKind::kConfig, "GPT config {}: every size (and the vocabulary multiple {}) must be positive", str(),
           vocab_multiple);
  HT_CHECK(n_embd % n_head == 0, ErrorKind::kConfig, "GPT config: n_head={} does not divide n_embd={}: choose n_head in {}", n_head,
           n_embd, divisors_list(n_embd));
}

void GPTConfig::validate_parallel(int tp, int pp) const {
  validate();
  HT_CHECK(tp > 0 && pp > 0, ErrorKind::kConfig, "--tp ({}) and --pp ({}) must be positive", tp, pp);
  HT_CHECK(n_head % tp == 0, ErrorKind::kConfig,
           "GPT config {}: n_head={} does not split over --tp {}: choose --tp in {} or another --n-head", str(),
           n_head, tp, divisors_list(n_head));
  HT_CHECK(padded_vocab_size() % tp == 0, ErrorKind::kConfig,
           "GPT config {}: vocab_size={}{} does not split over --tp {} (vocab-parallel embedding): choose a "
           "--vocab-size divisible by {}, or pad it to a multiple of {} (--vocab-multiple)",
           str(), vocab_size,
           padded_vocab_size() != vocab_size ? fmt::format(" (padded to {})", padded_vocab_size()) : "", tp, tp,
           tp);
  HT_CHECK(n_layer >= pp, ErrorKind::kConfig,
           "GPT config {}: {} layers cannot fill {} pipeline stages (one block per stage at least): lower --pp to <= {}",
           str(), n_layer, pp, n_layer);
}


std::int64_t GPTConfig::padded_vocab_size() const {
  const std::int64_t m = std::max<std::int64_t>(vocab_multiple, 1);
  return (vocab_size + m - 1) / m * m;
}

std::int64_t GPTConfig::num_parameters() const {
  const std::int64_t c = n_embd;
  const std::int64_t per_block = 2 * 2 * c + (3 * c * c + 3 * c) + (c * c + c) + (4 * c * c + 4 * c) + (4 * c * c + c);
  return padded_vocab_size() * c + context * c + n_layer * per_block + 2 * c;
}

double GPTConfig::flops_per_token(std::int64_t seq_len) const {
  // Positions are a lookup, not a matmul; the padding rows are not counted.
  const double n = double(num_parameters() - context * n_embd - (padded_vocab_size() - vocab_size) * n_embd);
  return 6.0 * n + 12.0 * double(n_layer) * double(seq_len) * double(n_embd);
}

std::string GPTConfig::str() const {
  const std::string pad = padded_vocab_size() != vocab_size ? fmt::format(" Vp{}", padded_vocab_size()) : "";
  return fmt::format("L{} H{} C{} V{}{} T{}", n_layer, n_head, n_embd, vocab_size, pad, context);
}

GPT::GPT(const GPTConfig& config, const nn::Placement& placement)
    : CausalLM("gpt", placement, config.vocab_size, config.context, config.n_embd, config.padded_vocab_size()),
      config_(config) {
  const nn::TensorParallel& tp = placement.tp;
  const Device device = placement.device;
  config.validate_parallel(tp.size(), stage().size);
  // Children named as in GPT-2 ("wte", "h.3.attn.c_attn.weight", "ln_f.weight"):
  // the embedding and head register their parameters without a prefix.
  if (first_stage())
    embedding_ = &add_built(
        std::make_unique<nn::Embedding>("", config.vocab_size, config.context, config.n_embd, device, tp, "wte",
                                        "wpe", config.padded_vocab_size()));
  if (embedding_) embedding_->set_context_parallel(placement.cp);
  const auto [first, last] = parallel::stage_range(config.n_layer, stage().rank, stage().size, stage().boundaries);
  for (int i = first; i < last; ++i)
    blocks_.push_back(
        &add_built(std::make_unique<nn::Block>(fmt::format("h.{}", i), config.n_embd, config.n_head, device, tp,
                                               placement.cp)));
  if (last_stage()) {
    ln_f_ = &add_built(std::make_unique<nn::LayerNorm>("ln_f", config.n_embd, device));
    if (first_stage()) {
      // The head reuses the token embedding: two gradient contributions per backward.
      head_ = &add_module(std::make_unique<nn::LMHead>(embedding_->token_weight(), tp));
      embedding_->token_weight().set_uses(2);
    } else {
      head_ = &add_built(std::make_unique<nn::LMHead>("", "wte", config.vocab_size, config.n_embd, device, tp,
                                                      config.padded_vocab_size()));
    }
  }
  set_stage(embedding_, std::vector<nn::Module*>(blocks_.begin(), blocks_.end()), ln_f_, head_);
  // GPT-2's initialisation, by name.
  const float residual_std = 0.02f / std::sqrt(2.f * float(config.n_layer));
  for (nn::Parameter* p : parameters()) {
    const std::string& n = p->name();
    if (ends_with(n, ".bias"))
      p->set_init(nn::Init::zeros());
    else if (n.find("ln_") != std::string::npos)
      p->set_init(nn::Init::ones());
    else
      p->set_init(nn::Init::normal(ends_with(n, "c_proj.weight") ? residual_std : 0.02f));
  }
}

nn::Embedding& GPT::embedding() {
  HT_CHECK_ARG(embedding_, "GPT: stage {} of {} holds no embedding (the first stage does)", stage().rank,
               stage().size);
  return *embedding_;
}

nn::LayerNorm& GPT::ln_f() {
  HT_CHECK_ARG(ln_f_, "GPT: stage {} of {} holds no final norm (the last stage does)", stage().rank, stage().size);
  return *ln_f_;
}

nn::LMHead& GPT::head() {
  HT_CHECK_ARG(head_, "GPT: stage {} of {} holds no output head (the last stage does)", stage().rank, stage().size);
  return *head_;
}

std::vector<nn::TiedWeight> GPT::tied_weights() const {
  if (stage().size == 1) return {};
  return {{.name = "wte", .stages = {0, stage().size - 1}}};
}

double GPT::flops_per_token(const Shape& input_shape) const {
  return config_.flops_per_token(sequence_length(input_shape));
}

}  // namespace ht::models
