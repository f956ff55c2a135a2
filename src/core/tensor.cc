// ht::Tensor and ht::Storage.
#include "ht/core/tensor.h"

#include <cstring>

#include "ht/config.h"
#if HT_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/cuda_sync.h"
#endif

namespace ht {
namespace {

// Copies involving a device are enqueued on the current stream of the CUDA
// side's device (the destination's when both are devices), in order with the
// ops that wrote the source and will read the destination. The host waits
// only when the destination is host memory, which the caller reads on
// return. A copy from pageable host memory is staged by the runtime before
// cudaMemcpyAsync returns, so the source may be reused at once; from pinned
// memory the copy runs later, and the host allocator's fences keep a freed
// pinned block from reuse until then.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if HT_HAVE_CUDA
  const cuda::DeviceGuard guard(dst_dev.is_cuda() ? dst_dev : src_dev);
  const cudaStream_t stream = cuda::current_stream();
  HT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (dst_dev.is_cpu()) cuda::synchronize_stream(stream);
#else
  (void)dst_dev;
  throw Error(ErrorKind::kNotSupported, "device copy requested in a build without CUDA");
#endif
}

float element_as_float(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return to_float(static_cast<const f16*>(p)[i]);
    case DType::kBF16: return to_float(static_cast<const bf16*>(p)[i]);
    case DType::kI32: return float(static_cast<const std::int32_t*>(p)[i]);
  }
  return 0.f;
}

}  // namespace

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Storage::Storage(std::size_t bytes, Device device, MemCategory category, HostMemory host)
    : bytes_(bytes), device_(device), category_(category), host_(host) {
  data_ = detail::allocate(bytes, device, category, host);
}

Storage::Storage(void* data, std::size_t bytes, std::shared_ptr<void> owner)
    : data_(data),
      bytes_(bytes),
      device_(Device::cpu()),
      category_(MemCategory::kOther),
      host_(HostMemory::kPlain),
      owner_(std::move(owner)) {}

Storage::~Storage() {
  if (!owner_) detail::deallocate(data_, bytes_, device_, category_, host_);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, std::size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)),
      offset_bytes_(offset_bytes),
      shape_(std::move(shape)),
      numel_(shape_numel(shape_)),
      dtype_(dtype) {}

