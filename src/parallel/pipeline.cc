// ht::parallel::Pipeline: executes a schedule's action table (schedule.h)
// over this rank's model chunks.
#include "ht/parallel/pipeline.h"

#include <algorithm>
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

// The tensors between two stages travel as one buffer (a Packet): one
// tensor as itself, several packed flat in order. The header of what is
// sent: how many tensors, then each one's rank, dimensions and dtype in 10
// int32 (at most 8 tensors of at most 8 dimensions).
constexpr int kMaxStageTensors = 8;
constexpr int kHeaderInts = 1 + 10 * kMaxStageTensors;
Tensor header_of(const std::vector<Shape>& parts, DType dtype) {
  HT_CHECK(parts.size() <= std::size_t(kMaxStageTensors), ErrorKind::kInvalidArgument,
           "pipeline: {} tensors passed between stages; at most {}", parts.size(), kMaxStageTensors);
  Tensor h = Tensor::zeros({kHeaderInts}, DType::kI32, Device::cpu());
  auto* v = static_cast<std::int32_t*>(h.data_ptr());
  v[0] = std::int32_t(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Shape& shape = parts[i];
    HT_CHECK(shape.size() <= 8, ErrorKind::kInvalidArgument,
             "pipeline: a tensor of {} dimensions passed between stages; at most 8", shape.size());
    std::int32_t* t = v + 1 + 10 * i;
    t[0] = std::int32_t(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) t[1 + d] = std::int32_t(shape[d]);
    t[9] = std::int32_t(dtype);
  }
  return h;
}
/// Tensor i of a header, as text.
std::string header_text(const Tensor& h, int i) {
  const auto* v = static_cast<const std::int32_t*>(h.data_ptr());
  if (v[0] < 0 || v[0] > kMaxStageTensors) return "a header that is not one";
  if (i >= v[0]) return "nothing";
  const std::int32_t* t = v + 1 + 10 * i;
  if (t[0] < 0 || t[0] > 8) return "a header that is not one";
  Shape shape;
  for (int d = 0; d < t[0]; ++d) shape.push_back(t[1 + d]);
  const bool known = t[9] >= 0 && t[9] <= int(DType::kBF16);
  return fmt::format("{} {}", shape_str(shape), known ? dtype_name(DType(t[9])) : "of an unknown dtype");
}
/// The first tensor where two headers differ, or -1.
int first_difference(const Tensor& a, const Tensor& b) {
  const auto* x = static_cast<const std::int32_t*>(a.data_ptr());
  const auto* y = static_cast<const std::int32_t*>(b.data_ptr());
  const int n = std::max(std::clamp(x[0], 0, kMaxStageTensors), std::clamp(y[0], 0, kMaxStageTensors));
  for (int i = 0; i < n; ++i)
    if (std::memcmp(x + 1 + 10 * i, y + 1 + 10 * i, 10 * sizeof(std::int32_t)) != 0) return i;
  return x[0] != y[0] ? n : -1;
}

/// What passes between two stages: the buffer and the tensors it holds.
struct Packet {
  Tensor data;
  std::vector<Shape> parts;
};

/// One tensor as itself; several (floating, of one dtype) copied flat.
Packet pack(const std::vector<Tensor>& tensors) {
  if (tensors.size() == 1) return {tensors[0], {tensors[0].shape()}};
  std::int64_t total = 0;
  std::vector<Shape> parts;
  for (const Tensor& t : tensors) {
    HT_CHECK(t.defined() && t.dtype() == tensors[0].dtype(), ErrorKind::kDTypeMismatch,
             "pipeline: the tensors a stage sends on share one dtype (the compute dtype); got {} beside {}",
             t.defined() ? dtype_name(t.dtype()) : "nothing", dtype_name(tensors[0].dtype()));
    total += t.numel();
    parts.push_back(t.shape());
  }
  Packet p{Tensor::empty({total}, tensors[0].dtype(), tensors[0].device(), MemCategory::kActivations), parts};
  std::int64_t at = 0;
  for (const Tensor& t : tensors) {
    Tensor part = p.data.slice(at, at + t.numel()).view(t.shape());
    part.copy_from(t);
    at += t.numel();
  }
  return p;
}

