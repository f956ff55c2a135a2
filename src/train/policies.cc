// The engine's run policies (train/policies.h).
#include "train/policies.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ht/comm/agreement.h"
#include "ht/core/error.h"
#include "ht/core/fnv.h"

namespace ht::train {

namespace {

// A copy into freshly mapped pages (the run's first) costs several times a
// later one, whose image is ready: the interval after it is at most this,
// so that the next snapshot measures again soon.
constexpr std::int64_t kFreshSnapshotInterval = 10;
// The share of a step `auto` snapshots may cost, measured.
constexpr double kSnapshotBudget = 0.02;
// The steps no snapshot touched whose median a touched step is compared
// with: enough that a slow one (a disk save's writes, an evaluation) does
// not move it.
constexpr std::size_t kQuietSteps = 9;

}  // namespace

void DivergenceWatch::observe(float loss, std::int64_t step) {
  run_ = std::isfinite(loss) ? 0 : run_ + 1;
  HT_CHECK(run_ < limit_, ErrorKind::kDivergence,
           "the loss has been non-finite for {} steps in a row (step {}): training diverged; resume from an earlier "
           "checkpoint with a lower learning rate",
           run_, step);
}

void StragglerWatch::end_of_step(comm::Communicator& world, StepStats& s) {
  if (window_ <= 0 || s.step % window_ != 0) return;
  const float mine = float(work_ms_ / double(window_));
  work_ms_ = 0;
  Tensor all = Tensor::empty({world.size()}, DType::kF32);
  world.all_gather(Tensor::from_vector(std::vector<float>{mine}, {1}), all)->wait();
  std::vector<float> v = all.to_vector<float>(), sorted = v;
  std::sort(sorted.begin(), sorted.end());
  const float median = sorted[(sorted.size() - 1) / 2];  // the lower median: with two ranks, the faster
  slow_windows_.resize(v.size(), 0);
  std::vector<std::string> report;
  for (std::size_t r = 0; r < v.size(); ++r) {
    slow_windows_[r] = v[r] > float(threshold_) * median ? slow_windows_[r] + 1 : 0;
    if (slow_windows_[r] >= windows_) {
      report.push_back(fmt::format("rank {} ({:.1f} ms/step, {:.2f}x the median, {} windows)", r, v[r],
                                   median > 0 ? v[r] / median : 0.f, slow_windows_[r]));
      s.straggler_ranks.push_back(int(r));
    }
  }
  s.stragglers = fmt::format("{}", fmt::join(report, "; "));
}

void ReplicaCheck::check(nn::Model& model, comm::DeviceMesh& mesh, bool sharded, std::int64_t step) {
  checked_step_ = step;
  // Replicas (the same tp rank and stage in every dp x cp group) hold
  // identical parameters after the update; one 64-bit checksum each is compared.
  if (mesh.shape().size(comm::MeshAxis::kDpCp) < 2 || sharded) return;
  std::uint64_t h = kFnvOffset;
  for (nn::Parameter* p : model.parameters()) {
    const Tensor host = p->data().to(Device::cpu());
    h = fnv_fold(h, ckpt::checksum64(host.data_ptr(), host.nbytes()));
  }
  comm::Communicator& dp = mesh.dp_cp_group();
  const std::vector<std::uint64_t> v = comm::all_gather_u64(dp, h);
  std::vector<int> agree(std::size_t(dp.size()), 0);
  for (int a = 0; a < dp.size(); ++a)
    for (int b = 0; b < dp.size(); ++b)
      if (v[std::size_t(a)] == v[std::size_t(b)]) ++agree[std::size_t(a)];
  const int most = *std::max_element(agree.begin(), agree.end());
  if (most == dp.size()) return;  // every replica agrees with every other
  // The odd ones out; with no majority (two replicas) every rank is suspect.
  const std::vector<int> ranks = mesh.group(comm::MeshAxis::kDpCp);
  std::vector<int> culprits;
  for (int a = 0; a < dp.size(); ++a)
    if (agree[std::size_t(a)] < most || most * 2 <= dp.size()) culprits.push_back(ranks[std::size_t(a)]);
  HT_CHECK(false, ErrorKind::kCorruption,
           "silent data corruption after step {}: the parameters of world rank(s) {} differ from their data-parallel "
           "replicas' (group {}); treat their node(s) as faulty",
           step, fmt::join(culprits, ","), dp.name());
}

bool CheckpointCadence::due_by_time() const {
  return every_s_ > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_).count() >= every_s_;
}

bool CheckpointCadence::save_now(std::int64_t step, bool by_time, bool suspect) {
  pending_ = pending_ || by_time || (every_steps_ > 0 && step % every_steps_ == 0);
  if (!pending_ || suspect) return false;
  pending_ = false;
  return true;
}

SnapshotCadence::SnapshotCadence(std::int64_t every)
    : every_(every), interval_(every > 0 ? every : kFreshSnapshotInterval) {}

void SnapshotCadence::taken(std::int64_t step, double stall_ms, bool fresh_image) {
  last_step_ = step;
  touching_ = true;
  // Auto's cost needs steps to compare with: none yet, none measured.
  measuring_ = every_ < 0 && !quiet_ms_.empty();
  if (measuring_) {
    std::vector<double> sorted(quiet_ms_.begin(), quiet_ms_.end());
    std::sort(sorted.begin(), sorted.end());
    baseline_ms_ = sorted[sorted.size() / 2];
  }
  stall_ms_ = stall_ms;
  fresh_image_ = fresh_image;
  excess_ms_ = 0;
  touched_ = 0;
}

void SnapshotCadence::step_time(std::int64_t step, double ms, bool snapshot_busy) {
  if (every_ >= 0) return;
  if (!touching_) {
    quiet_ms_.push_back(ms);
    if (quiet_ms_.size() > kQuietSteps) quiet_ms_.pop_front();
    return;
  }
  // A snapshot touches the step that began it through the first whose vote
  // finds every rank's work done: the work may have ended during that step,
  // before its vote.
  excess_ms_ += ms - baseline_ms_;
  ++touched_;
  if (step > last_step_ && !snapshot_busy) {
    touching_ = false;
    if (measuring_) measured(std::max(0.0, excess_ms_));
  }
}

void SnapshotCadence::measured(double excess_ms) {
  // The interval that keeps a running mean of the snapshots' cost (half the
  // weight on the newest: one slow snapshot on a busy machine does not set
  // the interval alone) within the budget, and leaves a quiet step between
  // snapshots, to compare with. Its stall at least: a step that happened to
  // be fast cannot hide it.
  const double cost = std::max(excess_ms, stall_ms_);
  if (!fresh_image_) cost_ms_mean_ = cost_ms_mean_ > 0 ? 0.5 * cost_ms_mean_ + 0.5 * cost : cost;
  const double expected = cost_ms_mean_ > 0 ? cost_ms_mean_ : cost;
  interval_ = std::clamp<std::int64_t>(std::int64_t(std::ceil(expected / (kSnapshotBudget * baseline_ms_))),
                                       touched_ + 1, 100000);
  if (fresh_image_) interval_ = std::min<std::int64_t>(interval_, kFreshSnapshotInterval);
}

}  // namespace ht::train
