// ht::train::TrainFlags' planning: --auto and --dry-run.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "ht/comm/agreement.h"
#include "ht/core/error.h"
#include "ht/core/launcher_env.h"
#include "ht/plan/search.h"
#include "ht/train/flags.h"

namespace ht::train {
namespace {

constexpr double kGiB = double(1 << 30);

std::string stage_table(const std::vector<plan::StageMemory>& stages) {
  std::string s = fmt::format("# {:>5} {:>6} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}\n", "stage", "blocks",
                              "params", "grads", "optim", "activations", "comm", "total GiB");
  for (const plan::StageMemory& m : stages)
    s += fmt::format("# {:>5} {:>6} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.3f} {:>10.3f} {:>10.3f}\n", m.stage, m.blocks,
                     m.of(MemCategory::kParameters) / kGiB, m.of(MemCategory::kGradients) / kGiB,
                     m.of(MemCategory::kOptimizerState) / kGiB, m.of(MemCategory::kActivations) / kGiB,
                     m.of(MemCategory::kCommunication) / kGiB, m.total() / kGiB);
  return s;
}

}  // namespace

plan::LayoutChoice TrainFlags::layout(int world_size) const {
  return {engine.layout.on_world(world_size), engine.recompute, engine.precision, engine.bucket_bytes};
}

std::string TrainFlags::dry_run_report(int world_size) const {
  HT_CHECK(model_spec, ErrorKind::kConfig, "--dry-run: this program does not describe its model (TrainFlags::model_spec)");
  const nn::ModelSpec spec = model_spec();
  const plan::LayoutChoice l = layout(world_size);
  const std::vector<plan::StageMemory> stages = plan::estimate_memory(spec, l);
  std::string s = fmt::format(
      "# dry run: {} | {} parameters | {} ranks as {} ({} x {} tokens a step): memory per rank by stage\n",
      spec.description, spec.num_parameters(), world_size, l.str(), l.global_batch(), spec.seq_len);
  s += stage_table(stages);
  const double peak = plan::peak_bytes(stages);
  if (plan_memory_gib > 0)
    s += fmt::format("# heaviest stage {:.3f} GiB of {:.3f} GiB per rank: {}\n", peak / kGiB, plan_memory_gib,
                     peak <= plan_memory_gib * kGiB ? "fits" : "does NOT fit");
  else
    s += fmt::format("# heaviest stage {:.3f} GiB (give --plan-memory-gib to check it against a budget)\n", peak / kGiB);
  s += "# nothing was trained (--dry-run)\n";
  return s;
}

void TrainFlags::apply_auto_plan(comm::Communicator& world, JobOptions& job_options) {
  HT_CHECK(model_spec, ErrorKind::kConfig, "--auto: this program does not describe its model (TrainFlags::model_spec)");
  plan::PlanRequest rq;
  rq.model = model_spec();
  rq.world = world.size();
  rq.precision = engine.precision;
  rq.global_batch = global_batch > 0 ? global_batch : layout(world.size()).global_batch();
  if (!plan_profile.empty()) {
    rq.profile = plan::load_profile(plan_profile);
  } else {  // a host probe (TrainFlags::resolve refused one for GPUs)
    plan::ProbeOptions po;
    po.memory_gib = plan_memory_gib;
    rq.profile = plan::probe_profile(po, &world, launcher_local_size(world.size()));
  }
  const plan::PlanResult result = plan::search_plans(rq, 3);
  const plan::LayoutChoice& best = result.plans.at(0).layout;
  HT_CHECK(comm::all_equal(world, best.name() + " " + nn::recompute_name(best.recompute)),
           ErrorKind::kConfig,
           "--auto: the ranks planned different layouts (their machine profiles differ); give them one with "
           "--plan-profile FILE");
  engine.layout = best;  // the parallel::Layout part of the choice
  engine.recompute = best.recompute;
  job_options.layout = job.layout = engine.layout;
  engine.validate();
  if (world.rank() == 0) {
    std::string text = plan::format_plans(result, rq);
    std::string out;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t nl = text.find('\n', at);
      const std::string line = text.substr(at, nl - at);
      out += (line.rfind("#", 0) == 0 ? "# plan" + line.substr(1) : "# plan " + line) + "\n";
      at = nl == std::string::npos ? text.size() : nl + 1;
    }
    std::fputs(out.c_str(), stdout);
    std::printf("# auto: %s%s (modelled %.1f ms a step, heaviest stage %.3f GiB)\n", best.str().c_str(),
                best.stage_layers.empty() ? "" : fmt::format(" stages {}", fmt::join(best.stage_layers, ",")).c_str(),
                result.plans[0].time.step_ms, result.plans[0].peak_bytes / kGiB);
    std::fflush(stdout);
  }
}

}  // namespace ht::train
