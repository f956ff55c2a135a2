// ht-trace's work: the ranks' trace files (EngineOptions::trace_path) merged
// into one Chrome trace-event file, and a summary per rank of where the time
// went and how much of each communicator's work ran during backward.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ht::trace_tool {

/// One rank's file as read.
struct RankTrace {
  std::string path;
  int rank = 0, world_size = 0;
  std::vector<std::int64_t> steps;  // first, last
  nlohmann::json events;            // its traceEvents
};

/// The files `inputs` name: the --trace path FILE.json, which stands for
/// every FILE.rank<R>.json beside it (when there are any), or a rank's file. Throws ht::Error (kIo or
/// kCorruption) naming the file and what is wrong with it.
std::vector<RankTrace> read_rank_traces(const std::vector<std::string>& inputs);

/// Every rank's events in one document, ranks in order. Throws kConfig for
/// two files of one rank or of different world sizes; `warnings` gets ranks
/// missing and ranks that traced other steps.
nlohmann::json merge_traces(const std::vector<RankTrace>& ranks, std::vector<std::string>& warnings);

/// A line per rank: computing and waiting time, and per communicator its
/// running time and how much of it overlapped a backward.
std::string summarise(const std::vector<RankTrace>& ranks);

}  // namespace ht::trace_tool
