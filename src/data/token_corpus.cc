// ht::data::TokenCorpus: shards as one sequence; specs with globs.
#include "ht/data/token_corpus.h"

#include <glob.h>

#include <algorithm>

#include "ht/core/error.h"

namespace ht::data {

std::vector<std::string> expand_shard_spec(const std::string& spec) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    at = comma + 1;
    HT_CHECK_ARG(!item.empty(), "token shards '{}': an empty item (two commas, or a comma at an end)", spec);
    std::string prefix, pattern = item;
    for (const std::string_view p : {"raw-uint16:", "raw-uint32:"})
      if (item.starts_with(p)) {
        prefix = std::string(p);
        pattern = item.substr(p.size());
      }
    if (pattern.find_first_of("*?[") == std::string::npos) {
      out.push_back(item);  // a plain path: opening it says whether it exists
      continue;
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> found;
    for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (found.empty())
      throw IoError(ErrorKind::kIo, fmt::format("token shards '{}': the pattern '{}' matches no file", spec, pattern));
    std::sort(found.begin(), found.end());
    for (const std::string& f : found) out.push_back(prefix + f);
  }
  return out;
}

TokenCorpus TokenCorpus::open(const std::string& spec) {
  std::vector<TokenShard> shards;
  for (const std::string& s : expand_shard_spec(spec)) shards.push_back(TokenShard::open(s));
  return TokenCorpus(std::move(shards));
}

TokenCorpus::TokenCorpus(std::vector<TokenShard> shards) : shards_(std::move(shards)) {
  HT_CHECK_ARG(!shards_.empty(), "a token corpus needs at least one shard");
  starts_.push_back(0);
  for (const TokenShard& s : shards_) starts_.push_back(starts_.back() + s.size());
}

void TokenCorpus::read(std::int64_t first, std::int64_t count, std::int32_t* out) const {
  HT_CHECK(first >= 0 && count >= 0 && first <= size() && count <= size() - first, ErrorKind::kOutOfRange,
           "token corpus of {}: tokens [{}, {}) are outside it", describe(), first, first + count);
  // The shard holding `first`: the last whose start is <= first (an empty
  // shard shares its start with the next and is skipped by the loop).
  std::size_t s = std::size_t(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
  while (count > 0) {
    const std::int64_t local = first - starts_[s], n = std::min(count, shards_[s].size() - local);
    shards_[s].read(local, n, out);
    out += n;
    first += n;
    count -= n;
    ++s;
  }
}

std::string TokenCorpus::describe() const {
  return fmt::format("{} shard{}, {} tokens ({}{})", shards_.size(), shards_.size() == 1 ? "" : "s", size(),
                     shards_.front().path(), shards_.size() == 1 ? "" : " ... " + shards_.back().path());
}

}  // namespace ht::data
