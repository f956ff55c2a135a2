// Tokenizers: UTF-8 decoding, the character classes, GPT-2's pre-tokenizer on
// hand-picked cases, a hand-made BPE vocabulary, the byte tokenizer, and the
// errors for missing and malformed files. With HT_GPT2_VOCAB_DIR (GPT-2's
// encoder.json and vocab.bpe) and HT_TOKENIZER_CORPUS (a text file), also
// round trips and the tiktoken and long-piece paths on GPT-2's vocabulary
// (tests/data/gpt2_reference_test.sh sets them); with HT_SPM_MODEL,
// HT_SPM_LINES and HT_SPM_IDS, the ids of a SentencePiece model against
// spm_encode's (tests/data/sentencepiece_reference_test.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/bpe_tokenizer.h"
#include "data/gpt2_pretokenizer.h"
#include "data/utf8.h"
#include "ht/data/token_dataset.h"
#include "ht/data/tokenizer.h"
#include "test_util.h"

namespace ht::data::tokenizer_test {
namespace {
namespace fs = std::filesystem;
using detail::CharClass;

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> pieces;
  for (detail::Gpt2Splitter s(text); !s.done();) pieces.emplace_back(s.next());
  return pieces;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

void write_file(const fs::path& path, std::string_view text) { std::ofstream(path, std::ios::binary) << text; }

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

TEST(Utf8, DecodesWellFormedAndRejectsEachIllFormedByte) {
  using detail::kInvalidCodePoint;
  using detail::next_utf8;
  const auto at = [](std::string_view s, std::size_t i = 0) {
    const detail::Utf8Char u = next_utf8(s, i);
    return std::pair<char32_t, int>(u.code_point, u.bytes);
  };
  EXPECT_EQ(at("A"), std::make_pair(char32_t(0x41), 1));
  EXPECT_EQ(at("\xC3\xA9"), std::make_pair(char32_t(0xE9), 2));
  EXPECT_EQ(at("\xE2\x82\xAC"), std::make_pair(char32_t(0x20AC), 3));
  EXPECT_EQ(at("\xF0\x9F\x98\x80"), std::make_pair(char32_t(0x1F600), 4));
  EXPECT_EQ(at("\xF4\x8F\xBF\xBF"), std::make_pair(char32_t(0x10FFFF), 4));
  // Truncated at the end of the text: never read past it.
  EXPECT_EQ(at(std::string_view("\xE2\x82", 2)), std::make_pair(kInvalidCodePoint, 1));
  EXPECT_EQ(at(std::string_view("\xF0\x9F\x98", 3)), std::make_pair(kInvalidCodePoint, 1));
  EXPECT_EQ(at("\xC3"), std::make_pair(kInvalidCodePoint, 1));
  // Overlong forms, surrogates, above U+10FFFF, stray continuation bytes.
  for (std::string_view bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80",
                               "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\x80", "\xBF", "\xFF", "\xFE"})
    EXPECT_EQ(at(bad), std::make_pair(kInvalidCodePoint, 1)) << "bytes of length " << bad.size();
  // A broken sequence followed by a good character: the good one survives.
  EXPECT_EQ(at("\xE2\x82" "A", 2), std::make_pair(char32_t('A'), 1));
  std::string round;
  for (char32_t cp : {char32_t(0x41), char32_t(0xE9), char32_t(0x20AC), char32_t(0x1F600)}) detail::append_utf8(round, cp);
  EXPECT_EQ(round, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(CharClass, LettersNumbersAndJavaScriptSpaces) {
  using detail::char_class;
  EXPECT_EQ(char_class('a'), CharClass::kLetter);
  EXPECT_EQ(char_class(0xE9), CharClass::kLetter);     // é
  EXPECT_EQ(char_class(0x4E2D), CharClass::kLetter);   // 中
  EXPECT_EQ(char_class(0x10400), CharClass::kLetter);  // Deseret capital long i, outside the BMP
  EXPECT_EQ(char_class(0x02B0), CharClass::kLetter);   // modifier letter small h (Lm)
  EXPECT_EQ(char_class('7'), CharClass::kNumber);
  EXPECT_EQ(char_class(0x0663), CharClass::kNumber);   // Arabic-Indic digit three (Nd)
  EXPECT_EQ(char_class(0x2167), CharClass::kNumber);   // Roman numeral eight (Nl)
  EXPECT_EQ(char_class(0x00BD), CharClass::kNumber);   // ½ (No)
  for (char32_t s : std::initializer_list<char32_t>{0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F,
                     0x205F, 0x3000, 0xFEFF})
    EXPECT_EQ(char_class(s), CharClass::kSpace) << std::hex << unsigned(s);
  for (char32_t o : std::initializer_list<char32_t>{0x00, 0x1C, 0x1F, 0x85, 0x21, 0x27, 0x1F600, 0x200B, detail::kInvalidCodePoint})
    EXPECT_EQ(char_class(o), CharClass::kOther) << std::hex << unsigned(o);
}

TEST(Gpt2Pretokenizer, SplitsAsThePattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split(""), V{});
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("don't we'll they're I'm you've he'd it's"),
            (V{"don", "'t", " we", "'ll", " they", "'re", " I", "'m", " you", "'ve", " he", "'d", " it", "'s"}));
  EXPECT_EQ(split("DON'T 'sup ''s"), (V{"DON", "'", "T", " '", "sup", " ''", "s"}));  // upper case is no contraction
  EXPECT_EQ(split("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("a  \n"), (V{"a", "  \n"}));
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("a \tb"), (V{"a", " ", "\t", "b"}));
  EXPECT_EQ(split("   "), (V{"   "}));
  EXPECT_EQ(split(" x"), (V{" x"}));
  EXPECT_EQ(split("year 2024abc!!?"), (V{"year", " 2024", "abc", "!!?"}));
  EXPECT_EQ(split("x ... y"), (V{"x", " ...", " y"}));
  EXPECT_EQ(split("caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87"), (V{"caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(split("hi \xF0\x9F\x98\x80\xF0\x9F\x98\x80!"), (V{"hi", " \xF0\x9F\x98\x80\xF0\x9F\x98\x80!"}));
  // U+3000 is a space of three bytes, but only U+0020 joins the word after it.
  EXPECT_EQ(split("a\xE3\x80\x80\xE3\x80\x80" "b"), (V{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
  // Invalid bytes are "other" characters of one byte each.
  EXPECT_EQ(split("ab\xFF\xFE" "cd \xC3"), (V{"ab", "\xFF\xFE", "cd", " \xC3"}));
  // Every split concatenates back to the text.
  const std::string mixed = "It's 3:00\xC2\xA0pm\r\n\t  \xE2\x80\xA8x\xFF\xF0\x9F";
  std::string joined;
  for (const std::string& p : split(mixed)) joined += p;
  EXPECT_EQ(joined, mixed);
}

// A small vocabulary in GPT-2's format: the 256 byte tokens, merges
// "h e" (rank 0), "l l" (1), "he ll" (2), "Ġ w" (3).
struct TinyVocabulary {
  test::TempDir dir{"ht_tokenizer_tiny"};
  TinyVocabulary() {
    const auto to_unicode = detail::gpt2_byte_to_unicode();
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      detail::append_utf8(s, to_unicode[std::size_t(b)]);
      tokens.push_back(s);
    }
    for (const char* t : {"he", "ll", "hell", "\xC4\xA0w", "<|endoftext|>"}) tokens.push_back(t);
    std::string json = "{";
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string escaped;
      for (char c : tokens[i]) {
        if (c == '"' || c == '\\') escaped.push_back('\\');
        escaped.push_back(c);
      }
      json += fmt::format("{}\"{}\": {}", i ? ", " : "", escaped, i);
    }
    json += "}";
    write_file(dir.path() / "encoder.json", json);
    write_file(dir.path() / "vocab.bpe", "#version: 0.2\nh e\nl l\nhe ll\n\xC4\xA0 w\n");
  }
};

TEST(BpeTokenizer, MergesByRankAndDecodes) {
  const TinyVocabulary v;
  const auto tok = load_tokenizer(v.dir.path().string());
  EXPECT_EQ(tok->vocab_size(), 261);
  EXPECT_EQ(tok->end_of_text(), std::optional<std::int32_t>(260));
  // "hello": h e l l o -> he l l o -> he ll o -> hell o; " world": Ġw o r l d.
  EXPECT_EQ(tok->encode("hello world"), (std::vector<std::int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(tok->decode(tok->encode("hello world")), "hello world");
  // Control bytes are mapped through bytes_to_unicode: byte 0x0A is U+010A.
  EXPECT_EQ(tok->encode("\n"), (std::vector<std::int32_t>{10}));
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{260}), "<|endoftext|>");
  EXPECT_TRUE(test::throws_error([&] { tok->decode(std::vector<std::int32_t>{261}); }, ErrorKind::kInvalidArgument,
                                 {"261", "261 ids"}));
  // The file pair is found from either file too.
  EXPECT_EQ(load_tokenizer((v.dir.path() / "vocab.bpe").string())->encode("hell"), (std::vector<std::int32_t>{258}));
}

// A Hugging Face tokenizer.json beside the pair says how text is split
// before merging: GPT-2's way is taken, any other refused by name (it would
// give other ids than the model's own tokenizer, with no error). Without
// one, a vocabulary larger than GPT-2's is refused.
TEST(BpeTokenizer, TokenizerJsonMustSplitTextAsGpt2) {
  const TinyVocabulary v;
  const fs::path config = v.dir.path() / "tokenizer.json";
  const std::string gpt2 = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true})";
  write_file(config, R"({"normalizer": null, )" + gpt2 + R"(, "model": {"type": "BPE"}})");
  EXPECT_EQ(load_tokenizer(v.dir.path().string())->encode("hell"), (std::vector<std::int32_t>{258}));
  const auto refused = [&](const std::string& json, std::initializer_list<std::string_view> words) {
    write_file(config, json);
    return test::throws_error([&] { load_tokenizer(v.dir.path().string()); }, ErrorKind::kNotSupported, words);
  };
  EXPECT_TRUE(refused(R"({"normalizer": {"type": "NFC"}, )" + gpt2 + "}", {"tokenizer.json", "normalizer", "NFC"}));
  EXPECT_TRUE(refused(R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split"}, )"
                      R"({"type": "ByteLevel", "use_regex": false}]}})",
                      {"pre_tokenizer", "Sequence", "other ids"}));
  EXPECT_TRUE(refused(R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}})", {"prefix space"}));
  EXPECT_TRUE(refused(R"({"pre_tokenizer": {"type": "ByteLevel"}})", {"prefix space"}));  // tokenizers' default
  EXPECT_TRUE(refused(R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}})",
                      {"GPT-2's pattern"}));
  EXPECT_TRUE(refused("[1]", {"not a JSON object"}));
  EXPECT_TRUE(refused(R"({)" + gpt2 + R"(, "model": {"type": "WordPiece", "vocab": {"a": 0}}})", {"WordPiece, not BPE"}));
  EXPECT_TRUE(refused(R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": "no"}})",
                      {"add_prefix_space is \"no\""}));
  write_file(config, "{");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(v.dir.path().string()); }, ErrorKind::kIo, {"not valid JSON"}));
  // No tokenizer.json: a vocabulary past GPT-2's size is refused.
  fs::remove(config);
  std::string json = read_file((v.dir.path() / "encoder.json").string());
  json.back() = ',';
  json += "\"big\": 60000}";
  write_file(v.dir.path() / "encoder.json", json);
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(v.dir.path().string()); }, ErrorKind::kNotSupported,
                                 {"60001 tokens", "tokenizer.json"}));
  write_file(config, R"({"normalizer": null, )" + gpt2 + "}");
  EXPECT_EQ(load_tokenizer(v.dir.path().string())->vocab_size(), 60001);
}

