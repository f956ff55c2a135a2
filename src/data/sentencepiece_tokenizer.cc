// SentencePiece models (.model files) through the SentencePiece library.
#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "data/tokenizers.h"
#include "ht/core/error.h"

namespace ht::data::detail {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    const auto status = processor_.Load(path);
    if (!status.ok())
      throw IoError(ErrorKind::kIo, fmt::format("cannot load SentencePiece model '{}': {}; it should be a .model file "
                                                "written by spm_train or SentencePieceTrainer", path, status.ToString()));
  }

  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    HT_CHECK(status.ok(), ErrorKind::kInvalidArgument, "SentencePiece model '{}' cannot encode the text: {}", path_,
             status.ToString());
    return {ids.begin(), ids.end()};
  }

  std::string decode(std::span<const std::int32_t> ids) const override {
    for (const std::int32_t id : ids)
      HT_CHECK_ARG(id >= 0 && id < vocab_size(), "token id {} is not in the vocabulary of SentencePiece model '{}' "
                   "({} ids)", id, path_, vocab_size());
    std::string text;
    const auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    HT_CHECK(status.ok(), ErrorKind::kInvalidArgument, "SentencePiece model '{}' cannot decode the ids: {}", path_,
             status.ToString());
    return text;
  }

  std::int64_t vocab_size() const override { return processor_.GetPieceSize(); }

  std::optional<std::int32_t> end_of_text() const override {
    const int eos = processor_.eos_id();
    return eos >= 0 ? std::optional<std::int32_t>(eos) : std::nullopt;
  }

  std::string description() const override { return fmt::format("sentencepiece {}", path_); }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace ht::data::detail
