// ht-trace: reading, merging and summarising the ranks' trace files.
#include "trace/merge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ht/core/error.h"

namespace ht::trace_tool {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

RankTrace read_one(const std::string& path) {
  std::ifstream in(path);
  HT_CHECK(in.good(), ErrorKind::kIo, "cannot open trace file '{}'", path);
  Json j;
  try {
    j = Json::parse(in);
  } catch (const Json::exception& e) {
    throw Error(ErrorKind::kCorruption,
                fmt::format("trace file '{}' is not JSON ({}); was it written to the end?", path, e.what()));
  }
  const bool ours = j.is_object() && j.contains("otherData") && j["otherData"].is_object() &&
                    j["otherData"].value("hypertrain_trace", 0) == 1 && j.contains("traceEvents") &&
                    j["traceEvents"].is_array();
  HT_CHECK(ours, ErrorKind::kCorruption,
           "'{}' is not a rank's trace file (written by --trace: traceEvents, and otherData with hypertrain_trace, "
           "rank, world_size and steps)",
           path);
  const Json& o = j["otherData"];
  RankTrace t;
  t.path = path;
  try {
    t.rank = o.at("rank").get<int>();
    t.world_size = o.at("world_size").get<int>();
    t.steps = o.at("steps").get<std::vector<std::int64_t>>();
  } catch (const Json::exception& e) {
    throw Error(ErrorKind::kCorruption, fmt::format("trace file '{}': otherData is incomplete ({})", path, e.what()));
  }
  HT_CHECK(t.world_size > 0 && t.rank >= 0 && t.rank < t.world_size && t.steps.size() == 2, ErrorKind::kCorruption,
           "trace file '{}': rank {} of world {}, steps {}: not a rank of its world", path, t.rank, t.world_size,
           fmt::join(t.steps, "-"));
  t.events = std::move(j["traceEvents"]);
  return t;
}

// FILE.rank<R>.EXT beside `base` (FILE.EXT), by rank.
std::vector<std::string> rank_files_of(const fs::path& base) {
  const std::string prefix = base.stem().string() + ".rank",
                    ext = base.has_extension() ? base.extension().string() : ".json";
  std::map<int, std::string> found;
  std::error_code ec;
  const fs::path dir = base.has_parent_path() ? base.parent_path() : fs::path(".");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    if (file.size() <= prefix.size() + ext.size() || file.rfind(prefix, 0) != 0 ||
        file.compare(file.size() - ext.size(), ext.size(), ext) != 0)
      continue;
    const std::string digits = file.substr(prefix.size(), file.size() - prefix.size() - ext.size());
    if (digits.size() <= 6 && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      found[std::stoi(digits)] = e.path().string();
  }
  std::vector<std::string> out;
  for (const auto& [rank, path] : found) out.push_back(path);
  return out;
}

std::string rank_label(const Json& events, int rank) {
  for (const Json& e : events)
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") return e["args"].value("name", "");
  return fmt::format("rank {}", rank);
}

// Sum of the lengths of the intersections of two sets of intervals, each
// sorted by start and (within a set) not overlapping.
double overlap(const std::vector<std::pair<double, double>>& a, const std::vector<std::pair<double, double>>& b) {
  double sum = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    sum += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return sum;
}

// Overlapping intervals joined, sorted.
std::vector<std::pair<double, double>> joined(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& iv : v)
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  return out;
}

double total(const std::vector<std::pair<double, double>>& v) {
  double sum = 0;
  for (const auto& [b, e] : v) sum += e - b;
  return sum;
}

}  // namespace

