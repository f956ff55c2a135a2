// Byte-level BPE: the vocabulary readers and the merge loop.
#include "data/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "data/gpt2_pretokenizer.h"
#include "data/utf8.h"
#include "ht/core/error.h"

namespace ht::data::detail {
namespace {

std::string read_whole_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(ErrorKind::kIo, fmt::format("cannot open {} '{}': it is missing or unreadable", what, path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return std::uint64_t(std::uint32_t(left)) << 32 | std::uint32_t(right);
}

// The bytes a GPT-2 token string stands for, or nullopt when a character is
// not one of bytes_to_unicode's (a special token such as "<|endoftext|>" is
// all printable ASCII, and so stands for its own bytes).
std::optional<std::string> token_string_bytes(std::string_view token, const std::array<int, 0x144>& byte_of) {
  std::string bytes;
  for (std::size_t i = 0; i < token.size();) {
    const Utf8Char u = next_utf8(token, i);
    if (u.code_point >= byte_of.size() || byte_of[u.code_point] < 0) return std::nullopt;
    bytes.push_back(char(byte_of[u.code_point]));
    i += std::size_t(u.bytes);
  }
  return bytes;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (std::size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      if (s[i + k] == '=' && i + 4 == s.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        if (pad > 0) return std::nullopt;
        v[k] = base64_value(s[i + k]);
        if (v[k] < 0) return std::nullopt;
      }
    }
    const std::uint32_t w = std::uint32_t(v[0]) << 18 | std::uint32_t(v[1]) << 12 | std::uint32_t(v[2]) << 6 | v[3];
    out.push_back(char(w >> 16));
    if (pad < 2) out.push_back(char(w >> 8 & 0xFF));
    if (pad < 1) out.push_back(char(w & 0xFF));
  }
  return out;
}

// Makes every pair whose concatenation is a token a merge of that token's
// rank: tiktoken's rule (merge the adjacent pair whose concatenation ranks
// lowest), which for a vocabulary trained by BPE is GPT-2's merge list.
void add_rank_merges(BpeVocabulary& v) {
  std::unordered_map<std::string_view, std::int32_t> id_of;
  for (std::size_t id = 0; id < v.token_bytes.size(); ++id)
    if (v.token_used[id]) id_of.emplace(v.token_bytes[id], std::int32_t(id));
  for (std::size_t id = 0; id < v.token_bytes.size(); ++id) {
    const std::string_view t = v.token_bytes[id];
    if (!v.token_used[id] || t.size() < 2) continue;
    for (std::size_t cut = 1; cut < t.size(); ++cut) {
      const auto l = id_of.find(t.substr(0, cut)), r = id_of.find(t.substr(cut));
      if (l != id_of.end() && r != id_of.end())
        v.merges[pair_key(l->second, r->second)] = {std::uint32_t(id), std::int32_t(id)};
    }
  }
}

}  // namespace

std::array<char32_t, 256> gpt2_byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[std::size_t(b)] = printable ? char32_t(b) : next++;
  }
  return map;
}