/// The tensors of a packet: views of its buffer.
std::vector<Tensor> unpack(const Packet& p) {
  if (p.parts.size() == 1) return {p.data};
  std::vector<Tensor> out;
  std::int64_t at = 0;
  for (const Shape& shape : p.parts) {
    const std::int64_t n = shape_numel(shape);
    out.push_back(p.data.slice(at, at + n).view(shape));
    at += n;
  }
  return out;
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
  /// `loss_scale`: a training step's mean-loss gradient factor, which
  /// layers' auxiliary losses take too (nn::Context::aux_loss_grad_scale).
  Step(Pipeline& p, const std::vector<data::MicroBatch>& batches, bool training, float loss_scale = 0.f)
      : p_(p), batches_(batches), training_(training), loss_scale_(loss_scale) {}

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
        const Packet y = take(outputs_, sent(a));
        wait(transfer(&y, next(), nullptr, -1, sent(a)));
        break;
      }
      case ActionKind::kRecvBackward: {
        Packet& dy = grads_in_[sent(a)] = expect(out_parts_.at(sent(a)));
        wait(transfer(nullptr, -1, &dy, next(), sent(a)));
        break;
      }
      case ActionKind::kBackward: backward_of(sent(a), backward, completes, /*split=*/false); break;
      case ActionKind::kBackwardInput: backward_of(sent(a), backward, completes, /*split=*/true); break;
      case ActionKind::kBackwardWeight: backward_weight(sent(a)); break;
      case ActionKind::kSendBackward: {
        const Packet dx = take(grads_out_, sent(a));
        wait(transfer(&dx, prev(), nullptr, -1, sent(a)));
        break;
      }
      case ActionKind::kSendForwardRecvBackward: {
        const Packet y = take(outputs_, sent(a));
        Packet& dy = grads_in_[received(a)] = expect(out_parts_.at(received(a)));
        wait(transfer(&y, next(), &dy, next(), received(a)));
        break;
      }
      case ActionKind::kSendBackwardRecvForward: {
        const Packet dx = take(grads_out_, sent(a));
        Packet& x = inputs_[received(a)] = expect(in_parts(received(a)));
        wait_for_input(transfer(&dx, prev(), &x, prev(), received(a)), received(a), x);
        break;
      }
      case ActionKind::kSendForwardRecvForward: {
        const Packet y = take(outputs_, sent(a));
        Packet& x = inputs_[received(a)] = expect(in_parts(received(a)));
        wait_for_input(transfer(&y, next(), &x, prev(), received(a)), received(a), x);
        break;
      }
      case ActionKind::kSendBackwardRecvBackward: {
        const Packet dx = take(grads_out_, sent(a));
        Packet& dy = grads_in_[received(a)] = expect(out_parts_.at(received(a)));
        wait(transfer(&dx, prev(), &dy, next(), received(a)));
        break;
      }
    }
  }

  /// The input of `k`: virtual stage 0 loads the micro-batch; the others
  /// receive the previous virtual stage's activations.
  void recv_forward(Key k) {
    if (chunk(k.chunk).first_stage()) {
      inputs_[k] = pack({input(k.micro_batch)});
      return;
    }
    Packet& x = inputs_[k] = expect(in_parts(k));
    wait_for_input(transfer(nullptr, -1, &x, prev(), k), k, x);
  }

  void forward(Key k) {
    const double t0 = now_ms();
    nn::Model& model = chunk(k.chunk);
    // The stage's input, and what came beside it (nn::Model::stage_inputs).
    std::vector<Tensor> more = unpack(take(inputs_, k));
    const Tensor x = more.front();
    more.erase(more.begin());
    const auto [it, fresh] = contexts_.try_emplace(k, model.device(), training_);
    HT_CHECK(fresh, ErrorKind::kInternal, "pipeline: micro-batch {} ran forward twice through chunk {}", k.micro_batch,
             k.chunk);
    nn::Context& ctx = it->second;
    const data::MicroBatch& batch = batches_[std::size_t(k.micro_batch)];
    prepare(ctx, batch, model.device());
    if (model.last_stage()) {
      const std::size_t given = more.size();
      ctx.set_stage_inputs(std::move(more));
      add_loss(model.forward_loss(ctx, x, batch.target.to(model.device())), batch, k.micro_batch);
      HT_CHECK(ctx.take_stage_inputs().empty(), ErrorKind::kNotSupported,
               "model '{}': its last stage receives {} further tensor(s) (stage_inputs), but its forward_loss does "
               "not pass them to forward: use the default forward_loss, or call forward(ctx, x, "
               "ctx.take_stage_inputs())",
               model.name(), given);
      HT_CHECK(ctx.take_more_outputs(&model).empty(), ErrorKind::kInvalidArgument,
               "model '{}': its last stage added further outputs (Tape::add_output), which only a stage with a next "
               "one sends: add them when !last_stage()",
               model.name());
      for (const auto& [name, m] : ctx.metrics()) {
        nn::Context::MetricSum& total = metrics_[name];
        total.sum += m.sum;
        total.count += m.per_sample ? double(batch.rows()) : m.count;
        total.per_sample = m.per_sample;
      }
    } else {
      std::vector<Tensor> outs{model.forward(ctx, x, more)};
      for (Tensor& t : ctx.take_more_outputs(&model)) outs.push_back(std::move(t));
      Packet y = pack(outs);
      out_parts_[k] = y.parts;
      outputs_[k] = std::move(y);
    }
    note_saved_bytes();
    if (!training_) {
      contexts_.erase(it);
      out_parts_.erase(k);
    }
    p_.stats_.compute_ms += now_ms() - t0;
  }

  /// A micro-batch's loss into the sums (LossSums). An evaluation's mean
  /// weighs its rows (its micro-batches may differ in size); a step's sums
  /// are divided by the target's element count, the same in every
  /// micro-batch of a step, which the backward divides by too.
  void add_loss(const nn::LossValue& l, const data::MicroBatch& batch, int micro_batch) {
    const bool first = losses_++ == 0;
    HT_CHECK(first || l.summed == summed_, ErrorKind::kInvalidArgument,
             "the model's loss is {} for micro-batch {} but {} for an earlier one: a loss is one or the other",
             l.summed ? "a sum" : "a mean", micro_batch, summed_ ? "a sum" : "a mean");
    summed_ = l.summed;
    loss_.summed = l.summed;
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
    if (training_) ctx.set_aux_loss_grad_scale(loss_scale_);
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
    nn::Context& ctx = it->second;
    // The outputs' gradients: the first as dy, those of the further outputs
    // through the context (nn::Tape::add_output).
    std::vector<Tensor> dys = model.last_stage() ? std::vector<Tensor>{Tensor()} : unpack(take(grads_in_, k));
    const Tensor dy = dys.front();
    dys.erase(dys.begin());
    if (!dys.empty()) ctx.put_more_output_grads(&model, std::move(dys));
    Tensor dx = backward(model, ctx, dy, completes);
    if (ctx.aux_loss_grads_added()) loss_.aux_loss_grads = true;
    if (!model.first_stage()) {
      // The inputs' gradients, in the order they came: x's, then the
      // further inputs' (zeros where none flowed).
      std::vector<Tensor> grads{std::move(dx)};
      const std::vector<Shape> parts = in_parts(k);
      std::vector<Tensor> more = ctx.take_call_input_grads(&model);
      for (std::size_t i = 1; i < parts.size(); ++i) {
        const Tensor g = i - 1 < more.size() ? more[i - 1] : Tensor();
        grads.push_back(g.defined() ? g : Tensor::zeros(parts[i], p_.activations_, model.device()));
      }
      grads_out_[k] = pack(grads);
    }
    out_parts_.erase(k);
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
  std::vector<nn::StageTensor> in_tensors(Key k) const {
    std::vector<nn::StageTensor> t = chunk(k.chunk).stage_inputs(batches_[std::size_t(k.micro_batch)].input.shape());
    HT_CHECK(!t.empty(), ErrorKind::kInvalidArgument, "model '{}': stage_inputs declares nothing to receive",
             chunk(k.chunk).name());
    return t;
  }
  std::vector<Shape> in_parts(Key k) const {
    std::vector<Shape> parts;
    for (const nn::StageTensor& t : in_tensors(k)) parts.push_back(t.shape);
    return parts;
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
  /// A buffer for activations or their gradients arriving from a
  /// neighbour: one tensor of its shape, or several flat.
  Packet expect(const std::vector<Shape>& parts) const {
    std::int64_t total = 0;
    for (const Shape& shape : parts) total += shape_numel(shape);
    const Shape shape = parts.size() == 1 ? parts[0] : Shape{total};
    return {Tensor::empty(shape, p_.activations_, chunk(0).device(), MemCategory::kActivations), parts};
  }
  /// The packet of `k` in `slots`, removed from it.
  static Packet take(std::map<Key, Packet>& slots, Key k) {
    const auto it = slots.find(k);
    HT_CHECK(it != slots.end(), ErrorKind::kInternal,
             "pipeline: the table uses micro-batch {}'s tensor of chunk {} before it exists", k.micro_batch, k.chunk);
    Packet t = std::move(it->second);
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
  comm::WorkPtr transfer(const Packet* send, int dst, Packet* recv, int src, Key k) {
    const bool every = p_.pp_.debug();
    const bool head_send = send && (every || !p_.headed_to_.count(dst));
    const bool head_recv = recv && (every || !p_.headed_from_.count(src));
    if (head_send || head_recv) {
      // On the data's device: a device backend moves device tensors only.
      const Device device = (send ? send->data : recv->data).device();
      const Tensor out = head_send ? header_of(send->parts, send->data.dtype()).to(device) : Tensor();
      Tensor in = head_recv ? Tensor::zeros({kHeaderInts}, DType::kI32, device) : Tensor();
      if (head_send && head_recv) wait(p_.pp_.send_recv(out, dst, in, src));
      else if (head_send) wait(p_.pp_.send(out, dst));
      else wait(p_.pp_.recv(in, src));
      if (head_send) p_.headed_to_.insert(dst);
      if (head_recv) {
        p_.headed_from_.insert(src);
        check_header(in.to(Device::cpu()), *recv, src, k);
      }
    }
    if (send && recv) return p_.pp_.send_recv(send->data, dst, recv->data, src);
    if (send) return p_.pp_.send(send->data, dst);
    return p_.pp_.recv(recv->data, src);
  }

  /// What arrived (`in`, a header) against what `recv` expects: a mismatch
  /// names the stage, the micro-batch, the tensor and both shapes.
  void check_header(const Tensor& in, const Packet& recv, int src, Key k) {
    const Tensor mine = header_of(recv.parts, recv.data.dtype());
    const int bad = first_difference(mine, in);
    if (bad < 0) return;
    const bool input = src == prev() && recv.parts == in_parts(k);
    const auto* counts = static_cast<const std::int32_t*>(in.data_ptr());
    if (recv.parts.size() == 1 && counts[0] == 1)
      HT_CHECK(false, ErrorKind::kShapeMismatch,
               "pipeline stage {} (chunk {}), micro-batch {}: rank {} sends {} where this stage expects {} ({}). "
               "stage_input_shape must give the shape the previous stage's forward returns",
               rank(), k.chunk, k.micro_batch, src, header_text(in, 0), header_text(mine, 0),
               input ? "its input: nn::Model::stage_input_shape" : "a gradient of what it sent");
    const std::string what = input && std::size_t(bad) < recv.parts.size()
                                 ? fmt::format("'{}'", in_tensors(k)[std::size_t(bad)].name)
                                 : fmt::format("number {}", bad + 1);
    HT_CHECK(false, ErrorKind::kShapeMismatch,
             "pipeline stage {} (chunk {}), micro-batch {}: rank {} sends {} tensor(s) where this stage expects {} "
             "({}); tensor {}: {} sent, {} expected. stage_inputs must list, in order, what the previous stage's "
             "forward returns and then what it adds with Tape::add_output",
             rank(), k.chunk, k.micro_batch, src, counts[0], recv.parts.size(),
             input ? "its inputs: nn::Model::stage_inputs" : "the gradients of what it sent", what,
             header_text(in, bad), header_text(mine, bad));
  }

  /// wait() for a transfer that brings `k`'s input `x` from the previous
  /// stage: one of another size than the model declares is named with the
  /// stage, the micro-batch and the declaration to fix.
  void wait_for_input(const comm::WorkPtr& w, Key k, const Packet& x) {
    try {
      wait(w);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kShapeMismatch) throw;
      std::string declared = fmt::format("{} {}", shape_str(x.data.shape()), dtype_name(x.data.dtype()));
      if (x.parts.size() > 1) {
        declared += ", the tensors";
        for (const nn::StageTensor& t : in_tensors(k)) declared += fmt::format(" '{}' {}", t.name, shape_str(t.shape));
      }
      throw Error(ErrorKind::kShapeMismatch,
                  fmt::format("pipeline stage {} (chunk {}), micro-batch {}: what the previous stage sent is not the "
                              "input this stage declares, {} ({} elements; nn::Model::stage_input_shape): {}. "
                              "stage_input_shape must give the shape the previous stage's forward returns",
                              rank(), k.chunk, k.micro_batch, declared, x.data.numel(), e.what()));
    }
  }

  Pipeline& p_;
  const std::vector<data::MicroBatch>& batches_;
  bool training_;
  std::map<Key, nn::Context> contexts_;
  std::map<Key, Packet> inputs_;     // received or loaded, for the forward
  std::map<Key, Packet> outputs_;    // computed, to send to the next virtual stage
  std::map<Key, Packet> grads_in_;   // the outputs' gradients, received
  std::map<Key, Packet> grads_out_;  // the inputs' gradients, to send back
  std::map<Key, std::vector<Shape>> out_parts_;  // what each forward in flight sent on
  LossSums loss_;
  float loss_scale_;
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
  Step s(*this, batches, /*training=*/true, loss_scale);
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
