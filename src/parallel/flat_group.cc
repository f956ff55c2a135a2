// FlatGroup: parameters end to end in one buffer.
#include "parallel/flat_group.h"

namespace ht::parallel::detail {

void FlatGroup::bind_params() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    nn::Parameter& p = *params[i];
    p.set_data(work_params.slice(offsets[i], offsets[i] + shape_numel(p.shape())).view(p.shape()));
  }
}

void FlatGroup::bind_grads() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    nn::Parameter& p = *params[i];
    p.set_grad(work_grads.slice(offsets[i], offsets[i] + shape_numel(p.shape())).view(p.shape()));
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
  g.shards = shards;
  g.shard_rank = shard_rank;
  g.device = device;
  for (nn::Parameter* p : g.params) {
    g.offsets.push_back(g.numel);
    g.numel += shape_numel(p->shape());
  }
  g.padded = (g.numel + shards - 1) / shards * shards;
  // Zeros: the padding must stay zero through reductions and updates.
  master_full = Tensor::zeros({g.padded}, DType::kF32, g.device, MemCategory::kParameters);
  for (std::size_t i = 0; i < g.params.size(); ++i) {
    const nn::Parameter& p = *g.params[i];
    master_full.slice(g.offsets[i], g.offsets[i] + shape_numel(p.shape())).copy_from(value_of(p).view({-1}));
  }
  return g;
}

}  // namespace ht::parallel::detail