TEST(BpeTokenizer, BadFilesNameTheFileAndWhatToDo) {
  const test::TempDir dir("ht_tokenizer_bad");
  const fs::path& d = dir.path();
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer((d / "nothing").string()); }, ErrorKind::kIo,
                                 {"does not exist", "nothing", "encoder.json"}));
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(d.string()); }, ErrorKind::kIo, {"holds no tokenizer files"}));
  write_file(d / "encoder.json", "{\"a\": 0}");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(d.string()); }, ErrorKind::kIo,
                                 {"no vocab.bpe or merges.txt", "side by side"}));
  write_file(d / "vocab.bpe", "#version: 0.2\n");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(d.string()); }, ErrorKind::kIo,
                                 {"encoder.json", "no token for byte 0x00", "not a byte-level BPE"}));
  write_file(d / "encoder.json", "{\"a\": 0,");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(d.string()); }, ErrorKind::kIo, {"not valid JSON"}));
  write_file(d / "encoder.json", "[1, 2]");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(d.string()); }, ErrorKind::kIo, {"not a JSON object"}));

  const TinyVocabulary v;
  const fs::path merges = v.dir.path() / "vocab.bpe";
  write_file(merges, "#version: 0.2\nh e\nthree tokens here\n");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(v.dir.path().string()); }, ErrorKind::kIo,
                                 {"vocab.bpe", "line 3", "not two tokens"}));
  write_file(merges, "#version: 0.2\nh e\nx yz\n");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(v.dir.path().string()); }, ErrorKind::kIo,
                                 {"line 3", "'yz' is not in the vocabulary", "do not belong together"}));

  write_file(d / "ranks.tiktoken", "IQ== 0\nnot base64! 1\n");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer((d / "ranks.tiktoken").string()); }, ErrorKind::kIo,
                                 {"ranks.tiktoken", "line 2", "<base64 token> <rank>"}));
  write_file(d / "ranks.tiktoken", "IQ== 0\n");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer((d / "ranks.tiktoken").string()); }, ErrorKind::kIo,
                                 {"no token for byte 0x00"}));
  write_file(d / "notes.txt", "just some text\n");
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer((d / "notes.txt").string()); }, ErrorKind::kIo,
                                 {"notes.txt", "is not a tokenizer", "SentencePiece"}));
  write_file(d / "broken.model", "not a protobuf");
  try {
    load_tokenizer((d / "broken.model").string());
    ADD_FAILURE() << "a broken .model file loaded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("broken.model"), std::string::npos) << e.message();
  }
}

