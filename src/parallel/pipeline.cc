// ht::parallel::Pipeline: executes a schedule's action table (schedule.h)
// over this rank's model chunks.
#include "ht/parallel/pipeline.h"

#include <cstring>
#include <map>

#include "core/clock.h"
#include "core/trace.h"
#include "ht/nn/model_chunks.h"
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

bool is_compute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight;
}

// The header of a tensor sent between stages: its rank, dimensions and
// dtype, in 10 int32 (a tensor of more than 8 dimensions is refused).
constexpr int kHeaderInts = 10;
Tensor header_of(const Tensor& t) {
  HT_CHECK(t.shape().size() <= 8, ErrorKind::kInvalidArgument,
           "pipeline: a tensor of {} dimensions passed between stages; at most 8", t.shape().size());
  Tensor h = Tensor::zeros({kHeaderInts}, DType::kI32, Device::cpu());
  auto* v = static_cast<std::int32_t*>(h.data_ptr());
  v[0] = std::int32_t(t.shape().size());
  for (std::size_t d = 0; d < t.shape().size(); ++d) v[1 + d] = std::int32_t(t.shape()[d]);
  v[9] = std::int32_t(t.dtype());
  return h;
}
std::string header_text(const Tensor& h) {
  const auto* v = static_cast<const std::int32_t*>(h.data_ptr());
  if (v[0] < 0 || v[0] > 8) return "a header that is not one";
  Shape shape;
  for (int d = 0; d < v[0]; ++d) shape.push_back(v[1 + d]);
  const bool known = v[9] >= 0 && v[9] <= int(DType::kBF16);
  return fmt::format("{} {}", shape_str(shape), known ? dtype_name(DType(v[9])) : "of an unknown dtype");
}

std::vector<nn::Model*> chunks_of(nn::Model& model) {
  if (auto* chunks = dynamic_cast<nn::ModelChunks*>(&model)) return chunks->chunks();
  return {&model};
}

}  // namespace

// One step's state: the micro-batches, the contexts, activations and
// gradients in flight per (micro-batch, chunk), and the time spent
// computing and waiting.
class Pipeline::Step {
  // A micro-batch's pass through one chunk: what every tensor and context in
  // flight belongs to.
  struct Key {
    int micro_batch = 0, chunk = 0;
    auto operator<=>(const Key&) const = default;
  };
  static Key sent(const Action& a) { return {a.micro_batch, a.chunk}; }
  static Key received(const Action& a) { return {a.recv_micro_batch, a.recv_chunk}; }

 public:
  Step(Pipeline& p, const std::vector<data::MicroBatch>& batches, bool training)
      : p_(p), batches_(batches), training_(training) {}

  /// Executes `table`. `backward(chunk, ctx, dy, completes)` runs each
  /// backward (or B) through a chunk: dy is undefined on the last virtual
  /// stage, `completes` says whether it is the chunk's last of the step; it
  /// returns the input's gradient.
  using Backward = std::function<Tensor(nn::Model&, nn::Context&, const Tensor& dy, bool completes)>;
  void run(const std::vector<Action>& table, const Backward& backward) {
    // Each chunk's last backward completes its parameters' gradients.
    std::map<int, std::size_t> last_backward;
    for (std::size_t i = 0; i < table.size(); ++i)
      if (table[i].kind == ActionKind::kBackward || table[i].kind == ActionKind::kBackwardInput)
        last_backward[table[i].chunk] = i;
    for (std::size_t i = 0; i < table.size(); ++i) {
      const Action& a = table[i];
      // On the timeline: computing, or waiting for a transfer (virtual stage
      // 0's "receive" is loading its input).
      const bool loads = a.kind == ActionKind::kRecvForward && chunk(a.chunk).first_stage();
      const trace::Span span("compute", is_compute(a.kind) || loads ? "compute" : "wait", trace_name(a.kind),
                             a.micro_batch, p_.chunks_.size() > 1 ? a.chunk : -1);
      const auto last = last_backward.find(a.chunk);
      execute(a, backward, last != last_backward.end() && last->second == i);
    }
    HT_CHECK(contexts_.empty() && inputs_.empty() && outputs_.empty() && grads_in_.empty() && grads_out_.empty(),
             ErrorKind::kInternal,
             "pipeline: schedule {} left work behind on stage {}: {} contexts, {} inputs, {} outputs, {} gradients",
             schedule_name(p_.schedule_), rank(), contexts_.size(), inputs_.size(), outputs_.size(),
             grads_in_.size() + grads_out_.size());
  }

