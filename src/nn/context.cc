// ht::nn::Context.
#include "ht/nn/context.h"

#include "ht/nn/module.h"

namespace ht::nn {

void Context::save(const Module* m, std::vector<Tensor> tensors) {
  if (saving_) saved_[m].push_back({std::move(tensors), false});
}

void Context::save_input_for_recompute(const Module* m, Tensor input) {
  if (saving_) saved_[m].push_back({{std::move(input)}, true});
}

bool Context::recomputes(const Module* m) const {
  const auto it = saved_.find(m);
  return it != saved_.end() && !it->second.empty() && it->second.back().recompute;
}

std::vector<Tensor> Context::take(const Module* m) {
  std::vector<Tensor> out = saved(m);
  pop(m);
  return out;
}

void Context::pop(const Module* m) {
  auto it = saved_.find(m);
  if (it == saved_.end()) return;
  it->second.pop_back();
  if (it->second.empty()) saved_.erase(it);
}

const std::vector<Tensor>& Context::saved(const Module* m) const {
  auto it = saved_.find(m);
  HT_CHECK(it != saved_.end() && !it->second.empty(), ErrorKind::kInvalidArgument,
           "backward of module '{}' found nothing saved in this context: run forward with the same Context "
           "(created with save_for_backward = true) before backward",
           m->name());
  return it->second.back().tensors;
}

std::int64_t Context::saved_bytes() const {
  std::int64_t total = 0;
  for (const auto& [m, runs] : saved_)
    for (const Entry& e : runs)
      for (const Tensor& t : e.tensors) total += t.defined() ? std::int64_t(t.nbytes()) : 0;
  return total;
}

}  // namespace ht::nn
