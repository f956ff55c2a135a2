// ht::nn::Tape: recording a forward-only module's run and walking it backwards.
#include "ht/nn/tape.h"

#include "ht/nn/module.h"
#include "ht/ops/elementwise.h"

namespace ht::nn {
namespace {

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

Tape& Var::tape() const {
  HT_CHECK(tape_ != nullptr, ErrorKind::kInvalidArgument,
           "this Var belongs to no tape: Vars come from compute()'s input, a Tape, or ops on such Vars");
  return *tape_;
}

bool Var::requires_grad() const { return tape_ != nullptr && tape_->needs_grad(*this); }

bool Tape::needs_grad(const Var& v) const {
  return v.node_ >= 0 && nodes_[std::size_t(v.node_)].requires_grad;
}

Var Tape::add(Node node, Tensor value) {
  if (!recording_) return Var(std::move(value), this, -1);
  node.shape = value.shape();
  node.dtype = value.dtype();
  node.device = value.device();
  nodes_.push_back(std::move(node));
  return Var(std::move(value), this, int(nodes_.size()) - 1);
}

Var Tape::input(const Tensor& x) {
  HT_CHECK(input_ < 0, ErrorKind::kInvalidArgument, "a tape has one input; this one has it already");
  Node n;
  n.kind = Kind::kInput;
  n.requires_grad = is_floating(x.dtype());
  Var v = add(std::move(n), x);
  input_ = v.node_;
  return v;
}

Var Tape::more_input(const Tensor& t) {
  Node n;
  n.kind = Kind::kInput;
  n.requires_grad = is_floating(t.dtype());
  Var v = add(std::move(n), t);
  more_inputs_.push_back(v.node_);
  return v;
}

Var Tape::constant(const Tensor& t) { return Var(t, this, -1); }

Var Tape::parameter(Parameter& p) {
  HT_CHECK(p.data().defined(), ErrorKind::kInvalidArgument,
           "parameter '{}' holds no values here (ZeRO-3 frees a unit's parameters outside its forward and backward): "
           "read a parameter only in the compute() of the module that owns it",
           p.name());
  Node n;
  n.kind = Kind::kParameter;
  n.parameter = &p;
  n.requires_grad = true;
  return add(std::move(n), p.data());
}

Var Tape::side_input(const std::string& name) {
  const Tensor* t = ctx_.side_input(name);
  HT_CHECK(t != nullptr, ErrorKind::kInvalidArgument,
           "side input '{}' is not in this micro-batch: give it with the data (data::MicroBatch::side[\"{}\"]), or, "
           "when driving the module yourself, with Context::set_side_input",
           name, name);
  return constant(*t);
}

Var Tape::call(Module& m, const Var& x) { return call(m, x, {}); }

Var Tape::call(Module& m, const Var& x, const std::vector<Var>& more) {
  HT_CHECK(x.tape_ == this, ErrorKind::kInvalidArgument,
           "module '{}' was called on a Var of another module's tape: pass it the values of this compute()", m.name());
  std::vector<Tensor> more_tensors;
  // The child runs its backward whenever it has parameters (their
  // gradients and hooks) or an input needs a gradient.
  bool needs = needs_grad(x) || !m.parameters().empty();
  Node n;
  n.kind = Kind::kCall;
  n.inputs = {x.node_};
  for (const Var& v : more) {
    HT_CHECK(v.tape_ == this, ErrorKind::kInvalidArgument,
             "module '{}' was given a further input of another module's tape: pass it the values of this compute()",
             m.name());
    more_tensors.push_back(v.tensor());
    n.inputs.push_back(v.node_);
    needs = needs || needs_grad(v);
  }
  Tensor y = m.forward(ctx_, x.tensor(), more_tensors);
  HT_CHECK(ctx_.take_more_outputs(&m).empty(), ErrorKind::kNotSupported,
           "module '{}' added further outputs (Tape::add_output), which only a model's pipeline stage may: return "
           "one value from a module called in compute()",
           m.name());
  n.module = &m;
  n.requires_grad = needs;
  return add(std::move(n), std::move(y));
}

Var Tape::record(Tensor out, const std::vector<Var>& inputs, std::vector<Tensor> saved, Backward backward) {
  Node n;
  n.saved = std::move(saved);
  n.backward = std::move(backward);
  for (const Var& v : inputs) {
    HT_CHECK(v.tape_ == this, ErrorKind::kInvalidArgument,
             "an op mixes Vars of two tapes: a module's compute() may combine only its own values");
    n.inputs.push_back(v.node_);
    n.requires_grad = n.requires_grad || needs_grad(v);
  }
  if (!n.requires_grad) return Var(std::move(out), this, -1);
  return add(std::move(n), std::move(out));
}

void Tape::set_output(const Var& out) {
  HT_CHECK(out.tape_ == this, ErrorKind::kInvalidArgument, "compute() returned a Var of another tape");
  output_ = out.node_;
}

void Tape::add_output(const Var& v) {
  HT_CHECK(v.tape_ == this, ErrorKind::kInvalidArgument, "add_output: a Var of another tape");
  more_outputs_.push_back(v.node_);
  more_output_values_.push_back(v.tensor());
}

Tensor Tape::zeros_like(const Node& n) const { return Tensor::zeros(n.shape, n.dtype, n.device); }

void Tape::accumulate(std::vector<Tensor>& grads, int node, const Tensor& g) const {
  Tensor& slot = grads[std::size_t(node)];
  if (!slot.defined()) {
    slot = g;  // possibly shared with other nodes' gradients: never written into
    return;
  }
  Tensor sum = Tensor::empty(slot.shape(), slot.dtype(), slot.device(), MemCategory::kActivations);
  ops::add(slot, g, sum);
  slot = std::move(sum);
}

Tensor Tape::backward(Context& ctx, const Tensor& dy, const std::vector<Tensor>& more_dys) {
  HT_CHECK(!done_, ErrorKind::kInvalidArgument, "a tape is backpropagated once; run the forward again");
  done_ = true;
  HT_CHECK(more_dys.empty() || more_dys.size() == more_outputs_.size(), ErrorKind::kInvalidArgument,
           "backward got gradients for {} further outputs of a tape that has {}", more_dys.size(),
           more_outputs_.size());
  std::vector<Tensor> grads(nodes_.size());
  if (output_ >= 0) grads[std::size_t(output_)] = dy;
  for (std::size_t i = 0; i < more_dys.size(); ++i) {
    const int node = more_outputs_[i];
    if (node >= 0 && nodes_[std::size_t(node)].requires_grad && more_dys[i].defined())
      accumulate(grads, node, more_dys[i]);
  }
  for (int i = int(nodes_.size()) - 1; i >= 0; --i) {
    Node& n = nodes_[std::size_t(i)];
    Tensor g = std::move(grads[std::size_t(i)]);
    switch (n.kind) {
      case Kind::kInput:
        if (g.defined()) grads[std::size_t(i)] = std::move(g);  // kept: the module's dx
        continue;
      case Kind::kParameter: {
        Parameter& p = *n.parameter;
        if (g.defined()) {
          if (p.begin_grad_write() == 0.f)
            p.raw_grad().copy_from(g);
          else
            ops::add(p.raw_grad(), g, p.raw_grad());
        }
        p.allocate_grad();  // zeros when nothing reached it: the hooks read it
        p.mark_grad_ready();
        continue;
      }
      case Kind::kCall: {
        if (!n.requires_grad) continue;
        // A child whose output got no gradient still runs its backward: its
        // parameters' hooks and ZeRO-3's reductions wait for it.
        const Tensor dx = n.module->backward(ctx, g.defined() ? g : zeros_like(n));
        if (n.inputs[0] >= 0 && nodes_[std::size_t(n.inputs[0])].requires_grad && dx.defined())
          accumulate(grads, n.inputs[0], dx);
        if (n.inputs.size() > 1) {
          const std::vector<Tensor> more = ctx.take_call_input_grads(n.module);
          for (std::size_t k = 1; k < n.inputs.size(); ++k) {
            const int in = n.inputs[k];
            if (in >= 0 && nodes_[std::size_t(in)].requires_grad && k - 1 < more.size() && more[k - 1].defined())
              accumulate(grads, in, more[k - 1]);
          }
        }
        continue;
      }
      case Kind::kOp: {
        if (!g.defined()) break;
        std::vector<bool> needs;
        for (int in : n.inputs) needs.push_back(in >= 0 && nodes_[std::size_t(in)].requires_grad);
        const std::vector<Tensor> dins = n.backward(ctx, g, n.saved, needs);
        HT_CHECK(dins.size() == n.inputs.size(), ErrorKind::kInternal,
                 "a tape op's backward gave {} gradients for {} inputs", dins.size(), n.inputs.size());
        for (std::size_t k = 0; k < dins.size(); ++k)
          if (needs[k] && dins[k].defined()) accumulate(grads, n.inputs[k], dins[k]);
        break;
      }
    }
    n.saved.clear();  // an op's activations go as soon as its backward has run
  }
  const auto gradient_of = [&](int node) {
    if (node < 0 || !nodes_[std::size_t(node)].requires_grad) return Tensor();
    return grads[std::size_t(node)].defined() ? grads[std::size_t(node)] : zeros_like(nodes_[std::size_t(node)]);
  };
  Tensor dx = gradient_of(input_);
  more_grads_.clear();
  for (int node : more_inputs_) more_grads_.push_back(gradient_of(node));
  nodes_.clear();
  // A module returns gradients of its own (Module::backward), which the
  // caller may write into; one passed through from dy (an identity, a
  // residual's skip), or one shared by two inputs (x + memory), would write
  // into another's.
  if (dx.defined() && overlaps(dx, dy)) dx = dx.clone();
  for (Tensor& g : more_grads_)
    if (g.defined() && (overlaps(g, dy) || (dx.defined() && overlaps(g, dx)))) g = g.clone();
  for (std::size_t i = 0; i < more_grads_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (more_grads_[i].defined() && more_grads_[j].defined() && overlaps(more_grads_[i], more_grads_[j]))
        more_grads_[i] = more_grads_[i].clone();
  return dx;
}

std::int64_t Tape::saved_bytes() const {
  std::int64_t total = 0;
  for (const Node& n : nodes_)
    for (const Tensor& t : n.saved) total += t.defined() ? std::int64_t(t.nbytes()) : 0;
  return total;
}

}  // namespace ht::nn
