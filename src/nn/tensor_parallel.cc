// ht::nn::TensorParallel and the full-tensor <-> part conversions.
#include "ht/nn/tensor_parallel.h"

#include <cstring>

namespace ht::nn {
namespace {

// A tensor seen as (outer, split, inner) around its split dimension: the
// split extent is parts x tp x chunk, and rank r's part holds, for each
// piece j, the chunk at (j * tp + r).
struct SplitView {
  std::int64_t outer = 1, chunk = 0, inner = 1;
  int parts = 1, tp = 1;
};

SplitView split_view(const Shape& full, const ParamLayout& l) {
  const int d = l.tp_split_dim;
  HT_CHECK(d >= 0 && d < int(full.size()), ErrorKind::kInvalidArgument, "tensor-parallel split dimension {} outside {}",
           d, shape_str(full));
  HT_CHECK(l.tp_parts > 0 && full[std::size_t(d)] % (std::int64_t(l.tp_parts) * l.tp_size) == 0,
           ErrorKind::kConfig, "dimension {} of {} ({}) does not split into {} piece(s) x {} tensor-parallel ranks", d,
           shape_str(full), full[std::size_t(d)], l.tp_parts, l.tp_size);
  SplitView v;
  v.parts = l.tp_parts;
  v.tp = l.tp_size;
  v.chunk = full[std::size_t(d)] / (std::int64_t(l.tp_parts) * l.tp_size);
  for (int i = 0; i < d; ++i) v.outer *= full[std::size_t(i)];
  for (std::size_t i = std::size_t(d) + 1; i < full.size(); ++i) v.inner *= full[i];
  return v;
}

// Copies between the full tensor and rank r's part, piece by piece (host memory).
void copy_part(const SplitView& v, int r, std::byte* full, std::byte* part, std::size_t elem, bool to_part) {
  const std::size_t run = std::size_t(v.chunk * v.inner) * elem;
  if (run == 0) return;  // a zero-size tensor: nothing to copy however many (outer x parts) runs it has
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (int j = 0; j < v.parts; ++j) {
      std::byte* f = full + ((o * v.parts * v.tp + (j * v.tp + r)) * v.chunk * v.inner) * std::int64_t(elem);
      std::byte* p = part + ((o * v.parts + j) * v.chunk * v.inner) * std::int64_t(elem);
      if (to_part)
        std::memcpy(p, f, run);
      else
        std::memcpy(f, p, run);
    }
}

}  // namespace

void TensorParallel::all_reduce_sum(Tensor& t) const {
  if (size() > 1) group->all_reduce(t, t, comm::ReduceOp::kSum)->wait();
}

Shape tp_part_shape(const Shape& full, const ParamLayout& layout) {
  if (!layout.tp_split()) return full;
  Shape s = full;
  split_view(full, layout);  // validates divisibility
  s[std::size_t(layout.tp_split_dim)] /= layout.tp_size;
  return s;
}

Tensor tp_part_of(const Tensor& full, const ParamLayout& layout) {
  if (!layout.tp_split()) return full;
  const SplitView v = split_view(full.shape(), layout);
  const Tensor host = full.to(Device::cpu());
  Tensor part = Tensor::empty(tp_part_shape(full.shape(), layout), full.dtype(), Device::cpu(), full.category());
  copy_part(v, layout.tp_rank, static_cast<std::byte*>(host.data_ptr()), static_cast<std::byte*>(part.data_ptr()),
            dtype_size(full.dtype()), /*to_part=*/true);
  return part.to(full.device());
}

Tensor tp_assemble(const std::vector<Tensor>& parts, const ParamLayout& layout) {
  HT_CHECK_ARG(!parts.empty(), "tp_assemble: no parts");
  if (!layout.tp_split()) return parts.front();
  HT_CHECK_ARG(int(parts.size()) == layout.tp_size, "tp_assemble: {} parts for a tensor-parallel group of {}",
               parts.size(), layout.tp_size);
  Shape full_shape = parts.front().shape();
  full_shape[std::size_t(layout.tp_split_dim)] *= layout.tp_size;
  const SplitView v = split_view(full_shape, layout);
  Tensor full = Tensor::empty(full_shape, parts.front().dtype(), Device::cpu(), parts.front().category());
  for (int r = 0; r < layout.tp_size; ++r) {
    const Tensor& p = parts[std::size_t(r)];
    HT_CHECK_ARG(p.shape() == parts.front().shape() && p.dtype() == full.dtype(),
                 "tp_assemble: part {} is {} where part 0 is {}", r, shape_str(p.shape()),
                 shape_str(parts.front().shape()));
    const Tensor host = p.to(Device::cpu());
    copy_part(v, r, static_cast<std::byte*>(full.data_ptr()), static_cast<std::byte*>(host.data_ptr()),
              dtype_size(full.dtype()), /*to_part=*/false);
  }
  return full.to(parts.front().device());
}

}  // namespace ht::nn
