// ht::nn::ModelChunks: the model chunks one rank holds in an interleaved
// pipeline (parallel::Schedule::kInterleaved, Megatron's virtual pipeline).
//
// With p ranks and v chunks per rank the model is split into p v virtual
// stages, and rank r holds virtual stages r, p + r, ..., (v - 1) p + r:
// chunk c is a model of its own, built for virtual stage c p + r of p v.
// Together they are this rank's model for everything outside the pipeline:
// the chunks are its children (their parameters keep their names), so data
// parallelism, the optimizer, checkpoints and reports see every parameter
// the rank holds; the rank's own stage is r of p; the first stage holds the
// embedding (virtual stage 0), the last the loss (virtual stage p v - 1).
// The pipeline runs the chunks (parallel::Pipeline); forward and backward
// of the whole refuse, since a rank's chunks are not consecutive layers.
#pragma once

#include <memory>
#include <vector>

#include "ht/nn/model.h"

namespace ht::nn {

class ModelChunks : public Model {
 public:
  /// `placement.stage` is the rank's (r of p); `chunks[c]` must be built
  /// for virtual stage c p + r of p v, on the same device and tp group.
  /// Throws kInvalidArgument when they are not, and kConfig for p = 1 (a
  /// rank would hold both ends of the model: nothing to interleave with).
  ModelChunks(const Placement& placement, std::vector<std::unique_ptr<Model>> chunks);

  /// Chunk c is virtual stage c p + r.
  std::vector<Model*> chunks() const;

  /// Refused: the pipeline runs the chunks (kNotSupported).
  LossValue forward_loss(Context& ctx, const Tensor& input, const Tensor& target) override;
  Tensor backward_loss(Context& ctx, float grad_scale) override;

  void check_batch(const Tensor& input, const Tensor& target) const override;
  /// What chunk 0 receives (every chunk receives the same shape).
  Shape stage_input_shape(const Shape& input_shape) const override;
  std::vector<StageTensor> stage_inputs(const Shape& input_shape) const override;
  /// The chunks' tied weights with their virtual stages mapped to ranks.
  std::vector<TiedWeight> tied_weights() const override;
  int num_layers() const override;
  /// The chunks' (the pipeline runs each chunk's forward_loss, which adds them).
  std::vector<std::string> metric_names() const override;
  std::string describe() const override;
  double flops_per_token(const Shape& input_shape) const override;
  /// Each chunk's own rule (a chunk is a whole model's part, not a block).
  void set_recompute(Recompute mode) override;

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  [[noreturn]] void refuse() const;

  std::vector<Model*> chunks_;
};

}  // namespace ht::nn
