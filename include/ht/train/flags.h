// ht::train::TrainFlags: the command line every training program built on
// the library shares (gpt_train, llama_train, a program of one's own), on
// CLI11: steps and seed, batch and accumulation, the mesh (--tp, --pp; dp is
// the rest; --stage-layers for pipeline stages of chosen sizes) and ZeRO,
// activation recomputation, precision and loss scaling, the optimizer and
// schedule, validation, checkpoints and resume, and the resilience settings
// htrun relies on. A program adds its own flags (model sizes, data) to the
// same CLI::App.
//
//   CLI::App app{"..."};
//   ht::train::TrainFlags flags;
//   flags.add_to(app);
//   app.add_option("--hidden", hidden, "...");   // the program's own
//   CLI11_PARSE(app, argc, argv);
//   return ht::train::run_job("my_train", flags, [&](ht::train::Job& job) { ... });
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "ht/train/engine.h"
#include "ht/train/job.h"
#include "ht/train/run.h"

namespace ht::train {

struct TrainFlags {
  JobOptions job;
  EngineOptions engine;
  FitOptions fit;
  // Flags given as text, resolved into the options above by resolve().
  std::string device = "cpu";
  std::string schedule = "1f1b";
  std::string recompute = "none";
  std::string precision = "fp32";
  std::string grad_reduce = "fp32";
  std::string resume;    // "" or "auto"
  std::string ckpt_dir;  // default <run-dir>/checkpoints
  int ckpt_commit_delay_ms = 0;
  double bucket_mb = 25;

  /// Registers the flags on `app` (defaults shown in --help).
  void add_to(CLI::App& app);
  /// Turns the text flags into options, sets the checkpoint directory
  /// (<run-dir>/checkpoints unless --ckpt-dir) when checkpoints or a resume
  /// are asked for, and validates; throws kConfig naming a bad value.
  void resolve();
};

/// run_job (job.h) with `flags` resolved first: a bad value is a usage error.
int run_job(const char* program, TrainFlags& flags, const std::function<void(Job&)>& body);

}  // namespace ht::train
