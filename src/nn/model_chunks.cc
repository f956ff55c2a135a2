// ht::nn::ModelChunks.
#include "ht/nn/model_chunks.h"

#include <algorithm>

namespace ht::nn {

ModelChunks::ModelChunks(const Placement& placement, std::vector<std::unique_ptr<Model>> chunks)
    : Model("", placement) {
  const int p = placement.stage.size, r = placement.stage.rank, v = int(chunks.size());
  HT_CHECK(v >= 1, ErrorKind::kInvalidArgument, "ModelChunks: no chunks given for pipeline rank {}", r);
  HT_CHECK(p >= 2, ErrorKind::kConfig,
           "the interleaved pipeline schedule needs at least 2 pipeline ranks (--pp), got {}: with one rank there is "
           "no bubble to shrink; use --schedule 1f1b",
           p);
  for (int c = 0; c < v; ++c) {
    const Model& m = *chunks[std::size_t(c)];
    HT_CHECK(m.stage().rank == c * p + r && m.stage().size == p * v && m.device() == placement.device &&
                 m.tensor_parallel().size() == placement.tp.size(),
             ErrorKind::kInvalidArgument,
             "ModelChunks: chunk {} of pipeline rank {} is '{}' for virtual stage {} of {} on {}; it must be virtual "
             "stage {} of {} on {}",
             c, r, m.describe(), m.stage().rank, m.stage().size, m.device().str(), c * p + r, p * v,
             placement.device.str());
  }
  for (auto& c : chunks) {
    chunks_.push_back(c.get());
    add_module_keeping_names(std::move(c));
  }
}

std::vector<Model*> ModelChunks::chunks() const { return chunks_; }

void ModelChunks::refuse() const {
  throw Error(ErrorKind::kNotSupported,
              fmt::format("{}: the chunks of an interleaved pipeline rank are not consecutive layers; run them "
                          "through parallel::Pipeline",
                          describe()));
}

LossValue ModelChunks::forward_loss(Context&, const Tensor&, const Tensor&) { refuse(); }
Tensor ModelChunks::backward_loss(Context&, float) { refuse(); }
Tensor ModelChunks::forward_impl(Context&, const Tensor&) { refuse(); }
Tensor ModelChunks::backward_impl(Context&, const Tensor&) { refuse(); }

void ModelChunks::check_batch(const Tensor& input, const Tensor& target) const {
  chunks_.front()->check_batch(input, target);
}

Shape ModelChunks::stage_input_shape(const Shape& input_shape) const {
  return chunks_.front()->stage_input_shape(input_shape);
}

std::vector<StageTensor> ModelChunks::stage_inputs(const Shape& input_shape) const {
  return chunks_.front()->stage_inputs(input_shape);
}

std::vector<TiedWeight> ModelChunks::tied_weights() const {
  const int p = stage().size;
  std::vector<TiedWeight> out = chunks_.front()->tied_weights();
  for (TiedWeight& t : out) {
    std::vector<int> ranks;
    for (int s : t.stages) ranks.push_back(s % p);
    std::vector<int> unique = ranks;
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    HT_CHECK(unique.size() == ranks.size(), ErrorKind::kConfig,
             "{}: the weight '{}' is tied between virtual stages that share a rank under {} pipeline ranks; use "
             "more pipeline ranks or fewer virtual stages",
             describe(), t.name, p);
    t.stages = unique;  // the original (virtual stage 0, rank 0) stays first
  }
  return out;
}

int ModelChunks::num_layers() const { return chunks_.front()->num_layers(); }

std::vector<std::string> ModelChunks::metric_names() const { return chunks_.front()->metric_names(); }

std::string ModelChunks::describe() const { return chunks_.front()->describe(); }

double ModelChunks::flops_per_token(const Shape& input_shape) const {
  return chunks_.front()->flops_per_token(input_shape);
}

void ModelChunks::set_recompute(Recompute mode) {
  for (Model* c : chunks_) c->set_recompute(mode);
}

}  // namespace ht::nn
