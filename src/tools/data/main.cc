// ht-data: text and datasets for training, one subcommand a file.
//
//   ht-data encode --tokenizer PATH   token ids of standard input, space-separated, one line
//   ht-data shards --tokenizer PATH --out DIR INPUTS...
//                                     text tokenized in parallel into a set of token shards
//
// Exit status: 0 on success; 1 when a file cannot be read or is malformed
// (the message names it); 2 on a usage error.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <vector>

#include "data/data_tool.h"

int main(int argc, char** argv) {
  namespace tool = ht::data::tool;
  CLI::App app{"Text and datasets for hypertrain: tokenize text, write token shards", "ht-data"};
  app.require_subcommand(1);
  const std::vector<tool::Subcommand> subcommands{tool::add_encode(app), tool::add_shards(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? tool::kOk : tool::kUsage;
  }
  for (const tool::Subcommand& s : subcommands)
    if (s.command->parsed()) {
      try {
        return s.run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ht-data %s: %s\n", s.command->get_name().c_str(), e.what());
        return tool::kFailed;
      }
    }
  return tool::kUsage;
}
