// Embedding: validation and dispatch. Token ids are range-checked by the
// drivers (the CPU one while it reads them; the CUDA one with a device flag);
// the vocabulary shard is checked here and reaches them resolved. f16 and bf16
// calls run the f32 drivers through F32Staging.
#include "ht/ops/embedding.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

// Names: the table, position-table and activation arguments ("wte", "wpe",
// "out" in forward; "dwte", "dwpe", "dout" in backward).
struct Names {
  const char* wte;
  const char* wpe;
  const char* x;
};

void check_common(const char* op, Names names, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                  const Tensor& x) {
  detail::check_ndim(op, "tokens", tokens, 2);
  detail::check_dtype(op, "tokens", tokens, DType::kI32);
  detail::check_ndim(op, names.wte, wte, 2);
  detail::check_compute_dtype(op, {{names.wte, &wte}, {names.wpe, &wpe}, {names.x, &x}});
  const std::int64_t b = tokens.size(0), t = tokens.size(1), c = wte.size(1);
  detail::check_shape(op, names.x, x, {b, t, c});
  if (wpe.defined()) {
    detail::check_ndim(op, names.wpe, wpe, 2);
    HT_CHECK(wpe.size(1) == c && wpe.size(0) >= t, ErrorKind::kShapeMismatch,
             "{}: wpe {} must be (T_max >= {}, {}); the sequence is longer than the model's context", op,
             shape_str(wpe.shape()), t, c);
  }
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out, VocabShard shard) {
  const char* op = "embedding_forward";
  const Device dev = wpe.defined()
                         ? detail::check_same_device(op, {{"tokens", &tokens}, {"wte", &wte}, {"wpe", &wpe}, {"out", &out}})
                         : detail::check_same_device(op, {{"tokens", &tokens}, {"wte", &wte}, {"out", &out}});
  check_common(op, {"wte", "wpe", "out"}, tokens, wte, wpe, out);
  shard = detail::check_vocab_shard(op, "wte", wte.size(0), shard);
  detail::F32Staging s;
  HT_DISPATCH(dev, embedding_forward, tokens, s.in(wte), s.in(wpe), s.out(out, detail::Staged::kOverwrite), shard);
  s.commit();
}

void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe, VocabShard shard) {
  const char* op = "embedding_backward";
  const Device dev =
      dwpe.defined()
          ? detail::check_same_device(op, {{"dout", &dout}, {"tokens", &tokens}, {"dwte", &dwte}, {"dwpe", &dwpe}})
          : detail::check_same_device(op, {{"dout", &dout}, {"tokens", &tokens}, {"dwte", &dwte}});
  check_common(op, {"dwte", "dwpe", "dout"}, tokens, dwte, dwpe, dout);
  shard = detail::check_vocab_shard(op, "dwte", dwte.size(0), shard);
  detail::F32Staging s;
  HT_DISPATCH(dev, embedding_backward, s.in(dout), tokens, s.out(dwte, detail::Staged::kAccumulate),
              s.out(dwpe, detail::Staged::kAccumulate), shard);
  s.commit();
}

}  // namespace ht::ops
