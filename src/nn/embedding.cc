// ht::nn::Embedding.
#include "ht/nn/embedding.h"

#include "ht/ops/embedding.h"
#include "ht/ops/movement.h"

namespace ht::nn {

Embedding::Embedding(std::string name, std::int64_t vocab_size, std::int64_t max_positions, std::int64_t dim,
                     Device device, TensorParallel tp, const std::string& token_name, const std::string& position_name,
                     std::int64_t padded_vocab)
    : Module(std::move(name)), tp_(tp), vocab_(vocab_size), rows_(padded_vocab > 0 ? padded_vocab : vocab_size) {
  HT_CHECK(vocab_size > 0 && dim > 0 && max_positions >= 0, ErrorKind::kConfig,
           "Embedding '{}': vocab_size={} and dim={} must be positive, max_positions={} non-negative", this->name(),
           vocab_size, dim, max_positions);
  HT_CHECK(rows_ >= vocab_size, ErrorKind::kConfig,
           "Embedding '{}': the padded vocabulary {} is smaller than the vocabulary {}", this->name(), rows_,
           vocab_size);
  HT_CHECK(rows_ % tp.size() == 0, ErrorKind::kConfig,
           "Embedding '{}': {} rows (vocab_size={}{}) do not split over tensor-parallel size {}; choose a --vocab-size "
           "divisible by --tp, or pad the vocabulary to a multiple of it",
           this->name(), rows_, vocab_size, rows_ != vocab_size ? fmt::format(", padded to {}", rows_) : "",
           tp.size());
  const ParamLayout vocab_split =
      tp.size() > 1 ? ParamLayout{.tp_split_dim = 0, .tp_rank = tp.rank(), .tp_size = tp.size()} : ParamLayout{};
  // PyTorch's nn.Embedding default: N(0, 1).
  wte_ = &add_parameter(token_name, {rows_, dim}, /*weight_decay=*/true, device, vocab_split, Init::normal(1.f));
  wte_->set_real_rows(vocab_size);
  if (max_positions > 0)
    wpe_ = &add_parameter(position_name, {max_positions, dim}, /*weight_decay=*/true, device, {}, Init::normal(1.f));
}

ops::VocabShard Embedding::shard() const {
  if (tp_.size() == 1 && rows_ == vocab_) return {};
  return {.start = tp_.rank() * (rows_ / tp_.size()), .size = vocab_, .padded_size = rows_ != vocab_ ? rows_ : -1};
}

Tensor Embedding::position_rows(const Tensor& table, int half, std::int64_t t) const {
  const std::int64_t start = cp_.half_start(half, t);
  return table.slice(start, start + t / 2);
}

Tensor Embedding::forward_impl(Context& ctx, const Tensor& tokens) {
  Tensor out = Tensor::empty({tokens.size(0), tokens.size(1), wte_->data().size(1)}, wte_->data().dtype(),
                             tokens.device());
  // Positions are added once: by tp rank 0, before the group sums the lookups.
  const bool add_positions = wpe_ && tp_.rank() == 0;
  if (cp_.size() == 1 || !add_positions) {
    ops::embedding_forward(tokens, wte_->data(), add_positions ? wpe_->data() : Tensor(), out, shard());
  } else {
    // Each chunk with the rows of its own positions.
    const std::int64_t t = tokens.size(1), l = t / 2;
    for (int half = 0; half < 2; ++half) {
      const Tensor chunk_tokens = ops::narrow_copy(tokens, 1, half * l, l);
      Tensor chunk = ops::narrow_copy(out, 1, half * l, l);  // shape only; overwritten
      ops::embedding_forward(chunk_tokens, wte_->data(), position_rows(wpe_->data(), half, t), chunk, shard());
      ops::narrow_into(chunk, 1, half * l, out);
    }
  }
  tp_.all_reduce_sum(out);
  ctx.save(this, {tokens});
  return out;
}

Tensor Embedding::backward_impl(Context& ctx, const Tensor& dy) {
  const Tensor& tokens = ctx.saved(this).at(0);
  wte_->allocate_grad();
  Tensor no_wpe;
  if (wpe_) wpe_->allocate_grad();
  if (cp_.size() == 1 || !wpe_) {
    ops::embedding_backward(dy, tokens, wte_->grad(), wpe_ ? wpe_->grad() : no_wpe, shard());
  } else {
    const std::int64_t t = tokens.size(1), l = t / 2;
    for (int half = 0; half < 2; ++half) {
      Tensor rows = position_rows(wpe_->grad(), half, t);  // a view: accumulates in place
      ops::embedding_backward(ops::narrow_copy(dy, 1, half * l, l), ops::narrow_copy(tokens, 1, half * l, l),
                              wte_->grad(), rows,
                              shard());
    }
  }
  wte_->mark_grad_ready();
  if (wpe_) wpe_->mark_grad_ready();
  return Tensor();
}

}  // namespace ht::nn
