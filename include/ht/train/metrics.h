// Training metrics as JSON Lines: one object per line, units in field names.
// The first line describes the run ("type": "run", written as training
// begins); then "step" lines, one per optimizer step ("step_ms": how long it
// took; a program may add fields of its own), and "eval" lines ("step": the
// step the evaluation follows, 0 before the first; "val_loss", "val_samples"
// and "val_<name>" for each of the model's metrics). "time_ms" (run and step lines) is when the line was
// written, milliseconds since the epoch: htrun reads both. Each line is flushed as written, so a
// crash loses at most the line being written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "ht/core/client_state.h"
#include "ht/train/engine.h"

namespace ht::train {

class MetricsWriter {
 public:
  /// Opens (truncates) `path`; throws IoError naming it when it cannot.
  /// A launch `epoch` > 0 (resilience::launch_epoch) joins every line
  /// ("epoch"), so a supervisor tells this launch's lines from an older one's.
  explicit MetricsWriter(const std::string& path, std::int64_t epoch = 0);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  /// `model` as nn::Model::describe(), `mesh` as MeshShape::str() ("pp2 x
  /// dp2 x tp2"); `extra` fields (the program's own: "seq_len") join the line.
  void write_run(const EngineOptions& options, const std::string& model, std::int64_t num_parameters,
                 const std::string& mesh = "pp1 x dp1 x tp1", const ClientState& extra = {});
  /// `extra`: the program's own fields (FitOptions::step_fields).
  void write_step(const StepStats& s, const ClientState& extra = {});
  void write_eval(std::int64_t step, const EvalStats& e);

 private:
  void write_line(const std::string& line);
  std::FILE* file_;
  std::string path_;
  std::int64_t epoch_ = 0;
};

}  // namespace ht::train
