// ht::plan::LayoutChoice.
#include "ht/plan/layout_choice.h"

#include <fmt/format.h>


#include "ht/core/error.h"
#include "ht/parallel/layout.h"

namespace ht::plan {

std::string LayoutChoice::str() const {
  std::string s = fmt::format("tp{} pp{} dp{} zero{}", tp, pp, dp, zero);
  if (zero > 0 && shards() != dp) s += fmt::format("/{}", shards());
  s += fmt::format(" mb{}x{}", micro_batch, grad_accum);
  if (pp > 1) s += " " + parallel::schedule_name(schedule);
  if (virtual_stages > 1) s += fmt::format(" v{}", virtual_stages);
  if (recompute != nn::Recompute::kNone) s += std::string(" ") + nn::recompute_name(recompute);
  return s;
}

std::vector<int> blocks_per_stage(const LayoutChoice& l, int num_blocks) {
  // The engine's own rules and messages (--stage-layers), so a plan never
  // holds a split the engine would refuse.
  const int stages = l.model_stages();
  if (!l.stage_layers.empty()) {
    parallel::validate_boundaries(parallel::stage_boundaries(l.stage_layers, stages, l.virtual_stages), num_blocks,
                                  stages, l.virtual_stages);
    return l.stage_layers;
  }
  return parallel::layers_per_stage(parallel::partition_by_count(num_blocks, stages));
}

}  // namespace ht::plan
