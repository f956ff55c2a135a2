// ht::parallel::Pipeline: the GPipe and 1F1B schedules.
#include "ht/parallel/pipeline.h"

#include <deque>

#include "core/clock.h"
#include "core/trace.h"
#include "ht/ops/cast.h"

namespace ht::parallel {

namespace {

// An action as the timeline names it (core/trace.h).
const char* trace_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kRecvForward: return "recv forward";
    case ActionKind::kForward: return "forward";
    case ActionKind::kSendForward: return "send forward";
    case ActionKind::kRecvBackward: return "recv backward";
    case ActionKind::kBackward: return "backward";
    case ActionKind::kSendBackward: return "send backward";
    case ActionKind::kSendForwardRecvBackward: return "send forward, recv backward";
    case ActionKind::kSendBackwardRecvForward: return "send backward, recv forward";
    case ActionKind::kBackwardInput: return "backward input";
    case ActionKind::kBackwardWeight: return "backward weight";
    case ActionKind::kSendForwardRecvForward: return "send forward, recv forward";
    case ActionKind::kSendBackwardRecvBackward: return "send backward, recv backward";
  }
  return "?";
}

}  // namespace

// One step's state: the micro-batches, their contexts in flight, the
// transfers to the neighbours and the time spent computing and waiting.
class Pipeline::Step {
 public:
  Step(Pipeline& p, const std::vector<data::MicroBatch>& batches, bool training)
      : p_(p), model_(p.model_), batches_(batches), training_(training) {
    if (!model_.first_stage()) in_shape_ = model_.stage_input_shape(batches.front().input.shape());
  }

  /// The next micro-batch's input: its own, or the previous stage's activations.
  Tensor recv_forward() {
    if (model_.first_stage()) return input(forwards_);
    Tensor x = buffer(in_shape_);
    wait(p_.pp_.recv(x, stage() - 1));
    return x;
  }
  /// Runs the forward of the next micro-batch; returns what goes to the next stage.
  Tensor forward(const Tensor& x) {
    const double t0 = now_ms();
    contexts_.emplace_back(model_.device(), training_);
    nn::Context& ctx = contexts_.back();
    const data::MicroBatch& b = batches_[std::size_t(forwards_++)];
    Tensor y;
    if (model_.last_stage())
      loss_ += model_.forward_loss(ctx, x, b.target.to(model_.device()));
    else
      y = model_.forward(ctx, x);
    out_shapes_.push_back(y.defined() ? y.shape() : Shape{});
    std::int64_t saved = 0;
    for (const nn::Context& c : contexts_) saved += c.saved_bytes();
    p_.stats_.peak_saved_bytes = std::max(p_.stats_.peak_saved_bytes, saved);
    if (!training_) {
      contexts_.pop_back();
      out_shapes_.pop_back();
    }
    p_.stats_.compute_ms += now_ms() - t0;
    return y;
  }
  // The transfers below are the table's: it has none without a neighbour
  // (a first stage's "receive" is loading its input, above).
  void send_forward(const Tensor& y) { wait(p_.pp_.send(y, stage() + 1)); }
  /// The gradient of the oldest micro-batch in flight's output.
  Tensor recv_backward() {
    Tensor dy = buffer(out_shapes_.front());
    wait(p_.pp_.recv(dy, stage() + 1));
    return dy;
  }
  Tensor send_forward_recv_backward(const Tensor& y) {
    Tensor dy = buffer(out_shapes_.front());
    wait(p_.pp_.send_recv(y, stage() + 1, dy, stage() + 1));
    return dy;
  }
  /// Backward of the oldest micro-batch in flight; returns the gradient for the previous stage.
  Tensor backward(const Tensor& dy, float loss_scale, const std::function<void(bool)>& before_backward, bool final) {
    const double t0 = now_ms();
    if (before_backward) before_backward(final);
    nn::Context& ctx = contexts_.front();
    Tensor dx = model_.last_stage() ? model_.backward_loss(ctx, loss_scale) : model_.backward(ctx, dy);
    contexts_.pop_front();
    out_shapes_.pop_front();
    p_.stats_.compute_ms += now_ms() - t0;
    return dx;
  }
  void send_backward(const Tensor& dx) { wait(p_.pp_.send(dx, stage() - 1)); }
  Tensor send_backward_recv_forward(const Tensor& dx) {
    Tensor x = buffer(in_shape_);
    wait(p_.pp_.send_recv(dx, stage() - 1, x, stage() - 1));
    return x;
  }

  double loss() const { return loss_; }