TEST(ByteTokenizer, IsTokenizeBytes) {
  const auto tok = load_tokenizer("bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->end_of_text(), std::nullopt);
  const std::string text = "caf\xC3\xA9\n\xFF\x00z";
  const std::string_view all(text.data(), text.size());
  const test::TempDir dir("ht_tokenizer_bytes");
  write_file(dir.path() / "t.txt", std::string(all) + std::string(all));
  const TokenSplits s = tokenize_bytes({(dir.path() / "t.txt").string()}, 0.5);
  EXPECT_EQ(tok->encode(all), s.train);
  EXPECT_EQ(tok->decode(tok->encode(all)), all);
  EXPECT_TRUE(test::throws_error([&] { tok->decode(std::vector<std::int32_t>{256}); }, ErrorKind::kInvalidArgument,
                                 {"256", "[0, 256)"}));
}

// GPT-2's own vocabulary, when the reference script gives it.
std::unique_ptr<Tokenizer> gpt2_or_skip() {
  const char* dir = env("HT_GPT2_VOCAB_DIR");
  if (dir == nullptr) return nullptr;
  return load_tokenizer(dir);
}

TEST(Gpt2Vocabulary, RoundTripsTheCorpusAndInvalidUtf8) {
  const auto tok = gpt2_or_skip();
  if (!tok) GTEST_SKIP() << "HT_GPT2_VOCAB_DIR not set (tests/data/gpt2_reference_test.sh sets it)";
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->end_of_text(), std::optional<std::int32_t>(50256));
  if (const char* corpus = env("HT_TOKENIZER_CORPUS")) {
    const std::string text = read_file(corpus);
    ASSERT_GT(text.size(), 100000u);
    EXPECT_TRUE(tok->decode(tok->encode(text)) == text);
  }
  // Any bytes come back unchanged, and the same bytes give the same ids.
  const std::string bad = "ok \xFF\xFE bad \xC3( \xE2\x82 end\xF0\x9F\x98";
  EXPECT_EQ(tok->decode(tok->encode(bad)), bad);
  EXPECT_EQ(tok->encode(bad), tok->encode(bad));
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(char(b));
  EXPECT_EQ(tok->decode(tok->encode(every_byte)), every_byte);
  // An invalid byte is a piece of "other" characters: "\xFF" alone is its byte's token.
  const auto ff = tok->encode("\xFF");
  ASSERT_EQ(ff.size(), 1u);
  EXPECT_EQ(tok->decode(ff), "\xFF");
}

