// ht::nn::Context: what one micro-batch's forward leaves for its backward.
//
// The caller owns one Context per micro-batch in flight, so a pipeline can
// hold several at once, and what is saved is the module's choice (activation
// recomputation is saving less). A module may run several times in one
// forward (a layer shared by two places of a model): each run's tensors are
// kept, and backward, which runs in the reverse order, takes the newest
// first (Module::backward drops an entry once its backward is done). A
// module under full recomputation (module.h) keeps only its input, in an
// entry marked so (save_input_for_recompute). Not thread-safe.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ht/core/tensor.h"

namespace ht::nn {

class Module;

class Context {
 public:
  /// `save_for_backward` false: an inference pass; modules save nothing.
  explicit Context(Device device = Device::cpu(), bool save_for_backward = true)
      : device_(device), saving_(save_for_backward) {}

  Device device() const { return device_; }
  bool saving() const { return saving_; }

  /// Stores the tensors one forward run of `m` needs in backward (call it
  /// once per run; each run's entry is kept).
  void save(const Module* m, std::vector<Tensor> tensors);
  /// The tensors of `m`'s newest run not yet backpropagated; throws
  /// kInvalidArgument when there are none (backward without a forward in
  /// this context).
  const std::vector<Tensor>& saved(const Module* m) const;
  /// Drops `m`'s newest entry, if any (after its backward).
  void pop(const Module* m);
  /// saved(m), then pop(m): for a model's backward_loss, whose loss entry
  /// must be gone before backward() reads the forward's own.
  std::vector<Tensor> take(const Module* m);
  /// Stores `input` as the whole of one forward run of `m`, marked for
  /// recomputation: m's backward runs its forward again from it
  /// (Module::forward under Recompute::kFull). Nothing when not saving.
  void save_input_for_recompute(const Module* m, Tensor input);
  /// Whether `m`'s newest entry is one of save_input_for_recompute's
  /// (false when there is none).
  bool recomputes(const Module* m) const;
  /// A new context on the same device, saving or not, carrying this one's
  /// side inputs and nothing saved: where a full recomputation runs a
  /// module's forward (without saving) and, in backward, again (saving).
  Context fresh(bool save_for_backward) const {
    Context c(device_, save_for_backward);
    c.side_ = side_;
    return c;
  }
  /// Drops everything saved and the side inputs (frees activations once backward is done).
  void clear() {
    saved_.clear();
    side_.clear();
  }
  /// Bytes held by saved tensors (views of one storage counted per view).
  std::int64_t saved_bytes() const;

  /// Side inputs of the micro-batch that layers deep inside a model read
  /// (a padding mask: "key_mask"), set by the model before its forward.
  void set_side_input(const std::string& name, Tensor t) { side_[name] = std::move(t); }
  /// The side input `name`, or null.
  const Tensor* side_input(const std::string& name) const {
    const auto it = side_.find(name);
    return it == side_.end() ? nullptr : &it->second;
  }

 private:
  Device device_;
  bool saving_;
  struct Entry {
    std::vector<Tensor> tensors;
    bool recompute = false;  // tensors = {input}: backward runs the forward again
  };
  std::unordered_map<const Module*, std::vector<Entry>> saved_;  // a stack per module
  std::unordered_map<std::string, Tensor> side_;
};

}  // namespace ht::nn
