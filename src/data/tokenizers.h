// The tokenizers load_tokenizer() chooses from (src/data/tokenizer.cc).
#pragma once

#include <memory>
#include <string>

#include "ht/data/tokenizer.h"

namespace ht::data::detail {

/// id = byte value, vocabulary 256, no end of text (data::tokenize_bytes's tokens).
std::unique_ptr<Tokenizer> make_byte_tokenizer();

/// A SentencePiece .model file (sentencepiece_tokenizer.cc), or kNotSupported
/// in a build without the library (sentencepiece_unavailable.cc).
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);

}  // namespace ht::data::detail
