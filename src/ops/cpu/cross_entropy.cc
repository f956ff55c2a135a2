// Host fused softmax cross-entropy: one pass for the max and one for the
// log-sum-exp per row. The row loops are vector loops (vexp, and reductions
// in a fixed lane order, so results do not depend on the thread count), built
// for AVX2 and the baseline (HT_CPU_MULTIVERSION): as scalar expf calls they
// took a tenth of a 124M training step with the GPT-2 vocabulary. With a
// vocabulary shard the logits are columns [start, start + v) of the full
// vocabulary: targets are checked against the full size and mapped to a
// local column (target - start) when this shard holds them. The columns of
// a padded vocabulary past its last real id (VocabShard::padded_size) are
// left out of the log-sum-exp and get a zero gradient.
//
// f16 and bf16 logits are widened one row at a time into a buffer per thread
// and dlogits rows rounded once from it, so a 16-bit call allocates one row
// per thread rather than f32 copies of (N, V) logits and dlogits: with the
// GPT-2 vocabulary those are the largest activations of a step.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/backend_ops.h"
#include "ops/cpu/convert.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace {

/// Whether row i's target is the ignored id.
bool ignored(const CrossEntropyOptions& o, std::int32_t target) { return o.ignore_index && target == *o.ignore_index; }

void check_targets(const std::int32_t* tg, std::int64_t n, std::int64_t vocab, const CrossEntropyOptions& o = {}) {
  for (std::int64_t i = 0; i < n; ++i)
    HT_CHECK((tg[i] >= 0 && tg[i] < vocab) || ignored(o, tg[i]), ErrorKind::kOutOfRange,
             "cross_entropy: target {} at row {} is outside the vocabulary [0, {}){}", tg[i], i, vocab,
             o.ignore_index ? fmt::format(" and is not the ignore index {}", *o.ignore_index) : std::string());
}

/// Sum of one row.
HT_CPU_MULTIVERSION float row_sum(const float* row, std::int64_t v) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < v; ++j) sum += row[j];
  return sum;
}

/// Log-sum-exp of one row.
HT_CPU_MULTIVERSION float row_lse(const float* row, std::int64_t v) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < v; ++j) mx = row[j] > mx ? row[j] : mx;  // this form vectorises
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < v; ++j) sum += vexp(row[j] - mx);
  return mx + std::log(sum);
}

/// out = (softmax(row) - uniform) * dloss, from the row's log-sum-exp
/// (uniform: label smoothing's eps / V, else 0); out may alias row.
HT_CPU_MULTIVERSION void row_softmax_scaled(const float* row, float lse, float uniform, float dloss, float* out,
                                            std::int64_t v) {
#pragma omp simd
  for (std::int64_t j = 0; j < v; ++j) out[j] = (vexp(row[j] - lse) - uniform) * dloss;
}

/// Row i of logits (n, v) as floats: a pointer into the tensor when it is
/// f32, else the row widened into `buf` (one buffer per thread).
class Rows {
 public:
  explicit Rows(const Tensor& logits)
      : base_(static_cast<const char*>(logits.data_ptr())), dtype_(logits.dtype()), v_(logits.size(1)) {}
  bool f32() const { return dtype_ == DType::kF32; }
  const float* row(std::int64_t i, std::vector<float>& buf) const {
    const char* p = base_ + i * v_ * std::int64_t(dtype_size(dtype_));
    if (f32()) return reinterpret_cast<const float*>(p);
    buf.resize(std::size_t(v_));
    widen(dtype_, p, buf.data(), v_);
    return buf.data();
  }

 private:
  const char* base_;
  DType dtype_;
  std::int64_t v_;
};

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse,
                           const CrossEntropyOptions& o) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const std::int32_t* tg = targets.data<std::int32_t>();
  check_targets(tg, n, v, o);
  const float eps = o.label_smoothing;
  const Rows rows(logits);
  float* ploss = losses.data<float>();
  float* plse = lse.data<float>();
#pragma omp parallel
  {
    std::vector<float> buf;  // 16-bit logits only
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = rows.row(i, buf);
      const float l = row_lse(row, v);
      plse[i] = l;
      if (ignored(o, tg[i]))
        ploss[i] = 0.f;
      else if (eps == 0.f)
        ploss[i] = l - row[tg[i]];
      else
        ploss[i] = l - (1.f - eps) * row[tg[i]] - eps * (row_sum(row, v) / float(v));
    }
  }
}

void cross_entropy_shard_forward(const Tensor& logits, const Tensor& targets, VocabShard shard, Tensor& lse,
                                 Tensor& target_logit) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const std::int32_t* tg = targets.data<std::int32_t>();
  check_targets(tg, n, shard.size);
  const std::int64_t real = shard.real_rows(v);  // the padding columns after them stay out of the softmax
  const Rows rows(logits);
  float* plse = lse.data<float>();
  float* ptl = target_logit.data<float>();
#pragma omp parallel
  {
    std::vector<float> buf;  // 16-bit logits only
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = rows.row(i, buf);
      const std::int64_t col = std::int64_t(tg[i]) - shard.start;  // the target's local column
      plse[i] = row_lse(row, real);  // real == 0: -inf, the identity of the caller's log-sum-exp over shards
      ptl[i] = col >= 0 && col < v ? row[col] : 0.f;
    }
  }
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard, const CrossEntropyOptions& o) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const std::int32_t* tg = targets.data<std::int32_t>();
  check_targets(tg, n, shard.size, o);
  const std::int64_t real = shard.real_rows(v);  // padding columns after them: gradient 0
  // Label smoothing's share of every real column of the whole vocabulary.
  const float eps = o.label_smoothing;
  const float uniform = eps == 0.f ? 0.f : eps / float(shard.size);  // resolved: the whole vocabulary's real ids
  const Rows rows(logits);
  const float* plse = lse.data<float>();
  const DType dt = dlogits.dtype();
  char* pd = static_cast<char*>(dlogits.data_ptr());
  const std::int64_t row_bytes = v * std::int64_t(dtype_size(dt));
#pragma omp parallel
  {
    std::vector<float> buf;  // 16-bit logits only
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      // kern::cross_entropy_grad with vexp; the target's logit is read first,
      // since out may alias row, and its one-hot term applied after the loop
      // (only when this shard holds the target's column). 16-bit: row and
      // out are both the widened row in buf, rounded into dlogits at the end.
      if (ignored(o, tg[i])) {
        std::fill(pd + i * row_bytes, pd + (i + 1) * row_bytes, char(0));  // all-zero bytes are 0 in every dtype
        continue;
      }
      const float* row = rows.row(i, buf);
      float* out = rows.f32() ? reinterpret_cast<float*>(pd + i * row_bytes) : buf.data();
      const float l = plse[i];
      const std::int64_t col = std::int64_t(tg[i]) - shard.start;
      const bool has_target = col >= 0 && col < v;
      const float target_logit = has_target ? row[col] : 0.f;
      row_softmax_scaled(row, l, uniform, dloss, out, real);
      std::fill(out + real, out + v, 0.f);
      if (has_target) out[col] = (vexp(target_logit - l) - (1.f - eps) - uniform) * dloss;
      if (!rows.f32()) narrow(out, dt, pd + i * row_bytes, v);
    }
  }
}

}  // namespace ht::ops::cpu
