// Dropout's counter-based hash and per-element rule, shared by the CPU and
// CUDA drivers so that both make bit-identical keep/drop decisions. Pure
// integer arithmetic plus one exact conversion to float: nothing here can
// round differently on two devices.
#pragma once

#include <cstdint>

#include "ht/core/macros.h"

namespace ht::kern {

/// splitmix64's increment, 2^64 / phi: keeps a zero word from meeting a zero
/// state (the finaliser maps 0 to 0).
inline constexpr std::uint64_t kDropoutGamma = 0x9e3779b97f4a7c15ULL;

/// splitmix64's output function (Steele, Lea and Flood 2014, with Stafford's
/// "Mix13" constants): a bijection of 64-bit words in which every input bit
/// flips each output bit with probability close to 1/2.
HT_HD std::uint64_t splitmix64_finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// One word absorbed into the running hash: h' = finalize(h ^ (w + gamma)).
/// For a fixed h it is a bijection of w, so the elements of one row never
/// share a hash.
HT_HD std::uint64_t dropout_absorb(std::uint64_t h, std::uint64_t w) {
  return splitmix64_finalize(h ^ (w + kDropoutGamma));
}

/// The hash of (seed, site, row) before the column: what every element of a
/// row shares, so a driver can compute it once per row. h starts at 0, and
/// the first step is splitmix64's first output for state `seed`.
HT_HD std::uint64_t dropout_row_hash(std::uint64_t seed, std::uint64_t site, std::uint64_t row) {
  return dropout_absorb(dropout_absorb(dropout_absorb(0, seed), site), row);
}

/// The hash of element (row, col) of (seed, site): the four words absorbed in
/// the order seed, site, row, col.
HT_HD std::uint64_t dropout_hash(std::uint64_t seed, std::uint64_t site, std::uint64_t row, std::uint64_t col) {
  return dropout_absorb(dropout_row_hash(seed, site, row), col);
}

/// The hash's top 24 bits as a uniform in [0, 1) on the 2^-24 grid: exact in
/// f32, so the comparison with p is the same on every device.
HT_HD float dropout_uniform(std::uint64_t h) { return float(h >> 40) * (1.f / 16777216.f); }

/// Whether the element with hash h survives dropout with probability p.
HT_HD bool dropout_keep(std::uint64_t h, float p) { return dropout_uniform(h) >= p; }

/// The factor of kept elements, 1 / (1 - p), rounded once to f32.
HT_HD float dropout_scale(float p) { return 1.f / (1.f - p); }

/// One output element: x * scale if kept, else 0.
HT_HD float dropout_value(float x, bool keep, float scale) { return keep ? x * scale : 0.f; }

}  // namespace ht::kern