BpeVocabulary read_gpt2_vocabulary(const std::string& encoder_path, const std::string& merges_path) {
  const std::array<char32_t, 256> to_unicode = gpt2_byte_to_unicode();
  std::array<int, 0x144> byte_of;  // bytes_to_unicode's characters lie below U+0144
  byte_of.fill(-1);
  for (int b = 0; b < 256; ++b) byte_of[to_unicode[std::size_t(b)]] = b;

  BpeVocabulary v;
  v.description = fmt::format("gpt2-bpe {} + {}", encoder_path, merges_path);
  const nlohmann::json encoder = [&] {
    const std::string text = read_whole_file(encoder_path, "BPE vocabulary");
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(ErrorKind::kIo, fmt::format("BPE vocabulary '{}' is not valid JSON ({}): it should be GPT-2's "
                                                "encoder.json or Hugging Face's vocab.json, an object of token: id",
                                                encoder_path, e.what()));
    }
  }();
  if (!encoder.is_object() || encoder.empty())
    throw IoError(ErrorKind::kIo, fmt::format("BPE vocabulary '{}' is not a JSON object of token: id (GPT-2's "
                                              "encoder.json or Hugging Face's vocab.json)", encoder_path));
  std::unordered_map<std::string, std::int32_t> id_of;
  id_of.reserve(encoder.size());
  std::int64_t max_id = -1;
  for (const auto& [token, id] : encoder.items()) {
    const std::int64_t i = id.is_number_integer() ? id.get<std::int64_t>() : -1;
    if (i < 0 || i > (1 << 30))
      throw IoError(ErrorKind::kIo, fmt::format("BPE vocabulary '{}': token '{}' has id {}, not an integer in "
                                                "[0, 2^30]: the file is damaged", encoder_path, token, id.dump()));
    max_id = std::max(max_id, i);
    id_of.emplace(token, std::int32_t(i));
  }
  v.token_bytes.assign(std::size_t(max_id + 1), {});
  v.token_used.assign(std::size_t(max_id + 1), false);
  for (const auto& [token, id] : id_of) {
    std::optional<std::string> bytes = token_string_bytes(token, byte_of);
    v.token_bytes[std::size_t(id)] = bytes ? std::move(*bytes) : token;
    v.token_used[std::size_t(id)] = true;
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, to_unicode[std::size_t(b)]);
    const auto it = id_of.find(s);
    if (it == id_of.end())
      throw IoError(ErrorKind::kIo, fmt::format("BPE vocabulary '{}' has no token for byte 0x{:02x} ('{}'): it is "
                                                "not a byte-level BPE vocabulary as GPT-2's", encoder_path, b, s));
    v.byte_id[std::size_t(b)] = it->second;
  }
  if (const auto it = id_of.find("<|endoftext|>"); it != id_of.end()) v.end_of_text = it->second;

  // vocab.bpe: "#version: 0.2" and one merge "left right" a line, in rank
  // order. A later duplicate of a pair replaces the earlier (as GPT-2's
  // dict(zip(merges, range(len(merges))))).
  const std::string merges = read_whole_file(merges_path, "BPE merges file");
  std::size_t line_no = 0, rank = 0;
  for (std::size_t at = 0; at < merges.size();) {
    std::size_t end = merges.find('\n', at);
    if (end == std::string::npos) end = merges.size();
    std::string_view line(merges.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw IoError(ErrorKind::kIo, fmt::format("BPE merges file '{}' line {}: '{}' is not two tokens separated by "
                                                "one space: it should be GPT-2's vocab.bpe or Hugging Face's merges.txt",
                                                merges_path, line_no, line));
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    const auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end())
      throw IoError(ErrorKind::kIo, fmt::format("BPE merges file '{}' line {}: '{}' is not in the vocabulary '{}': "
                                                "the two files do not belong together",
                                                merges_path, line_no,
                                                l == id_of.end() ? left : r == id_of.end() ? right : left + right,
                                                encoder_path));
    v.merges[pair_key(l->second, r->second)] = {std::uint32_t(rank++), m->second};
  }
  if (v.merges.empty())
    throw IoError(ErrorKind::kIo, fmt::format("BPE merges file '{}' holds no merges: it should be GPT-2's vocab.bpe "
                                              "or Hugging Face's merges.txt", merges_path));
  return v;
}