  const LossSums& loss() const { return loss_; }
  const std::map<std::string, nn::Context::MetricSum>& metrics() const { return metrics_; }
  /// What a micro-batch's loss gradient is divided by beside the loss
  /// scale: 1 for a mean, the target's element count for a sum.
  float loss_divisor() const { return loss_divisor_; }

 private:
  void execute(const Action& a, const Backward& backward, bool completes) {
    switch (a.kind) {
      case ActionKind::kRecvForward: recv_forward(sent(a)); break;
      case ActionKind::kForward: forward(sent(a)); break;
      case ActionKind::kSendForward: {
        const Tensor y = take(outputs_, sent(a));
        wait(transfer(&y, next(), nullptr, -1, sent(a)));
        break;
      }
      case ActionKind::kRecvBackward: {
        Tensor& dy = grads_in_[sent(a)] = buffer(out_shapes_.at(sent(a)));
        wait(transfer(nullptr, -1, &dy, next(), sent(a)));
        break;
      }
      case ActionKind::kBackward: backward_of(sent(a), backward, completes, /*split=*/false); break;
      case ActionKind::kBackwardInput: backward_of(sent(a), backward, completes, /*split=*/true); break;
      case ActionKind::kBackwardWeight: backward_weight(sent(a)); break;
      case ActionKind::kSendBackward: {
        const Tensor dx = take(grads_out_, sent(a));
        wait(transfer(&dx, prev(), nullptr, -1, sent(a)));
        break;
      }
      case ActionKind::kSendForwardRecvBackward: {
        const Tensor y = take(outputs_, sent(a));
        Tensor& dy = grads_in_[received(a)] = buffer(out_shapes_.at(received(a)));
        wait(transfer(&y, next(), &dy, next(), received(a)));
        break;
      }
      case ActionKind::kSendBackwardRecvForward: {
        const Tensor dx = take(grads_out_, sent(a));
        Tensor& x = inputs_[received(a)] = buffer(in_shape(received(a)));
        wait_for_input(transfer(&dx, prev(), &x, prev(), received(a)), received(a), x);
        break;
      }
      case ActionKind::kSendForwardRecvForward: {
        const Tensor y = take(outputs_, sent(a));
        Tensor& x = inputs_[received(a)] = buffer(in_shape(received(a)));
        wait_for_input(transfer(&y, next(), &x, prev(), received(a)), received(a), x);
        break;
      }
      case ActionKind::kSendBackwardRecvBackward: {
        const Tensor dx = take(grads_out_, sent(a));
        Tensor& dy = grads_in_[received(a)] = buffer(out_shapes_.at(received(a)));
        wait(transfer(&dx, prev(), &dy, next(), received(a)));
        break;
      }
    }
  }

  /// The input of `k`: virtual stage 0 loads the micro-batch; the others
  /// receive the previous virtual stage's activations.
  void recv_forward(Key k) {
    if (chunk(k.chunk).first_stage()) {
      inputs_[k] = input(k.micro_batch);
      return;
    }
    Tensor& x = inputs_[k] = buffer(in_shape(k));
    wait_for_input(transfer(nullptr, -1, &x, prev(), k), k, x);
  }

  void forward(Key k) {
    const double t0 = now_ms();
    nn::Model& model = chunk(k.chunk);
    const Tensor x = take(inputs_, k);
    const auto [it, fresh] = contexts_.try_emplace(k, model.device(), training_);
    HT_CHECK(fresh, ErrorKind::kInternal, "pipeline: micro-batch {} ran forward twice through chunk {}", k.micro_batch,
             k.chunk);
    nn::Context& ctx = it->second;
    const data::MicroBatch& batch = batches_[std::size_t(k.micro_batch)];
    prepare(ctx, batch, model.device());
    if (model.last_stage()) {
      add_loss(model.forward_loss(ctx, x, batch.target.to(model.device())), batch, k.micro_batch);
      for (const auto& [name, m] : ctx.metrics()) {
        nn::Context::MetricSum& total = metrics_[name];
        total.sum += m.sum;
        total.count += m.per_sample ? double(batch.rows()) : m.count;
        total.per_sample = m.per_sample;
      }
    } else {
      Tensor y = model.forward(ctx, x);
      out_shapes_[k] = y.shape();
      outputs_[k] = std::move(y);
    }
    note_saved_bytes();
    if (!training_) {
      contexts_.erase(it);
      out_shapes_.erase(k);
    }
    p_.stats_.compute_ms += now_ms() - t0;
  }

