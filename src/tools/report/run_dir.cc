// Reads a run directory into ht::report::RunDir.
#include "report/run_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "ckpt/manifest.h"
#include "ht/core/error.h"
#include "ht/train/run.h"
#include "ht/resilience/run_protocol.h"

namespace ht::report {
namespace {

namespace fs = std::filesystem;

// metrics.jsonl: a run line, step lines, eval lines. A line cut short by a
// crash (the last one) is skipped; any other damaged line is an error.
void read_metrics(const fs::path& file, RunDir& r) {
  std::ifstream in(file);
  if (!in)
    throw IoError(ErrorKind::kIo, fmt::format("cannot read '{}': it is missing or unreadable; ht-report reads the run "
                                              "directory a training program wrote (gpt_train --run-dir {} ..., or "
                                              "htrun --run-dir {} -- ...)",
                                              file.string(), r.path, r.path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::map<std::int64_t, StepRecord> steps;
  std::map<std::int64_t, EvalRecord> evals;
  for (std::size_t n = 0; n < lines.size(); ++n) {
    std::optional<resilience::MetricsLine> line;
    try {
      line = resilience::parse_metrics_line(lines[n]);
    } catch (const resilience::ProtocolError& e) {
      if (n + 1 == lines.size()) break;  // the last line, cut short
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("'{}' line {}: {}; the file is damaged", file.string(), n + 1, e.what()));
    }
    if (!line) continue;  // a line of another type
    if (auto* run = std::get_if<resilience::RunLine>(&*line)) r.run = std::move(*run);
    if (auto* step = std::get_if<StepRecord>(&*line)) steps[step->step] = std::move(*step);
    if (auto* eval = std::get_if<EvalRecord>(&*line)) evals[eval->step] = std::move(*eval);
  }
  if (steps.empty())
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("'{}' holds no step record ({} line(s)): the run did not complete a step; let it train "
                            "at least one step, then run ht-report again",
                            file.string(), lines.size()));
  for (auto& [step, s] : steps) r.steps.push_back(std::move(s));
  for (auto& [step, e] : evals) r.evals.push_back(std::move(e));
}

void read_checkpoints(const fs::path& dir, RunDir& r) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.path().filename().string().starts_with("step_")) continue;
    if (!fs::exists(e.path() / ckpt::detail::kManifestName, ec)) continue;  // not committed
    ckpt::detail::Manifest m;
    try {
      m = ckpt::detail::read_manifest(e.path().string());
    } catch (const Error&) {
      continue;  // damaged: ht-ckpt verify says how
    }
    CheckpointInfo c;
    c.step = m.run.step;
    c.layout = m.layout;
    c.world = m.world;
    for (const ckpt::detail::RankFileEntry& file : m.files) c.bytes += file.bytes;
    r.checkpoints.push_back(std::move(c));
  }
  std::sort(r.checkpoints.begin(), r.checkpoints.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
}

// htrun_job.log: every launch's printed lines. A progress line's step number
// going back (a relaunch resumed from an earlier step) starts a new launch.
void read_job_log(const fs::path& file, RunDir& r) {
  std::ifstream in(file);
  if (!in) return;
  std::int64_t last = -1;
  for (std::string line; std::getline(in, line);) {
    const std::optional<train::ProgressLine> p = train::parse_progress_line(line);
    if (!p) continue;
    LoggedStep s;
    s.step = p->step;
    s.loss = p->loss;
    if (r.launches == 0 || s.step <= last) ++r.launches;
    s.launch = r.launches - 1;
    last = s.step;
    r.logged_steps.push_back(s);
  }
}

}  // namespace

std::map<std::string, double> memory_bytes(const StepRecord& step) {
  std::map<std::string, double> out;
  for (const auto& [key, value] : step.fields) {
    if (key.size() <= 6 || !key.ends_with("_bytes")) continue;
    if (const auto* i = std::get_if<std::int64_t>(&value)) out[key] = double(*i);
    else if (const auto* u = std::get_if<std::uint64_t>(&value)) out[key] = double(*u);
    else if (const auto* d = std::get_if<double>(&value); d && !std::isnan(*d)) out[key] = *d;  // NaN: null
  }
  return out;
}

RunDir read_run_dir(const std::string& path) {
  RunDir r;
  r.path = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw IoError(ErrorKind::kIo, fmt::format("run directory '{}' does not exist or is not a directory; give the "
                                              "directory a training program wrote with --run-dir (gpt_train "
                                              "--run-dir DIR ..., or htrun --run-dir DIR -- ...)",
                                              path));
  read_metrics(ht::resilience::metrics_path(path), r);
  read_checkpoints(ht::resilience::checkpoint_dir(path), r);
  const fs::path report = ht::resilience::supervisor_report_path(path);
  if (fs::exists(report, ec)) {
    try {
      r.htrun = resilience::read_supervisor_report(report.string());
    } catch (const resilience::ProtocolError& e) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("'{}' is not htrun's report: {}; run htrun again or remove the file to report the "
                              "training records alone",
                              report.string(), e.what()));
    }
    read_job_log(ht::resilience::job_log_path(path), r);
  }
  return r;
}

}  // namespace ht::report