Tensor Tensor::from_host_memory(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
  for (auto d : shape)
    HT_CHECK(d >= 0, ErrorKind::kInvalidArgument, "tensor shape {} has a negative size", shape_str(shape));
  HT_CHECK(owner != nullptr && (data != nullptr || shape_numel(shape) == 0), ErrorKind::kInvalidArgument,
           "from_host_memory: memory of a tensor of shape {} needs its data and an owner", shape_str(shape));
  const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, std::move(owner)), 0, shape, dtype);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemCategory category, HostMemory host) {
  for (auto d : shape)
    HT_CHECK(d >= 0, ErrorKind::kInvalidArgument, "tensor shape {} has a negative size", shape_str(shape));
  const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(bytes, device, category, host), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, MemCategory category) {
  Tensor t = empty(shape, dtype, device, category);
  t.zero_();
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, MemCategory category) {
  HT_CHECK(std::int64_t(values.size()) == shape_numel(shape), ErrorKind::kShapeMismatch,
           "from_vector: {} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, DTypeOf<T>::value, Device::cpu(), category);
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&, MemCategory);
template Tensor Tensor::from_vector(const std::vector<f16>&, const Shape&, MemCategory);
template Tensor Tensor::from_vector(const std::vector<bf16>&, const Shape&, MemCategory);
template Tensor Tensor::from_vector(const std::vector<std::int32_t>&, const Shape&, MemCategory);

std::int64_t Tensor::size(int d) const {
  const int nd = ndim();
  const int i = d < 0 ? d + nd : d;
  HT_CHECK(i >= 0 && i < nd, ErrorKind::kOutOfRange, "dimension {} out of range for a {}-d tensor {}", d,
           nd, shape_str(shape_));
  return shape_[std::size_t(i)];
}

void* Tensor::data_ptr() const {
  HT_CHECK(defined(), ErrorKind::kInvalidArgument, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

void Tensor::check_dtype(DType expected, const char* what) const {
  HT_CHECK(dtype_ == expected, ErrorKind::kDTypeMismatch, "{}: expected dtype {}, got {} for tensor {}", what,
           dtype_name(expected), dtype_name(dtype_), shape_str(shape_));
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  HT_CHECK(ndim() >= 1, ErrorKind::kInvalidArgument, "slice of a 0-d tensor");
  HT_CHECK(0 <= begin && begin <= end && end <= shape_[0], ErrorKind::kOutOfRange,
           "slice [{}, {}) out of range for first dimension of {}", begin, end, shape_str(shape_));
  Shape s = shape_;
  s[0] = end - begin;
  const std::size_t row_bytes = std::size_t(numel_ / std::max<std::int64_t>(shape_[0], 1)) * dtype_size(dtype_);
  return Tensor(storage_, offset_bytes_ + std::size_t(begin) * row_bytes, std::move(s), dtype_);
}

Tensor Tensor::operator[](std::int64_t i) const {
  Tensor row = slice(i, i + 1);
  row.shape_.erase(row.shape_.begin());
  return row;
}

Tensor Tensor::view(Shape shape) const {
  int inferred = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      HT_CHECK(inferred < 0, ErrorKind::kShapeMismatch, "view {}: only one size may be -1", shape_str(shape));
      inferred = int(i);
    } else {
      HT_CHECK(shape[i] >= 0, ErrorKind::kShapeMismatch, "view {}: sizes must be non-negative or -1",
               shape_str(shape));
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    HT_CHECK(known > 0 && numel_ % known == 0, ErrorKind::kShapeMismatch, "cannot view {} as {}",
             shape_str(shape_), shape_str(shape));
    shape[std::size_t(inferred)] = numel_ / known;
  }
  HT_CHECK(shape_numel(shape) == numel_, ErrorKind::kShapeMismatch,
           "cannot view tensor of shape {} ({} elements) as {}", shape_str(shape_), numel_, shape_str(shape));
  return Tensor(storage_, offset_bytes_, std::move(shape), dtype_);
}

Tensor Tensor::flatten_rows() const {
  HT_CHECK(ndim() >= 1, ErrorKind::kInvalidArgument, "flatten_rows of a 0-d tensor");
  // The row count is the product of the leading sizes, not numel / cols: a
  // (4, 0) tensor has 4 empty rows.
  const std::int64_t rows = shape_numel(Shape(shape_.begin(), shape_.end() - 1));
  return Tensor(storage_, offset_bytes_, {rows, shape_.back()}, dtype_);
}

Tensor Tensor::to(Device device) const {
  Tensor out = empty(shape_, dtype_, device, category());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::clone() const { return to(device()); }

void Tensor::copy_from(const Tensor& src) {
  HT_CHECK(src.dtype_ == dtype_, ErrorKind::kDTypeMismatch,
           "copy_from: source {} {} does not match destination {} {}; convert with ops::cast",
           shape_str(src.shape_), dtype_name(src.dtype_), shape_str(shape_), dtype_name(dtype_));
  HT_CHECK(src.numel_ == numel_, ErrorKind::kShapeMismatch,
           "copy_from: source {} {} does not match destination {} {}", shape_str(src.shape_),
           dtype_name(src.dtype_), shape_str(shape_), dtype_name(dtype_));
  if (numel_ == 0) return;
  copy_bytes(data_ptr(), device(), src.data_ptr(), src.device(), nbytes());
}

void Tensor::zero_() {
  if (numel_ == 0) return;
  if (device().is_cpu()) {
    std::memset(data_ptr(), 0, nbytes());
    return;
  }
#if HT_HAVE_CUDA
  const cuda::DeviceGuard guard(device());
  HT_CUDA_CHECK(cudaMemsetAsync(data_ptr(), 0, nbytes(), cuda::current_stream()));
#endif
}

void Tensor::fill_(float value) {
  HT_CHECK(is_floating(dtype_), ErrorKind::kDTypeMismatch, "fill_ needs a floating tensor, got {}",
           dtype_name(dtype_));
  Tensor host = device().is_cpu() ? *this : empty(shape_, dtype_, Device::cpu(), category());
  for (std::int64_t i = 0; i < numel_; ++i) {
    switch (dtype_) {
      case DType::kF32: host.data<float>()[i] = value; break;
      case DType::kF16: host.data<f16>()[i] = to_f16(value); break;
      case DType::kBF16: host.data<bf16>()[i] = to_bf16(value); break;
      case DType::kI32: break;
    }
  }
  if (!device().is_cpu()) copy_from(host);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<T> out(static_cast<std::size_t>(numel_));
  if constexpr (std::is_same_v<T, std::int32_t>) {
    check_dtype(DType::kI32, "to_vector<int32_t>");
    if (numel_) std::memcpy(out.data(), host.data_ptr(), nbytes());
  } else {
    for (std::int64_t i = 0; i < numel_; ++i) out[std::size_t(i)] = element_as_float(host.data_ptr(), dtype_, i);
  }
  return out;
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<std::int32_t> Tensor::to_vector() const;

float Tensor::item(std::int64_t i) const {
  HT_CHECK(i >= 0 && i < numel_, ErrorKind::kOutOfRange, "item({}) out of range for {} elements", i, numel_);
  if (device().is_cpu()) return element_as_float(data_ptr(), dtype_, i);
  std::uint32_t word = 0;  // one element, at most 4 bytes
  const std::size_t esize = dtype_size(dtype_);
  copy_bytes(&word, Device::cpu(), static_cast<const char*>(data_ptr()) + std::size_t(i) * esize, device(), esize);
  return element_as_float(&word, dtype_, 0);
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("Tensor(shape={}, dtype={}, device={})", shape_str(shape_), dtype_name(dtype_),
                     device().str());
}

bool same_storage(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() != nullptr &&
         (a.data_ptr() == b.data_ptr() ||
          (a.device() == b.device() &&
           static_cast<const char*>(a.data_ptr()) < static_cast<const char*>(b.data_ptr()) + b.nbytes() &&
           static_cast<const char*>(b.data_ptr()) < static_cast<const char*>(a.data_ptr()) + a.nbytes()));
}

}  // namespace ht