TEST(Gpt2Vocabulary, LongPiecesMergeAsShortOnesAndFast) {
  const auto tok = gpt2_or_skip();
  if (!tok) GTEST_SKIP() << "HT_GPT2_VOCAB_DIR not set (tests/data/gpt2_reference_test.sh sets it)";
  const auto& bpe = dynamic_cast<const detail::BpeTokenizer&>(*tok);
  // The heap loop (long pieces) and the quadratic one (short pieces) agree on
  // every piece of the corpus.
  std::string text = "   the quick brown fox 1234567 !!!??? \xE4\xB8\xAD\xE6\x96\x87\xE6\x96\x87 aaaaaaaaaaaa";
  if (const char* corpus = env("HT_TOKENIZER_CORPUS")) text = read_file(corpus).substr(0, 300000);
  std::size_t pieces = 0;
  for (detail::Gpt2Splitter s(text); !s.done(); ++pieces) {
    const std::string_view piece = s.next();
    std::vector<std::int32_t> a, b;
    bpe.merge_piece(piece, false, a);
    bpe.merge_piece(piece, true, b);
    ASSERT_EQ(a, b) << "piece '" << piece << "'";
  }
  EXPECT_GT(pieces, 3u);
  // A megabyte of spaces is one piece; it merges in well under a second.
  const std::string spaces(1 << 20, ' ');
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok->encode(spaces);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok->decode(ids), spaces);
  EXPECT_LT(s, 5.0);
}

