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
#include "ht/nn/init.h"

namespace ht::nn {

struct ParamLayout {
  /// Dimension split across the tensor-parallel group, or -1 if replicated there.
  int tp_split_dim = -1;
  int tp_rank = 0;
  int tp_size = 1;
  /// The split dimension is made of this many equal stacked pieces, each
  /// split over tp on its own (3 for GPT-2's packed [Q | K | V]).
  int tp_parts = 1;
  bool tp_split() const { return tp_split_dim >= 0 && tp_size > 1; }
  /// A copy of a weight that an earlier pipeline stage also holds (the
  /// output head's tied embedding on the last stage): its gradient is summed
  /// with the other copies' before the data-parallel reduction and it is
  /// counted and saved once, by the first holder. Set by the parallel layer
  /// from the model's nn::Model::tied_weights().
  bool pp_tied_copy = false;
};

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&)>;

  Parameter(std::string name, Shape full_shape, Tensor data, bool weight_decay);

  const std::string& name() const { return name_; }
  const Shape& full_shape() const { return full_shape_; }
  /// The shape of this rank's tensor: the full shape unless tensor-parallel.
  const Shape& shape() const { return shape_; }
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
  /// How the first values are drawn (see init.h); set by the creating module.
  const Init& init() const { return init_; }
  void set_init(const Init& init) { init_ = init; }
  /// The values this rank's part starts from under `seed`: init_full(init(),
  /// full_shape(), name(), seed) cut to layout(), as a new host f32 tensor.
  Tensor initial_value(std::uint64_t seed) const;

  /// Replaces the storage (e.g. by a view into a flat buffer); the element count must match shape().
  void set_data(Tensor t);
  void set_grad(Tensor t);
  /// Drops the values (ZeRO-3 between uses) or the gradient (sharded
  /// gradients between steps); set_data / set_grad give them back.
  void release_data() { data_ = Tensor(); }
  void release_grad() { grad_ = Tensor(); }
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
  Shape shape_;
  Tensor data_;
  Tensor grad_;
  bool weight_decay_;
  ParamLayout layout_;
  Init init_;
  int uses_ = 1;
  int contributions_ = 0;
  GradReadyHook hook_;
};

}  // namespace ht::nn
