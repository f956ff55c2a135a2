// ht-data's subcommands: each file adds one to the command line and says how
// to run it once parsed.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace ht::data::tool {

/// Exit statuses of every subcommand.
inline constexpr int kOk = 0, kFailed = 1, kUsage = 2;

struct Subcommand {
  CLI::App* command = nullptr;  // parsed into by CLI11
  std::function<int()> run;     // called when `command` was given; returns the exit status
};

/// `ht-data encode --tokenizer PATH` (encode.cc).
Subcommand add_encode(CLI::App& app);
/// `ht-data shards --tokenizer PATH --out DIR INPUTS...` (shards.cc).
Subcommand add_shards(CLI::App& app);

}  // namespace ht::data::tool