BpeVocabulary read_tiktoken_vocabulary(const std::string& path) {
  const std::string text = read_whole_file(path, "tiktoken rank file");
  BpeVocabulary v;
  v.description = fmt::format("tiktoken-bpe {}", path);
  std::vector<std::pair<std::string, std::int64_t>> ranks;
  std::size_t line_no = 0;
  std::int64_t max_rank = -1;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    std::optional<std::string> bytes;
    std::int64_t rank = -1;
    if (space != std::string_view::npos) {
      bytes = base64_decode(line.substr(0, space));
      const std::string_view r = line.substr(space + 1);
      if (!r.empty() && r.size() < 10 && std::all_of(r.begin(), r.end(), [](char c) { return c >= '0' && c <= '9'; }))
        rank = std::stoll(std::string(r));
    }
    if (!bytes || rank < 0)
      throw IoError(ErrorKind::kIo, fmt::format("tiktoken rank file '{}' line {}: '{}' is not '<base64 token> <rank>'",
                                                path, line_no, line.substr(0, 80)));
    max_rank = std::max(max_rank, rank);
    ranks.emplace_back(std::move(*bytes), rank);
  }
  if (ranks.empty())
    throw IoError(ErrorKind::kIo, fmt::format("tiktoken rank file '{}' is empty: it should hold lines "
                                              "'<base64 token> <rank>'", path));
  if (std::int64_t(ranks.size()) + 1 > kGpt2PatternMaxTokens)  // the file holds no end of text
    throw Error(ErrorKind::kNotSupported,
                fmt::format("tiktoken rank file '{}' holds {} ranks: a vocabulary this large (cl100k_base, o200k_base) "
                            "splits text with another pattern than GPT-2's, which is not implemented; use r50k_base "
                            "or p50k_base, or GPT-2's encoder.json and vocab.bpe", path, ranks.size()));
  // The files hold no special tokens. GPT-2's (r50k_base, p50k_base) leave
  // rank 50256 free for <|endoftext|>.
  std::int64_t size = max_rank + 1;
  if (max_rank >= 50255) {
    const bool taken = std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.second == 50256; });
    if (!taken) {
      v.end_of_text = 50256;
      size = std::max<std::int64_t>(size, 50257);
    }
  }
  v.token_bytes.assign(std::size_t(size), {});
  v.token_used.assign(std::size_t(size), false);
  for (auto& [bytes, rank] : ranks) {
    if (v.token_used[std::size_t(rank)])
      throw IoError(ErrorKind::kIo, fmt::format("tiktoken rank file '{}' gives rank {} twice: the file is damaged",
                                                path, rank));
    v.token_bytes[std::size_t(rank)] = std::move(bytes);
    v.token_used[std::size_t(rank)] = true;
  }
  if (v.end_of_text) {
    v.token_bytes[std::size_t(*v.end_of_text)] = "<|endoftext|>";
    v.token_used[std::size_t(*v.end_of_text)] = true;
  }
  std::array<bool, 256> seen{};
  for (std::size_t id = 0; id < v.token_bytes.size(); ++id)
    if (v.token_used[id] && v.token_bytes[id].size() == 1 && !(v.end_of_text && std::int64_t(id) == *v.end_of_text)) {
      const auto b = static_cast<unsigned char>(v.token_bytes[id][0]);
      if (!seen[b]) v.byte_id[b] = std::int32_t(id);
      seen[b] = true;
    }
  for (int b = 0; b < 256; ++b)
    if (!seen[std::size_t(b)])
      throw IoError(ErrorKind::kIo, fmt::format("tiktoken rank file '{}' has no token for byte 0x{:02x}: it is not a "
                                                "byte-level BPE vocabulary", path, b));
  if (v.end_of_text) v.token_used[std::size_t(*v.end_of_text)] = false;  // not a merge result
  add_rank_merges(v);
  if (v.end_of_text) v.token_used[std::size_t(*v.end_of_text)] = true;
  return v;
}

void check_gpt2_text_splitting(const std::string& tokenizer_json) {
  const std::string text = read_whole_file(tokenizer_json, "tokenizer.json");
  // Only the text preparation is read: the vocabulary and merges (most of
  // the file; vocab.json and merges.txt hold them) are dropped while parsing.
  const nlohmann::json::parser_callback_t settings_only = [](int depth, nlohmann::json::parse_event_t event,
                                                             nlohmann::json& parsed) {
    return !(event == nlohmann::json::parse_event_t::key && depth <= 2 && parsed.is_string() &&
             (parsed == "vocab" || parsed == "merges" || parsed == "added_tokens"));
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, settings_only);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(ErrorKind::kIo, fmt::format("'{}' is not valid JSON ({})", tokenizer_json, e.what()));
  }
  const auto refuse = [&](const std::string& what) {
    throw Error(ErrorKind::kNotSupported,
                fmt::format("'{}': {}; this library's byte-level BPE prepares text as GPT-2 does (no normalizer, "
                            "the ByteLevel pre-tokenizer with GPT-2's pattern and no prefix space), so this "
                            "tokenizer would give other ids than its own: use a SentencePiece or GPT-2-style tokenizer",
                            tokenizer_json, what));
  };
  if (!j.is_object()) refuse("it is not a JSON object");
  // A field of another type than the format's is refused as a setting
  // this library does not know (nlohmann's value() would throw its own error).
  const auto field = [&](const nlohmann::json& o, const char* key, auto fallback) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return fallback;
    try {
      return it->get<decltype(fallback)>();
    } catch (const nlohmann::json::exception&) {
      refuse(fmt::format("its {} is {}", key, it->dump().substr(0, 200)));
    }
    return fallback;
  };
  if (const auto n = j.find("normalizer"); n != j.end() && !n->is_null())
    refuse(fmt::format("its normalizer is {}", n->dump().substr(0, 200)));
  const auto pre = j.find("pre_tokenizer");
  if (pre == j.end() || !pre->is_object() || field(*pre, "type", std::string()) != "ByteLevel")
    refuse(fmt::format("its pre_tokenizer is {}", pre == j.end() ? "absent" : pre->dump().substr(0, 300)));
  // tokenizers' ByteLevel defaults: add_prefix_space true, use_regex true.
  if (field(*pre, "add_prefix_space", true)) refuse("its ByteLevel pre_tokenizer adds a prefix space");
  if (!field(*pre, "use_regex", true)) refuse("its ByteLevel pre_tokenizer does not split with GPT-2's pattern");
  if (const auto m = j.find("model"); m != j.end() && m->is_object() && field(*m, "type", std::string("BPE")) != "BPE")
    refuse(fmt::format("its model is {}, not BPE", field(*m, "type", std::string())));
}

