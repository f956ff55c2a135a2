// load_tokenizer(): which tokenizer a path names; and the byte tokenizer.
#include "ht/data/tokenizer.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "data/bpe_tokenizer.h"
#include "data/tokenizers.h"
#include "ht/core/error.h"

namespace ht::data {
namespace detail {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(std::span<const std::int32_t> ids) const override {
    std::string text(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) {
      HT_CHECK_ARG(ids[i] >= 0 && ids[i] < 256, "token id {} is not a byte: the byte tokenizer's ids lie in [0, 256)",
                   ids[i]);
      text[i] = char(ids[i]);
    }
    return text;
  }
  std::int64_t vocab_size() const override { return 256; }
  std::optional<std::int32_t> end_of_text() const override { return std::nullopt; }
  std::string description() const override { return "bytes"; }
};

namespace fs = std::filesystem;

constexpr const char* kWhatLoads =
    "give 'bytes', a directory holding encoder.json (or vocab.json) and vocab.bpe (or merges.txt), one of those "
    "files, a tiktoken rank file (lines '<base64 token> <rank>'), or a SentencePiece .model file";

// The first of `names` present in `dir`, or "".
std::string first_present(const fs::path& dir, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (fs::is_regular_file(dir / name)) return (dir / name).string();
  return {};
}

std::unique_ptr<Tokenizer> load_bpe_pair(const fs::path& dir, const std::string& named) {
  const std::string vocab = first_present(dir, {"encoder.json", "vocab.json"});
  const std::string merges = first_present(dir, {"vocab.bpe", "merges.txt"});
  if (vocab.empty() || merges.empty())
    throw IoError(ErrorKind::kIo,
                  fmt::format("tokenizer '{}': {} has {} but no {}; a GPT-2 BPE needs both files side by side", named,
                              dir.string(), vocab.empty() ? "a merges file" : "a vocabulary",
                              vocab.empty() ? "encoder.json or vocab.json" : "vocab.bpe or merges.txt"));
  // A Hugging Face directory says in tokenizer.json how its text is split
  // before merging; without one, only a vocabulary of GPT-2's size is taken
  // to be split as GPT-2's (anything else would give wrong ids, silently).
  const std::string config = first_present(dir, {"tokenizer.json"});
  if (!config.empty()) check_gpt2_text_splitting(config);
  auto tokenizer = std::make_unique<BpeTokenizer>(read_gpt2_vocabulary(vocab, merges));
  if (config.empty() && tokenizer->vocab_size() > kGpt2PatternMaxTokens)
    throw Error(ErrorKind::kNotSupported,
                fmt::format("tokenizer '{}': {} holds {} tokens, more than a vocabulary split by GPT-2's pattern "
                            "(cl100k_base, Qwen2 and others split text otherwise, which is not implemented), and no "
                            "tokenizer.json says how its text is split: put the model's tokenizer.json beside it",
                            named, vocab, tokenizer->vocab_size()));
  return tokenizer;
}

// A tiktoken rank file starts "<base64> <digits>".
bool looks_like_tiktoken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!std::getline(in, line)) return false;
  const std::size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 >= line.size()) return false;
  for (std::size_t i = 0; i < space; ++i) {
    const char c = line[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) return false;
  }
  for (std::size_t i = space + 1; i < line.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(line[i])) && !(line[i] == '\r' && i + 1 == line.size())) return false;
  return true;
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace detail

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  if (path == "bytes") return detail::make_byte_tokenizer();
  HT_CHECK_ARG(!path.empty(), "no tokenizer named: {}", detail::kWhatLoads);
  const fs::path p(path);
  std::error_code ec;
  if (!fs::exists(p, ec))
    throw IoError(ErrorKind::kIo, fmt::format("tokenizer '{}' does not exist: {}", path, detail::kWhatLoads));
  if (fs::is_directory(p)) {
    if (!detail::first_present(p, {"encoder.json", "vocab.json", "vocab.bpe", "merges.txt"}).empty())
      return detail::load_bpe_pair(p, path);
    if (const std::string model = detail::first_present(p, {"tokenizer.model", "spm.model"}); !model.empty())
      return detail::load_sentencepiece(model);
    throw IoError(ErrorKind::kIo, fmt::format("tokenizer directory '{}' holds no tokenizer files: {}", path,
                                              detail::kWhatLoads));
  }
  const std::string name = p.filename().string();
  if (name == "encoder.json" || name == "vocab.json" || name == "vocab.bpe" || name == "merges.txt")
    return detail::load_bpe_pair(p.parent_path().empty() ? fs::path(".") : p.parent_path(), path);
  if (p.extension() == ".model") return detail::load_sentencepiece(path);
  if (p.extension() == ".tiktoken" || detail::looks_like_tiktoken(path))
    return std::make_unique<detail::BpeTokenizer>(detail::read_tiktoken_vocabulary(path));
  throw IoError(ErrorKind::kIo, fmt::format("'{}' is not a tokenizer this library reads: {}", path, detail::kWhatLoads));
}

}  // namespace ht::data
