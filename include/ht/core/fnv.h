// FNV-1a, 64-bit: the project's one stable hash (a dropout site, an init
// stream, a memory directory's path, a configuration the ranks agree on,
// the lanes of the checkpoint checksum), the same in every process, build
// and machine. Not for security: anything here is chosen by the user.
#pragma once

#include <cstdint>
#include <string_view>

namespace ht {

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

/// Folds one more value (a byte, a word, another hash) into `h`.
constexpr std::uint64_t fnv_fold(std::uint64_t h, std::uint64_t value) { return (h ^ value) * kFnvPrime; }

/// FNV-1a of `text`'s bytes.
constexpr std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = kFnvOffset;
  for (const char c : text) h = fnv_fold(h, static_cast<unsigned char>(c));
  return h;
}

}  // namespace ht
