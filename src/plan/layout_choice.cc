// ht::plan::LayoutChoice.
#include "ht/plan/layout_choice.h"

namespace ht::plan {

std::string LayoutChoice::str() const {
  std::string s = parallel::Layout::str();
  if (recompute != nn::Recompute::kNone) s += std::string(" ") + nn::recompute_name(recompute);
  return s;
}

}  // namespace ht::plan
