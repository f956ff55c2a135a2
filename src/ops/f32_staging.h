// Private: how a compute op runs in f16 or bf16 without a second copy of its
// math. The public op hands its f32 driver f32 copies of the call's 16-bit
// tensors and rounds the outputs back once (ht/ops/compute_dtype.h). f32,
// i32 and undefined tensors pass through untouched, so an f32 call allocates
// and converts nothing, and neither does a call whose driver takes 16-bit
// tensors itself (CUDA matmul; on the CPU add, scale, GELU, cross-entropy).
#pragma once

#include <array>

#include "ht/core/tensor.h"
#include "ops/backend_ops.h"

namespace ht::ops::detail {

/// What a staged output holds when the driver starts.
enum class Staged {
  kOverwrite,   // nothing: the driver writes every element
  kAccumulate,  // the output's stored values, widened: the driver adds to them
};

/// Usage, in the public op after validation:
///
///   F32Staging s;
///   HT_DISPATCH(dev, bias_grad, s.in(dy), s.out(dbias, Staged::kAccumulate));
///   s.commit();
///
/// Every in() and out() of one call reads its 16-bit tensor before the driver
/// runs, and commit() writes the 16-bit outputs after it, so outputs that
/// alias inputs (layernorm_backward's dx and dy, gelu's y and x) stay
/// correct. If the driver throws, commit() is never reached and the 16-bit
/// outputs are left as they were. The copies live on the tensors' device
/// (MemCategory::kOther: scratch, not activations a model keeps) until the
/// object is destroyed. Not thread-safe; one object per call.
class F32Staging {
 public:
  F32Staging() = default;
  /// `native`: the driver computes the 16-bit dtypes itself (f32 inside,
  /// one rounding per output); every tensor passes through untouched.
  explicit F32Staging(bool native) : native_(native) {}
  F32Staging(const F32Staging&) = delete;
  F32Staging& operator=(const F32Staging&) = delete;

  /// What the f32 driver reads for `t`: t itself unless it is f16 or bf16,
  /// else a new f32 copy of it.
  const Tensor& in(const Tensor& t) {
    if (!staged(t)) return t;
    Tensor& f = add(t, nullptr);
    HT_DISPATCH(t.device(), cast, t, f);
    return f;
  }

  /// What the f32 driver writes for `t`: t itself unless it is f16 or bf16,
  /// else a new f32 tensor (holding t's values widened, for kAccumulate) that
  /// commit() rounds into t.
  Tensor& out(Tensor& t, Staged what) {
    if (!staged(t)) return t;
    Tensor& f = add(t, &t);
    if (what == Staged::kAccumulate) HT_DISPATCH(t.device(), cast, t, f);
    return f;
  }

  /// Rounds every staged output into its 16-bit tensor (once per element).
  void commit() {
    for (std::size_t i = 0; i < std::size_t(count_); ++i)
      if (target_[i]) HT_DISPATCH(f32_[i].device(), cast, f32_[i], *target_[i]);
  }

 private:
  static constexpr int kMaxTensors = 8;  // layernorm_backward stages the most: 6

  bool staged(const Tensor& t) const {
    return !native_ && t.defined() && (t.dtype() == DType::kF16 || t.dtype() == DType::kBF16);
  }

  Tensor& add(const Tensor& t, Tensor* target) {
    HT_CHECK(count_ < kMaxTensors, ErrorKind::kInternal, "F32Staging: more than {} tensors staged in one call",
             kMaxTensors);
    const auto i = std::size_t(count_++);
    f32_[i] = Tensor::empty(t.shape(), DType::kF32, t.device(), MemCategory::kOther);
    target_[i] = target;
    return f32_[i];
  }

  std::array<Tensor, kMaxTensors> f32_;
  std::array<Tensor*, kMaxTensors> target_{};  // the 16-bit output of each f32 copy; null for inputs
  int count_ = 0;
  bool native_ = false;
};

}  // namespace ht::ops::detail
