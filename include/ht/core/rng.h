// A small, fast, counter-based random number generator whose whole state is
// two integers, so it can be saved in a checkpoint and restored exactly.
#pragma once

#include <cstdint>

namespace ht {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : seed_(seed) {}

  /// 64 random bits: SplitMix64 of (seed, counter).
  std::uint64_t next_u64() {
    std::uint64_t z = seed_ * 0x9e3779b97f4a7c15ull + (++counter_) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 24 random bits.
  float uniform() { return float(next_u64() >> 40) * (1.0f / 16777216.0f); }
  /// Uniform integer in [0, n), n > 0.
  std::uint64_t below(std::uint64_t n) { return next_u64() % n; }
  /// Standard normal (Box-Muller; one draw per call).
  float normal();

  std::uint64_t seed() const { return seed_; }
  std::uint64_t counter() const { return counter_; }
  void set_state(std::uint64_t seed, std::uint64_t counter) {
    seed_ = seed;
    counter_ = counter;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t counter_ = 0;
};

}  // namespace ht