 private:
  int stage() const { return model_.stage().rank; }
  /// Micro-batch i's input on the model's device; a floating one in the
  /// compute dtype (token ids stay integers).
  Tensor input(std::int64_t i) const {
    const Tensor& in = batches_[std::size_t(i)].input;
    Tensor on_device = in.to(model_.device());
    if (!is_floating(in.dtype()) || in.dtype() == p_.activations_) return on_device;
    Tensor cast = Tensor::empty(in.shape(), p_.activations_, model_.device(), MemCategory::kActivations);
    ops::cast(on_device, cast);
    return cast;
  }
  /// A buffer for activations or their gradients arriving from a neighbour.
  Tensor buffer(const Shape& shape) const {
    return Tensor::empty(shape, p_.activations_, model_.device(), MemCategory::kActivations);
  }
  void wait(const comm::WorkPtr& w) {
    const double t0 = now_ms();
    w->wait();
    p_.stats_.idle_ms += now_ms() - t0;
  }

  Pipeline& p_;
  nn::Model& model_;
  const std::vector<data::MicroBatch>& batches_;
  bool training_;
  Shape in_shape_;  // what this stage receives (not the first stage)
  std::deque<nn::Context> contexts_;
  std::deque<Shape> out_shapes_;  // what each micro-batch in flight sent on
  std::int64_t forwards_ = 0;
  double loss_ = 0;
};

Pipeline::Pipeline(nn::Model& model, comm::Communicator& pp, Schedule schedule, DType activations)
    : model_(model), pp_(pp), schedule_(schedule), activations_(activations) {
  HT_CHECK(pp.size() == model.stage().size && pp.rank() == model.stage().rank, ErrorKind::kInvalidArgument,
           "pipeline group '{}' is rank {} of {}, but the model is stage {} of {}", pp.name(), pp.rank(), pp.size(),
           model.stage().rank, model.stage().size);
}

double Pipeline::train_step(const std::vector<data::MicroBatch>& batches, float loss_scale,
                            const std::function<void(bool)>& before_backward) {
  HT_CHECK_ARG(!batches.empty(), "pipeline: a step needs at least one micro-batch");
  stats_ = {};
  Step s(*this, batches, /*training=*/true);
  const int m = int(batches.size());
  run(s, stage_actions(schedule_, model_.stage().rank, model_.stage().size, m), [&](const Tensor& dy, int micro) {
    return s.backward(dy, loss_scale, before_backward, micro + 1 == m);
  });
  return s.loss();
}

double Pipeline::evaluate(const std::vector<data::MicroBatch>& batches) {
  if (batches.empty()) return 0;
  const PipelineStats kept = stats_;
  Step s(*this, batches, /*training=*/false);
  run(s, forward_only_actions(model_.stage().rank, model_.stage().size, int(batches.size())), nullptr);
  stats_ = kept;
  return s.loss();
}

void Pipeline::run(Step& s, const std::vector<Action>& table,
                   const std::function<Tensor(const Tensor&, int)>& backward) {
  // One tensor per slot: the input of the next forward, the output to send,
  // the gradient arriving from the next stage and the one to send back.
  Tensor x, y, dy, dx;
  for (const Action& a : table) {
    // On the timeline: computing, or waiting for a transfer (a first
    // stage's "receive" is loading its input).
    const bool computes = a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward ||
                          (a.kind == ActionKind::kRecvForward && model_.first_stage());
    const trace::Span span("compute", computes ? "compute" : "wait", trace_name(a.kind), a.micro_batch);
    switch (a.kind) {
      case ActionKind::kRecvForward: x = s.recv_forward(); break;
      case ActionKind::kForward: y = s.forward(x); break;
      case ActionKind::kSendForward: s.send_forward(y); break;
      case ActionKind::kRecvBackward: dy = s.recv_backward(); break;
      case ActionKind::kBackward: dx = backward(dy, a.micro_batch); break;
      case ActionKind::kSendBackward: s.send_backward(dx); break;
      case ActionKind::kSendForwardRecvBackward: dy = s.send_forward_recv_backward(y); break;
      case ActionKind::kSendBackwardRecvForward: x = s.send_backward_recv_forward(dx); break;
      // The interleaved and ZB-H1 tables (schedule.h) are not executed yet:
      // parse_schedule offers neither, so a table holding these is a bug.
      case ActionKind::kBackwardInput:
      case ActionKind::kBackwardWeight:
      case ActionKind::kSendForwardRecvForward:
      case ActionKind::kSendBackwardRecvBackward:
        HT_CHECK(false, ErrorKind::kInternal, "pipeline: action {} of schedule {} is not executed by this build",
                 action_str(a, true), schedule_name(schedule_));
    }
  }
}

}  // namespace ht::parallel
