// ht::build_description.
#include "ht/core/version.h"

#include <fmt/format.h>

#include "ht/config.h"

namespace ht {

std::string build_description() {
  return fmt::format("hypertrain {} ({}, {}, cuda={})", HT_VERSION, HT_GIT_COMMIT, HT_BUILD_TYPE, HT_HAVE_CUDA);
}

}  // namespace ht