  /// A micro-batch's loss into the sums (LossSums). An evaluation's mean
  /// weighs its rows (its micro-batches may differ in size); a step's sums
  /// are divided by the target's element count, the same in every
  /// micro-batch of a step, which the backward divides by too.
  void add_loss(const nn::LossValue& l, const data::MicroBatch& batch, int micro_batch) {
    HT_CHECK(losses_++ == 0 || l.summed == summed_, ErrorKind::kInvalidArgument,
             "the model's loss is {} for micro-batch {} but {} for an earlier one: a loss is one or the other",
             l.summed ? "a sum" : "a mean", micro_batch, summed_ ? "a sum" : "a mean");
    summed_ = l.summed;
    if (!training_) {
      loss_.sum += l.summed ? l.value : l.value * double(batch.rows());
      loss_.count += l.summed ? l.count : double(batch.rows());
      return;
    }
    if (!l.summed) {
      loss_.sum += l.value;
      loss_.count += 1;
      return;
    }
    const double elements = double(batch.target.numel());
    HT_CHECK(elements > 0 && (loss_divisor_ == 1.f || loss_divisor_ == float(elements)), ErrorKind::kInvalidArgument,
             "a token-normalised loss needs targets of one non-empty shape in every micro-batch of a step; micro-batch "
             "{} has {}",
             micro_batch, shape_str(batch.target.shape()));
    loss_divisor_ = float(elements);
    loss_.sum += l.value / elements;
    loss_.count += l.count / elements;
  }

  /// What every stage's forward of a micro-batch reads beside its input:
  /// whether it trains, where its samples sit in the run, and its side
  /// inputs, sealed (nn/context.h).
  void prepare(nn::Context& ctx, const data::MicroBatch& batch, Device device) const {
    ctx.set_batch({.training = training_, .seed = p_.seed_, .first_sample = batch.first_sample});
    for (const auto& [name, t] : batch.side) ctx.set_side_input(name, t.to(device));
    ctx.seal_side_inputs();
  }

  /// A fused backward, or ZB-H1's B (`split`: the weight gradients are kept
  /// in the context for backward_weight).
  void backward_of(Key k, const Backward& backward, bool completes, bool split) {
    const double t0 = now_ms();
    nn::Model& model = chunk(k.chunk);
    auto it = contexts_.find(k);
    HT_CHECK(it != contexts_.end(), ErrorKind::kInternal,
             "pipeline: backward of micro-batch {} through chunk {} before its forward", k.micro_batch, k.chunk);
    if (completes)
      // The chunk's last backward completes its gradients (data
      // parallelism counts their contributions from here on), so no earlier
      // micro-batch's weight gradients may still be waiting.
      for (const auto& [key, c] : contexts_)
        HT_CHECK(key == k || c.pending_weight_grads() == 0, ErrorKind::kInternal,
                 "pipeline: micro-batch {}'s weight gradients are still deferred at chunk {}'s last backward",
                 key.micro_batch, k.chunk);
    if (split) it->second.set_defer_weight_grads(true);
    const Tensor dy = model.last_stage() ? Tensor() : take(grads_in_, k);
    Tensor dx = backward(model, it->second, dy, completes);
    if (!model.first_stage()) grads_out_[k] = std::move(dx);
    out_shapes_.erase(k);
    if (split)
      note_saved_bytes();  // B frees some activations and keeps the deferred GEMMs' inputs
    else
      contexts_.erase(it);
    p_.stats_.compute_ms += now_ms() - t0;
  }

  /// ZB-H1's W: the weight gradients B kept; frees the micro-batch's activations.
  void backward_weight(Key k) {
    const double t0 = now_ms();
    auto it = contexts_.find(k);
    HT_CHECK(it != contexts_.end(), ErrorKind::kInternal,
             "pipeline: weight gradients of micro-batch {} through chunk {} without its forward", k.micro_batch,
             k.chunk);
    it->second.run_weight_grads();
    contexts_.erase(it);
    p_.stats_.compute_ms += now_ms() - t0;
  }

