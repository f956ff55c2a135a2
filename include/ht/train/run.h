// ht::train::fit: a whole training run on one rank, with the run policy
// every program built on the library shares: the "#" preamble and one
// progress line per step on rank 0,
//   step 120/200 | loss 2.4511 | lr 6.12e-04 | norm 0.412 | 402 ms | 2.5k tok/s
// (with "| scale S" under loss scaling and "| checkpoint (N ms stall)" when
// one is saved), <run_dir>/metrics.jsonl (a run line, step and eval lines),
// validation before a fresh run's first step, every eval_every steps and at
// the end (a resumed launch does not repeat it at its first step), a checkpoint every
// ckpt_every steps and at the end, and the exits htrun reads: on SIGTERM or
// SIGUSR1 on any rank every rank finishes its step, saves and exits 77
// ("# preempted at step N: checkpoint committed"); with straggler_action
// "exit" a persistent straggler ends the run the same way with 79, naming
// the slow ranks in the exit record ("# straggler at step N: ...").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "ht/core/client_state.h"
#include "ht/train/engine.h"
#include "ht/train/job.h"

namespace ht::train {

struct FitOptions {
  /// One rank's dense peak in TFLOP/s for the step's GEMMs, which MFU
  /// divides by; 0: rank 0 measures it before the first step
  /// (ht/train/mfu.h).
  double peak_tflops = 0;
  /// "report": print a straggler and go on; "exit": checkpoint, then exit
  /// (79) so that htrun replaces the straggler's node.
  std::string straggler_action = "report";
  /// Extra fields of metrics.jsonl's run line (the program's own settings:
  /// "seq_len", a dataset's name).
  ClientState run_fields;
  /// Rank 0's extra preamble lines, printed before training (each starts "# ").
  std::vector<std::string> preamble;
  /// On every rank after each step's line (and its validation, if any).
  std::function<void(Engine&, const StepStats&)> after_step;
  /// On rank 0, each step: fields of the program's own that join the
  /// step's metrics.jsonl line ({"tokens_seen", n}); none if empty. The
  /// model's validation metrics join the eval lines by themselves
  /// (nn::Model::metric_names).
  std::function<ClientState(Engine&, const StepStats&)> step_fields;
  /// On every rank at the end, after the final checkpoint (sampling, export).
  std::function<void(Engine&)> at_end;

  /// Throws kConfig naming a bad value.
  void validate() const;
};

/// Trains from where `engine` stands (step 0, or the step it resumed from)
/// to engine.options().steps under the policy above. Collective. The
/// engine must have been built for `job` (Engine(job, ...)). Resumed at the
/// last step, it returns at once after `at_end` ("# nothing left to train"):
/// no evaluation, no save. On a stop (preemption, a straggler exit) it
/// returns after the checkpoint without `at_end`, the job holding the exit
/// decision (Job::exit_decision) that run_job ends the process with.
void fit(Job& job, Engine& engine, const FitOptions& options = {});

/// "1.23M", "4.5k", "12": counts for people.
std::string human_count(double v);

/// What a reader of the job's output (htrun_job.log) takes from rank 0's
/// progress line, "step 12/24 | loss 5.2031 | lr ... | 7 ms | ...": the step,
/// the steps to train and the loss. The line's writer is fit's, beside the
/// reader in run.cc.
struct ProgressLine {
  std::int64_t step = 0, steps = 0;
  double loss = 0;  // NaN when the line says nan
};
/// nullopt for any other line.
std::optional<ProgressLine> parse_progress_line(std::string_view line);

}  // namespace ht::train
