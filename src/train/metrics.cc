// JSON Lines metrics.
#include "ht/train/metrics.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ht/config.h"

namespace ht::train {
namespace {

// When a line was written, on the wall clock the heartbeats use: htrun tells
// launches apart, and times recoveries and goodput, by it.
std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The line of `j`, with the launch's epoch when there is one.
std::string stamped(nlohmann::json j, std::int64_t epoch) {
  if (epoch > 0) j["epoch"] = epoch;
  return j.dump();
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t epoch) : path_(path), epoch_(epoch) {
  file_ = std::fopen(path.c_str(), "w");
  HT_CHECK(file_ != nullptr, ErrorKind::kIo, "cannot open metrics file '{}': {}; check --run-dir", path,
           std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write_line(const std::string& line) {
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) < 0 || std::fflush(file_) != 0)
    throw IoError(ErrorKind::kIo, fmt::format("writing metrics to '{}' failed: {}", path_, std::strerror(errno)));
}

void MetricsWriter::write_run(const EngineOptions& o, const std::string& model, std::int64_t num_parameters,
                              const std::string& mesh, const ClientState& extra) {
  nlohmann::json j{{"type", "run"},
                   {"time_ms", now_ms()},
                   {"version", HT_VERSION},
                   {"git_commit", HT_GIT_COMMIT},
                   {"build_type", HT_BUILD_TYPE},
                   {"device", o.device.str()},
                   {"model", model},
                   {"num_parameters", num_parameters},
                   {"steps", o.steps},
                   {"micro_batch", o.micro_batch},
                   {"grad_accum", o.grad_accum},
                   {"lr", o.lr},
                   {"min_lr", o.min_lr},
                   {"warmup_steps", o.warmup_steps},
                   {"grad_clip", o.grad_clip},
                   {"weight_decay", o.adamw.weight_decay},
                   {"mesh", mesh},
                   {"zero_stage", o.data_parallel.zero_stage},
                   {"zero_shard_group", o.data_parallel.shard_group},
                   {"schedule", parallel::schedule_name(o.schedule)},
                   {"recompute", nn::recompute_name(o.recompute)},
                   {"stage_layers", o.stage_layers},
                   {"precision", precision::policy_name(o.data_parallel.precision)},
                   {"grad_reduce_dtype", dtype_name(o.data_parallel.precision.reduce)},
                   {"seed", o.seed}};
  for (const auto& [key, value] : extra) std::visit([&](const auto& v) { j[key] = v; }, value);
  write_line(stamped(std::move(j), epoch_));
}

void MetricsWriter::write_step(const StepStats& s, const ClientState& extra) {
  nlohmann::json j{{"type", "step"},      {"step", s.step},   {"time_ms", now_ms()}, {"loss", s.loss},
                   {"lr", s.lr},          {"grad_norm", s.grad_norm}, {"step_ms", s.ms},
                   {"tokens", s.tokens},  {"tokens_per_s", s.tokens_per_s()},
                   {"loss_scale", s.loss_scale}, {"skipped", s.skipped}, {"skipped_steps", s.skipped_steps},
                   {"checkpoint", s.checkpointed}, {"snapshot", s.snapshotted}};
  for (const auto& [key, value] : extra) std::visit([&](const auto& v) { j[key] = v; }, value);
  write_line(stamped(std::move(j), epoch_));
}

void MetricsWriter::write_eval(std::int64_t step, const EvalStats& e) {
  nlohmann::json j{{"type", "eval"}, {"step", step}, {"val_loss", e.loss}, {"val_samples", e.samples}};
  for (const auto& [name, value] : e.metrics) j["val_" + name] = value;
  write_line(stamped(std::move(j), epoch_));
}

}  // namespace ht::train
