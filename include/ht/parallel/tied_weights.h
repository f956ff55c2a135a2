// ht::parallel::TiedWeights: a model's weights tied across pipeline stages
// (nn::Model::tied_weights: a GPT's embedding, used again by the head on the
// last stage). Each stage holding a tie keeps a copy; after backward the
// copies' gradients are summed over those stages, so that every copy steps
// with the whole gradient and they stay equal. Built once per model; the
// data-parallel layer isolates tied parameters into deferred groups and
// sums them here before reducing them over dp (x cp).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/nn/model.h"

namespace ht::parallel {

class TiedWeights {
 public:
  /// Checks the model's declared ties against its stage, marks the copies
  /// on later stages (ParamLayout::pp_tied_copy: their gradient and values
  /// are not counted twice) and splits one communicator per tie over the
  /// stages holding it, at this rank's dp and tp coordinates. Collective over
  /// the world. Throws kInvalidArgument naming the tie when its stages are
  /// not two or more distinct ascending stages of the pipeline, or when this
  /// stage holds no parameter of its name.
  TiedWeights(nn::Model& model, comm::DeviceMesh& mesh);

  /// Whether `p` is tied across stages.
  bool tied(const nn::Parameter* p) const { return comm_of(p) != nullptr; }
  /// Sums `p`'s gradient over the stages holding its copies (blocking);
  /// nothing for a parameter that is not tied.
  void sum_gradient(nn::Parameter& p) const;

 private:
  comm::Communicator* comm_of(const nn::Parameter* p) const;
  // Per tie: this stage's copy (null if it holds none) and the communicator
  // over the stages holding it (same dp and tp coordinates).
  std::vector<std::pair<nn::Parameter*, std::unique_ptr<comm::Communicator>>> ties_;
};

}  // namespace ht::parallel
