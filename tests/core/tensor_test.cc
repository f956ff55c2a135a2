// ht::Tensor: creation, shapes, views sharing storage, copies, element access,
// fills, and the per-category memory accounting behind every allocation.
#include "ht/core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "test_util.h"

namespace ht {
namespace {

using test::throws_error;

std::vector<float> iota_floats(std::size_t n, float start = 0.f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(Tensor, UndefinedByDefault) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.str(), "Tensor(undefined)");
  EXPECT_TRUE(throws_error([&] { (void)t.data_ptr(); }, ErrorKind::kInvalidArgument, {"undefined"}));
  EXPECT_FALSE(same_storage(t, t));
}

TEST(Tensor, EmptyHasShapeDtypeDeviceCategory) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    for (const Shape& s : std::vector<Shape>{{}, {0}, {1}, {7}, {3, 5}, {2, 0, 3}, {2, 3, 5, 7}}) {
      Tensor t = Tensor::empty(s, dt, Device::cpu(), MemCategory::kGradients);
      EXPECT_TRUE(t.defined());
      EXPECT_EQ(t.shape(), s);
      EXPECT_EQ(t.ndim(), int(s.size()));
      const std::int64_t n = std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
      EXPECT_EQ(t.numel(), n);
      EXPECT_EQ(t.nbytes(), std::size_t(n) * dtype_size(dt));
      EXPECT_EQ(t.dtype(), dt);
      EXPECT_EQ(t.device(), Device::cpu());
      EXPECT_EQ(t.category(), MemCategory::kGradients);
      EXPECT_NE(t.data_ptr(), nullptr);  // even for empty tensors
    }
  }
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
}

TEST(Tensor, HostBuffersAre64ByteAligned) {
  for (std::int64_t n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty({n}, DType::kF16);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64, 0u) << n;
  }
}

TEST(Tensor, EmptyRejectsNegativeSizes) {
  EXPECT_TRUE(throws_error([] { Tensor::empty({3, -2}, DType::kF32); }, ErrorKind::kInvalidArgument,
                           {"negative", "[3, -2]"}));
  EXPECT_TRUE(throws_error([] { Tensor::empty({-1}, DType::kI32); }, ErrorKind::kInvalidArgument, {"[-1]"}));
  EXPECT_TRUE(throws_error([] { Tensor::zeros({-4, -4}, DType::kF16); }, ErrorKind::kInvalidArgument, {"negative"}));
}

TEST(Tensor, SizeCountsFromTheEndAndChecksRange) {
  Tensor t = Tensor::empty({2, 3, 5}, DType::kF32);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(2), 5);
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_TRUE(throws_error([&] { (void)t.size(3); }, ErrorKind::kOutOfRange, {"dimension 3", "[2, 3, 5]"}));
  EXPECT_TRUE(throws_error([&] { (void)t.size(-4); }, ErrorKind::kOutOfRange, {"dimension -4"}));
  EXPECT_EQ(t.str(), "Tensor(shape=[2, 3, 5], dtype=f32, device=cpu)");
}

TEST(Tensor, ZerosAndFromVector) {
  Tensor z = Tensor::zeros({3, 7}, DType::kBF16);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.f);
  Tensor zi = Tensor::zeros({5}, DType::kI32);
  EXPECT_EQ(zi.to_vector<std::int32_t>(), std::vector<std::int32_t>(5, 0));

  const std::vector<float> vals = iota_floats(6, -2.5f);
  Tensor t = Tensor::from_vector(vals, {2, 3}, MemCategory::kParameters);
  EXPECT_EQ(t.category(), MemCategory::kParameters);
  EXPECT_EQ(t.to_vector<float>(), vals);
  EXPECT_TRUE(throws_error([&] { Tensor::from_vector(vals, {4, 2}); }, ErrorKind::kShapeMismatch,
                           {"6 values", "[4, 2]"}));

  const std::vector<std::int32_t> ids{5, -7, 2147483647};
  Tensor ti = Tensor::from_vector(ids, {3});
  EXPECT_EQ(ti.dtype(), DType::kI32);
  EXPECT_EQ(ti.to_vector<std::int32_t>(), ids);
  EXPECT_EQ(ti.item(1), -7.f);

  Tensor th = Tensor::from_vector(std::vector<f16>{{0x3c00}, {0xc000}}, {2});  // 1, -2
  EXPECT_EQ(th.to_vector<float>(), (std::vector<float>{1.f, -2.f}));
  Tensor tb = Tensor::from_vector(std::vector<bf16>{{0x3f80}, {0x4049}}, {2});  // 1, 3.140625
  EXPECT_EQ(tb.to_vector<float>(), (std::vector<float>{1.f, 3.140625f}));

  Tensor empty = Tensor::from_vector(std::vector<float>{}, {0, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.to_vector<float>().empty());
}

