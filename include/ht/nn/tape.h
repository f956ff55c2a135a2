// ht::nn::Tape and ht::nn::Var: the backward of a forward-only module,
// derived from a record of its forward (reverse-mode automatic
// differentiation over the library's ops, as PyTorch's autograd).
//
// A module that defines compute(const Var& x) instead of forward_impl and
// backward_impl (module.h) gets its backward from a Tape: Module's default
// forward_impl wraps its input in a Var, runs compute(), and keeps what was
// recorded in the micro-batch's Context (one tape per run); its default
// backward_impl walks the tape backwards. Each op of functional.h and each
// call of a child module (Module::operator()) appends a node: the inputs it
// read, the tensors its backward needs, and how to compute its inputs'
// gradients from its output's. A child module's node calls the child's own
// backward, so hand-written layers (Linear, SelfAttention, tensor-parallel
// ones) keep their speed and their collectives, ZeRO-3's gather and free
// hooks fire around them, zero-bubble pipelines defer their weight GEMMs,
// and activation recomputation of the module or of its children works as
// for any module (a recomputed forward records a fresh tape).
//
// Recording happens only when the Context saves for backward; otherwise
// (inference, and the forward a full recomputation does without saving)
// every Var is a plain value and nothing is kept.
//
// Backward visits the nodes in reverse order. A Var read by several ops
// gets the sum of their gradients (out of place: a gradient may be shared
// by several nodes, so none is ever written into). A parameter read through
// Tape::parameter gets its gradient added to Parameter::grad and is marked
// ready (Parameter::mark_grad_ready) once per backward of the tape, even if
// no gradient reached it (its hooks, which data parallelism waits for, must
// fire). A child whose output received no gradient still runs its backward,
// with zeros, for the same reason. Gradients follow the sums' order of the
// forward's reverse, so a tape's gradients are bit-for-bit those of a
// hand-written backward that sums in the same order.
//
// Not thread-safe. A Var refers to its tape, which lives as long as the run
// that recorded it (until its backward, or the end of the forward when not
// recording); do not keep Vars beyond compute().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/tensor.h"
#include "ht/nn/context.h"
#include "ht/nn/parameter.h"

namespace ht::nn {

class Module;
class Tape;

/// A value of a forward-only module's computation: a tensor and its place
/// on the tape that records it (none: a constant, which gets no gradient).
class Var {
 public:
  Var() = default;

  const Tensor& tensor() const { return value_; }
  /// The tape this value belongs to (the module run's).
  Tape& tape() const;
  bool defined() const { return value_.defined(); }
  const Shape& shape() const { return value_.shape(); }
  std::int64_t size(int d) const { return value_.size(d); }
  int ndim() const { return value_.ndim(); }
  DType dtype() const { return value_.dtype(); }
  Device device() const { return value_.device(); }
  /// Whether backward computes a gradient for it.
  bool requires_grad() const;

 private:
  friend class Tape;
  Var(Tensor value, Tape* tape, int node) : value_(std::move(value)), tape_(tape), node_(node) {}

  Tensor value_;
  Tape* tape_ = nullptr;
  int node_ = -1;  // -1: a constant
};

class Tape {
 public:
  /// Gradients of an op's inputs from its output's gradient `dy`: one per
  /// input, in order; computed only where `needs[i]` (leave the others
  /// undefined). `saved` are the tensors the op kept; never write into dy
  /// or them. `ctx` is the context of the backward (a recomputation's own).
  using Backward = std::function<std::vector<Tensor>(Context& ctx, const Tensor& dy, const std::vector<Tensor>& saved,
                                                     const std::vector<bool>& needs)>;

  /// Records when ctx.saving().
  explicit Tape(Context& ctx) : ctx_(ctx), recording_(ctx.saving()) {}
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  bool recording() const { return recording_; }
  /// The context of the forward being recorded (its side inputs, its batch).
  Context& context() const { return ctx_; }

