// ht::data::TokenBlend and the blend spec parser.
#include "ht/data/token_blend.h"

#include <cmath>
#include <cstdlib>

#include "ht/core/error.h"
#include "ht/core/rng.h"

namespace ht::data {

namespace {

constexpr std::uint64_t kGoldenFraction = 0x9e3779b97f4a7c15ull;  // frac((sqrt 5 - 1) / 2) * 2^64
constexpr std::uint64_t kBlendStream = 0xb1e4d5a3c2f00001ull;     // u_0's draw, apart from the windows' draws

// "0.7:" at the start of `item`: the weight, or false when the item has none.
bool leading_weight(const std::string& item, double& weight) {
  const std::size_t colon = item.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string head = item.substr(0, colon);
  char* end = nullptr;
  weight = std::strtod(head.c_str(), &end);
  return end == head.c_str() + head.size();
}

}  // namespace

std::vector<BlendPart> parse_blend(const std::string& spec) {
  std::vector<BlendPart> parts;
  bool weighted = false;
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    at = comma + 1;
    double w = 0;
    if (leading_weight(item, w)) {
      HT_CHECK(std::isfinite(w) && w > 0, ErrorKind::kConfig,
               "data blend '{}': weight {} is not a positive number (write weight:shards, e.g. 0.7:a.bin,0.3:b.bin)",
               spec, item.substr(0, item.find(':')));
      HT_CHECK(parts.empty() || weighted, ErrorKind::kConfig,
               "data blend '{}': '{}' has a weight but the parts before it have none; give every part a weight", spec,
               item);
      weighted = true;
      parts.push_back({w, item.substr(item.find(':') + 1)});
      HT_CHECK(!parts.back().shards.empty(), ErrorKind::kConfig, "data blend '{}': the part of weight {} names no shards",
               spec, w);
    } else if (parts.empty()) {
      parts.push_back({1.0, item});
    } else {
      parts.back().shards += "," + item;
    }
  }
  return parts;
}

TokenBlend::TokenBlend(const std::vector<double>& weights, std::uint64_t seed) {
  HT_CHECK(!weights.empty(), ErrorKind::kConfig, "a data blend needs at least one part");
  double total = 0;
  for (const double w : weights) {
    HT_CHECK(std::isfinite(w) && w > 0, ErrorKind::kConfig, "data blend weight {} is not a positive number", w);
    total += w;
  }
  // Thresholds in 64-bit fixed point: share j ends at sum_{k<=j} w_k / total.
  double cumulative = 0;
  for (std::size_t j = 0; j + 1 < weights.size(); ++j) {
    cumulative += weights[j] / total;
    thresholds_.push_back(cumulative >= 1 ? ~0ull : std::uint64_t(std::ldexp(cumulative, 64)));
  }
  Rng rng(seed ^ kBlendStream);
  offset_ = rng.next_u64();
}

int TokenBlend::part(std::int64_t sample) const {
  const std::uint64_t u = offset_ + std::uint64_t(sample) * kGoldenFraction;  // mod 2^64: frac(u_0 + i phi)
  int j = 0;
  while (j < int(thresholds_.size()) && u >= thresholds_[std::size_t(j)]) ++j;
  return j;
}

}  // namespace ht::data
