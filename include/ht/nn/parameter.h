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
#include <utility>

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
  /// A routed expert's (nn::MoE): under expert parallelism only the ranks
  /// of one expert-parallel coordinate hold it, and its gradient is reduced
  /// over the expert-data-parallel group (comm::DeviceMesh::edp_group).
  bool expert = false;
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
  /// After discard_grad() and before this step's first contribution, the
  /// first access zeroes it: whoever reads or adds to it sees zeros.
  Tensor& grad() {
    settle_grad();
    return grad_;
  }
  const Tensor& grad() const {
    settle_grad();
    return grad_;
  }
  /// Whether AdamW applies weight decay (matrices yes; biases, norm gains no).
  bool weight_decay() const { return weight_decay_; }
  ParamLayout& layout() { return layout_; }
  const ParamLayout& layout() const { return layout_; }
  /// How the first values are drawn (see init.h); set by the creating module.
  const Init& init() const { return init_; }
  void set_init(const Init& init) { init_ = init; }
  /// The values this rank's part starts from under `seed`: init_full(init(),
  /// full_shape(), name(), seed) with the padding rows (see real_rows) set
  /// to zero, cut to layout(), as a new host f32 tensor.
  Tensor initial_value(std::uint64_t seed) const;
  /// A padded vocabulary matrix (embedding, output head): only the first
  /// real_rows() rows of the full shape are real; the rest start at zero and
  /// get no gradient, so they stay zero (weight decay keeps a zero at zero).
  /// Checkpoints store the full, padded shape. -1: no padding.
  void set_real_rows(std::int64_t rows) { real_rows_ = rows; }
  std::int64_t real_rows() const { return real_rows_ >= 0 ? real_rows_ : full_shape_.at(0); }

  /// Replaces the storage (e.g. by a view into a flat buffer); the element count must match shape().
  void set_data(Tensor t);
  void set_grad(Tensor t);
  /// Drops the values (ZeRO-3 between uses) or the gradient (sharded
  /// gradients between steps); set_data / set_grad give them back.
  void release_data() { data_ = Tensor(); }
  void release_grad() { grad_ = Tensor(); }
  /// Allocates a zeroed gradient like data, unless one is already set.
  void allocate_grad();
  /// Zeroes the gradient now and restarts the contribution count.
  void zero_grad();
  /// Starts a new step's gradient without touching its memory: the first
  /// contribution then overwrites it (begin_grad_write() returns beta 0),
  /// and a first access through grad() zeroes it, so a parameter that gets
  /// no contribution reads as zero. Restarts the contribution count. This
  /// is what the parallel layer calls before each step: zeroing a gradient
  /// that a GEMM is about to overwrite costs a pass over it (1-2 % of a CPU
  /// step; see docs/benchmarks.md).
  void discard_grad();
  /// Whether the gradient holds no contribution since discard_grad().
  bool grad_discarded() const { return discarded_; }
  /// Starts one backward contribution written by an op that can overwrite
  /// (a GEMM's beta): allocates the gradient if needed and returns the beta
  /// to write it with: 0 for the step's first contribution after
  /// discard_grad() (the writer must then write every element), else 1
  /// (add). Write into raw_grad(); end with mark_grad_ready(). Ops that can
  /// only add use grad(), which zeroes a discarded gradient first.
  float begin_grad_write();
  /// The gradient's storage as it is, never zeroed on access: for the
  /// writer after begin_grad_write(), and for code that knows it is settled.
  Tensor& raw_grad() { return grad_; }

  /// How many backward contributions make one complete gradient per
  /// micro-batch (2 for a weight tied between embedding and output head,
  /// or for a module called twice in one forward).
  void set_uses(int uses) { uses_ = uses; }
  int uses() const { return uses_; }
  /// Counts the saving forwards of the module that owns it (Module::forward),
  /// so the engine can refuse a module called more often per micro-batch
  /// than uses() says (its gradient would be reduced after the first
  /// call's contribution); take_forwards() returns the count and resets it.
  void note_forward() { ++forwards_; }
  std::int64_t take_forwards() { return std::exchange(forwards_, 0); }
  /// Called by a module when it has finished accumulating its contribution;
  /// after the last of `uses()` contributions, the grad-ready hook runs.
  void mark_grad_ready();
  void set_grad_ready_hook(GradReadyHook hook) { hook_ = std::move(hook); }

  /// Prefixes the name ("weight" -> "h.0.attn.c_attn.weight"); used when a
  /// module is registered into its parent.
  void add_name_prefix(const std::string& prefix) { name_ = prefix + name_; }

 private:
  // The lazy zeroing of a discarded gradient is invisible to readers (it
  // reads as zero either way), so const access may perform it.
  void settle_grad() const;

  std::string name_;
  Shape full_shape_;
  Shape shape_;
  Tensor data_;
  mutable Tensor grad_;
  mutable bool discarded_ = false;
  bool weight_decay_;
  ParamLayout layout_;
  Init init_;
  std::int64_t real_rows_ = -1;
  int uses_ = 1;
  int contributions_ = 0;
  std::int64_t forwards_ = 0;
  GradReadyHook hook_;
};

}  // namespace ht::nn
