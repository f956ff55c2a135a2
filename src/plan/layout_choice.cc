// ht::plan::LayoutChoice.
#include "ht/plan/layout_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "ht/core/error.h"

namespace ht::plan {

std::string LayoutChoice::str() const {
  std::string s = fmt::format("tp{} pp{} dp{} zero{}", tp, pp, dp, zero);
  if (zero > 0 && shards() != dp) s += fmt::format("/{}", shards());
  s += fmt::format(" mb{}x{}", micro_batch, grad_accum);
  if (pp > 1) s += " " + parallel::schedule_name(schedule);
  if (recompute != nn::Recompute::kNone) s += std::string(" ") + nn::recompute_name(recompute);
  return s;
}

std::vector<int> blocks_per_stage(const LayoutChoice& l, int num_blocks) {
  if (!l.stage_layers.empty()) {
    HT_CHECK(int(l.stage_layers.size()) == l.pp, ErrorKind::kConfig,
             "stage layers name {} stages but the layout has pp {}", l.stage_layers.size(), l.pp);
    HT_CHECK(std::accumulate(l.stage_layers.begin(), l.stage_layers.end(), 0) == num_blocks &&
                 *std::min_element(l.stage_layers.begin(), l.stage_layers.end()) > 0,
             ErrorKind::kConfig, "stage layers must be positive and sum to the model's {} blocks", num_blocks);
    return l.stage_layers;
  }
  HT_CHECK(l.pp > 0 && num_blocks >= l.pp, ErrorKind::kConfig, "{} blocks cannot fill {} pipeline stages", num_blocks,
           l.pp);
  std::vector<int> v(std::size_t(l.pp), num_blocks / l.pp);
  for (int s = 0; s < num_blocks % l.pp; ++s) ++v[std::size_t(s)];
  return v;
}

}  // namespace ht::plan
