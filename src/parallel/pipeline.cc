// ht::parallel::Pipeline: the GPipe and 1F1B schedules.
#include "ht/parallel/pipeline.h"

#include <chrono>
#include <deque>

namespace ht::parallel {

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::kGPipe;
  if (name == "1f1b") return Schedule::k1F1B;
  HT_CHECK(false, ErrorKind::kConfig, "--schedule '{}' is not a pipeline schedule: choose gpipe or 1f1b", name);
  return Schedule::k1F1B;
}

std::string schedule_name(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
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
    if (model_.first_stage()) return batches_[std::size_t(forwards_)].input.to(model_.device());
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
  void send_forward(const Tensor& y) {
    if (!model_.last_stage()) wait(p_.pp_.send(y, stage() + 1));
  }
  /// The gradient of the oldest micro-batch in flight's output.
  Tensor recv_backward() {
    if (model_.last_stage()) return Tensor();
    Tensor dy = buffer(out_shapes_.front());
    wait(p_.pp_.recv(dy, stage() + 1));
    return dy;
  }
  Tensor send_forward_recv_backward(const Tensor& y) {
    if (model_.last_stage()) return Tensor();
    Tensor dy = buffer(out_shapes_.front());
    wait(p_.pp_.send_recv(y, stage() + 1, dy, stage() + 1));
    return dy;
  }
  /// Backward of the oldest micro-batch in flight; returns the gradient for the previous stage.
  Tensor backward(const Tensor& dy, float loss_scale, const std::function<void(bool)>& before_backward) {
    const double t0 = now_ms();
    if (before_backward) before_backward(backwards_ + 1 == std::int64_t(batches_.size()));
    ++backwards_;
    nn::Context& ctx = contexts_.front();
    Tensor dx = model_.last_stage() ? model_.backward_loss(ctx, loss_scale) : model_.backward(ctx, dy);
    contexts_.pop_front();
    out_shapes_.pop_front();
    p_.stats_.compute_ms += now_ms() - t0;
    return dx;
  }
  void send_backward(const Tensor& dx) {
    if (!model_.first_stage()) wait(p_.pp_.send(dx, stage() - 1));
  }
  Tensor send_backward_recv_forward(const Tensor& dx) {
    if (model_.first_stage()) return batches_[std::size_t(forwards_)].input.to(model_.device());
    Tensor x = buffer(in_shape_);
    wait(p_.pp_.send_recv(dx, stage() - 1, x, stage() - 1));
    return x;
  }

  double loss() const { return loss_; }

 private:
  int stage() const { return model_.stage().rank; }
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
  std::int64_t forwards_ = 0, backwards_ = 0;
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
  if (schedule_ == Schedule::kGPipe) {
    for (int i = 0; i < m; ++i) s.send_forward(s.forward(s.recv_forward()));
    for (int i = 0; i < m; ++i) s.send_backward(s.backward(s.recv_backward(), loss_scale, before_backward));
    return s.loss();
  }
  // 1F1B: warm-up forwards, then one forward and one backward at a time, then the remaining backwards.
  const int warmup = std::min(model_.stage().size - model_.stage().rank - 1, m);
  const int steady = m - warmup;
  for (int i = 0; i < warmup; ++i) s.send_forward(s.forward(s.recv_forward()));
  Tensor x = steady > 0 ? s.recv_forward() : Tensor();
  for (int i = 0; i < steady; ++i) {
    const Tensor dy = s.send_forward_recv_backward(s.forward(x));
    const Tensor dx = s.backward(dy, loss_scale, before_backward);
    if (i + 1 == steady)
      s.send_backward(dx);
    else
      x = s.send_backward_recv_forward(dx);
  }
  for (int i = 0; i < warmup; ++i) s.send_backward(s.backward(s.recv_backward(), loss_scale, before_backward));
  return s.loss();
}

double Pipeline::evaluate(const std::vector<data::MicroBatch>& batches) {
  if (batches.empty()) return 0;
  const PipelineStats kept = stats_;
  Step s(*this, batches, /*training=*/false);
  for (std::size_t i = 0; i < batches.size(); ++i) s.send_forward(s.forward(s.recv_forward()));
  stats_ = kept;
  return s.loss();
}

}  // namespace ht::parallel
