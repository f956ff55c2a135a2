// ht::nn::Module: hooks, parameter registry and naming.
#include "ht/nn/module.h"

#include <unordered_set>

#include "ht/nn/tensor_parallel.h"

namespace ht::nn {

Tensor Module::forward(Context& ctx, const Tensor& x) { return forward(ctx, x, {}); }

Tensor Module::forward(Context& ctx, const Tensor& x, const std::vector<Tensor>& more) {
  if (pre_forward_) pre_forward_(*this, ctx);
  if (ctx.saving())
    for (auto& p : params_) p->note_forward();
  Tensor y;
  if (recompute_ == Recompute::kFull && ctx.saving()) {
    // Full recomputation: the forward saves nothing (its intermediate
    // tensors go as soon as the next op has read them); only the inputs are
    // kept, marked, for backward to run the forward again from.
    Context scratch = ctx.fresh(/*save_for_backward=*/false);
    y = run_forward_impl(scratch, x, more);
    std::vector<Tensor> inputs{x};
    inputs.insert(inputs.end(), more.begin(), more.end());
    ctx.save_input_for_recompute(this, std::move(inputs));
  } else {
    y = run_forward_impl(ctx, x, more);
  }
  if (post_forward_) post_forward_(*this, ctx);
  return y;
}

Tensor Module::run_forward_impl(Context& ctx, const Tensor& x, const std::vector<Tensor>& more) {
  ctx.set_call_inputs(this, more);
  Tensor y = forward_impl(ctx, x);
  HT_CHECK(!ctx.has_call_inputs(this), ErrorKind::kNotSupported,
           "module '{}' was given {} further input(s), but its forward takes one: write it forward-only with "
           "compute_with(x, more) (nn/module.h)",
           name_, ctx.take_call_inputs(this).size());
  return y;
}

Tensor Module::backward(Context& ctx, const Tensor& dy) {
  if (pre_backward_) pre_backward_(*this, ctx);
  Tensor dx;
  if (ctx.recomputes(this)) {
    // After the pre-backward hook (ZeRO-3 has gathered the unit): the
    // forward again, from the kept input, saving into a context of its own
    // that carries the micro-batch's side inputs; then backward through it.
    // The re-run's output is not needed, only what it saved. The forward ops
    // are deterministic, so backward_impl reads the very bits a saving
    // forward would have kept.
    const std::vector<Tensor> inputs = ctx.saved(this);
    const std::vector<Tensor> more(inputs.begin() + 1, inputs.end());
    Context again = ctx.fresh(/*save_for_backward=*/true);
    (void)run_forward_impl(again, inputs.at(0), more);
    dx = backward_impl(again, dy);
    if (!more.empty()) ctx.put_call_input_grads(this, again.take_call_input_grads(this));
  } else {
    dx = backward_impl(ctx, dy);
  }
  ctx.pop(this);
  if (post_backward_) post_backward_(*this, ctx);
  return dx;
}

Var Module::compute(const Var& /*x*/) {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "module '{}' says nothing of how it computes from one input: define compute(const Var& x) (forward only; "
           "see nn/module.h), or override both forward_impl and backward_impl; a module of several inputs "
           "(compute_with) is called with them, m(x, {{more}})",
           name_);
  return {};
}

Var Module::compute_with(const Var& x, const std::vector<Var>& more) {
  HT_CHECK(more.empty(), ErrorKind::kNotSupported,
           "module '{}' was given {} further input(s), but it computes from one: define compute_with(x, more) to "
           "take them (nn/module.h)",
           name_, more.size());
  return compute(x);
}

Tensor Module::forward_impl(Context& ctx, const Tensor& x) {
  const std::vector<Tensor> more = ctx.take_call_inputs(this);
  auto tape = std::make_shared<Tape>(ctx);
  const Var in = tape->input(x);
  std::vector<Var> more_vars;
  for (const Tensor& t : more) more_vars.push_back(tape->more_input(t));
  const Var y = more.empty() ? compute(in) : compute_with(in, more_vars);
  HT_CHECK(y.defined(), ErrorKind::kInvalidArgument, "module '{}': compute() returned no value", name_);
  if (!tape->more_output_values().empty()) ctx.put_more_outputs(this, tape->more_output_values());
  if (ctx.saving()) {
    tape->set_output(y);
    ctx.save_tape(this, tape);
  }
  return y.tensor();
}

Tensor Module::backward_impl(Context& ctx, const Tensor& dy) {
  HT_CHECK(ctx.holds(this), ErrorKind::kInvalidArgument,
           "backward of module '{}' found no recorded forward in this context: a module that overrides forward_impl "
           "must override backward_impl too (or neither, and define compute()); and backward follows a forward in "
           "the same Context, created with save_for_backward = true",
           name_);
  const std::shared_ptr<Tape> tape = ctx.tape(this);
  Tensor dx = tape->backward(ctx, dy, ctx.take_more_output_grads(this));
  if (tape->more_inputs() > 0) ctx.put_call_input_grads(this, tape->take_more_grads());
  return dx;
}

void Module::set_recompute(Recompute mode) {
  recompute_ = mode;
  for (auto& c : children_) c->set_recompute(mode == Recompute::kFull ? Recompute::kNone : mode);
}

Parameter& Module::add_parameter(const std::string& name, const Shape& shape, bool weight_decay, Device device,
                                 const ParamLayout& layout, const Init& init) {
  Tensor data = Tensor::empty(tp_part_shape(shape, layout), DType::kF32, device, MemCategory::kParameters);
  params_.push_back(std::make_unique<Parameter>(name, shape, std::move(data), weight_decay));
  params_.back()->layout() = layout;
  params_.back()->set_init(init);
  return *params_.back();
}

void Module::adopt(std::unique_ptr<Module> child) {
  // The child's parameters and descendants get its name before theirs; the
  // child's own path is its name already.
  if (!child->name_.empty()) {
    const std::string prefix = child->name_ + ".";
    for (auto& p : child->params_) p->add_name_prefix(prefix);
    for (auto& c : child->children_) c->prefix_names(prefix);
  }
  children_.push_back(std::move(child));
}

void Module::prefix_names(const std::string& prefix) {
  path_ = prefix + path_;
  for (auto& p : params_) p->add_name_prefix(prefix);
  for (auto& c : children_) c->prefix_names(prefix);
}

void Module::collect(std::vector<Parameter*>& out) {
  for (auto& p : params_) out.push_back(p.get());
  for (auto& c : children_) c->collect(out);
  for (Parameter* p : shared_) out.push_back(p);
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> all;
  collect(all);
  std::vector<Parameter*> unique;
  std::unordered_set<Parameter*> seen;
  for (Parameter* p : all)
    if (seen.insert(p).second) unique.push_back(p);
  return unique;
}

std::vector<Module*> Module::children() {
  std::vector<Module*> out;
  for (auto& c : children_) out.push_back(c.get());
  return out;
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (Parameter* p : parameters()) n += shape_numel(p->full_shape());
  return n;
}

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

void Module::discard_grads() {
  for (Parameter* p : parameters()) p->discard_grad();
}

}  // namespace ht::nn
