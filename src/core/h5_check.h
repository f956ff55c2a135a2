// Private: turns negative HDF5 return values into ht::IoError at the call
// site, and owns HDF5 ids (one move-only owner per id kind).
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "ht/core/error.h"

namespace ht::detail {
[[noreturn]] void throw_h5_error(const char* expr, const std::string& context, std::source_location where);

/// Evaluates an HDF5 call; throws IoError naming the call and `context` (a path) if it is negative.
template <typename T>
T h5_check(T value, const char* expr, const std::string& context,
           std::source_location where = std::source_location::current()) {
  if (value < 0) throw_h5_error(expr, context, where);
  return value;
}

/// Owner of one HDF5 identifier; closes it with the matching H5?close.
template <herr_t (*Close)(hid_t)>
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~H5Id() { reset(); }
  hid_t get() const { return id_; }
  void reset() noexcept {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};
using H5File = H5Id<H5Fclose>;
using H5Dataset = H5Id<H5Dclose>;
using H5Dataspace = H5Id<H5Sclose>;
using H5Attribute = H5Id<H5Aclose>;
using H5Group = H5Id<H5Gclose>;
using H5Plist = H5Id<H5Pclose>;
}  // namespace ht::detail

#define HT_H5_CHECK(expr, context) ::ht::detail::h5_check((expr), #expr, (context))
