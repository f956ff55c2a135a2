// ht::data::TokenShard: llm.c, hypertrain and raw token shards, mapped.
#include "ht/data/token_shard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/atomic_file.h"
#include "core/file_mapping.h"
#include "ht/ckpt/checkpoint.h"
#include "ht/core/error.h"
#include "ht/core/fnv.h"

namespace ht::data {

namespace {

constexpr std::string_view kRaw16 = "raw-uint16:";
constexpr std::string_view kRaw32 = "raw-uint32:";
constexpr std::int64_t kHtHeaderFields = 40;  // bytes covered by the header's own checksum

[[noreturn]] void bad_shard(const std::string& path, const std::string& what) {
  throw IoError(ErrorKind::kIo, fmt::format("token shard '{}': {}", path, what));
}

std::uint64_t le(const std::byte* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(std::to_integer<unsigned char>(p[i])) << (8 * i);
  return v;
}

void put_le(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint64_t header_hash(const unsigned char* p) {
  return fnv1a(std::string_view(reinterpret_cast<const char*>(p), std::size_t(kHtHeaderFields)));
}

// The tokens fill the rest of the file exactly: fewer bytes is a truncated
// (or half-written) shard, more is bytes no token owns.
void check_length(const TokenShardHeader& h, std::int64_t file_bytes, const std::string& path) {
  const std::int64_t room = file_bytes - h.data_offset;
  if (h.tokens > room / h.token_bytes)
    bad_shard(path, fmt::format("its header counts {} tokens of {} bytes ({} bytes) but the file holds {} bytes after "
                                "the header: the token count runs past the file's end (truncated?)",
                                h.tokens, h.token_bytes, h.tokens * h.token_bytes, room));
  if (h.tokens * h.token_bytes != room)
    bad_shard(path, fmt::format("its header counts {} tokens of {} bytes but {} bytes follow the header ({} bytes "
                                "that no token owns)",
                                h.tokens, h.token_bytes, room, room - h.tokens * h.token_bytes));
}

}  // namespace

TokenShardHeader parse_token_shard_header(std::span<const std::byte> head, std::int64_t file_bytes, int raw_token_bytes,
                                          const std::string& path) {
  TokenShardHeader h;
  if (raw_token_bytes != 0) {
    HT_CHECK_ARG(raw_token_bytes == 2 || raw_token_bytes == 4, "raw token shards hold 2- or 4-byte ids, not {}",
                 raw_token_bytes);
    h.format = TokenShardFormat::kRaw;
    h.token_bytes = raw_token_bytes;
    if (file_bytes % raw_token_bytes != 0)
      bad_shard(path, fmt::format("a raw uint{} shard of {} bytes: not a whole number of tokens", 8 * raw_token_bytes,
                                  file_bytes));
    h.tokens = file_bytes / raw_token_bytes;
    return h;
  }
  if (file_bytes < kTokenShardHeaderBytes || std::int64_t(head.size()) < kTokenShardHeaderBytes)
    bad_shard(path, fmt::format("it is {} bytes, shorter than the {}-byte header of an llm.c or hypertrain shard (a "
                                "headerless array is read with the prefix raw-uint16: or raw-uint32:)",
                                file_bytes, kTokenShardHeaderBytes));
  h.data_offset = kTokenShardHeaderBytes;
  const std::byte* p = head.data();
  if (std::memcmp(p, kTokenShardMagic.data(), kTokenShardMagic.size()) == 0) {
    h.format = TokenShardFormat::kHypertrain;
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    if (le(p + 40, 8) != header_hash(u))
      bad_shard(path, "its header's checksum does not match (the header is damaged)");
    const std::uint64_t version = le(p + 8, 4);
    if (version != kTokenShardVersion)
      bad_shard(path, fmt::format("unknown hypertrain shard version {} (this build reads version {})", version,
                                  kTokenShardVersion));
    const std::uint64_t width = le(p + 12, 4);
    if (width != 2 && width != 4) bad_shard(path, fmt::format("{} bytes per token (2 or 4 expected)", width));
    h.token_bytes = int(width);
    const std::uint64_t tokens = le(p + 16, 8), vocab = le(p + 24, 8);
    if (tokens > std::uint64_t(std::numeric_limits<std::int64_t>::max() / 4) ||
        vocab > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      bad_shard(path, fmt::format("its header counts {} tokens of a vocabulary of {}: more than a file holds", tokens,
                                  vocab));
    h.tokens = std::int64_t(tokens);
    h.vocab_size = std::int64_t(vocab);
    h.checksum = le(p + 32, 8);
  } else {
    const auto magic = std::int32_t(le(p, 4)), version = std::int32_t(le(p + 4, 4)), count = std::int32_t(le(p + 8, 4));
    h.format = TokenShardFormat::kLlmc;
    if (magic == kLlmcMagicGpt2) {
      if (version != 1)
        bad_shard(path, fmt::format("llm.c GPT-2 shard (magic {}) of unknown version {} (1 expected)", magic, version));
      h.token_bytes = 2;
    } else if (magic == kLlmcMagicLlama3) {
      if (version != 7)
        bad_shard(path, fmt::format("llm.c Llama 3 shard (magic {}) of unknown version {} (7 expected)", magic, version));
      h.token_bytes = 4;
    } else {
      bad_shard(path, fmt::format("bad magic {} (0x{:08x}): neither llm.c's ({} for uint16, {} for uint32 tokens) nor "
                                  "hypertrain's (\"{}\"); read a headerless array with the prefix raw-uint16: or "
                                  "raw-uint32:",
                                  magic, std::uint32_t(magic), kLlmcMagicGpt2, kLlmcMagicLlama3, kTokenShardMagic));
    }
    if (count < 0) bad_shard(path, fmt::format("its header counts {} tokens", count));
    h.tokens = count;
  }
  check_length(h, file_bytes, path);
  return h;
}

TokenShard TokenShard::open(const std::string& spec) {
  int raw = 0;
  std::string path = spec;
  if (spec.starts_with(kRaw16)) {
    raw = 2;
    path = spec.substr(kRaw16.size());
  } else if (spec.starts_with(kRaw32)) {
    raw = 4;
    path = spec.substr(kRaw32.size());
  }
  TokenShard s;
  s.map_ = ht::detail::FileMapping::open(path, "token shard");
  const std::int64_t head = std::min(s.map_->bytes(), kTokenShardHeaderBytes);
  s.header_ = parse_token_shard_header({s.map_->data(), std::size_t(head)}, s.map_->bytes(), raw, path);
  return s;
}

const std::string& TokenShard::path() const { return map_->path(); }

void TokenShard::read(std::int64_t first, std::int64_t count, std::int32_t* out) const {
  HT_CHECK(first >= 0 && count >= 0 && first <= size() && count <= size() - first, ErrorKind::kOutOfRange,
           "token shard '{}': tokens [{}, {}) are outside its {} tokens", path(), first, first + count, size());
  const std::byte* p = map_->data() + header_.data_offset + first * header_.token_bytes;
  if (header_.token_bytes == 2) {
    for (std::int64_t i = 0; i < count; ++i) {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = std::int32_t(v);
    }
    return;
  }
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    if (v > std::uint32_t(std::numeric_limits<std::int32_t>::max()))
      bad_shard(path(), fmt::format("token {} is {}, beyond the int32 ids the model takes", first + i, v));
    out[i] = std::int32_t(v);
  }
}

void TokenShard::verify() const {
  if (header_.format != TokenShardFormat::kHypertrain) return;
  const std::uint64_t sum = ckpt::checksum64(map_->data() + header_.data_offset,
                                             std::size_t(header_.tokens * header_.token_bytes));
  if (sum != header_.checksum)
    bad_shard(path(), fmt::format("the tokens' checksum is {:016x} but the header says {:016x}: the tokens are damaged",
                                  sum, header_.checksum));
}

void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens,
                       const TokenShardWriteOptions& options) {
  HT_CHECK_ARG(options.format != TokenShardFormat::kRaw, "write_token_shard '{}': write llm.c or hypertrain shards",
               path);
  std::int64_t top = options.vocab_size > 0 ? options.vocab_size - 1 : 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    HT_CHECK_ARG(tokens[i] >= 0, "write_token_shard '{}': token {} is {}, not an id", path, i, tokens[i]);
    HT_CHECK_ARG(options.vocab_size <= 0 || tokens[i] < options.vocab_size,
                 "write_token_shard '{}': token {} is {}, outside the vocabulary of {}", path, i, tokens[i],
                 options.vocab_size);
    top = std::max<std::int64_t>(top, tokens[i]);
  }
  int width = options.token_bytes;
  if (width == 0) width = top <= 0xffff ? 2 : 4;
  HT_CHECK_ARG(width == 2 || width == 4, "write_token_shard '{}': {} bytes per token (2 or 4)", path, width);
  HT_CHECK_ARG(width == 4 || top <= 0xffff,
               "write_token_shard '{}': id {} does not fit in uint16; write 4 bytes per token", path, top);
  std::vector<unsigned char> data(tokens.size() * std::size_t(width));
  for (std::size_t i = 0; i < tokens.size(); ++i) put_le(data.data() + i * std::size_t(width), std::uint32_t(tokens[i]), width);
  unsigned char header[kTokenShardHeaderBytes] = {};
  if (options.format == TokenShardFormat::kLlmc) {
    HT_CHECK_ARG(tokens.size() < (std::size_t(1) << 31),
                 "write_token_shard '{}': llm.c shards count tokens in an int32; {} tokens need several shards", path,
                 tokens.size());
    put_le(header, std::uint32_t(width == 2 ? kLlmcMagicGpt2 : kLlmcMagicLlama3), 4);
    put_le(header + 4, width == 2 ? 1 : 7, 4);
    put_le(header + 8, tokens.size(), 4);
  } else {
    std::memcpy(header, kTokenShardMagic.data(), kTokenShardMagic.size());
    put_le(header + 8, kTokenShardVersion, 4);
    put_le(header + 12, std::uint32_t(width), 4);
    put_le(header + 16, tokens.size(), 8);
    put_le(header + 24, std::uint64_t(std::max<std::int64_t>(options.vocab_size, 0)), 8);
    put_le(header + 32, ckpt::checksum64(data.data(), data.size()), 8);
    put_le(header + 40, header_hash(header), 8);
  }
  ht::detail::AtomicFile out(path, "token shard");
  out.write(header, sizeof header);
  out.write(data.data(), data.size());
  out.commit();
}

}  // namespace ht::data