BpeTokenizer::BpeTokenizer(BpeVocabulary vocabulary) : vocab_(std::move(vocabulary)) {}

const BpeVocabulary::Merge* BpeTokenizer::find_merge(std::int32_t left, std::int32_t right) const {
  const auto it = vocab_.merges.find(pair_key(left, right));
  return it == vocab_.merges.end() ? nullptr : &it->second;
}

// Both loops merge, again and again, the adjacent pair of lowest rank (the
// leftmost of equals) until no pair is a merge. For GPT-2's merge list this is
// GPT-2's loop, which merges every occurrence of the best pair at once: a
// merge never creates another occurrence of its own pair, and each of those
// occurrences stays the best until it is merged.
void BpeTokenizer::merge_piece(std::string_view piece, bool heap, std::vector<std::int32_t>& out) const {
  std::vector<std::int32_t> ids(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) ids[i] = vocab_.byte_id[static_cast<unsigned char>(piece[i])];
  if (!heap) {
    // O(n^2) over a short piece: the fastest for words.
    while (ids.size() > 1) {
      std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max();
      std::size_t best = 0;
      std::int32_t merged = 0;
      for (std::size_t i = 0; i + 1 < ids.size(); ++i)
        if (const auto* m = find_merge(ids[i], ids[i + 1]); m && m->rank < best_rank) {
          best_rank = m->rank;
          best = i;
          merged = m->id;
        }
      if (best_rank == std::numeric_limits<std::uint32_t>::max()) break;
      ids[best] = merged;
      ids.erase(ids.begin() + std::ptrdiff_t(best) + 1);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  // O(n log n) for long pieces (a run of a million spaces is one piece): the
  // symbols as a linked list, the candidate pairs in a heap by (rank, left
  // position); a popped pair whose symbols have changed since is skipped.
  const std::size_t n = ids.size();
  std::vector<std::int64_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = std::int64_t(i) - 1;
    next[i] = i + 1 < n ? std::int64_t(i + 1) : -1;
  }
  struct Candidate {
    std::uint32_t rank;
    std::int64_t left, right;
    std::int32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](std::int64_t l, std::int64_t r) {
    if (l < 0 || r < 0) return;
    if (const auto* m = find_merge(ids[std::size_t(l)], ids[std::size_t(r)]))
      queue.push({m->rank, l, r, ids[std::size_t(l)], ids[std::size_t(r)]});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) offer(std::int64_t(i), std::int64_t(i + 1));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const auto l = std::size_t(c.left), r = std::size_t(c.right);
    if (!alive[l] || !alive[r] || next[l] != c.right || ids[l] != c.left_id || ids[r] != c.right_id) continue;
    ids[l] = find_merge(c.left_id, c.right_id)->id;
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[std::size_t(next[r])] = c.left;
    offer(prev[l], c.left);
    offer(c.left, next[l]);
  }
  for (std::int64_t i = 0; i >= 0; i = next[std::size_t(i)]) out.push_back(ids[std::size_t(i)]);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(vocab_.byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kCachePieceBytes) {
    merge_piece(piece, /*heap=*/true, out);
    return;
  }
  // The high bits pick the part: the map inside uses the low ones.
  CacheShard& shard = cache_[(PieceHash{}(piece) >> 40) % kCacheShards];
  {
    std::lock_guard lock(shard.mutex);
    if (const auto it = shard.pieces.find(piece); it != shard.pieces.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_piece(piece, /*heap=*/false, out);
  std::lock_guard lock(shard.mutex);
  if (shard.pieces.size() >= kCacheEntries / kCacheShards) shard.pieces.clear();
  shard.pieces.emplace(std::string(piece), std::vector<std::int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3);
  for (Gpt2Splitter split(text); !split.done();) encode_piece(split.next(), out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (const std::int32_t id : ids) {
    HT_CHECK_ARG(id >= 0 && id < vocab_size() && vocab_.token_used[std::size_t(id)],
                 "token id {} is not in the vocabulary of {} ({} ids){}", id, vocab_.description, vocab_size(),
                 id >= 0 && id < vocab_size() ? ": the vocabulary leaves that id unused" : "");
    text += vocab_.token_bytes[std::size_t(id)];
  }
  return text;
}

}  // namespace ht::data::detail