TEST(Tensor, TypedAccessChecksDtype) {
  Tensor t = Tensor::empty({4}, DType::kF16);
  EXPECT_NO_THROW((void)t.data<f16>());
  EXPECT_TRUE(throws_error([&] { (void)t.data<float>(); }, ErrorKind::kDTypeMismatch, {"f32", "f16"}));
  EXPECT_TRUE(throws_error([&] { (void)t.data<bf16>(); }, ErrorKind::kDTypeMismatch, {"bf16", "f16"}));
  EXPECT_TRUE(throws_error([&] { (void)t.to_vector<std::int32_t>(); }, ErrorKind::kDTypeMismatch, {"i32"}));
  EXPECT_TRUE(throws_error([&] { t.check_dtype(DType::kI32, "my_op"); }, ErrorKind::kDTypeMismatch,
                           {"my_op", "i32", "f16"}));
}

TEST(Tensor, ItemReadsOneElementAndChecksRange) {
  Tensor t = Tensor::from_vector(iota_floats(5, 10.f), {5});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.item(i), 10.f + float(i));
  EXPECT_EQ(t.item(), 10.f);
  EXPECT_TRUE(throws_error([&] { (void)t.item(5); }, ErrorKind::kOutOfRange, {"item(5)", "5 elements"}));
  EXPECT_TRUE(throws_error([&] { (void)t.item(-1); }, ErrorKind::kOutOfRange, {"item(-1)"}));
  Tensor h = Tensor::empty({3}, DType::kF16);
  h.fill_(0.1f);
  EXPECT_EQ(h.item(2), to_float(to_f16(0.1f)));
}

TEST(Tensor, SliceSharesStorageBothWays) {
  Tensor t = Tensor::from_vector(iota_floats(4 * 3), {4, 3});
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_TRUE(same_storage(s, t));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  // Write through the view, read through the parent.
  s.data<float>()[4] = -1.f;
  EXPECT_EQ(t.item(7), -1.f);
  // Write through the parent, read through the view.
  t.data<float>()[3] = 42.f;
  EXPECT_EQ(s.item(0), 42.f);
  // A slice of a slice still offsets correctly.
  Tensor ss = s.slice(1, 2);
  EXPECT_EQ(ss.to_vector<float>(), (std::vector<float>{6, -1, 8}));
  // Views keep the storage alive after the parent handle dies.
  Tensor keep;
  {
    Tensor parent = Tensor::from_vector(iota_floats(6), {3, 2});
    keep = parent.slice(2, 3);
  }
  EXPECT_EQ(keep.to_vector<float>(), (std::vector<float>{4, 5}));
  // Disjoint slices do not overlap.
  EXPECT_FALSE(same_storage(t.slice(0, 2), t.slice(2, 4)));
  EXPECT_TRUE(same_storage(t.slice(0, 3), t.slice(2, 4)));
  EXPECT_FALSE(same_storage(t, Tensor::from_vector(iota_floats(12), {4, 3})));
}

