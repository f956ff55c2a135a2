// Self-attention, packed and general: validation and dispatch. On the CPU
// f16 and bf16 calls run the f32 driver through F32Staging; the CUDA driver
// takes 16-bit inputs itself (tensor cores, f32 accumulation). lse is f32 and
// the key mask and segment ids i32 on both: they pass through.
#include "ht/ops/attention.h"

#include <string>

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

// Returns C after checking qkv is (B, T, 3C) with C divisible by n_head.
std::int64_t check_qkv(const char* op, const Tensor& qkv, int n_head) {
  detail::check_ndim(op, "qkv", qkv, 3);
  HT_CHECK(qkv.size(2) % 3 == 0, ErrorKind::kShapeMismatch, "{}: last dimension of qkv {} must be 3*C", op,
           shape_str(qkv.shape()));
  const std::int64_t c = qkv.size(2) / 3;
  HT_CHECK(n_head > 0 && c % n_head == 0, ErrorKind::kShapeMismatch,
           "{}: n_head={} must be positive and divide the channel count C={}", op, n_head, c);
  return c;
}

// Checks the head counts and the shapes of q (B, T, H * D), k and v (B, Tk,
// KV * D), D >= 1; returns D.
std::int64_t check_qkv_separate(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                const AttentionOptions& o) {
  HT_CHECK(o.n_head > 0 && o.n_kv_head > 0, ErrorKind::kShapeMismatch,
           "{}: n_head={} and n_kv_head={} must be positive (n_kv_head = n_head for multi-head attention, 1 for "
           "multi-query)",
           op, o.n_head, o.n_kv_head);
  if (o.n_head % o.n_kv_head != 0) {
    std::string divisors;
    for (int d = 1; d <= o.n_head; ++d)
      if (o.n_head % d == 0) {
        if (!divisors.empty()) divisors += ',';
        divisors += std::to_string(d);
      }
    HT_CHECK(false, ErrorKind::kShapeMismatch,
             "{}: n_kv_head={} must divide n_head={} (each key/value head serves n_head / n_kv_head query heads): "
             "choose n_kv_head in {{{}}}",
             op, o.n_kv_head, o.n_head, divisors);
  }
  HT_CHECK(o.causal_offset >= 0 && (o.causal || o.causal_offset == 0), ErrorKind::kInvalidArgument,
           "{}: causal_offset {} must be >= 0, and only a causal mask has one", op, o.causal_offset);
  detail::check_ndim(op, "q", q, 3);
  detail::check_ndim(op, "k", k, 3);
  detail::check_ndim(op, "v", v, 3);
  HT_CHECK(q.size(2) % o.n_head == 0 && q.size(2) >= o.n_head, ErrorKind::kShapeMismatch,
           "{}: the last dimension of q {} must be n_head={} times the head dimension (>= 1)", op,
           shape_str(q.shape()), o.n_head);
  const std::int64_t d = q.size(2) / o.n_head;
  const Shape kv{q.size(0), k.size(1), o.n_kv_head * d};
  HT_CHECK(k.shape() == kv, ErrorKind::kShapeMismatch,
           "{}: 'k' must have shape {} (the batch of q {}, its own keys, n_kv_head={} heads of dimension {}), got {}",
           op, shape_str(kv), shape_str(q.shape()), o.n_kv_head, d, shape_str(k.shape()));
  HT_CHECK(v.shape() == kv, ErrorKind::kShapeMismatch,
           "{}: 'v' must have shape {} (that of k: batch, keys, n_kv_head={} heads of dimension {}), got {}", op,
           shape_str(kv), o.n_kv_head, d, shape_str(v.shape()));
  return d;
}

// lse is (B, H, T) f32 whatever the compute dtype of the call.
void check_lse(const char* op, const Tensor& lse, const Shape& expected, DType compute) {
  HT_CHECK(lse.dtype() == DType::kF32, ErrorKind::kDTypeMismatch,
           "{}: 'lse' must be f32 whatever the compute dtype ({} here): allocate it as DType::kF32, got {}", op,
           dtype_name(compute), dtype_name(lse.dtype()));
  detail::check_shape(op, "lse", lse, expected);
}

// A non-null per-position input (a key mask, segment ids) is (B, T) i32 on
// `like`'s device.
void check_i32_rows(const char* op, const char* name, const Tensor* rows, const char* like_name, const Tensor& like,
                    std::int64_t b, std::int64_t t) {
  if (!rows) return;
  detail::check_same_device(op, {{like_name, &like}, {name, rows}});
  detail::check_dtype(op, name, *rows, DType::kI32);
  detail::check_shape(op, name, *rows, {b, t});
}

// A key mask is (B, Tk) on k's device.
void check_key_mask(const char* op, const Tensor& k, const Tensor* key_mask) {
  check_i32_rows(op, "key_mask", key_mask, "k", k, k.size(0), k.size(1));
}

// Segment ids are (B, T), T the queries' (and, in self-attention, the
// keys') positions.
void check_segment_ids(const char* op, const char* like_name, const Tensor& like, const Tensor* segment_ids,
                       std::int64_t b, std::int64_t t) {
  check_i32_rows(op, "segment_ids", segment_ids, like_name, like, b, t);
}

