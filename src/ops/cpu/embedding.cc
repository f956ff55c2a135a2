// Host token + position embedding. Backward scatters by column blocks: every
// thread owns some columns of dwte and dwpe and visits tokens in order, so
// repeated tokens accumulate in a fixed order without atomics. With a
// vocabulary shard, ids are checked against the full vocabulary and mapped to
// local rows (id - shard.start); ids of other shards touch no wte row.
#include "ops/backend_ops.h"
#include "ops/cpu/column_blocks.h"

namespace ht::ops::cpu {
namespace {

void check_ids(const std::int32_t* ids, std::int64_t n, std::int64_t t, std::int64_t vocab) {
  for (std::int64_t i = 0; i < n; ++i)
    HT_CHECK(ids[i] >= 0 && ids[i] < vocab, ErrorKind::kOutOfRange,
             "embedding: token id {} at batch row {}, position {} is outside the vocabulary [0, {}); "
             "check the dataset's tokenizer against the model's vocab_size",
             ids[i], i / t, i % t, vocab);
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out, VocabShard shard) {
  const std::int64_t t = tokens.size(1), n = tokens.numel(), c = wte.size(1), rows = wte.size(0);
  const std::int32_t* ids = tokens.data<std::int32_t>();
  check_ids(ids, n, t, shard.size);
  const float* pte = wte.data<float>();
  const float* ppe = wpe.defined() ? wpe.data<float>() : nullptr;
  float* po = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = std::int64_t(ids[i]) - shard.start;  // local row; unsharded: the id
    float* o = po + i * c;
    const float* pos = ppe ? ppe + (i % t) * c : nullptr;
    if (row < 0 || row >= rows) {  // another shard's token: the position term alone
      for (std::int64_t j = 0; j < c; ++j) o[j] = pos ? pos[j] : 0.f;
      continue;
    }
    const float* e = pte + row * c;
    if (pos) {
#pragma omp simd
      for (std::int64_t j = 0; j < c; ++j) o[j] = e[j] + pos[j];
    } else {
      for (std::int64_t j = 0; j < c; ++j) o[j] = e[j];
    }
  }
}

void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe, VocabShard shard) {
  const std::int64_t t = tokens.size(1), n = tokens.numel(), c = dwte.size(1), rows = dwte.size(0);
  const std::int32_t* ids = tokens.data<std::int32_t>();
  check_ids(ids, n, t, shard.size);
  const float* pg = dout.data<float>();
  float* pte = dwte.data<float>();
  float* ppe = dwpe.defined() ? dwpe.data<float>() : nullptr;
  for_column_blocks(c, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* g = pg + i * c;
      const std::int64_t row = std::int64_t(ids[i]) - shard.start;
      if (row >= 0 && row < rows) {  // tokens of other shards scatter nothing here
        float* e = pte + row * c;
        for (std::int64_t j = j0; j < j1; ++j) e[j] += g[j];
      }
      if (ppe) {
        float* pos = ppe + (i % t) * c;
        for (std::int64_t j = j0; j < j1; ++j) pos[j] += g[j];
      }
    }
  });
}

}  // namespace ht::ops::cpu