TEST(Tensor, SliceBounds) {
  Tensor t = Tensor::empty({5, 2}, DType::kI32);
  EXPECT_EQ(t.slice(0, 0).shape(), (Shape{0, 2}));
  EXPECT_EQ(t.slice(5, 5).shape(), (Shape{0, 2}));
  EXPECT_EQ(t.slice(0, 5).numel(), 10);
  EXPECT_TRUE(throws_error([&] { (void)t.slice(0, 6); }, ErrorKind::kOutOfRange, {"[0, 6)", "[5, 2]"}));
  EXPECT_TRUE(throws_error([&] { (void)t.slice(-1, 2); }, ErrorKind::kOutOfRange, {"[-1, 2)"}));
  EXPECT_TRUE(throws_error([&] { (void)t.slice(3, 2); }, ErrorKind::kOutOfRange, {"[3, 2)"}));
  EXPECT_TRUE(throws_error([&] { (void)t[5]; }, ErrorKind::kOutOfRange, {"[5, 6)"}));
  EXPECT_TRUE(throws_error([&] { (void)t[-1]; }, ErrorKind::kOutOfRange, {}));
  Tensor scalar = Tensor::empty({}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { (void)scalar.slice(0, 0); }, ErrorKind::kInvalidArgument, {"0-d"}));
}

TEST(Tensor, IndexDropsFirstDimension) {
  Tensor t = Tensor::from_vector(iota_floats(2 * 3 * 4), {2, 3, 4});
  Tensor r = t[1];
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  EXPECT_EQ(r.item(0), 12.f);
  Tensor rr = r[2];
  EXPECT_EQ(rr.shape(), (Shape{4}));
  EXPECT_EQ(rr.to_vector<float>(), (std::vector<float>{20, 21, 22, 23}));
  rr.data<float>()[0] = -5.f;
  EXPECT_EQ(t.item(20), -5.f);
  Tensor e = t[0][0][3];  // 0-d
  EXPECT_EQ(e.ndim(), 0);
  EXPECT_EQ(e.numel(), 1);
  EXPECT_EQ(e.item(), 3.f);
}

TEST(Tensor, ViewWithInferredSize) {
  Tensor t = Tensor::from_vector(iota_floats(24), {2, 3, 4});
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_TRUE(same_storage(v, t));
  v.data<float>()[5] = 100.f;
  EXPECT_EQ(t.item(5), 100.f);
  EXPECT_EQ(t.view({-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.view({-1, 2, 3}).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(t.view({1, 24, 1}).shape(), (Shape{1, 24, 1}));
  EXPECT_EQ(t.view({24}).view({2, 3, 4}).to_vector<float>(), t.to_vector<float>());
  // A view of a slice sees the slice's rows only.
  EXPECT_EQ(t.slice(1, 2).view({-1}).item(0), 12.f);
  // Zero elements: -1 resolves to 0 when the other sizes are positive.
  Tensor z = Tensor::empty({0, 6}, DType::kF32);
  EXPECT_EQ(z.view({-1, 3}).shape(), (Shape{0, 3}));
  EXPECT_EQ(z.view({2, 0}).shape(), (Shape{2, 0}));
  // A 1-element tensor views as 0-d.
  EXPECT_EQ(Tensor::empty({1, 1}, DType::kF32).view({}).ndim(), 0);
}

TEST(Tensor, ViewErrors) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { (void)t.view({5, 5}); }, ErrorKind::kShapeMismatch, {"[2, 3, 4]", "[5, 5]"}));
  EXPECT_TRUE(throws_error([&] { (void)t.view({-1, 5}); }, ErrorKind::kShapeMismatch, {"[-1, 5]"}));
  EXPECT_TRUE(throws_error([&] { (void)t.view({-1, -1}); }, ErrorKind::kShapeMismatch, {"only one"}));
  EXPECT_TRUE(throws_error([&] { (void)t.view({-1, 0}); }, ErrorKind::kShapeMismatch, {"[-1, 0]"}));
  // Negative sizes other than -1 are errors even when their product matches.
  EXPECT_TRUE(throws_error([&] { (void)t.view({-2, -12}); }, ErrorKind::kShapeMismatch, {"[-2, -12]"}));
  EXPECT_TRUE(throws_error([&] { (void)t.view({-6, -1}); }, ErrorKind::kShapeMismatch, {"[-6, -1]"}));
  EXPECT_TRUE(throws_error([&] { (void)Tensor::empty({0}, DType::kF32).view({-1, 0}); }, ErrorKind::kShapeMismatch,
                           {}));
}

