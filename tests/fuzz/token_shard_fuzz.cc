// Fuzz target: a token shard (ht::data::TokenShard): llm.c's and
// hypertrain's headers, the token checksum, and reads of its ends.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "ht/core/error.h"
#include "ht/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ht::fuzz::write_scratch_file("shard.bin", ht::fuzz::as_text(data, size));
  try {
    const ht::data::TokenShard s = ht::data::TokenShard::open(path);
    s.verify();
    std::vector<std::int32_t> ids(16);
    const std::int64_t n = std::min<std::int64_t>(16, s.size());
    s.read(0, n, ids.data());
    s.read(s.size() - n, n, ids.data());
  } catch (const ht::Error&) {
    // a refused file: the message names it and what is wrong
  }
  return 0;
}