// Standard base64 (padded), as tiktoken's rank files hold token bytes.
std::string base64(std::string_view bytes) {
  static constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t w = std::uint32_t(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) w |= std::uint32_t(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) w |= static_cast<unsigned char>(bytes[i + 2]);
    b64 += kBase64[w >> 18 & 63];
    b64 += kBase64[w >> 12 & 63];
    b64 += i + 1 < bytes.size() ? kBase64[w >> 6 & 63] : '=';
    b64 += i + 2 < bytes.size() ? kBase64[w & 63] : '=';
  }
  return b64;
}

TEST(Gpt2Vocabulary, TiktokenRankFileEncodesAsEncoderJson) {
  const auto tok = gpt2_or_skip();
  if (!tok) GTEST_SKIP() << "HT_GPT2_VOCAB_DIR not set (tests/data/gpt2_reference_test.sh sets it)";
  // r50k_base is GPT-2's vocabulary with ranks = ids: write it as a tiktoken file.
  const auto& bpe = dynamic_cast<const detail::BpeTokenizer&>(*tok);
  std::string ranks;
  for (std::int32_t id = 0; id < 50256; ++id)
    ranks += fmt::format("{} {}\n", base64(bpe.decode(std::vector<std::int32_t>{id})), id);
  const test::TempDir dir("ht_tokenizer_tiktoken");
  write_file(dir.path() / "r50k_base.tiktoken", ranks);
  const auto tik = load_tokenizer((dir.path() / "r50k_base.tiktoken").string());
  EXPECT_EQ(tik->vocab_size(), 50257);
  EXPECT_EQ(tik->end_of_text(), std::optional<std::int32_t>(50256));
  std::string text = "Hello world, it's 2024! \xF0\x9F\x98\x80  \n\n caf\xC3\xA9";
  if (const char* corpus = env("HT_TOKENIZER_CORPUS")) text = read_file(corpus);
  EXPECT_TRUE(tik->encode(text) == tok->encode(text));
}

