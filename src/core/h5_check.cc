// Error conversion for HDF5: collects the library's error stack into the message.
#include "core/h5_check.h"

namespace ht::detail {
namespace {

herr_t collect(unsigned n, const H5E_error2_t* e, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (n < 3 && e->desc) *text += fmt::format("{}{}", text->empty() ? "" : "; ", e->desc);
  return 0;
}

}  // namespace

void throw_h5_error(const char* expr, const std::string& context, std::source_location where) {
  std::string stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &stack);
  H5Eclear2(H5E_DEFAULT);
  throw IoError(ErrorKind::kIo, fmt::format("{} failed for '{}'", expr, context), where,
                stack.empty() ? "HDF5" : "HDF5: " + stack);
}

}  // namespace ht::detail
