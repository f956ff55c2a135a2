// load_sentencepiece() in a build without libsentencepiece: says so.
#include <fmt/format.h>

#include "data/tokenizers.h"
#include "ht/core/error.h"

namespace ht::data::detail {

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  throw Error(ErrorKind::kNotSupported,
              fmt::format("'{}' is a SentencePiece model, and this build of hypertrain has no SentencePiece: install "
                          "libsentencepiece-dev (scripts/setup.sh) and configure the build again", path));
}

}  // namespace ht::data::detail