  /// The activations held by the micro-batches in flight, into the peak.
  void note_saved_bytes() {
    std::int64_t saved = 0;
    for (const auto& [key, c] : contexts_) saved += c.saved_bytes();
    p_.stats_.peak_saved_bytes = std::max(p_.stats_.peak_saved_bytes, saved);
  }

  nn::Model& chunk(int c) const { return *p_.chunks_.at(std::size_t(c)); }
  int rank() const { return p_.pp_.rank(); }
  // The ranks of the previous and next virtual stage: the neighbours, and
  // around the ring between chunks (interleaved).
  int next() const { return (rank() + 1) % p_.pp_.size(); }
  int prev() const { return (rank() + p_.pp_.size() - 1) % p_.pp_.size(); }
  /// What `k`'s chunk receives for its micro-batch (evaluation micro-batches may differ in rows).
  Shape in_shape(Key k) const {
    return chunk(k.chunk).stage_input_shape(batches_[std::size_t(k.micro_batch)].input.shape());
  }

  /// Micro-batch i's input on the model's device; a floating one in the
  /// compute dtype (token ids stay integers).
  Tensor input(int i) const {
    const Tensor& in = batches_[std::size_t(i)].input;
    const Device device = chunk(0).device();
    Tensor on_device = in.to(device);
    if (!is_floating(in.dtype()) || in.dtype() == p_.activations_) return on_device;
    Tensor cast = Tensor::empty(in.shape(), p_.activations_, device, MemCategory::kActivations);
    ops::cast(on_device, cast);
    return cast;
  }
  /// A buffer for activations or their gradients arriving from a neighbour.
  Tensor buffer(const Shape& shape) const {
    return Tensor::empty(shape, p_.activations_, chunk(0).device(), MemCategory::kActivations);
  }
  /// The tensor of `k` in `slots`, removed from it.
  static Tensor take(std::map<Key, Tensor>& slots, Key k) {
    const auto it = slots.find(k);
    HT_CHECK(it != slots.end(), ErrorKind::kInternal,
             "pipeline: the table uses micro-batch {}'s tensor of chunk {} before it exists", k.micro_batch, k.chunk);
    Tensor t = std::move(it->second);
    slots.erase(it);
    return t;
  }
  void wait(const comm::WorkPtr& w) {
    const double t0 = now_ms();
    w->wait();
    p_.stats_.idle_ms += now_ms() - t0;
  }

  /// Sends `send` to `dst` and receives `recv` (`k`'s) from `src`, either
  /// or both. The first transfer each way between two neighbours (every
  /// transfer in the communicator's debug mode) first exchanges headers in
  /// the same pattern (so it pairs as the data does):
  /// what arrives is checked against what this stage expects, and a
  /// mismatch is named with both shapes before any data moves.
  comm::WorkPtr transfer(const Tensor* send, int dst, Tensor* recv, int src, Key k) {
    const bool every = p_.pp_.debug();
    const bool head_send = send && (every || !p_.headed_to_.count(dst));
    const bool head_recv = recv && (every || !p_.headed_from_.count(src));
    if (head_send || head_recv) {
      // On the data's device: a device backend moves device tensors only.
      const Device device = (send ? *send : *recv).device();
      const Tensor out = head_send ? header_of(*send).to(device) : Tensor();
      Tensor in = head_recv ? Tensor::zeros({kHeaderInts}, DType::kI32, device) : Tensor();
      if (head_send && head_recv) wait(p_.pp_.send_recv(out, dst, in, src));
      else if (head_send) wait(p_.pp_.send(out, dst));
      else wait(p_.pp_.recv(in, src));
      if (head_send) p_.headed_to_.insert(dst);
      if (head_recv) {
        p_.headed_from_.insert(src);
        in = in.to(Device::cpu());
        const Tensor mine = header_of(*recv);
        HT_CHECK(std::memcmp(mine.data_ptr(), in.data_ptr(), mine.nbytes()) == 0, ErrorKind::kShapeMismatch,
                 "pipeline stage {} (chunk {}), micro-batch {}: rank {} sends {} where this stage expects {} ({}). "
                 "stage_input_shape must give the shape the previous stage's forward returns",
                 rank(), k.chunk, k.micro_batch, src, header_text(in), header_text(mine),
                 src == prev() && recv->shape() == in_shape(k) ? "its input: nn::Model::stage_input_shape"
                                                               : "a gradient of what it sent");
      }
    }
    if (send && recv) return p_.pp_.send_recv(*send, dst, *recv, src);
    if (send) return p_.pp_.send(*send, dst);
    return p_.pp_.recv(*recv, src);
  }

