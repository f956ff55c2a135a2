// ht::nn::Parameter: a named, trainable tensor, its gradient, and how it is laid
// out across ranks.
//
// The name is stable ("h.3.attn.c_attn.weight") and is the checkpoint key. The
// full (logical) shape is the shape of the whole tensor; `data` may hold only
// this rank's part of it, as `layout` describes. Checkpoints and resharding
// read the layout, never the model code.
#pragma once

#include <functional>
#include <string>

#include "ht/core/tensor.h"

namespace ht::nn {

struct ParamLayout {
  /// Dimension split across the tensor-parallel group, or -1 if replicated there.
  int tp_split_dim = -1;
  int tp_rank = 0;
  int tp_size = 1;
  /// Whether `data` is (a view into) a buffer sharded over the data-parallel
  /// group (ZeRO-3); then `data` may be empty between uses.
  bool dp_sharded = false;
};

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&)>;

  Parameter(std::string name, Shape full_shape, Tensor data, bool weight_decay);

  const std::string& name() const { return name_; }
  const Shape& full_shape() const { return full_shape_; }
  /// This rank's values (f32 master or compute-dtype working copy, as the owner set).
  Tensor& data() { return data_; }
  const Tensor& data() const { return data_; }
  /// The gradient, same shape/device as data; allocated by allocate_grad().
  Tensor& grad() { return grad_; }
  const Tensor& grad() const { return grad_; }
  /// Whether AdamW applies weight decay (matrices yes; biases, norm gains no).
  bool weight_decay() const { return weight_decay_; }
  ParamLayout& layout() { return layout_; }
  const ParamLayout& layout() const { return layout_; }

  /// Replaces the storage (e.g. by a view into a flat buffer); the shape must match.
  void set_data(Tensor t);
  void set_grad(Tensor t);
  /// Allocates a zeroed gradient like data, unless one is already set.
  void allocate_grad();
  void zero_grad();

  /// How many backward contributions make one complete gradient per
  /// micro-batch (2 for a weight tied between embedding and output head).
  void set_uses(int uses) { uses_ = uses; }
  int uses() const { return uses_; }
  /// Called by a module when it has finished accumulating its contribution;
  /// after the last of `uses()` contributions, the grad-ready hook runs.
  void mark_grad_ready();
  void set_grad_ready_hook(GradReadyHook hook) { hook_ = std::move(hook); }

  /// Prefixes the name ("weight" -> "h.0.attn.c_attn.weight"); used when a
  /// module is registered into its parent.
  void add_name_prefix(const std::string& prefix) { name_ = prefix + name_; }

 private:
  std::string name_;
  Shape full_shape_;
  Tensor data_;
  Tensor grad_;
  bool weight_decay_;
  ParamLayout layout_;
  int uses_ = 1;
  int contributions_ = 0;
  GradReadyHook hook_;
};

}  // namespace ht::nn
