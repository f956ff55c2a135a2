// ht::nn::Module: forward and backward, named parameters, hooks.
//
// A module says how it computes in one of two ways:
//   - forward-only: it defines compute(const Var& x), built from the ops of
//     functional.h and calls of its children (child(x)); its backward comes
//     from the tape that compute() recorded (tape.h). A few lines, like a
//     PyTorch module's forward:
//         Var compute(const Var& x) override { return x + mlp_(norm_(x)); }
//     A module of several inputs (a decoder block: its state and the
//     encoder's memory) defines compute_with(x, more) instead, and its
//     caller calls it as child(x, {memory}); every input gets its gradient.
//   - explicit: it overrides forward_impl(ctx, x) and backward_impl(ctx, dy)
//     and saves what backward reads in the Context itself (the bundled
//     layers, for speed and fused kernels).
// forward(ctx, x) and backward(ctx, dy) are non-virtual: they run the hooks
// and call the virtual forward_impl / backward_impl. Hooks are how parallel
// wrappers reach in without the model knowing: ZeRO-3 gathers a unit's
// parameters in a pre-forward / pre-backward hook and frees them after;
// data parallelism starts bucketed reductions from each Parameter's
// grad-ready hook while the rest of backward runs.
//
// backward() accumulates into parameter gradients (+=), or overwrites a
// gradient discarded since its last use (Parameter::discard_grad), and
// returns the gradient of the input (freshly allocated: the caller may write
// into it; undefined for an integer input such as token ids). It never
// writes into dy, which may be shared with other gradients.
//
// Activation recomputation (nn::Recompute; Megatron's
// --recompute-granularity, PyTorch's torch.utils.checkpoint for kFull) is a
// property of a module, set by set_recompute:
//   kNone       the module keeps what its backward reads.
//   kSelective  the attention modules (CausalSelfAttention, SelfAttention)
//               keep q, k, v (and the key mask) only; their backward runs
//               the attention forward again for its output and log-sum-exp
//               (what depends on the T^2 softmax), about one activation of
//               the block's width less per layer for one attention forward
//               more. Other modules keep what they keep under kNone.
//   kFull       forward() keeps only the input (forward_impl runs in a
//               non-saving Context) and backward() runs forward_impl again
//               from it, saving, in a fresh Context that carries the same
//               side inputs, right before backward_impl: one forward more,
//               for the module's activations reduced to its input.
// The re-run calls forward_impl, not forward: the module's own
// pre-/post-forward hooks fire once per forward as before, and the re-run
// sits between the pre-backward hook (where ZeRO-3 gathers the unit) and
// the post-backward one (where it frees it), so the parameters are there
// when it reads them. Any module can be recomputed so, a program's own ones
// included; an inference Context (saving() false) changes nothing. Side
// inputs reach the re-run; one that a recomputed module sets itself stays
// inside it (set side inputs in the model, above the recomputed modules).
// Recomputation changes no bits: the forward ops are deterministic, so a
// backward reads the very tensors it would have kept (recompute_test).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ht/nn/context.h"
#include "ht/nn/parameter.h"
#include "ht/nn/model_spec.h"  // nn::Recompute
#include "ht/nn/tape.h"

namespace ht::nn {

class Module {
 public:
  using Hook = std::function<void(Module&, Context&)>;

  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Tensor forward(Context& ctx, const Tensor& x);
  /// The forward on x and further inputs `more` (a decoder block's encoder
  /// memory): a forward-only module reads them in compute(x, more); a
  /// module that takes none refuses them by name. Backward returns x's
  /// gradient and leaves theirs in ctx (Context::take_call_input_grads).
  Tensor forward(Context& ctx, const Tensor& x, const std::vector<Tensor>& more);
  Tensor backward(Context& ctx, const Tensor& dy);

  /// A forward-only step of the calling module's compute(): this module's
  /// forward on x, recorded on x's tape (Tape::call).
  Var operator()(const Var& x) { return x.tape().call(*this, x); }
  /// The same with further inputs, Vars of the same tape; their gradients
  /// flow back through the tape too.
  Var operator()(const Var& x, const std::vector<Var>& more) { return x.tape().call(*this, x, more); }

  /// The module's own name within its parent ("attn"); parameters carry full names.
  const std::string& name() const { return name_; }
  /// The names from the model down to this module ("h.3.attn"), as its
  /// parameters' names start: stable across layouts (keys dropout's draws).
  const std::string& path() const { return path_; }
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

  /// Activation recomputation for this module and its descendants; takes
  /// effect from the next forward (a forward's backward does what that
  /// forward prepared, whatever the mode is by then). The default:
  ///   kFull      this module keeps only its input and recomputes; its
  ///              descendants kNone (the re-run saves everything it needs);
  ///   kSelective this module and its descendants kSelective (modules with a
  ///              selective form, the attention modules, use it; others
  ///              save as under kNone);
  ///   kNone      this module and its descendants kNone.
  /// A module overrides it to adapt its parts (an attention module tells
  /// its output projection not to keep its input; nn::Model applies the
  /// mode to its parts, never to itself: see model.h). Call it between
  /// steps, not while a forward's backward is pending.
  virtual void set_recompute(Recompute mode);
  /// The mode set on this module itself (kNone by default).
  Recompute recompute() const { return recompute_; }

  void set_pre_forward_hook(Hook h) { pre_forward_ = std::move(h); }
  void set_post_forward_hook(Hook h) { post_forward_ = std::move(h); }
  void set_pre_backward_hook(Hook h) { pre_backward_ = std::move(h); }
  void set_post_backward_hook(Hook h) { post_backward_ = std::move(h); }

 protected:
  /// A forward-only module's computation (see the top): ops on Vars and
  /// calls of children. Called by the default forward_impl, on a tape that
  /// records when the context saves. Throws kNotSupported by default: a
  /// module defines compute(), or forward_impl and backward_impl.
  virtual Var compute(const Var& x);
  /// A forward-only module of several inputs: x and `more`, in the order
  /// the caller gave them (operator()(x, more)). Called by the default
  /// forward_impl when there are further inputs; refuses them by default
  /// (a module of one input defines compute(x) alone).
  virtual Var compute_with(const Var& x, const std::vector<Var>& more);
  /// The forward: by default compute() (or compute_with() given further
  /// inputs, which it takes from ctx) on a tape kept in ctx.
  virtual Tensor forward_impl(Context& ctx, const Tensor& x);
  /// The backward: by default the tape forward_impl kept, walked back.
  virtual Tensor backward_impl(Context& ctx, const Tensor& dy);

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
  /// add_module without the child's name before its parameters' (a part
  /// that is itself a whole model's piece: nn::ModelChunks).
  void add_module_keeping_names(std::unique_ptr<Module> child) { children_.push_back(std::move(child)); }

 private:
  /// forward_impl with `more` passed through ctx; refuses them when it did
  /// not take them.
  Tensor run_forward_impl(Context& ctx, const Tensor& x, const std::vector<Tensor>& more);
  void adopt(std::unique_ptr<Module> child);
  void collect(std::vector<Parameter*>& out);
  void prefix_names(const std::string& prefix);

  std::string name_;
  std::string path_ = name_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<Parameter*> shared_;
  std::vector<std::unique_ptr<Module>> children_;
  Recompute recompute_ = Recompute::kNone;
  Hook pre_forward_, post_forward_, pre_backward_, post_backward_;
};

}  // namespace ht::nn
