// JSON Lines metrics: the run protocol's run, step and eval lines
// (ht/resilience/run_protocol.h), filled from the engine's options and stats.
#include "ht/train/metrics.h"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ht/config.h"
#include "ht/resilience/run_protocol.h"

namespace ht::train {
namespace {

using resilience::FieldValue;
using resilience::Fields;

// When a line was written, on the wall clock the heartbeats use: htrun tells
// launches apart, and times recoveries and goodput, by it.
std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

FieldValue field_of(const ClientValue& v) {
  return std::visit([](const auto& x) { return FieldValue(x); }, v);
}

// A program's own fields; on a run line, those htrun reads (where the launch
// resumed from) go to their own members.
void add_program_fields(const ClientState& extra, Fields& fields, resilience::RunLine* run = nullptr) {
  for (const auto& [key, value] : extra) {
    if (run) {
      const auto* integer = std::get_if<std::int64_t>(&value);
      const auto* text = std::get_if<std::string>(&value);
      const auto* number = std::get_if<double>(&value);
      if (key == "resumed_from" && integer) { run->resumed_from = *integer; continue; }
      if (key == "resume_tier" && text) { run->resume_tier = *text; continue; }
      if (key == "resume_ms" && number) { run->resume_ms = *number; continue; }
    }
    fields[key] = field_of(value);
  }
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
  resilience::RunLine run;
  run.time_ms = wall_ms();
  run.epoch = epoch_;
  const parallel::Layout& l = o.layout;
  std::vector<std::int64_t> stage_layers(l.stage_layers.begin(), l.stage_layers.end());
  run.fields = {{"version", std::string(HT_VERSION)},
                {"git_commit", std::string(HT_GIT_COMMIT)},
                {"build_type", std::string(HT_BUILD_TYPE)},
                {"device", o.device.str()},
                {"model", model},
                {"num_parameters", num_parameters},
                {"steps", o.steps},
                {"layout", l.name()},
                {"micro_batch", l.micro_batch},
                {"grad_accum", std::int64_t(l.grad_accum)},
                {"lr", double(o.lr)},
                {"min_lr", double(o.min_lr)},
                {"warmup_steps", o.warmup_steps},
                {"lr_decay", o.lr_schedule ? std::string("the program's own") : optim::decay_name(o.lr_decay)},
                {"grad_clip", double(o.grad_clip)},
                {"optimizer", o.make_optimizer ? std::string("the program's own") : o.optimizer},
                {"weight_decay", double(o.optimizer == "sgd" ? o.sgd.weight_decay : o.adamw.weight_decay)},
                {"mesh", mesh},
                {"zero_stage", std::int64_t(l.zero)},
                {"zero_shard_group", std::int64_t(l.shard_group)},
                {"schedule", parallel::schedule_name(l.schedule)},
                {"virtual_stages", std::int64_t(l.virtual_stages)},
                {"recompute", std::string(nn::recompute_name(o.recompute))},
                {"stage_layers", std::move(stage_layers)},
                {"precision", precision::policy_name(o.precision)},
                {"grad_reduce_dtype", std::string(dtype_name(o.precision.reduce))},
                {"seed", std::uint64_t(o.seed)}};
  add_program_fields(extra, run.fields, &run);
  write_line(resilience::format_metrics_line(run));
}

void MetricsWriter::write_step(const StepStats& s, const ClientState& extra) {
  resilience::StepLine line;
  line.step = s.step;
  line.time_ms = wall_ms();
  line.loss = s.loss;
  line.lr = s.lr;
  line.grad_norm = s.grad_norm;
  line.step_ms = s.ms;
  line.tokens = s.tokens;
  line.tokens_per_s = s.tokens_per_s();
  line.loss_scale = s.loss_scale;
  line.skipped = s.skipped;
  line.skipped_steps = s.skipped_steps;
  line.checkpoint = s.checkpointed;
  line.snapshot = s.snapshotted;
  line.epoch = epoch_;
  add_program_fields(extra, line.fields);
  write_line(resilience::format_metrics_line(line));
}

void MetricsWriter::write_eval(std::int64_t step, const EvalStats& e) {
  write_line(resilience::format_metrics_line(
      resilience::EvalLine{.step = step, .val_loss = e.loss, .val_samples = e.samples, .metrics = e.metrics, .epoch = epoch_}));
}

}  // namespace ht::train