  /// The module's input: backward returns its gradient (a floating input;
  /// an integer one, token ids, gets none).
  Var input(const Tensor& x);
  /// A further input of the module (Module::compute_with's `more`), after
  /// input(): a floating one gets its gradient (take_more_grads).
  Var more_input(const Tensor& t);
  /// A value that gets no gradient (a mask, an index, a constant).
  Var constant(const Tensor& t);
  /// A parameter's values (Parameter::data(), the compute-dtype working
  /// copy under mixed precision); its gradient is added to p.grad().
  Var parameter(Parameter& p);
  /// The context's side input `name` as a constant; throws kInvalidArgument
  /// naming it when the micro-batch has none.
  Var side_input(const std::string& name);
  /// `m`'s forward on x (its hooks, its own saved tensors, its collectives);
  /// backward calls m.backward.
  Var call(Module& m, const Var& x);
  /// The same with further inputs (Module::forward(ctx, x, more)); backward
  /// gives each its gradient.
  Var call(Module& m, const Var& x, const std::vector<Var>& more);
  /// Appends an op: `out` is its result, `inputs` what it read (Vars of this
  /// tape), `saved` what its backward needs. When no input requires a
  /// gradient (or the tape does not record) the result is a constant and
  /// nothing is kept.
  Var record(Tensor out, const std::vector<Var>& inputs, std::vector<Tensor> saved, Backward backward);

  /// The value `out` of this tape is the module's output (called once,
  /// after compute()).
  void set_output(const Var& out);
  /// A further output, after the one compute() returns: what a model's
  /// pipeline stage sends the next stage beside it, in the order the next
  /// stage declares (nn::Model::stage_inputs). Backward seeds it with its
  /// gradient. For a model's own compute; a child module called on a tape
  /// may not add one.
  void add_output(const Var& v);
  /// The further outputs' values, in order.
  const std::vector<Tensor>& more_output_values() const { return more_output_values_; }
  /// Backpropagates `dy` (the output's gradient) and `more_dys` (the
  /// further outputs', in order; none: zeros) through the whole tape under
  /// `ctx`, and lets the saved tensors go. Returns the input's gradient
  /// (undefined for an integer input). Once.
  Tensor backward(Context& ctx, const Tensor& dy, const std::vector<Tensor>& more_dys = {});

  /// How many further inputs the module took (more_input).
  std::size_t more_inputs() const { return more_inputs_.size(); }
  /// After backward: the further inputs' gradients, in order (undefined for
  /// integer ones); once.
  std::vector<Tensor> take_more_grads() { return std::move(more_grads_); }

  /// Bytes held by the tensors the nodes keep (views counted per view).
  std::int64_t saved_bytes() const;

 private:
  friend class Var;
  enum class Kind { kInput, kParameter, kOp, kCall };
  struct Node {
    Kind kind = Kind::kOp;
    std::vector<int> inputs;  // node indices; -1: a constant
    std::vector<Tensor> saved;
    Backward backward;
    Parameter* parameter = nullptr;  // kParameter
    Module* module = nullptr;        // kCall
    Shape shape;                     // the output's
    DType dtype = DType::kF32;
    Device device = Device::cpu();
    bool requires_grad = false;
  };
  Var add(Node node, Tensor value);
  bool needs_grad(const Var& v) const;
  void accumulate(std::vector<Tensor>& grads, int node, const Tensor& g) const;
  Tensor zeros_like(const Node& n) const;

  Context& ctx_;
  bool recording_;
  std::vector<Node> nodes_;
  int input_ = -1, output_ = -1;
  std::vector<int> more_inputs_;   // node indices (-1 when not recording)
  std::vector<int> more_outputs_;  // node indices (-1: a constant, or not recording)
  std::vector<Tensor> more_output_values_;
  std::vector<Tensor> more_grads_;
  bool done_ = false;
};

}  // namespace ht::nn
