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

#include "ht/plan/layout_choice.h"
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
  int virtual_stages = 0;  // --virtual-stages; 0: 2 under the interleaved schedule, else 1
  std::string recompute = "none";
  std::string precision = "fp32";
  std::string lr_decay = "cosine";
  std::string grad_reduce = "fp32";
  std::string resume;    // "" or "auto"
  std::string ckpt_dir;  // default <run-dir>/checkpoints
  int ckpt_commit_delay_ms = 0;
  std::string mem_ckpt_every = "auto";  // "auto", or a number of steps (0: no memory tier)
  std::string trace_steps = "3-5";      // --trace-steps: FIRST-LAST or one step
  double bucket_mb = 25;
  // Planning (ht/plan): --auto picks the layout for the world found, --dry-run
  // prints the memory per stage and exits without training.
  bool auto_plan = false;
  bool dry_run = false;
  std::int64_t global_batch = 0;  // rows per step for --auto; 0: micro-batch x accumulation x dp as given
  std::string plan_profile;       // a machine profile file; empty: probe this machine (CPU only)
  double plan_memory_gib = 0;     // memory per rank for the probe's budget; 0: physical / ranks on the node
  /// The program's model as the planner sees it (nn::ModelSpec at the run's
  /// sequence length), needed by --auto and --dry-run: set it before run_job.
  std::function<nn::ModelSpec()> model_spec;

  /// Registers the flags on `app` (defaults shown in --help).
  void add_to(CLI::App& app);
  /// Turns the text flags into options, sets the checkpoint directory
  /// (<run-dir>/checkpoints unless --ckpt-dir) when checkpoints or a resume
  /// are asked for, and validates; throws kConfig naming a bad value.
  void resolve();

  /// --auto, from JobOptions::choose_layout (collective over `world`):
  /// plans the layout (plan::search_plans with the program's model_spec, the
  /// world's size, the global batch, --precision and the machine profile)
  /// and sets tp and pp in `job_options` and the engine's options from it;
  /// rank 0 prints the chosen plan and the runners-up. Every rank computes
  /// the same plan (the probe's figures are agreed over the world); throws
  /// kConfig when none fits or the ranks disagree.
  void apply_auto_plan(comm::Communicator& world, JobOptions& job_options);
  /// The layout the flags describe on a world of `world_size` ranks, for the planner.
  plan::LayoutChoice layout(int world_size) const;
  /// --dry-run's report (rank 0 prints it): the memory estimate of every
  /// stage of the layout by category, against --plan-memory-gib if given.
  std::string dry_run_report(int world_size) const;

 private:
  void add_run_flags(CLI::App& app);
  void add_layout_flags(CLI::App& app);
  void add_optimizer_flags(CLI::App& app);
  void add_checkpoint_flags(CLI::App& app);
  void add_resilience_flags(CLI::App& app);
  void add_planning_flags(CLI::App& app);
};

/// run_job (job.h) with `flags` resolved first: a bad value is a usage error.
int run_job(const char* program, TrainFlags& flags, const std::function<void(Job&)>& body);

}  // namespace ht::train
