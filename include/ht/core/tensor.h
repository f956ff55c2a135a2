// ht::Tensor: a contiguous, reference-counted buffer with a shape, a dtype and
// a device. No strides and no autograd: views along the first dimension (and
// reshapes) share storage; everything else copies.
//
// Copying a Tensor copies the handle, not the bytes. A Tensor is not
// thread-safe to mutate, but distinct handles to one storage may be read from
// several threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/device.h"
#include "ht/core/dtype.h"
#include "ht/core/error.h"
#include "ht/core/memory.h"

namespace ht {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& shape);
std::int64_t shape_numel(const Shape& shape);

/// Owns one allocation; shared by all tensors that view it.
class Storage {
 public:
  Storage(std::size_t bytes, Device device, MemCategory category, HostMemory host);
  /// Host memory the library did not allocate (a mapped file's pages),
  /// which `owner` keeps alive for as long as this storage lives; the
  /// storage frees nothing itself and is not counted by the allocator.
  Storage(void* data, std::size_t bytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
  Device device_;
  MemCategory category_;
  HostMemory host_;
  std::shared_ptr<void> owner_;  // set for borrowed memory (the second constructor)
};

class Tensor {
 public:
  /// An undefined tensor (no storage); `defined()` is false.
  Tensor() = default;

  /// Uninitialised tensor. Throws on negative sizes or allocation failure.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      MemCategory category = MemCategory::kActivations,
                      HostMemory host = HostMemory::kPlain);
  /// A host tensor over `data` (at least shape's bytes, suitably aligned),
  /// memory that `owner` keeps alive while any view of it lives: the pages
  /// of a mapped file that a checkpoint's memory tier writes and sends.
  static Tensor from_host_memory(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      MemCategory category = MemCategory::kActivations);
  /// A host tensor holding `values` (T in float, f16, bf16, int32_t).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            MemCategory category = MemCategory::kOther);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  /// Size of dimension `d`; negative `d` counts from the end.
  std::int64_t size(int d) const;
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  MemCategory category() const { return storage_ ? storage_->category() : MemCategory::kOther; }
  std::size_t nbytes() const { return std::size_t(numel_) * dtype_size(dtype_); }

  void* data_ptr() const;
  /// Typed pointer; throws kDTypeMismatch if T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(DTypeOf<T>::value, "Tensor::data<T>()");
    return static_cast<T*>(data_ptr());
  }

  /// Rows [begin, end) along the first dimension, sharing storage.
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  /// Row `i` along the first dimension (one dimension fewer), sharing storage.
  Tensor operator[](std::int64_t i) const;
  /// The same bytes with another shape of equal element count; one size may be -1.
  Tensor view(Shape shape) const;
  /// Collapses all dimensions but the last: (d0*...*dn-2, dn-1).
  Tensor flatten_rows() const;

  /// Copies into a new tensor on `device` (same dtype and category).
  Tensor to(Device device) const;
  Tensor clone() const;
  /// Copies `src`'s bytes into this tensor; shapes (element counts), dtypes must match.
  void copy_from(const Tensor& src);
  void zero_();
  /// Fills a float tensor with `value` (converted to its dtype).
  void fill_(float value);

  /// Copies to host and converts each element to T (f32 tensors to float,
  /// f16/bf16 to float, i32 to int32_t or float).
  template <typename T>
  std::vector<T> to_vector() const;
  /// Element i as float (slow; for tests and diagnostics). Host or device.
  float item(std::int64_t i = 0) const;

  /// "Tensor(shape=[2, 3], dtype=f32, device=cpu)"
  std::string str() const;

  /// Throws kDTypeMismatch naming `what` unless dtype() == expected.
  void check_dtype(DType expected, const char* what) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, std::size_t offset_bytes, Shape shape, DType dtype);

  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

/// Whether two tensors' storages overlap (same storage or same bytes).
bool same_storage(const Tensor& a, const Tensor& b);

}  // namespace ht