TEST(Tensor, FlattenRows) {
  Tensor t = Tensor::from_vector(iota_floats(30), {2, 3, 5});
  Tensor f = t.flatten_rows();
  EXPECT_EQ(f.shape(), (Shape{6, 5}));
  EXPECT_TRUE(same_storage(f, t));
  EXPECT_EQ(Tensor::empty({7}, DType::kF32).flatten_rows().shape(), (Shape{1, 7}));
  // Empty tensors keep their row count: (d0 * ... * dn-2, dn-1) as documented.
  EXPECT_EQ(Tensor::empty({4, 0}, DType::kF32).flatten_rows().shape(), (Shape{4, 0}));
  EXPECT_EQ(Tensor::empty({2, 3, 0}, DType::kF32).flatten_rows().shape(), (Shape{6, 0}));
  EXPECT_EQ(Tensor::empty({0, 3}, DType::kF32).flatten_rows().shape(), (Shape{0, 3}));
  EXPECT_EQ(Tensor::empty({2, 0, 3}, DType::kF32).flatten_rows().shape(), (Shape{0, 3}));
  EXPECT_TRUE(throws_error([] { (void)Tensor::empty({}, DType::kF32).flatten_rows(); }, ErrorKind::kInvalidArgument,
                           {"0-d"}));
}

TEST(Tensor, CloneAndToCopyBytes) {
  Tensor t = Tensor::from_vector(iota_floats(6), {2, 3}, MemCategory::kOptimizerState);
  Tensor c = t.clone();
  EXPECT_FALSE(same_storage(c, t));
  EXPECT_EQ(c.shape(), t.shape());
  EXPECT_EQ(c.category(), MemCategory::kOptimizerState);
  EXPECT_EQ(c.to_vector<float>(), t.to_vector<float>());
  c.data<float>()[0] = 9.f;
  EXPECT_EQ(t.item(0), 0.f);
  Tensor h = t.to(Device::cpu());
  EXPECT_FALSE(same_storage(h, t));
  EXPECT_EQ(h.to_vector<float>(), t.to_vector<float>());
}

TEST(Tensor, CopyFrom) {
  Tensor src = Tensor::from_vector(iota_floats(6, 1.f), {2, 3});
  Tensor dst = Tensor::zeros({3, 2}, DType::kF32);  // same element count, other shape: allowed
  dst.copy_from(src);
  EXPECT_EQ(dst.to_vector<float>(), src.to_vector<float>());
  EXPECT_EQ(dst.shape(), (Shape{3, 2}));
  // Into a view: writes through to the parent only in the viewed rows.
  Tensor big = Tensor::zeros({4, 3}, DType::kF32);
  big.slice(1, 3).copy_from(src);
  EXPECT_EQ(big.to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0}));
  Tensor e = Tensor::empty({0}, DType::kF32);
  EXPECT_NO_THROW(e.copy_from(Tensor::empty({0, 5}, DType::kF32)));

  EXPECT_TRUE(throws_error([&] { dst.copy_from(Tensor::zeros({7}, DType::kF32)); }, ErrorKind::kShapeMismatch,
                           {"[7]", "[3, 2]"}));
  EXPECT_TRUE(throws_error([&] { dst.copy_from(Tensor::zeros({2, 3}, DType::kF16)); }, ErrorKind::kDTypeMismatch,
                           {"f16", "f32"}));
  EXPECT_TRUE(throws_error([&] { dst.copy_from(Tensor::zeros({12}, DType::kF16)); }, ErrorKind::kDTypeMismatch,
                           {"f16", "f32"}));
}

