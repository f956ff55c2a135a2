// htrun: finding and reading the ranks' files in the run directory.
#include "htrun/run_files.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ht/ckpt/checkpoint.h"
#include "ht/resilience/rank_guard.h"

namespace fs = std::filesystem;
namespace protocol = ht::resilience;

namespace htrun {
MetricsTail::MetricsTail(const std::string& run_dir) : path_(protocol::metrics_path(run_dir)) {}

std::vector<protocol::MetricsLine> MetricsTail::poll() {
  std::vector<protocol::MetricsLine> out;
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
      if (auto m = protocol::parse_metrics_line(line)) out.push_back(std::move(*m));
    } catch (const protocol::ProtocolError&) {
      // damaged: the report counts what it can read
    }
  }
  return out;
}

std::int64_t read_launch_epoch(const std::string& run_dir) {
  return std::max<std::int64_t>(0, protocol::run_dir_epoch(run_dir));
}

void write_launch_epoch(const std::string& run_dir, std::int64_t epoch) {
  const fs::path path = protocol::launch_epoch_path(run_dir), tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << epoch << "\n";
    if (!out) throw std::runtime_error(fmt::format("htrun: cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
}

std::int64_t latest_checkpoint_step(const std::string& run_dir) {
  const auto committed = ht::ckpt::committed_checkpoints(protocol::checkpoint_dir(run_dir));
  return committed.empty() ? 0 : committed.back().step;
}

}  // namespace htrun
