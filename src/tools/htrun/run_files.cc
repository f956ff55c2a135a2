// htrun: reading heartbeats, exit records and checkpoints from the run directory.
#include "htrun/run_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ht/ckpt/checkpoint.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace htrun {
namespace {

/// Every parsable <dir>/*.json; a file being replaced is skipped (the next
/// poll reads it).
std::vector<json> read_json_files(const fs::path& dir) {
  std::vector<json> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".json") continue;
    try {
      std::ifstream in(e.path());
      out.push_back(json::parse(in));
    } catch (...) {
    }
  }
  return out;
}

}  // namespace

MetricsTail::MetricsTail(std::string run_dir) : path_((fs::path(run_dir) / "metrics.jsonl").string()) {}

std::vector<MetricsRecord> MetricsTail::poll() {
  std::vector<MetricsRecord> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;
  std::string first;
  if (!std::getline(in, first) || in.eof()) return out;  // not even one complete line yet
  in.seekg(0, std::ios::end);
  const auto size = std::uint64_t(in.tellg());
  if (first != first_line_ || size < offset_) {  // a new file (the run line carries its time)
    first_line_ = first;
    offset_ = 0;
  }
  in.seekg(std::streamoff(offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line still being written: read it whole next time
    offset_ += line.size() + 1;
    try {
      const json j = json::parse(line);
      const std::string type = j.value("type", "");
      if (type != "run" && type != "step") continue;
      out.push_back({type, j.value("step", std::int64_t(0)), j.value("time_ms", 0.0) / 1000,
                     j.value("step_ms", 0.0) / 1000, j.value("resumed_from", std::int64_t(-1)),
                     j.value("resume_tier", std::string()), j.value("epoch", std::int64_t(0))});
    } catch (...) {
    }
  }
  return out;
}

std::map<int, Heartbeat> read_heartbeats(const std::string& run_dir, std::int64_t epoch) {
  std::map<int, Heartbeat> out;
  for (const json& j : read_json_files(fs::path(run_dir) / "heartbeat")) {
    try {
      Heartbeat h{j.value("epoch", std::int64_t(0)),
                  j.at("rank").get<int>(),
                  j.at("pid").get<int>(),
                  j.value("host", ""),
                  j.at("step").get<std::int64_t>(),
                  j.at("phase").get<std::string>(),
                  j.at("time_ms").get<double>() / 1000,
                  j.at("progress_ms").get<double>() / 1000};
      if (epoch == 0 || h.epoch == 0 || h.epoch == epoch) out[h.rank] = h;
    } catch (...) {
    }
  }
  return out;
}

std::vector<ExitRecord> read_exit_records(const std::string& run_dir, std::int64_t epoch) {
  std::vector<ExitRecord> out;
  for (const json& j : read_json_files(fs::path(run_dir) / "exit")) {
    ExitRecord r;
    r.epoch = j.value("epoch", std::int64_t(0));
    if (epoch != 0 && r.epoch != 0 && r.epoch != epoch) continue;  // an older launch's
    r.rank = j.value("rank", -1);
    r.code = j.value("code", 0);
    r.kind = j.value("kind", "");
    r.step = j.value("step", std::int64_t(0));
    r.phase = j.value("phase", "");
    r.time_s = j.value("time_ms", 0.0) / 1000;
    r.message = j.value("message", "");
    r.blamed = j.value("blamed_ranks", std::vector<int>{});
    out.push_back(std::move(r));
  }
  // The first to exit first: the others often exit because of it.
  std::sort(out.begin(), out.end(), [](const ExitRecord& a, const ExitRecord& b) { return a.time_s < b.time_s; });
  return out;
}

std::int64_t read_launch_epoch(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "launch_epoch");
  long long epoch = 0;
  return in >> epoch && epoch > 0 ? std::int64_t(epoch) : 0;
}

void write_launch_epoch(const std::string& run_dir, std::int64_t epoch) {
  const fs::path path = fs::path(run_dir) / "launch_epoch", tmp = fs::path(run_dir) / "launch_epoch.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << epoch << "\n";
    if (!out) throw std::runtime_error(fmt::format("htrun: cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
}

void clear_rank_files(const std::string& run_dir) {
  std::error_code ec;
  fs::remove_all(fs::path(run_dir) / "heartbeat", ec);
  fs::remove_all(fs::path(run_dir) / "exit", ec);
}

std::int64_t latest_checkpoint_step(const std::string& run_dir) {
  const auto committed = ht::ckpt::committed_checkpoints((fs::path(run_dir) / "checkpoints").string());
  return committed.empty() ? 0 : committed.back().step;
}

}  // namespace htrun