TEST(Tensor, ZeroAndFill) {
  Tensor t = Tensor::from_vector(iota_floats(5, 1.f), {5});
  t.zero_();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, 0.f));
  t.fill_(-2.75f);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, -2.75f));
  // f16 and bf16 fills store the rounded value.
  Tensor h = Tensor::empty({3}, DType::kF16);
  h.fill_(1.0f / 3.0f);
  EXPECT_EQ(h.data<f16>()[2].bits, 0x3555);  // 0.33325195
  Tensor b = Tensor::empty({3}, DType::kBF16);
  b.fill_(1.0f / 3.0f);
  EXPECT_EQ(b.data<bf16>()[1].bits, 0x3eab);  // 0.333984375
  h.fill_(1e6f);
  EXPECT_TRUE(std::isinf(h.item(0)));
  t.fill_(NAN);
  EXPECT_TRUE(std::isnan(t.item(4)));
  // Fill through a view touches only its rows.
  Tensor m = Tensor::zeros({3, 2}, DType::kF32);
  m[1].fill_(7.f);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{0, 0, 7, 7, 0, 0}));
  m.slice(2, 3).zero_();
  m[0].zero_();
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{0, 0, 7, 7, 0, 0}));
  Tensor ints = Tensor::zeros({2}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { ints.fill_(1.f); }, ErrorKind::kDTypeMismatch, {"i32"}));
  Tensor none = Tensor::empty({0}, DType::kF16);
  EXPECT_NO_THROW(none.fill_(1.f));
  EXPECT_NO_THROW(none.zero_());
}

TEST(Tensor, ToVectorConvertsToFloat) {
  Tensor i = Tensor::from_vector(std::vector<std::int32_t>{-3, 0, 16777217}, {3});
  // i32 -> float rounds like a C++ conversion.
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{-3.f, 0.f, 16777216.f}));
}

TEST(Tensor, CudaTensorInCpuOnlyBuild) {
  if (cuda_compiled()) GTEST_SKIP() << "this build has the CUDA backend";
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_TRUE(throws_error([] { Tensor::empty({4}, DType::kF32, Device::cuda()); }, ErrorKind::kNotSupported,
                           {"CUDA", "HT_WITH_CUDA"}));
  // A failed allocation records nothing.
  EXPECT_EQ(memory_stats(DeviceType::kCUDA, MemCategory::kActivations).current_bytes, 0);
  EXPECT_EQ(memory_stats_total(DeviceType::kCUDA).current_bytes, 0);
}

TEST(Tensor, PinnedHostMemoryWithoutDeviceIsPlain) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a device is present; pinned memory is real";
  Tensor t = Tensor::empty({5}, DType::kF32, Device::cpu(), MemCategory::kCommunication, HostMemory::kPinned);
  t.fill_(1.5f);
  EXPECT_EQ(t.item(4), 1.5f);
}

// Memory accounting -----------------------------------------------------------

TEST(Memory, CategoryNames) {
  EXPECT_EQ(mem_category_name(MemCategory::kParameters), "parameters");
  EXPECT_EQ(mem_category_name(MemCategory::kGradients), "gradients");
  EXPECT_EQ(mem_category_name(MemCategory::kOptimizerState), "optimizer_state");
  EXPECT_EQ(mem_category_name(MemCategory::kActivations), "activations");
  EXPECT_EQ(mem_category_name(MemCategory::kCommunication), "communication");
  EXPECT_EQ(mem_category_name(MemCategory::kOther), "other");
}

