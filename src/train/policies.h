// Private: the run policies the engine consults at each step, each with its
// own state. A policy says what it wants (rank 0's votes on checkpoints and
// snapshots travel in the step's one control all-reduce and come back by
// name, Engine::StepVotes), learns what happened, and the engine does it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "ht/ckpt/checkpoint.h"
#include "ht/comm/communicator.h"
#include "ht/comm/device_mesh.h"
#include "ht/nn/model.h"
#include "ht/train/engine.h"

namespace ht::train {

/// Divergence: the agreed loss non-finite for `limit` steps in a row ends
/// the run. An overflow that loss scaling handles does not count: its loss
/// is finite.
class DivergenceWatch {
 public:
  explicit DivergenceWatch(int limit) : limit_(limit) {}
  /// The step's agreed loss (the same on every rank). Throws kDivergence
  /// at the limit, saying what to do.
  void observe(float loss, std::int64_t step);
  /// While the last loss was non-finite the state is suspect: it is neither
  /// saved nor snapshotted.
  bool suspect() const { return run_ > 0; }
  int nonfinite_run() const { return run_; }

 private:
  int limit_;
  int run_ = 0;  // consecutive steps with a non-finite loss
};

/// Straggler detection: every `window` steps (0: off) the ranks compare
/// their mean work per step (time before the gradient reduction); a rank
/// above `threshold` x the lower median for `windows` windows in a row is
/// reported.
class StragglerWatch {
 public:
  StragglerWatch(std::int64_t window, double threshold, int windows)
      : window_(window), threshold_(threshold), windows_(windows) {}
  /// This rank's own work in the step, in ms.
  void add_work(double ms) { work_ms_ += ms; }
  /// At the end of a window, collective over `world`: fills s.stragglers
  /// and s.straggler_ranks (the same on every rank). Nothing otherwise.
  void end_of_step(comm::Communicator& world, StepStats& s);

 private:
  std::int64_t window_;
  double threshold_;
  int windows_;
  double work_ms_ = 0;
  std::vector<int> slow_windows_;  // per world rank: consecutive slow windows
};

/// Silent data corruption: every `every` steps (0: never), and before a
/// save or snapshot of a step not checked yet, the data-parallel replicas
/// compare a 64-bit checksum of their parameters; replicas that differ end
/// the run (kCorruption) naming their world ranks, the odd ones out (every
/// rank of the group when there is no majority).
class ReplicaCheck {
 public:
  explicit ReplicaCheck(std::int64_t every) : every_(every) {}
  /// The step's own check is due.
  bool due(std::int64_t step) const { return every_ > 0 && step % every_ == 0; }
  /// A save or snapshot of `step` must check first.
  bool before_save(std::int64_t step) const { return every_ > 0 && checked_step_ != step; }
  /// Collective over the mesh. Nothing to compare without replicas or when
  /// the parameters are sharded (ZeRO-3: no rank holds them whole).
  void check(nn::Model& model, comm::DeviceMesh& mesh, bool sharded, std::int64_t step);

 private:
  std::int64_t every_;
  std::int64_t checked_step_ = -1;
};

/// Disk checkpoints: every `every_steps` steps and/or every `every_s`
/// seconds of rank 0's clock (0: not by that measure); a save that falls
/// due while the state is suspect waits for the next step that is not.
class CheckpointCadence {
 public:
  CheckpointCadence(std::int64_t every_steps, double every_s) : every_steps_(every_steps), every_s_(every_s) {}
  /// Rank 0's vote: the time since the last save reached every_s.
  bool due_by_time() const;
  /// Whether to save after `step`, given the ranks' agreed vote on time.
  bool save_now(std::int64_t step, bool by_time, bool suspect);
  /// A save began: the clock starts again.
  void saved() { last_save_ = std::chrono::steady_clock::now(); }

 private:
  std::int64_t every_steps_;
  double every_s_;
  std::chrono::steady_clock::time_point last_save_ = std::chrono::steady_clock::now();
  bool pending_ = false;  // due, waiting for a state that is not suspect
};

/// Memory snapshots: every `every` steps, or (every < 0, `auto`) as often
/// as kSnapshotBudget of a step allows. The cost is measured on rank 0 from
/// the step times, so it counts whatever a snapshot takes from training
/// (its stall, and its background work's cores, memory bandwidth and the
/// slowest rank's delay): what the steps it touched (the one that began it,
/// through the first whose vote finds every rank's snapshot work done)
/// took beyond the median of the recent steps none touched. The interval
/// keeps a running mean of that within the budget.
class SnapshotCadence {
 public:
  explicit SnapshotCadence(std::int64_t every);
  /// Rank 0's vote at `step`.
  bool due(std::int64_t step) const { return step - last_step_ >= interval_; }
  /// A snapshot of `step` began, stalling the step `stall_ms`, into an image
  /// mapped afresh or not: the steps from this one on are measured.
  void taken(std::int64_t step, double stall_ms, bool fresh_image);
  /// The run resumed from `step`: the interval counts from there.
  void resumed(std::int64_t step) { last_step_ = step; }
  /// Step `step` took `ms` (less a disk save's stall); `snapshot_busy`:
  /// whether any rank's snapshot work was under way at its vote.
  void step_time(std::int64_t step, double ms, bool snapshot_busy);

 private:
  /// The last snapshot's steps are measured: its cost sets the interval.
  void measured(double excess_ms);

  std::int64_t every_;
  std::int64_t interval_;
  std::int64_t last_step_ = 0;   // the last snapshot's step (or the resumed one)
  std::deque<double> quiet_ms_;  // the newest steps no snapshot touched
  // The last snapshot: its work may still be under way; whether it is
  // measured (there were quiet steps to compare with: their median), its
  // stall and image, its steps' time beyond the median so far, and how many.
  bool touching_ = false, measuring_ = false;
  double baseline_ms_ = 0, stall_ms_ = 0;
  bool fresh_image_ = false;
  double excess_ms_ = 0;
  std::int64_t touched_ = 0;
  double cost_ms_mean_ = 0;  // of the snapshots into pages already mapped: one slow one moves it half way
};

/// The engine's policies together (EngineOptions decides each).
struct Policies {
  explicit Policies(const EngineOptions& o)
      : divergence(o.divergence_steps),
        stragglers(o.straggler_window, o.straggler_threshold, o.straggler_windows),
        checkpoints(o.ckpt_every, o.ckpt_every_s),
        snapshots(o.mem_ckpt_every),
        replicas(o.sdc_every) {}
  DivergenceWatch divergence;
  StragglerWatch stragglers;
  CheckpointCadence checkpoints;
  SnapshotCadence snapshots;
  ReplicaCheck replicas;
};

}  // namespace ht::train
