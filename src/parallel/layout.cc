// ht::parallel::Layout.
#include "ht/parallel/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ht/core/error.h"
#include "ht/parallel/tables.h"

namespace ht::parallel {

std::string Layout::name() const {
  std::string sched = schedule_name(schedule);
  std::erase(sched, '-');  // zb-h1 -> zbh1: an identifier
  std::string s = fmt::format("zero{}", zero);
  if (shard_group > 0) s += fmt::format("_sg{}", shard_group);
  s += fmt::format("_dp{}_tp{}", dp, tp);
  if (cp != 1) s += fmt::format("_cp{}", cp);
  if (ep != 1) s += fmt::format("_ep{}", ep);
  s += fmt::format("_pp{}_{}", pp, sched);
  if (virtual_stages != 1) s += fmt::format("_v{}", virtual_stages);
  if (micro_batch != 1) s += fmt::format("_mb{}", micro_batch);
  if (grad_accum != 1) s += fmt::format("_acc{}", grad_accum);
  if (!stage_layers.empty()) s += fmt::format("_stages{}", fmt::join(stage_layers, "_"));
  return s;
}

std::string Layout::str() const {
  std::string s = fmt::format("tp{}", tp);
  if (cp != 1) s += fmt::format(" cp{}", cp);
  s += fmt::format(" pp{} dp{}", pp, dp);
  if (ep != 1) s += fmt::format(" ep{}", ep);
  s += fmt::format(" zero{}", zero);
  if (zero > 0 && shards() != dp * cp) s += fmt::format("/{}", shards());
  s += fmt::format(" mb{}x{}", micro_batch, grad_accum);
  if (pp > 1) s += " " + schedule_name(schedule);
  if (virtual_stages > 1) s += fmt::format(" v{}", virtual_stages);
  return s;
}

Layout Layout::on_world(int world_size) const {
  const int model_ranks = tp * pp * cp;  // the ranks one data-parallel replica spans
  HT_CHECK(tp >= 1 && pp >= 1 && cp >= 1 && world_size % model_ranks == 0, ErrorKind::kConfig,
           "--tp {} x --pp {}{} does not divide the {} ranks: choose sizes whose product divides the world", tp, pp,
           cp != 1 ? fmt::format(" x --cp {}", cp) : "", world_size);
  HT_CHECK(dp == 0 || model_ranks * dp == world_size, ErrorKind::kConfig,
           "the layout {} has dp {}, but tp {} x pp {} x cp {} leave {} data-parallel ranks of the {}: give dp 0 (the "
           "rest) or {}",
           name(), dp, tp, pp, cp, world_size / model_ranks, world_size, world_size / model_ranks);
  Layout l = *this;
  l.dp = world_size / model_ranks;
  l.validate();
  return l;
}

Layout Layout::on_mesh(const comm::MeshShape& mesh) const {
  HT_CHECK(tp == mesh.tp_size() && pp == mesh.pp_size() && cp == mesh.cp_size(), ErrorKind::kConfig,
           "the layout {} has tp {}, pp {} and cp {}, but the mesh it runs on has tp {}, pp {} and cp {}: build the "
           "mesh from the layout (JobOptions::layout), or give the layout the mesh's sizes",
           name(), tp, pp, cp, mesh.tp_size(), mesh.pp_size(), mesh.cp_size());
  return on_world(mesh.world_size());
}

void Layout::validate() const {
  const std::string problem = layout_problem(*this);
  HT_CHECK(problem.empty(), ErrorKind::kConfig, "{}", problem);
}

std::vector<int> Layout::stage_boundaries() const {
  return parallel::stage_boundaries(stage_layers, model_stages(), virtual_stages);
}

std::vector<int> Layout::layers_per_stage(int num_layers) const {
  if (stage_layers.empty()) return parallel::layers_per_stage(partition_by_count(num_layers, model_stages()));
  validate_boundaries(stage_boundaries(), num_layers, model_stages(), virtual_stages);
  return stage_layers;
}

std::string layout_problem(const Layout& l) {
  if (l.tp < 1 || l.pp < 1)
    return fmt::format("--tp {} and --pp {}: tensor-parallel and pipeline sizes are 1 or more", l.tp, l.pp);
  if (l.cp < 1) return fmt::format("--cp {}: the context-parallel size is 1 or more", l.cp);
  if (l.dp < 0) return fmt::format("dp {}: give the data-parallel ranks, or 0 for the rest of the world", l.dp);
  if (l.ep < 1) return fmt::format("--ep {}: the expert-parallel size is 1 or more", l.ep);
  if (l.dp > 0 && l.dp % l.ep != 0)
    return fmt::format("--ep {} does not divide the {} data-parallel ranks: the experts are split over runs of ep "
                       "data-parallel ranks; choose an ep that divides {}",
                       l.ep, l.dp, l.dp);
  if (l.ep > 1 && l.cp > 1)
    return fmt::format("--ep {} with --cp {}: expert parallelism with context parallelism is not supported yet; "
                       "choose one of them",
                       l.ep, l.cp);
  if (l.ep > 1 && l.shard_group > 0)
    return fmt::format("--ep {} with --zero-shard-group {}: hybrid sharding with expert parallelism is not supported yet; "
                       "give --zero-shard-group 0",
                       l.ep, l.shard_group);
  if (l.micro_batch < 1) return fmt::format("--micro-batch must be positive, got {}", l.micro_batch);
  if (l.grad_accum < 1) return fmt::format("--grad-accum must be positive, got {}", l.grad_accum);
  // hybrid_shard and stage_boundaries say what they check in their own
  // words (the ZeRO stage and shard group first: the schedule's rules take
  // the stage as valid); dp 0 (not resolved yet) is checked as 1 x shard
  // group, which every group divides.
  const auto problem_of = [](const auto& check) {
    try {
      check();
    } catch (const Error& e) {
      return e.message();
    }
    return std::string();
  };
  const int dp = l.dp > 0 ? l.dp * l.cp : std::max(l.shard_group, 1);
  if (std::string p = problem_of([&] { hybrid_shard(dp, l.shard_group, 0, l.zero); }); !p.empty()) return p;
  if (std::string p = schedule_problem(l.schedule, l.virtual_stages, l.pp, l.grad_accum, l.zero); !p.empty())
    return p;
  return problem_of([&] { l.stage_boundaries(); });
}

}  // namespace ht::parallel