std::vector<RankTrace> read_rank_traces(const std::vector<std::string>& inputs) {
  std::vector<RankTrace> out;
  for (const std::string& input : inputs) {
    // The --trace path first: the merged file may have been written there.
    const std::vector<std::string> files = rank_files_of(input);
    std::error_code ec;
    if (files.empty() && fs::is_regular_file(input, ec)) {
      out.push_back(read_one(input));
      continue;
    }
    HT_CHECK(!files.empty(), ErrorKind::kIo,
             "'{}' does not exist, and no rank files of it ({}.rank<R>{}) are beside it: give the --trace path or "
             "the ranks' files",
             input, (fs::path(input).parent_path() / fs::path(input).stem()).string(),
             fs::path(input).has_extension() ? fs::path(input).extension().string() : ".json");
    for (const std::string& f : files) out.push_back(read_one(f));
  }
  std::sort(out.begin(), out.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  return out;
}

Json merge_traces(const std::vector<RankTrace>& ranks, std::vector<std::string>& warnings) {
  HT_CHECK(!ranks.empty(), ErrorKind::kConfig, "no trace files to merge");
  const int world = ranks.front().world_size;
  std::set<int> seen;
  Json events = Json::array();
  for (const RankTrace& t : ranks) {
    HT_CHECK(t.world_size == world, ErrorKind::kConfig,
             "'{}' is rank {} of a world of {}, '{}' of a world of {}: traces of different runs", t.path, t.rank,
             t.world_size, ranks.front().path, world);
    HT_CHECK(seen.insert(t.rank).second, ErrorKind::kConfig, "two files of rank {}: '{}' and another; give each once",
             t.rank, t.path);
    if (t.steps != ranks.front().steps)
      warnings.push_back(fmt::format("rank {} traced steps {}, rank {} steps {} (a rank that stopped early?)", t.rank,
                                     fmt::join(t.steps, "-"), ranks.front().rank,
                                     fmt::join(ranks.front().steps, "-")));
    for (const Json& e : t.events) events.push_back(e);
  }
  std::vector<int> missing;
  for (int r = 0; r < world; ++r)
    if (!seen.count(r)) missing.push_back(r);
  if (!missing.empty())
    warnings.push_back(fmt::format("rank(s) {} of {} have no file: the merged trace shows {} rank(s)",
                                   fmt::join(missing, ", "), world, seen.size()));
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"hypertrain_trace_merged", 1},
            {"world_size", world},
            {"ranks", std::vector<int>(seen.begin(), seen.end())},
            {"steps", ranks.front().steps},
            {"time_zero", "the end of a world barrier before the first traced step (microseconds)"}}}};
}

std::string summarise(const std::vector<RankTrace>& ranks) {
  std::string out;
  for (const RankTrace& t : ranks) {
    std::map<int, std::string> rows;
    for (const Json& e : t.events)
      if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
        rows[e.value("tid", 0)] = e["args"].value("name", "");
    double compute = 0, wait = 0;
    std::vector<std::pair<double, double>> backward;
    std::map<std::string, std::vector<std::pair<double, double>>> comm;
    for (const Json& e : t.events) {
      if (e.value("ph", "") != "X") continue;
      const double b = e.value("ts", 0.0), d = e.value("dur", 0.0);
      const std::string cat = e.value("cat", ""), name = e.value("name", "");
      if (cat == "compute") compute += d;
      if (cat == "wait") wait += d;
      if (cat == "compute" && name.rfind("backward", 0) == 0) backward.emplace_back(b, b + d);
      if (cat == "comm") comm[rows[e.value("tid", 0)]].emplace_back(b, b + d);
    }
    backward = joined(std::move(backward));
    out += fmt::format("{}: computing {:.1f} ms, waiting for pipeline transfers {:.1f} ms\n", rank_label(t.events, t.rank),
                       compute / 1e3, wait / 1e3);
    for (auto& [row, spans] : comm) {
      const auto busy = joined(std::move(spans));
      out += fmt::format("  {}: running {:.1f} ms, {:.1f} ms of it during a backward\n", row, total(busy) / 1e3,
                         overlap(busy, backward) / 1e3);
    }
  }
  return out;
}

}  // namespace ht::trace_tool
