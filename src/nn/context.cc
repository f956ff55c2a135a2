// ht::nn::Context.
#include "ht/nn/context.h"

#include "ht/nn/module.h"
#include "ht/nn/tape.h"

namespace ht::nn {

void Context::save(const Module* m, std::vector<Tensor> tensors) {
  if (saving_) saved_[m].push_back({std::move(tensors), false, nullptr});
}

void Context::save_tape(const Module* m, std::shared_ptr<Tape> tape) {
  if (saving_) saved_[m].push_back({{}, false, std::move(tape)});
}

std::shared_ptr<Tape> Context::tape(const Module* m) const {
  const Entry& e = newest(m);
  HT_CHECK(e.tape != nullptr, ErrorKind::kInvalidArgument,
           "backward of module '{}' found no recorded tape in this context: a module that overrides forward_impl "
           "must override backward_impl too (or neither, and define compute())",
           m->name());
  return e.tape;
}

std::shared_ptr<Tape> Context::take_tape(const Module* m) {
  std::shared_ptr<Tape> t = tape(m);
  pop(m);
  return t;
}

void Context::set_side_input(const std::string& name, Tensor t) {
  HT_CHECK(!sealed_, ErrorKind::kConfig,
           "side input '{}' was set during a forward the engine runs: a pipeline's later stages would never see it. "
           "Give it with the micro-batch instead (data::MicroBatch::side[\"{}\"], rows along dimension 0): the "
           "engine hands it to every stage",
           name, name);
  side_[name] = std::move(t);
}

void Context::save_input_for_recompute(const Module* m, std::vector<Tensor> inputs) {
  if (saving_) saved_[m].push_back({std::move(inputs), true, nullptr});
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

const Context::Entry& Context::newest(const Module* m) const {
  auto it = saved_.find(m);
  HT_CHECK(it != saved_.end() && !it->second.empty(), ErrorKind::kInvalidArgument,
           "backward of module '{}' found nothing saved in this context: run forward with the same Context "
           "(created with save_for_backward = true) before backward",
           m->name());
  return it->second.back();
}

const std::vector<Tensor>& Context::saved(const Module* m) const { return newest(m).tensors; }

Context::MetricSum& Context::metric(const std::string& name, bool per_sample) {
  const auto [it, fresh] = metrics_.try_emplace(name, MetricSum{.per_sample = per_sample});
  HT_CHECK(fresh || it->second.per_sample == per_sample, ErrorKind::kInvalidArgument,
           "the metric '{}' was added both per sample and with a count of its own: give one metric one kind", name);
  return it->second;
}

std::int64_t Context::saved_bytes() const {
  std::int64_t total = 0;
  for (const auto& [m, runs] : saved_)
    for (const Entry& e : runs) {
      for (const Tensor& t : e.tensors) total += t.defined() ? std::int64_t(t.nbytes()) : 0;
      if (e.tape) total += e.tape->saved_bytes();
    }
  if (deferred_)
    for (const Deferred& d : *deferred_)
      for (const Tensor& t : d.inputs) total += t.defined() ? std::int64_t(t.nbytes()) : 0;
  return total;
}

void Context::set_defer_weight_grads(bool defer) {
  if (!defer) {
    HT_CHECK(pending_weight_grads() == 0, ErrorKind::kInvalidArgument,
             "Context: {} deferred weight gradients are still to run; call run_weight_grads() before ending deferral",
             pending_weight_grads());
    deferred_.reset();
  } else if (!deferred_) {
    deferred_ = std::make_shared<std::vector<Deferred>>();
  }
}

void Context::weight_grad(std::vector<Tensor> inputs, WeightGrad compute) {
  if (deferred_)
    deferred_->push_back({std::move(inputs), std::move(compute)});
  else
    compute(inputs);
}

void Context::run_weight_grads() {
  if (!deferred_) return;
  // Taken out first: what runs may not defer again into the same queue.
  std::vector<Deferred> todo = std::move(*deferred_);
  deferred_->clear();
  for (Deferred& d : todo) d.compute(d.inputs);
}

}  // namespace ht::nn