  /// wait() for a transfer that brings `k`'s input `x` from the previous
  /// stage: one of another size than the model declares is named with the
  /// stage, the micro-batch and the declaration to fix.
  void wait_for_input(const comm::WorkPtr& w, Key k, const Tensor& x) {
    try {
      wait(w);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kShapeMismatch) throw;
      throw Error(ErrorKind::kShapeMismatch,
                  fmt::format("pipeline stage {} (chunk {}), micro-batch {}: what the previous stage sent is not the "
                              "input this stage declares, {} {} ({} elements; nn::Model::stage_input_shape): {}. "
                              "stage_input_shape must give the shape the previous stage's forward returns",
                              rank(), k.chunk, k.micro_batch, shape_str(x.shape()), dtype_name(x.dtype()), x.numel(),
                              e.what()));
    }
  }

  Pipeline& p_;
  const std::vector<data::MicroBatch>& batches_;
  bool training_;
  std::map<Key, nn::Context> contexts_;
  std::map<Key, Tensor> inputs_;     // received or loaded, for the forward
  std::map<Key, Tensor> outputs_;    // computed, to send to the next virtual stage
  std::map<Key, Tensor> grads_in_;   // the outputs' gradients, received
  std::map<Key, Tensor> grads_out_;  // the inputs' gradients, to send back
  std::map<Key, Shape> out_shapes_;  // what each forward in flight sent on
  LossSums loss_;
  int losses_ = 0;            // micro-batch losses added
  bool summed_ = false;       // the step's loss is token-normalised
  float loss_divisor_ = 1.f;  // see loss_divisor()
  std::map<std::string, nn::Context::MetricSum> metrics_;  // evaluation metrics' sums (last stage)
};

Pipeline::Pipeline(nn::Model& model, comm::Communicator& pp, Schedule schedule, DType activations,
                   std::uint64_t seed)
    : chunks_(chunks_of(model)), pp_(pp), schedule_(schedule), activations_(activations), seed_(seed) {
  HT_CHECK(pp.size() == model.stage().size && pp.rank() == model.stage().rank, ErrorKind::kInvalidArgument,
           "pipeline group '{}' is rank {} of {}, but the model is stage {} of {}", pp.name(), pp.rank(), pp.size(),
           model.stage().rank, model.stage().size);
  HT_CHECK(schedule == Schedule::kInterleaved || chunks_.size() == 1, ErrorKind::kInvalidArgument,
           "pipeline schedule {} with {} model chunks per rank: only the interleaved schedule runs several chunks "
           "(nn::ModelChunks)",
           schedule_name(schedule), chunks_.size());
}

LossSums Pipeline::train_step(const std::vector<data::MicroBatch>& batches, float loss_scale,
                            const std::function<void(nn::Model*)>& before_backward) {
  HT_CHECK_ARG(!batches.empty(), "pipeline: a step needs at least one micro-batch");
  stats_ = {};
  Step s(*this, batches, /*training=*/true);
  s.run(stage_actions(schedule_, pp_.rank(), pp_.size(), int(batches.size()), virtual_stages()),
        [&](nn::Model& model, nn::Context& ctx, const Tensor& dy, bool completes) {
          if (before_backward) before_backward(completes ? &model : nullptr);
          return model.last_stage() ? model.backward_loss(ctx, loss_scale / s.loss_divisor())
                                    : model.backward(ctx, dy);
        });
  return s.loss();
}

Evaluation Pipeline::evaluate(const std::vector<data::MicroBatch>& batches) {
  if (batches.empty()) return {};
  const PipelineStats kept = stats_;
  Step s(*this, batches, /*training=*/false);
  s.run(forward_only_actions(pp_.rank(), pp_.size(), int(batches.size()), virtual_stages()), nullptr);
  stats_ = kept;
  return {.loss = s.loss(), .metric_sums = s.metrics()};
}

}  // namespace ht::parallel
