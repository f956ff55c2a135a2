// ht::parallel::TiedWeights.
#include "ht/parallel/tied_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ht/core/error.h"

namespace ht::parallel {

TiedWeights::TiedWeights(nn::Model& model, comm::DeviceMesh& mesh) {
  const comm::MeshShape& shape = mesh.shape();
  const comm::MeshCoord& at = mesh.coord();
  const int stage = model.stage().rank;
  std::vector<nn::Parameter*> params = model.parameters();
  for (const nn::TiedWeight& t : model.tied_weights()) {
    HT_CHECK(t.stages.size() >= 2 && std::is_sorted(t.stages.begin(), t.stages.end()) &&
                 std::adjacent_find(t.stages.begin(), t.stages.end()) == t.stages.end() && t.stages.front() >= 0 &&
                 t.stages.back() < model.stage().size,
             ErrorKind::kInvalidArgument,
             "model '{}' declares weight '{}' tied across stages {{{}}}: a tie needs two or more distinct stages, "
             "ascending, each below the pipeline's {}",
             model.describe(), t.name, fmt::join(t.stages, ","), model.stage().size);
    const bool holds = std::find(t.stages.begin(), t.stages.end(), stage) != t.stages.end();
    nn::Parameter* param = nullptr;
    if (holds) {
      const auto it = std::find_if(params.begin(), params.end(), [&](nn::Parameter* p) { return p->name() == t.name; });
      HT_CHECK(it != params.end(), ErrorKind::kInvalidArgument,
               "model '{}' declares weight '{}' tied across stages {{{}}}, but stage {} holds no parameter of that "
               "name",
               model.describe(), t.name, fmt::join(t.stages, ","), stage);
      param = *it;
      param->layout().pp_tied_copy = stage != t.stages.front();
    }
    // The copies of one (dp, cp, tp) position, ordered by stage.
    const int color = holds ? shape.dp_cp_rank(at) * shape.tp_size() + at.tp_rank : -1;
    ties_.emplace_back(param, mesh.world().split(color, at.pp_rank, fmt::format("tied.{}.{}", t.name, color)));
  }
}

comm::Communicator* TiedWeights::comm_of(const nn::Parameter* p) const {
  for (const auto& [param, comm] : ties_)
    if (param == p) return comm.get();
  return nullptr;
}

void TiedWeights::sum_gradient(nn::Parameter& p) const {
  if (comm::Communicator* c = comm_of(&p)) c->all_reduce(p.grad(), p.grad(), comm::ReduceOp::kSum)->wait();
}

}  // namespace ht::parallel
