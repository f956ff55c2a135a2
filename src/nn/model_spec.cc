// ht::nn::ModelSpec.
#include "ht/nn/model_spec.h"

#include <algorithm>

#include "ht/core/error.h"

namespace ht::nn {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    if (name == recompute_name(r)) return r;
  throw Error(ErrorKind::kConfig, fmt::format("recomputation '{}' is not known: choose none, selective or full", name));
}

int ModelSpec::first_block() const {
  int i = 0;
  while (i < int(layers.size()) && layers[std::size_t(i)].role == LayerRole::kFirst) ++i;
  return i;
}

int ModelSpec::end_block() const {
  int i = first_block();
  while (i < int(layers.size()) && layers[std::size_t(i)].role == LayerRole::kBlock) ++i;
  return i;
}

std::int64_t ModelSpec::num_parameters() const {
  std::int64_t n = 0;
  for (const LayerSpec& l : layers) n += l.params_split + l.params_replicated + l.params_expert;
  return n;
}

std::int64_t ModelSpec::active_parameters() const {
  std::int64_t n = num_parameters();
  for (const LayerSpec& l : layers)
    if (l.experts > 0) n -= l.params_expert / l.experts * (l.experts - l.top_k);
  return n;
}

int ModelSpec::max_experts() const {
  int e = 0;
  for (const LayerSpec& l : layers) e = std::max(e, l.experts);
  return e;
}

bool ModelSpec::splits_experts_over(int ep) const {
  if (ep <= 0) return false;
  if (ep == 1) return true;
  if (max_experts() == 0) return false;
  for (const LayerSpec& l : layers)
    if (l.experts > 0 && l.experts % ep != 0) return false;
  return true;
}

bool ModelSpec::splits_over(int tp) const {
  if (tp <= 0) return false;
  for (std::int64_t d : tp_divides)
    if (d % tp != 0) return false;
  return true;
}

void ModelSpec::validate() const {
  HT_CHECK(num_blocks() > 0, ErrorKind::kConfig, "model spec '{}': no block (a layer with role kBlock)", description);
  for (std::size_t i = std::size_t(end_block()); i < layers.size(); ++i)
    HT_CHECK(layers[i].role == LayerRole::kLast, ErrorKind::kConfig,
             "model spec '{}': layer {} ('{}') comes after the blocks but is not a last-stage layer; order the layers "
             "first-stage, blocks, last-stage",
             description, i, layers[i].name);
  HT_CHECK(seq_len > 0 && width > 0, ErrorKind::kConfig, "model spec '{}': seq_len ({}) and width ({}) must be positive",
           description, seq_len, width);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    HT_CHECK(l.shares_with < int(i), ErrorKind::kConfig,
             "model spec '{}': layer '{}' shares the weight of layer {}, which is not an earlier layer", description,
             l.name, l.shares_with);
    HT_CHECK(l.params_split >= 0 && l.params_replicated >= 0 && l.gemm_flops >= 0 && l.attention_flops >= 0,
             ErrorKind::kConfig, "model spec '{}': layer '{}' has a negative size", description, l.name);
    HT_CHECK(l.params_expert >= 0 && l.gemm_flops_replicated >= 0 && l.ep_all_to_all >= 0 && l.experts >= 0 &&
                 (l.experts > 0 ? l.top_k >= 1 && l.top_k <= l.experts && l.params_expert % l.experts == 0
                                : l.params_expert == 0 && l.top_k == 0),
             ErrorKind::kConfig,
             "model spec '{}': layer '{}' has {} routed experts, top_k {} and {} expert parameters: give experts >= 1, "
             "top_k in [1, experts] and parameters that divide evenly among the experts, or all three 0 for a dense "
             "layer",
             description, l.name, l.experts, l.top_k, l.params_expert);
  }
}

}  // namespace ht::nn
