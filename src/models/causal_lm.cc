// ht::models::CausalLM: the vocab-parallel next-token loss and sampling.
#include "ht/models/causal_lm.h"

#include <algorithm>
#include <utility>
#include <cmath>

#include "ht/ops/cross_entropy.h"

namespace ht::models {

CausalLM::CausalLM(std::string name, const nn::Placement& placement, std::int64_t vocab_size, std::int64_t context,
                   std::int64_t width, std::int64_t padded_vocab)
    : Model(std::move(name), placement),
      vocab_(vocab_size),
      padded_vocab_(padded_vocab > 0 ? padded_vocab : vocab_size),
      context_(context),
      width_(width) {}

ops::VocabShard CausalLM::logits_shard() const {
  const int tp = tensor_parallel().size();
  if (tp == 1 && padded_vocab_ == vocab_) return {};
  return {.start = tensor_parallel().rank() * (padded_vocab_ / tp),
          .size = vocab_,
          .padded_size = padded_vocab_ != vocab_ ? padded_vocab_ : -1};
}

Shape CausalLM::stage_input_shape(const Shape& input_shape) const {
  HT_CHECK(input_shape.size() == 2, ErrorKind::kShapeMismatch, "{}: tokens must be (B, T), got {}", describe(),
           shape_str(input_shape));
  return {input_shape[0], input_shape[1], width_};
}

std::string divisors_list(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return fmt::format("{{{}}}", fmt::join(out, ","));
}

std::int64_t CausalLM::sequence_length(const Shape& input_shape) const {
  return input_shape.size() == 2 ? input_shape[1] * context_parallel().size() : context_;
}

void CausalLM::set_stage(nn::Module* embedding, std::vector<nn::Module*> blocks, nn::Module* norm, nn::Module* head) {
  HT_CHECK((embedding != nullptr) == first_stage() && (norm != nullptr) == last_stage() &&
               (head != nullptr) == last_stage(),
           ErrorKind::kInternal, "{}: stage {} of {} set its modules wrongly", describe(), stage().rank, stage().size);
  embedding_ = embedding;
  blocks_ = std::move(blocks);
  norm_ = norm;
  head_ = head;
}

void CausalLM::set_recompute(nn::Recompute mode) {
  for (nn::Module* c : children()) c->set_recompute(mode == nn::Recompute::kFull ? nn::Recompute::kNone : mode);
  if (mode == nn::Recompute::kFull)
    for (nn::Module* b : blocks_) b->set_recompute(nn::Recompute::kFull);
}

Tensor CausalLM::forward_impl(nn::Context& ctx, const Tensor& input) {
  check_input(input);
  Tensor x = embedding_ ? embedding_->forward(ctx, input) : input;
  for (nn::Module* b : blocks_) x = b->forward(ctx, x);
  if (!head_) return x;
  return head_->forward(ctx, norm_->forward(ctx, x));
}

Tensor CausalLM::backward_impl(nn::Context& ctx, const Tensor& dy) {
  Tensor dx = head_ ? norm_->backward(ctx, head_->backward(ctx, dy)) : dy;
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(ctx, dx);
  return embedding_ ? embedding_->backward(ctx, dx) : dx;
}

void CausalLM::check_input(const Tensor& input) const {
  if (first_stage()) {
    HT_CHECK(input.ndim() == 2 && input.dtype() == DType::kI32, ErrorKind::kShapeMismatch,
             "{}: tokens must be (B, T) i32, got {} {}", describe(), shape_str(input.shape()),
             dtype_name(input.dtype()));
    const std::int64_t length = input.size(1) * context_parallel().size();  // the whole sequence's
    HT_CHECK(length <= context_, ErrorKind::kShapeMismatch,
             "{}: sequence length {} exceeds the model's context {}; shorten the sequence or raise --context",
             describe(), length, context_);
  } else {
    HT_CHECK(input.ndim() == 3 && input.size(2) == width_ && is_floating(input.dtype()), ErrorKind::kShapeMismatch,
             "{} stage {}: input activations must be (B, T, {}) floats, got {} {}", describe(), stage().rank, width_,
             shape_str(input.shape()), dtype_name(input.dtype()));
  }
}

float CausalLM::vocab_parallel_loss(const Tensor& logits2, const Tensor& targets1, Tensor& lse) {
  // Each rank reduces its vocabulary columns to (log-sum-exp, target logit)
  // per row; one all-gather of those 2N numbers gives every rank the full
  // softmax normaliser and target logit without gathering any logits.
  // (A padded vocabulary at tp 1 takes this path too, with one shard.)
  const std::int64_t n = logits2.size(0);
  const int tp = tensor_parallel().size();
  Tensor stats = Tensor::empty({2 * n}, DType::kF32, logits2.device());
  Tensor local_lse = stats.slice(0, n), target_logit = stats.slice(n, 2 * n);
  ops::cross_entropy_shard_forward(logits2, targets1, logits_shard(), local_lse, target_logit);
  Tensor all = stats;
  if (tp > 1) {
    all = Tensor::empty({tp * 2 * n}, DType::kF32, logits2.device());
    tensor_parallel().group->all_gather(stats, all)->wait();
  }
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

nn::LossValue CausalLM::forward_loss(nn::Context& ctx, const Tensor& input, const Tensor& targets) {
  HT_CHECK(last_stage(), ErrorKind::kInvalidArgument,
           "{}: forward_loss runs on the last pipeline stage; stage {} of {} ends in activations", describe(),
           stage().rank, stage().size);
  HT_CHECK(targets.ndim() == 2 && targets.size(0) == input.size(0) && targets.size(1) == input.size(1),
           ErrorKind::kShapeMismatch, "{}: targets {} must be (B, T) of the input {}", describe(), shape_str(targets.shape()),
           shape_str(input.shape()));
  Tensor logits = forward(ctx, input);
  const Tensor logits2 = logits.flatten_rows();
  const Tensor targets1 = targets.view({-1});
  Tensor lse = Tensor::empty({logits2.size(0)}, DType::kF32, input.device());
  float loss = 0.f;
  if (tensor_parallel().size() > 1 || padded_vocab_ != vocab_) {
    loss = vocab_parallel_loss(logits2, targets1, lse);
  } else {
    Tensor losses = Tensor::empty({logits2.size(0)}, DType::kF32, input.device());
    ops::cross_entropy_forward(logits2, targets1, losses, lse);
    double total = 0.0;
    for (float l : losses.to_vector<float>()) total += l;
    loss = float(total / double(std::max<std::int64_t>(losses.numel(), 1)));
  }
  if (ctx.saving()) ctx.save(this, {logits, targets1, lse});
  return {.value = loss};
}

Tensor CausalLM::backward_loss(nn::Context& ctx, float grad_scale) {
  const std::vector<Tensor> s = ctx.take(this);
  HT_CHECK(s.size() == 3, ErrorKind::kInvalidArgument,
           "CausalLM::backward_loss needs a forward_loss in the same context first");
  Tensor logits = s[0];
  const Tensor targets = s[1], lse = s[2];
  Tensor logits2 = logits.flatten_rows();
  const float dloss = grad_scale / float(std::max<std::int64_t>(logits2.size(0), 1));
  // In place: logits become dlogits (zero in the padding columns).
  ops::cross_entropy_backward(logits2, targets, lse, dloss, logits2, logits_shard());
  return backward(ctx, logits);
}

std::vector<std::int32_t> CausalLM::generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                        Rng& rng) {
  HT_CHECK_ARG(!prompt.empty(), "CausalLM::generate needs a non-empty prompt");
  HT_CHECK(tensor_parallel().size() == 1 && stage().size == 1, ErrorKind::kNotSupported,
           "CausalLM::generate needs the whole model in one process (tp={}, pp={}); gather the parameters into a "
           "single-process GPT first",
           tensor_parallel().size(), stage().size);
  std::vector<std::int32_t> seq = prompt;
  for (int step = 0; step < count; ++step) {
    const std::int64_t t = std::min<std::int64_t>(std::int64_t(seq.size()), context_);
    std::vector<std::int32_t> window(seq.end() - t, seq.end());
    nn::Context ctx(device(), /*save_for_backward=*/false);
    Tensor tokens = Tensor::from_vector(window, {1, t}).to(device());
    Tensor logits = forward(ctx, tokens);
    std::vector<float> last = logits[0][t - 1].to_vector<float>();
    last.resize(std::size_t(vocab_));  // the padding ids are not tokens
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

void CausalLM::check_batch(const Tensor& input, const Tensor& target) const {
  for (const auto& [what, t] : {std::pair<const char*, const Tensor*>{"input", &input}, {"targets", &target}}) {
    if (!t->defined() || t->device().is_cuda() || t->dtype() != DType::kI32) continue;
    const std::int32_t* ids = t->data<std::int32_t>();
    const std::int64_t row = t->ndim() >= 2 ? t->size(t->ndim() - 1) : std::max<std::int64_t>(t->numel(), 1);
    for (std::int64_t i = 0; i < t->numel(); ++i)
      HT_CHECK(ids[i] >= 0 && ids[i] < vocab_, ErrorKind::kOutOfRange,
               "{}: token id {} at batch row {}, position {} of the {} is outside the vocabulary [0, {}); check the "
               "dataset's tokenizer against the model's vocab_size",
               describe(), ids[i], i / row, i % row, what, vocab_);
  }
}

}  // namespace ht::models
