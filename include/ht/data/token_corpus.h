// ht::data::TokenCorpus: token shards read as one sequence of tokens, in
// order, so that a window may span two shards and the same tokens cut into
// other shards give the same windows at the same positions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/data/token_shard.h"

namespace ht::data {

/// The shards a spec names: comma-separated items, each a path or a glob
/// pattern (*, ?, [...]; its matches in name order), optionally prefixed
/// "raw-uint16:" / "raw-uint32:" (kept on every match). Throws IoError for
/// a pattern that matches nothing, kInvalidArgument for an empty spec or item.
std::vector<std::string> expand_shard_spec(const std::string& spec);

class TokenCorpus {
 public:
  /// Opens every shard of expand_shard_spec(spec). Throws IoError naming a bad shard.
  static TokenCorpus open(const std::string& spec);
  /// Throws kInvalidArgument when `shards` is empty.
  explicit TokenCorpus(std::vector<TokenShard> shards);

  /// Tokens in all shards.
  std::int64_t size() const { return starts_.back(); }
  const std::vector<TokenShard>& shards() const { return shards_; }
  /// Copies tokens [first, first + count) of the sequence into `out`, from
  /// as many shards as they span. Throws kOutOfRange outside the corpus.
  void read(std::int64_t first, std::int64_t count, std::int32_t* out) const;
  /// "3 shards, 1200000 tokens (a.bin ... c.bin)": for logs and errors.
  std::string describe() const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<std::int64_t> starts_;  // token index of each shard's first token, then the total
};

}  // namespace ht::data
