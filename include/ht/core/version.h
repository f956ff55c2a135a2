// The library's version and build, for preambles and run records.
#pragma once

#include <string>

namespace ht {

/// "hypertrain 0.1.0 (abc1234, Release, cuda=0)": version, git commit, build
/// type and the compiled-in CUDA backend.
std::string build_description();

}  // namespace ht
