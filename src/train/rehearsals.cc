// HT_FAULTS rehearsals as step hooks.
#include "ht/train/rehearsals.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <thread>

namespace ht::train {

void add_fault_rehearsals(Engine& engine, const resilience::FaultPlan& plan, const std::string& run_dir) {
  if (plan.empty()) return;
  using resilience::FaultKind;
  const int rank = engine.mesh().rank();
  // The slow rehearsal stretches a step to `factor` times the previous one's
  // own work: the delay it added to that step is not part of it.
  struct Slowness {
    double last_work_ms = 0, injected_ms = 0;
  };
  auto slow = std::make_shared<Slowness>();
  StepHooks h;
  h.before_step = [plan, run_dir, rank, slow](std::int64_t step) {
    if (auto f = plan.find(FaultKind::kCrash, rank, step)) resilience::rehearse_crash(run_dir, *f, rank);
    if (auto f = plan.find(FaultKind::kHang, rank, step)) resilience::rehearse_hang(run_dir, *f, rank);
    if (auto f = plan.find(FaultKind::kSlow, rank, step)) {
      slow->injected_ms = (f->factor - 1.0) * slow->last_work_ms;
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow->injected_ms));
    }
  };
  h.after_step = [slow](const StepStats& s) {
    slow->last_work_ms = s.ms - slow->injected_ms;
    slow->injected_ms = 0;
  };
  h.after_gradients = [plan, run_dir, rank, &engine](std::int64_t step, float& local_loss) {
    const auto f = plan.find(FaultKind::kNan, rank, step);
    if (!f) return;
    if (f->step == step || f->step < 0) resilience::record_fired(run_dir, *f);
    if (!engine.optimizer().slots().empty()) {
      Tensor g = engine.optimizer().slots().front().grad;
      g.fill_(NAN);
    }
    local_loss = NAN;  // travels in the loss sum: every rank sees the same non-finite loss
  };
  h.after_update = [plan, run_dir, rank, &engine](std::int64_t step) {
    if (auto f = plan.find(FaultKind::kBitflip, rank, step)) {
      nn::Parameter& first = *engine.model().parameters().front();
      resilience::rehearse_bitflip(run_dir, *f, rank, first.data(), first.name());
    }
  };
  h.after_checkpoint = [plan, run_dir, rank, &engine](std::int64_t step) {
    const auto f = plan.find(FaultKind::kCkptCorrupt, rank, step);
    if (!f || f->step != step) return;
    engine.wait_for_checkpoint();  // damage it once it is committed
    if (rank == 0)
      resilience::rehearse_file_damage(
          run_dir, *f,
          (std::filesystem::path(ckpt::checkpoint_dir(engine.options().ckpt_dir, step)) / ckpt::rank_file_name(0))
              .string());
  };
  engine.add_hooks(std::move(h));
  // A kill inside a memory snapshot, at the phase named.
  if (engine.checkpointer() && engine.checkpointer()->has_memory_tier())
    for (const resilience::Fault& f : plan.faults())
      if (f.kind == FaultKind::kSnapshotCrash && (f.rank < 0 || f.rank == rank))
        engine.checkpointer()->set_snapshot_hook([plan, run_dir, rank](std::int64_t step, const std::string& phase) {
          for (const resilience::Fault& g : plan.faults())
            if (g.kind == FaultKind::kSnapshotCrash && (g.rank < 0 || g.rank == rank) &&
                (g.step < 0 || g.step == step) && g.phase == phase)
              resilience::rehearse_crash(run_dir, g, rank);
        });
}

}  // namespace ht::train
