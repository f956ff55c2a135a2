// FlatGroup: parameters end to end in one buffer.
#include "parallel/flat_group.h"

namespace ht::parallel::detail {

void FlatGroup::bind_params() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    nn::Parameter& p = *params[i];
    p.set_data(work_params.slice(layout.offsets[i], layout.offsets[i] + layout.numels[i]).view(p.shape()));
  }
}

void FlatGroup::bind_grads() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    nn::Parameter& p = *params[i];
    p.set_grad(work_grads.slice(layout.offsets[i], layout.offsets[i] + layout.numels[i]).view(p.shape()));
  }
}

void FlatGroup::unbind_params() {
  for (nn::Parameter* p : params) p->release_data();
}

void FlatGroup::unbind_grads() {
  for (nn::Parameter* p : params) p->release_grad();
}

FlatGroup make_flat_group(std::vector<nn::Parameter*> params, int shards, int shard_rank, Device device,
                          const std::function<Tensor(const nn::Parameter&)>& value_of, Tensor& master_full) {
  HT_CHECK_ARG(!params.empty() && shards > 0 && shard_rank >= 0 && shard_rank < shards,
               "flat group: {} parameters, shard {} of {}", params.size(), shard_rank, shards);
  FlatGroup g;
  g.params = std::move(params);
  g.shard_rank = shard_rank;
  g.device = device;
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : g.params) numels.push_back(shape_numel(p->shape()));
  g.layout = flat_layout(numels, shards);
  // Zeros: the padding must stay zero through reductions and updates.
  master_full = Tensor::zeros({g.padded()}, DType::kF32, g.device, MemCategory::kParameters);
  for (std::size_t i = 0; i < g.params.size(); ++i)
    master_full.slice(g.layout.offsets[i], g.layout.offsets[i] + g.layout.numels[i])
        .copy_from(value_of(*g.params[i]).view({-1}));
  return g;
}

}  // namespace ht::parallel::detail