TEST(Memory, CurrentAndPeakFollowATensorsLife) {
  const auto cat = MemCategory::kParameters;
  reset_memory_peaks();
  const MemStats before = memory_stats(DeviceType::kCPU, cat);
  const MemStats total_before = memory_stats_total(DeviceType::kCPU);
  const MemStats grads_before = memory_stats(DeviceType::kCPU, MemCategory::kGradients);
  EXPECT_EQ(before.peak_bytes, before.current_bytes);
  const std::int64_t bytes = 37 * 11 * 2;  // f16: counts requested bytes, not the 64-byte rounding
  {
    Tensor p = Tensor::empty({37, 11}, DType::kF16, Device::cpu(), cat);
    const MemStats during = memory_stats(DeviceType::kCPU, cat);
    EXPECT_EQ(during.current_bytes, before.current_bytes + bytes);
    EXPECT_EQ(during.peak_bytes, before.current_bytes + bytes);
    const MemStats total = memory_stats_total(DeviceType::kCPU);
    EXPECT_EQ(total.current_bytes, total_before.current_bytes + bytes);
    EXPECT_EQ(total.peak_bytes, total_before.current_bytes + bytes);
    // Other categories and the CUDA row do not move.
    EXPECT_EQ(memory_stats(DeviceType::kCPU, MemCategory::kGradients).current_bytes, grads_before.current_bytes);
    EXPECT_EQ(memory_stats(DeviceType::kCUDA, cat).current_bytes, 0);
    // Views, copies of the handle and reshapes allocate nothing.
    Tensor v = p.view({-1});
    Tensor s = p.slice(2, 9);
    Tensor h = p;
    EXPECT_EQ(memory_stats(DeviceType::kCPU, cat).current_bytes, before.current_bytes + bytes);
    // A clone is a second allocation in the same category.
    {
      Tensor c = p.clone();
      EXPECT_EQ(memory_stats(DeviceType::kCPU, cat).current_bytes, before.current_bytes + 2 * bytes);
    }
    const MemStats after_clone = memory_stats(DeviceType::kCPU, cat);
    EXPECT_EQ(after_clone.current_bytes, before.current_bytes + bytes);
    EXPECT_EQ(after_clone.peak_bytes, before.current_bytes + 2 * bytes);
  }
  const MemStats after = memory_stats(DeviceType::kCPU, cat);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.peak_bytes, before.current_bytes + 2 * bytes);  // the peak remembers
  EXPECT_EQ(memory_stats_total(DeviceType::kCPU).current_bytes, total_before.current_bytes);
  reset_memory_peaks();
  EXPECT_EQ(memory_stats(DeviceType::kCPU, cat).peak_bytes, before.current_bytes);
  EXPECT_EQ(memory_stats_total(DeviceType::kCPU).peak_bytes, total_before.current_bytes);
}

TEST(Memory, StorageOutlivesHandleUntilLastView) {
  const auto cat = MemCategory::kOptimizerState;
  const std::int64_t base = memory_stats(DeviceType::kCPU, cat).current_bytes;
  Tensor view;
  {
    Tensor t = Tensor::zeros({100}, DType::kF32, Device::cpu(), cat);
    view = t.slice(10, 20);
  }
  EXPECT_EQ(memory_stats(DeviceType::kCPU, cat).current_bytes, base + 400);
  view = Tensor();
  EXPECT_EQ(memory_stats(DeviceType::kCPU, cat).current_bytes, base);
}

TEST(Memory, TotalPeakIsPeakOfTheSum) {
  reset_memory_peaks();
  const std::int64_t base = memory_stats_total(DeviceType::kCPU).current_bytes;
  {
    Tensor a = Tensor::empty({100}, DType::kF32, Device::cpu(), MemCategory::kActivations);
    Tensor b = Tensor::empty({50}, DType::kI32, Device::cpu(), MemCategory::kCommunication);
    EXPECT_EQ(memory_stats_total(DeviceType::kCPU).current_bytes, base + 600);
  }
  {
    Tensor c = Tensor::empty({10}, DType::kF32, Device::cpu(), MemCategory::kOther);
  }
  const MemStats total = memory_stats_total(DeviceType::kCPU);
  EXPECT_EQ(total.current_bytes, base);
  EXPECT_EQ(total.peak_bytes, base + 600);
}

TEST(Memory, ZeroSizedTensorsCountNothing) {
  const std::int64_t base = memory_stats(DeviceType::kCPU, MemCategory::kGradients).current_bytes;
  Tensor e = Tensor::empty({0, 8}, DType::kF32, Device::cpu(), MemCategory::kGradients);
  EXPECT_EQ(memory_stats(DeviceType::kCPU, MemCategory::kGradients).current_bytes, base);
}

}  // namespace
}  // namespace ht