// A damaged rank file (a rank twice, a byte without a token) and a
// vocabulary past GPT-2's size (whose split pattern is another) are refused
// by name.
TEST(Tiktoken, DamagedAndTooLargeRankFilesAreRefused) {
  const test::TempDir dir("ht_tokenizer_tiktoken_bad");
  std::string bytes_only;
  for (int b = 0; b < 256; ++b) bytes_only += fmt::format("{} {}\n", base64(std::string(1, char(b))), b);
  const auto path = [&](const char* name) { return (dir.path() / name).string(); };
  write_file(path("ok.tiktoken"), bytes_only);
  EXPECT_EQ(load_tokenizer(path("ok.tiktoken"))->vocab_size(), 256);
  write_file(path("twice.tiktoken"), bytes_only + fmt::format("{} 7\n", base64("ab")));
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(path("twice.tiktoken")); }, ErrorKind::kIo,
                                 {"gives rank 7 twice"}));
  write_file(path("no_byte.tiktoken"), bytes_only.substr(bytes_only.find('\n') + 1));  // byte 0x00 missing
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(path("no_byte.tiktoken")); }, ErrorKind::kIo,
                                 {"no token for byte 0x00"}));
  std::string large = bytes_only;
  for (int r = 256; r < 50280; ++r) large += fmt::format("{} {}\n", base64(fmt::format("t{}", r)), r);
  write_file(path("large.tiktoken"), large);  // 50280 ranks, p50k_base's count: taken
  EXPECT_EQ(load_tokenizer(path("large.tiktoken"))->vocab_size(), 50280);
  large += fmt::format("{} 50280\n", base64("t50280"));
  write_file(path("large.tiktoken"), large);
  EXPECT_TRUE(test::throws_error([&] { load_tokenizer(path("large.tiktoken")); }, ErrorKind::kNotSupported,
                                 {"holds 50281 ranks", "r50k_base"}));
}

// SentencePiece: our ids against spm_encode's, line by line.
TEST(SentencePiece, IdsEqualSpmEncodeLineByLine) {
  const char* model = env("HT_SPM_MODEL");
  const char* lines_path = env("HT_SPM_LINES");
  const char* ids_path = env("HT_SPM_IDS");
  if (!model || !lines_path || !ids_path)
    GTEST_SKIP() << "HT_SPM_MODEL/LINES/IDS not set (tests/data/sentencepiece_reference_test.sh sets them)";
  const auto tok = load_tokenizer(model);
  std::ifstream lines(lines_path, std::ios::binary), ids(ids_path);
  std::string line, expected;
  std::size_t n = 0, differ = 0;
  while (std::getline(lines, line)) {
    ASSERT_TRUE(std::getline(ids, expected)) << "spm_encode gave fewer lines than " << lines_path << " holds";
    std::vector<std::int32_t> want;
    std::istringstream in(expected);
    for (std::int32_t id; in >> id;) want.push_back(id);
    const std::vector<std::int32_t> got = tok->encode(line);
    if (got != want && ++differ <= 5) ADD_FAILURE() << "line " << n + 1 << " '" << line << "': ids differ";
    // A model that normalises (NFKC, runs of spaces) decodes to the
    // normalised line, which encodes to the same ids again (unless a piece
    // was unknown: <unk>, spm_train's id 0, decodes to " \u2047 "); one trained
    // with the identity rule and byte fallback (HT_SPM_EXACT) gives the line back.
    if (env("HT_SPM_EXACT"))
      EXPECT_EQ(tok->decode(got), line) << "line " << n + 1;
    else if (std::find(got.begin(), got.end(), 0) == got.end())
      EXPECT_EQ(tok->encode(tok->decode(got)), got) << "line " << n + 1;
    ++n;
  }
  EXPECT_EQ(differ, 0u) << "of " << n << " lines";
  EXPECT_GT(n, 100u);
}

}  // namespace
}  // namespace ht::data::tokenizer_test
