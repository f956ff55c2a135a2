// Token shards: files of token ids, memory-mapped and read a window at a
// time, never whole. Three layouts are read:
//
//  - llm.c's (dev/data/data_common.py write_datafile): 256 little-endian
//    int32 of header, then the tokens. header[0] is the magic, header[1] the
//    version, header[2] the token count: magic 20240520 version 1 holds
//    uint16 tokens (GPT-2), magic 20240801 version 7 uint32 tokens (Llama 3).
//    The file must be exactly 1024 + count * width bytes, as llm.c's loader
//    requires.
//  - hypertrain's own (write_token_shard), 1024 bytes of little-endian header:
//      bytes  0..7   "HTTOKENS"
//             8..11  u32 format version (1)
//            12..15  u32 bytes per token (2: uint16, 4: uint32)
//            16..23  u64 token count
//            24..31  u64 vocabulary size (0 when not given)
//            32..39  u64 checksum64 of the token bytes (ht/ckpt/checkpoint.h)
//            40..47  u64 FNV-1a (ht/core/fnv.h) of bytes 0..39
//            48..1023 zero
//    then the tokens; the file is exactly 1024 + count * width bytes.
//  - a headerless array of uint16 or uint32 (nanoGPT's train.bin is uint16),
//    which nothing in the bytes identifies: only when asked for, by the spec
//    prefix "raw-uint16:" or "raw-uint32:".
//
// Opening checks the header alone (cheap whatever the file's size); the
// token checksum of a hypertrain shard is checked by verify(), which reads
// the whole file. Errors are IoError naming the file and what is wrong.
// A TokenShard is immutable after open(); reads may run on several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace ht::detail {
class FileMapping;
}

namespace ht::data {

enum class TokenShardFormat { kLlmc, kHypertrain, kRaw };

inline constexpr std::int32_t kLlmcMagicGpt2 = 20240520;  // version 1, uint16 tokens
inline constexpr std::int32_t kLlmcMagicLlama3 = 20240801;  // version 7, uint32 tokens
inline constexpr std::int64_t kTokenShardHeaderBytes = 1024;  // llm.c's 256 int32, and ours
inline constexpr std::string_view kTokenShardMagic = "HTTOKENS";
inline constexpr std::uint32_t kTokenShardVersion = 1;

/// What a shard's header says.
struct TokenShardHeader {
  TokenShardFormat format = TokenShardFormat::kRaw;
  int token_bytes = 2;            // 2 (uint16) or 4 (uint32)
  std::int64_t tokens = 0;        // token count
  std::int64_t data_offset = 0;   // bytes before the first token
  std::int64_t vocab_size = 0;    // hypertrain shards: as written (0: not given)
  std::uint64_t checksum = 0;     // hypertrain shards: checksum64 of the token bytes
};

/// Parses and checks the header of a file of `file_bytes` bytes whose first
/// bytes are `head` (at least min(file_bytes, 1024) of them). `raw_token_bytes`
/// 2 or 4 reads the file as a headerless array of that width; 0 detects
/// llm.c's or hypertrain's header by its magic and refuses anything else.
/// Refused, by name: a file shorter than its header, an unknown magic or
/// version, a damaged hypertrain header, a token count that runs past the
/// file's end or does not fill it. Throws IoError naming `path`.
TokenShardHeader parse_token_shard_header(std::span<const std::byte> head, std::int64_t file_bytes, int raw_token_bytes,
                                          const std::string& path);

class TokenShard {
 public:
  /// `spec`: a path to an llm.c or hypertrain shard (told apart by the
  /// magic), or "raw-uint16:<path>" / "raw-uint32:<path>" for a headerless
  /// array. Maps the file and checks its header. Throws IoError.
  static TokenShard open(const std::string& spec);

  const std::string& path() const;
  const TokenShardHeader& header() const { return header_; }
  /// Tokens in the shard.
  std::int64_t size() const { return header_.tokens; }
  /// Copies tokens [first, first + count) into `out` as int32. Throws
  /// kOutOfRange outside the shard, IoError for a uint32 id above 2^31 - 1.
  void read(std::int64_t first, std::int64_t count, std::int32_t* out) const;
  /// Reads the whole shard and checks a hypertrain shard's token checksum
  /// (others have none: nothing to check). Throws IoError on a mismatch.
  void verify() const;

 private:
  std::shared_ptr<const ::ht::detail::FileMapping> map_;
  TokenShardHeader header_;
};

struct TokenShardWriteOptions {
  TokenShardFormat format = TokenShardFormat::kHypertrain;  // or kLlmc (readable by llm.c)
  /// 2 or 4 bytes per token; 0: 2 when every id (and vocab_size) fits in uint16, else 4.
  int token_bytes = 0;
  std::int64_t vocab_size = 0;  // recorded in a hypertrain shard; when > 0, every id must be below it
};

/// Writes `tokens` as one shard at `path`, atomically (a temporary name,
/// synced and renamed). Throws kInvalidArgument for a negative id, an id
/// that does not fit the width or is not below vocab_size, an llm.c shard of
/// 2^31 tokens or more; IoError for the disk.
void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens,
                       const TokenShardWriteOptions& options = {});

}  // namespace ht::data
