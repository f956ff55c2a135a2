// ht-data encode: the token ids of standard input. A contract other programs
// call: all of standard input (bytes, any encoding) is one text; the ids go
// to standard output as decimal numbers separated by single spaces, then
// one newline (an empty input gives an empty line).
#include <cstdio>
#include <string>

#include "data/data_tool.h"
#include "ht/data/tokenizer.h"

namespace ht::data::tool {
namespace {

std::string read_stdin() {
  std::string text;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0;) text.append(buffer, n);
  if (std::ferror(stdin)) throw std::runtime_error("cannot read standard input");
  return text;
}

int encode_stdin(const std::string& tokenizer_path) {
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tokenizer_path);
  const std::vector<std::int32_t> ids = tokenizer->encode(read_stdin());
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  char digits[16];
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out.push_back(' ');
    out.append(digits, std::size_t(std::snprintf(digits, sizeof digits, "%d", ids[i])));
  }
  out.push_back('\n');
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
    throw std::runtime_error("cannot write the ids to standard output");
  return kOk;
}

}  // namespace

Subcommand add_encode(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("encode", "print the token ids of standard input, separated by spaces");
  cmd->add_option("--tokenizer", *path,
                  "'bytes'; a directory with encoder.json (or vocab.json) and vocab.bpe (or merges.txt); a tiktoken "
                  "rank file; or a SentencePiece .model file")
      ->required();
  return {cmd, [path] { return encode_stdin(*path); }};
}

}  // namespace ht::data::tool
