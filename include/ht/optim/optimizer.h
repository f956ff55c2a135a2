// ht::optim::Optimizer: updates over flat slots.
//
// A slot is one contiguous piece of parameter values with its gradient: a
// whole Parameter, or a ZeRO shard of a flat buffer. Optimizers know only
// slots, so the same AdamW steps a full model or 1/N of one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ht/core/tensor.h"
#include "ht/nn/parameter.h"

namespace ht::optim {

struct Slot {
  std::string name;  // the parameter's name, with "[a:b]" for a piece of it
  Tensor param;      // f32 values updated in place
  Tensor grad;       // gradient, same element count (f32, f16 or bf16)
  bool weight_decay = true;
  /// The parameter the slot is (a piece of), and where the piece starts in
  /// this rank's (tensor-parallel part of the) parameter, flattened.
  const nn::Parameter* source = nullptr;
  std::int64_t offset = 0;
  /// Whether this rank is the one that counts the piece in global sums and
  /// saves it: other ranks hold identical copies (data-parallel replicas,
  /// tensor-parallel replicas of an unsplit tensor, a tied copy).
  bool primary = true;
};

/// One slot per parameter (data and grad as they are now; grads are allocated).
std::vector<Slot> slots_of(const std::vector<nn::Parameter*>& params);

class Optimizer {
 public:
  explicit Optimizer(std::vector<Slot> slots) : slots_(std::move(slots)) {}
  virtual ~Optimizer() = default;

  /// Applies one update with learning rate `lr`; every gradient is first
  /// multiplied by `grad_scale` (gradient clipping and loss unscaling fold in
  /// here, so neither needs its own pass over the gradients).
  virtual void step(float lr, float grad_scale = 1.f) = 0;
  /// "adamw", "sgd", or a program's own: checkpoints record it, and a
  /// resume with another optimizer is refused (its state would not fit).
  virtual std::string name() const = 0;
  /// Steps taken so far.
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t n) { step_count_ = n; }
  /// Slot i's state tensors by kind, e.g. {("exp_avg", m), ("exp_avg_sq", v)}:
  /// f32, the slot's element count, updated in place (checkpoints read and
  /// write them).
  virtual std::vector<std::pair<std::string, Tensor>> slot_state(std::size_t i) = 0;
  /// Every slot's state, named "<slot name>.<kind>".
  std::vector<std::pair<std::string, Tensor>> state();
  const std::vector<Slot>& slots() const { return slots_; }

 protected:
  std::vector<Slot> slots_;
  std::int64_t step_count_ = 0;
};

}  // namespace ht::optim
