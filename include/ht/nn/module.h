// ht::nn::Module: explicit forward and backward, named parameters, hooks.
//
// forward(ctx, x) and backward(ctx, dy) are non-virtual: they run the hooks
// and call the virtual forward_impl / backward_impl. Hooks are how parallel
// wrappers reach in without the model knowing: ZeRO-3 gathers a unit's
// parameters in a pre-forward / pre-backward hook and frees them after;
// data parallelism starts bucketed reductions from each Parameter's
// grad-ready hook while the rest of backward runs.
//
// backward() accumulates into parameter gradients (+=), or overwrites a
// gradient discarded since its last use (Parameter::discard_grad), and
// returns the gradient of the input (overwritten, freshly allocated).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ht/nn/context.h"
#include "ht/nn/parameter.h"

namespace ht::nn {

class Module {
 public:
  using Hook = std::function<void(Module&, Context&)>;

  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Tensor forward(Context& ctx, const Tensor& x);
  Tensor backward(Context& ctx, const Tensor& dy);

  /// The module's own name within its parent ("attn"); parameters carry full names.
  const std::string& name() const { return name_; }
  /// This module's and its descendants' parameters in registration order,
  /// each once (a tied weight appears where it was first registered).
  std::vector<Parameter*> parameters();
  /// Direct children in registration order.
  std::vector<Module*> children();
  /// Total element count of all parameters (full shapes).
  std::int64_t num_parameters();
  /// Parameter::zero_grad() of every parameter.
  void zero_grad();
  /// Parameter::discard_grad() of every parameter: the next backward
  /// overwrites the gradients instead of adding to zeros.
  void discard_grads();

  void set_pre_forward_hook(Hook h) { pre_forward_ = std::move(h); }
  void set_post_forward_hook(Hook h) { post_forward_ = std::move(h); }
  void set_pre_backward_hook(Hook h) { pre_backward_ = std::move(h); }
  void set_post_backward_hook(Hook h) { post_backward_ = std::move(h); }

 protected:
  virtual Tensor forward_impl(Context& ctx, const Tensor& x) = 0;
  virtual Tensor backward_impl(Context& ctx, const Tensor& dy) = 0;

  /// Creates a parameter of full shape `shape` (uninitialised data on
  /// `device`, no gradient yet) whose first values `init` draws; a
  /// tensor-parallel `layout` makes its data this rank's part (see
  /// tensor_parallel.h).
  Parameter& add_parameter(const std::string& name, const Shape& shape, bool weight_decay, Device device,
                           const ParamLayout& layout = {}, const Init& init = Init::zeros());
  /// Adopts a child; its parameters' names get the prefix "<name>." (none
  /// for a child with an empty name).
  template <typename M>
  M& add_module(std::unique_ptr<M> child) {
    M& ref = *child;
    adopt(std::move(child));
    return ref;
  }
  /// Uses a parameter owned by another module (a tied weight).
  void use_shared_parameter(Parameter& p) { shared_.push_back(&p); }

 private:
  void adopt(std::unique_ptr<Module> child);
  void collect(std::vector<Parameter*>& out);
  void prefix_names(const std::string& prefix);

  std::string name_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<Parameter*> shared_;
  std::vector<std::unique_ptr<Module>> children_;
  Hook pre_forward_, post_forward_, pre_backward_, post_backward_;
};

}  // namespace ht::nn