// Segment ids compare a query's position with a key's in one sequence:
// self-attention only.
void check_segments_self(const char* op, const Tensor& q, const Tensor& k, const Tensor* segment_ids) {
  HT_CHECK(!segment_ids || q.size(1) == k.size(1), ErrorKind::kShapeMismatch,
           "{}: segment ids need as many keys as queries (self-attention: key j is position j of the queries' "
           "sequence), got {} queries and {} keys; pass none for cross-attention",
           op, q.size(1), k.size(1));
}

const Tensor& or_none(const Tensor* t) {
  static const Tensor kNone;
  return t ? *t : kNone;
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& lse) {
  attention_forward(qkv, n_head, nullptr, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                        Tensor& dqkv) {
  attention_backward(dout, qkv, out, lse, n_head, nullptr, dqkv);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                       const Tensor* key_mask, Tensor& out, Tensor& lse) {
  attention_forward(q, k, v, options, key_mask, nullptr, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& options, const Tensor* key_mask, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  attention_backward(dout, q, k, v, out, lse, options, key_mask, nullptr, dq, dk, dv);
}

void attention_forward(const Tensor& qkv, int n_head, const Tensor* segment_ids, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Device dev = detail::check_same_device(op, {{"qkv", &qkv}, {"out", &out}, {"lse", &lse}});
  const std::int64_t c = check_qkv(op, qkv, n_head);
  const std::int64_t b = qkv.size(0), t = qkv.size(1);
  const DType dt = detail::check_compute_dtype(op, {{"qkv", &qkv}, {"out", &out}});
  detail::check_shape(op, "out", out, {b, t, c});
  check_lse(op, lse, {b, n_head, t}, dt);
  check_segment_ids(op, "qkv", qkv, segment_ids, b, t);
  detail::F32Staging s(/*native=*/dev.is_cuda());
  HT_DISPATCH(dev, attention_forward, s.in(qkv), n_head, or_none(segment_ids), s.out(out, detail::Staged::kOverwrite),
              lse);
  s.commit();
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                        const Tensor* segment_ids, Tensor& dqkv) {
  const char* op = "attention_backward";
  const Device dev = detail::check_same_device(
      op, {{"dout", &dout}, {"qkv", &qkv}, {"out", &out}, {"lse", &lse}, {"dqkv", &dqkv}});
  const std::int64_t c = check_qkv(op, qkv, n_head);
  const std::int64_t b = qkv.size(0), t = qkv.size(1);
  const DType dt = detail::check_compute_dtype(op, {{"dout", &dout}, {"qkv", &qkv}, {"out", &out}, {"dqkv", &dqkv}});
  detail::check_shape(op, "dout", dout, {b, t, c});
  detail::check_shape(op, "out", out, {b, t, c});
  check_lse(op, lse, {b, n_head, t}, dt);
  detail::check_shape(op, "dqkv", dqkv, qkv.shape());
  check_segment_ids(op, "qkv", qkv, segment_ids, b, t);
  detail::F32Staging s(/*native=*/dev.is_cuda());
  HT_DISPATCH(dev, attention_backward, s.in(dout), s.in(qkv), s.in(out), lse, n_head, or_none(segment_ids),
              s.out(dqkv, detail::Staged::kOverwrite));
  s.commit();
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                       const Tensor* key_mask, const Tensor* segment_ids, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Device dev =
      detail::check_same_device(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}});
  check_qkv_separate(op, q, k, v, options);
  const std::int64_t b = q.size(0), t = q.size(1);
  const DType dt = detail::check_compute_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  detail::check_shape(op, "out", out, q.shape());
  check_lse(op, lse, {b, options.n_head, t}, dt);
  check_key_mask(op, k, key_mask);
  check_segments_self(op, q, k, segment_ids);
  check_segment_ids(op, "q", q, segment_ids, b, t);
  detail::F32Staging s(/*native=*/dev.is_cuda());
  HT_DISPATCH(dev, attention_forward, s.in(q), s.in(k), s.in(v), options, or_none(key_mask), or_none(segment_ids),
              s.out(out, detail::Staged::kOverwrite), lse);
  s.commit();
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& options, const Tensor* key_mask,
                        const Tensor* segment_ids, Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const Device dev = detail::check_same_device(op, {{"dout", &dout},
                                                    {"q", &q},
                                                    {"k", &k},
                                                    {"v", &v},
                                                    {"out", &out},
                                                    {"lse", &lse},
                                                    {"dq", &dq},
                                                    {"dk", &dk},
                                                    {"dv", &dv}});
  check_qkv_separate(op, q, k, v, options);
  const std::int64_t b = q.size(0), t = q.size(1);
  const DType dt = detail::check_compute_dtype(
      op, {{"dout", &dout}, {"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  detail::check_shape(op, "dout", dout, q.shape());
  detail::check_shape(op, "out", out, q.shape());
  check_lse(op, lse, {b, options.n_head, t}, dt);
  check_key_mask(op, k, key_mask);
  detail::check_shape(op, "dq", dq, q.shape());
  detail::check_shape(op, "dk", dk, k.shape());
  detail::check_shape(op, "dv", dv, v.shape());
  check_segments_self(op, q, k, segment_ids);
  check_segment_ids(op, "q", q, segment_ids, b, t);
  using detail::Staged;
  detail::F32Staging s(/*native=*/dev.is_cuda());
  HT_DISPATCH(dev, attention_backward, s.in(dout), s.in(q), s.in(k), s.in(v), s.in(out), lse, options,
              or_none(key_mask), or_none(segment_ids), s.out(dq, Staged::kOverwrite), s.out(dk, Staged::kOverwrite),
              s.out(dv, Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
