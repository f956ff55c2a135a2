// Pipeline schedule tables (GPipe, 1F1B, interleaved 1F1B, ZB-H1), their
// in-flight count, and a simulator of all ranks with blocking point-to-point
// transfers.
#include "ht/parallel/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "ht/core/error.h"

namespace ht::parallel {

Schedule parse_schedule(const std::string& name) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubbleH1})
    if (name == schedule_name(s)) return s;
  HT_CHECK(false, ErrorKind::kConfig,
           "--schedule '{}' is not a pipeline schedule: choose gpipe, 1f1b, interleaved or zb-h1", name);
  return Schedule::k1F1B;
}

std::string schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kGPipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

std::string schedule_problem(Schedule schedule, int virtual_stages, int stages, int micro_batches, int zero_stage) {
  const int v = virtual_stages, p = stages, m = micro_batches;
  if (schedule != Schedule::kInterleaved)
    return v == 1 ? std::string()
                  : fmt::format("--virtual-stages {}: model chunks per pipeline rank are for --schedule interleaved", v);
  if (v < 1) return fmt::format("--virtual-stages {} is not a number of model chunks per rank: use 2 or more", v);
  if (p < 2)
    return fmt::format("--schedule interleaved needs at least 2 pipeline ranks (--pp), got {}: with one there is no "
                       "bubble to shrink; use --schedule 1f1b",
                       p);
  if (m % p != 0)
    return fmt::format("--schedule interleaved runs micro-batches in groups of --pp {}: --grad-accum {} must be a "
                       "multiple of {} (e.g. {})",
                       p, m, p, (m / p + 1) * p);
  if (zero_stage >= 3)
    return "--schedule interleaved with --zero 3 is not supported (ZeRO-3 gathers each of the model's units around "
           "its use, and a rank's chunks are one unit each); use --zero 1 or 2, or --schedule 1f1b";
  return {};
}

std::string action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kRecvForward: return "recv-forward";
    case ActionKind::kForward: return "forward";
    case ActionKind::kSendForward: return "send-forward";
    case ActionKind::kRecvBackward: return "recv-backward";
    case ActionKind::kBackward: return "backward";
    case ActionKind::kSendBackward: return "send-backward";
    case ActionKind::kSendForwardRecvBackward: return "send-forward-recv-backward";
    case ActionKind::kSendBackwardRecvForward: return "send-backward-recv-forward";
    case ActionKind::kBackwardInput: return "backward-input";
    case ActionKind::kBackwardWeight: return "backward-weight";
    case ActionKind::kSendForwardRecvForward: return "send-forward-recv-forward";
    case ActionKind::kSendBackwardRecvBackward: return "send-backward-recv-backward";
  }
  return "?";
}

std::string action_str(const Action& a, bool with_chunk) {
  const auto at = [&](int mb, int chunk) {
    return with_chunk ? fmt::format("{}.{}", mb, chunk) : fmt::format("{}", mb);
  };
  const std::string mb = at(a.micro_batch, a.chunk);
  const std::string pair = mb + "," + at(a.recv_micro_batch, a.recv_chunk);
  switch (a.kind) {
    case ActionKind::kRecvForward: return "R" + mb;
    case ActionKind::kForward: return "F" + mb;
    case ActionKind::kSendForward: return "S" + mb;
    case ActionKind::kRecvBackward: return "r" + mb;
    case ActionKind::kBackward: return "b" + mb;
    case ActionKind::kSendBackward: return "s" + mb;
    case ActionKind::kSendForwardRecvBackward: return "SFRB(" + pair + ")";
    case ActionKind::kSendBackwardRecvForward: return "SBRF(" + pair + ")";
    case ActionKind::kBackwardInput: return "B" + mb;
    case ActionKind::kBackwardWeight: return "W" + mb;
    case ActionKind::kSendForwardRecvForward: return "SFRF(" + pair + ")";
    case ActionKind::kSendBackwardRecvBackward: return "SBRB(" + pair + ")";
  }
  return "?";
}

namespace {

void check_shape(int stage, int stages, int micro_batches) {
  HT_CHECK_ARG(stages > 0 && stage >= 0 && stage < stages, "stage {} outside a pipeline of {}", stage, stages);
  HT_CHECK_ARG(micro_batches > 0, "pipeline: a step needs at least one micro-batch, got {}", micro_batches);
}

// A micro-batch's pass through one chunk.
struct MicroChunk {
  int micro_batch = 0, chunk = 0;
};

// The executor's calls, each appending what it does on this rank (nothing
// for a transfer without a peer), in the words of the Pipeline it replaces.
// With chunks, the first virtual stage is rank 0's chunk 0 and the last
// rank p - 1's chunk v - 1; without, chunk is 0 and they are the first and
// last stage.
class Builder {
 public:
  Builder(int stage, int stages, int chunks = 1) : stage_(stage), stages_(stages), chunks_(chunks) {}

  void recv_forward(int mb, int chunk = 0) { add(ActionKind::kRecvForward, {mb, chunk}); }
  void forward(int mb, int chunk = 0) { add(ActionKind::kForward, {mb, chunk}); }
  void send_forward(int mb, int chunk = 0) {
    if (!last(chunk)) add(ActionKind::kSendForward, {mb, chunk});
  }
  void recv_backward(int mb, int chunk = 0) {
    if (!last(chunk)) add(ActionKind::kRecvBackward, {mb, chunk});
  }
  void backward(int mb, int chunk = 0) { add(ActionKind::kBackward, {mb, chunk}); }
  void backward_input(int mb) { add(ActionKind::kBackwardInput, {mb, 0}); }
  void backward_weight(int mb) { add(ActionKind::kBackwardWeight, {mb, 0}); }
  void send_backward(int mb, int chunk = 0) {
    if (!first(chunk)) add(ActionKind::kSendBackward, {mb, chunk});
  }
  void send_forward_recv_backward(int send_mb, int recv_mb) {
    if (!last(0)) add(ActionKind::kSendForwardRecvBackward, {send_mb, 0}, {recv_mb, 0});
  }
  void send_backward_recv_forward(int send_mb, int recv_mb) {
    if (first(0))
      add(ActionKind::kRecvForward, {recv_mb, 0});  // nothing to send; the next micro-batch is loaded
    else
      add(ActionKind::kSendBackwardRecvForward, {send_mb, 0}, {recv_mb, 0});
  }
  // The interleaved exchanges. A half without a peer is left out, leaving
  // the other as a plain transfer; the next input of virtual stage 0 is a
  // load, after the send.
  void send_forward_recv_forward(MicroChunk send, MicroChunk recv) {
    const bool has_send = !last(send.chunk), has_recv = !first(recv.chunk);
    if (has_send && has_recv) {
      add(ActionKind::kSendForwardRecvForward, send, recv);
      return;
    }
    if (has_send) add(ActionKind::kSendForward, send);
    add(ActionKind::kRecvForward, recv);
  }
  void send_backward_recv_backward(MicroChunk send, MicroChunk recv) {
    const bool has_send = !first(send.chunk), has_recv = !last(recv.chunk);
    if (has_send && has_recv) {
      add(ActionKind::kSendBackwardRecvBackward, send, recv);
      return;
    }
    if (has_send) add(ActionKind::kSendBackward, send);
    if (has_recv) add(ActionKind::kRecvBackward, recv);
  }

  std::vector<Action> take() { return std::move(out_); }

 private:
  bool first(int chunk) const { return stage_ == 0 && chunk == 0; }
  bool last(int chunk) const { return stage_ == stages_ - 1 && chunk == chunks_ - 1; }
  void add(ActionKind kind, MicroChunk p, MicroChunk recv = {-1, 0}) {
    out_.push_back({kind, p.micro_batch, recv.micro_batch, p.chunk, recv.chunk});
  }

  int stage_, stages_, chunks_;
  std::vector<Action> out_;
};

std::vector<Action> gpipe(int stage, int stages, int m) {
  Builder t(stage, stages);
  for (int i = 0; i < m; ++i) {
    t.recv_forward(i);
    t.forward(i);
    t.send_forward(i);
  }
  for (int i = 0; i < m; ++i) {
    t.recv_backward(i);
    t.backward(i);
    t.send_backward(i);
  }
  return t.take();
}

// 1F1B: p - s - 1 warm-up forwards; then steady pairs, forward of
// micro-batch w + i with backward of i, the output's send paired with the
// receive of i's gradient and i's gradient's send paired with the receive
// of the next input (so that the neighbours' blocking sends meet); then the
// w backwards left. Example p 4, s 1, m 4: w = 2, steady 2:
//   R0 F0 S0 R1 F1 S1 R2 F2 SFRB(2,0) b0 SBRF(0,3) F3 SFRB(3,1) b1 s1 r2 b2 s2 r3 b3 s3
// ZB-H1 (`split`): the same with each backward as B, and its W right after
// the transfer that follows B, or after B where none does (stage 0 sends no
// gradient). W(i) still comes before the next forward, so at most p - s
// micro-batches are held, as in 1F1B; B's gradient leaves one compute
// earlier, so the backward chain crosses the pipeline faster, and in the
// cool-down W runs while the next gradient is on its way.
std::vector<Action> one_f_one_b(int stage, int stages, int m, bool split) {
  Builder t(stage, stages);
  const auto backward = [&](int mb) {
    if (split)
      t.backward_input(mb);
    else
      t.backward(mb);
  };
  const auto weight = [&](int mb) {
    if (split) t.backward_weight(mb);
  };
  const int warmup = std::min(stages - stage - 1, m);
  const int steady = m - warmup;
  for (int i = 0; i < warmup; ++i) {
    t.recv_forward(i);
    t.forward(i);
    t.send_forward(i);
  }
  if (steady > 0) t.recv_forward(warmup);
  for (int i = 0; i < steady; ++i) {
    t.forward(warmup + i);
    t.send_forward_recv_backward(warmup + i, i);
    backward(i);
    if (i + 1 == steady)
      t.send_backward(i);
    else
      t.send_backward_recv_forward(i, warmup + i + 1);
    weight(i);
  }
  for (int i = 0; i < warmup; ++i) {
    t.recv_backward(steady + i);
    backward(steady + i);
    t.send_backward(steady + i);
    weight(steady + i);
  }
  return t.take();
}

// Megatron's order of a rank's k-th forward and backward: micro-batches in
// groups of p, each group through chunk 0, 1, ..., v - 1 (backwards: v - 1,
// ..., 0). Example p 2, v 2: forwards 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1 ...,
// backwards 0.1 1.1 0.0 1.0 2.1 3.1 ...
MicroChunk forward_micro_chunk(int k, int p, int v) {
  const int group = k / (p * v), at = k % (p * v);
  return {group * p + at % p, at / p};
}
MicroChunk backward_micro_chunk(int k, int p, int v) {
  const MicroChunk f = forward_micro_chunk(k, p, v);
  return {f.micro_batch, v - 1 - f.chunk};
}

// Interleaved, in lock-step rounds (see the header): rank r's k-th forward
// in round r + k, so that rank r + 1 receives in round i the output rank r
// sent in round i - 1, and rank 0 the output of rank p - 1's chunk c, which
// comes p - 1 rounds later in rank p - 1's order and p forwards later in
// rank 0's (the same micro-batch, chunk c + 1). The k-th backward in round
// e + k, e = (v + 1) p - 2 - r: rank p - 1 runs the last virtual stage's
// backward of a micro-batch in the round of its forward (its first
// backward, 0.(v-1), is forward (v - 1) p), and each lower rank one round
// later than the one above it. Each round: forward, forward exchange,
// backward, backward exchange, the halves without a peer left out; the
// round before the first backward receives its gradient. Example p 2, r 1,
// v 2, m 2: forwards 0 to 3 in rounds 1 to 4, e = 3, backwards 0 to 3 in
// rounds 3 to 6 (the table in the header).
std::vector<Action> interleaved(int r, int p, int m, int v) {
  Builder t(r, p, v);
  const int total = v * m;
  const int first_forward = r;
  const int first_backward = (v + 1) * p - 2 - r;
  const auto f = [&](int k) { return forward_micro_chunk(k, p, v); };
  const auto b = [&](int k) { return backward_micro_chunk(k, p, v); };
  t.recv_forward(f(0).micro_batch, f(0).chunk);
  for (int round = std::min(first_forward, first_backward - 1); round < first_backward + total; ++round) {
    const int k = round - first_forward, kb = round - first_backward;
    if (k >= 0 && k < total) {
      t.forward(f(k).micro_batch, f(k).chunk);
      if (k + 1 < total)
        t.send_forward_recv_forward(f(k), f(k + 1));
      else
        t.send_forward(f(k).micro_batch, f(k).chunk);
    }
    if (kb == -1) t.recv_backward(b(0).micro_batch, b(0).chunk);
    if (kb >= 0) {
      t.backward(b(kb).micro_batch, b(kb).chunk);
      if (kb + 1 < total)
        t.send_backward_recv_backward(b(kb), b(kb + 1));
      else
        t.send_backward(b(kb).micro_batch, b(kb).chunk);
    }
  }
  return t.take();
}

}  // namespace

std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int micro_batches) {
  return stage_actions(schedule, stage, stages, micro_batches, 1);
}

std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int micro_batches,
                                  int virtual_stages) {
  check_shape(stage, stages, micro_batches);
  const int m = micro_batches, v = virtual_stages;
  if (schedule != Schedule::kInterleaved) {
    HT_CHECK_ARG(v == 1,
                 "pipeline schedule {}: virtual_stages {} asks for model chunks, which only the interleaved "
                 "schedule has: pass virtual_stages=1, or use Schedule::kInterleaved",
                 schedule_name(schedule), v);
  }
  switch (schedule) {
    case Schedule::kGPipe: return gpipe(stage, stages, m);
    case Schedule::k1F1B: return one_f_one_b(stage, stages, m, /*split=*/false);
    case Schedule::kZeroBubbleH1: return one_f_one_b(stage, stages, m, /*split=*/true);
    case Schedule::kInterleaved: break;
  }
  HT_CHECK_ARG(v >= 1, "interleaved pipeline: virtual_stages {} is not a number of model chunks per rank: use 1 "
               "or more (1 is plain 1F1B; Megatron uses 2 to 4)", v);
  HT_CHECK_ARG(m % stages == 0,
               "interleaved pipeline: {} micro-batches is not a multiple of the {} pipeline ranks (the schedule "
               "runs micro-batches in groups of {}): use {}{} micro-batches, or the 1f1b schedule",
               m, stages, stages, m / stages > 0 ? fmt::format("{} or ", m / stages * stages) : std::string(),
               (m / stages + 1) * stages);
  // One chunk is no ring: 1F1B's table, with its lower memory.
  if (v == 1) return one_f_one_b(stage, stages, m, /*split=*/false);
  return interleaved(stage, stages, m, v);
}

std::vector<Action> forward_only_actions(int stage, int stages, int micro_batches, int virtual_stages) {
  check_shape(stage, stages, micro_batches);
  HT_CHECK_ARG(virtual_stages >= 1, "forward-only pipeline: virtual_stages {} is not a number of model chunks", virtual_stages);
  Builder t(stage, stages, virtual_stages);
  for (int i = 0; i < micro_batches; ++i)
    for (int c = 0; c < virtual_stages; ++c) {
      t.recv_forward(i, c);
      t.forward(i, c);
      t.send_forward(i, c);
    }
  return t.take();
}

int peak_in_flight(const std::vector<Action>& actions) {
  int now = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) --now;
  }
  return peak;
}

namespace {

// The halves of a transfer: which directed link between ranks, which end,
// and the data: its kind, micro-batch and the virtual stage that computed
// it, which both ends must agree on. `chunk` is the chunk of the action
// that posts the half, `peer_stage` the virtual stage at the other end (for
// messages).
struct Half {
  int from = 0, to = 0;  // the link from -> to; -1 where the peer does not exist
  bool send = false;
  bool forward = false;  // an activation (to the next virtual stage) rather than a gradient
  int micro_batch = 0;
  int chunk = 0;
  int producer = 0;  // the virtual stage that computed the data
  int peer_stage = 0;
};

// Ranks and chunks: virtual stage chunk * ranks + rank.
struct Ring {
  int ranks = 0, chunks = 1;
  int rank_of(int virtual_stage) const {
    return virtual_stage >= 0 && virtual_stage < ranks * chunks ? virtual_stage % ranks : -1;
  }
};

// The transfers of action `a` on rank s (none for compute and virtual stage
// 0's loads).
std::vector<Half> halves(const Action& a, int s, const Ring& ring) {
  const auto recv_forward = [&](int mb, int chunk, std::vector<Half>& out) {
    const int j = chunk * ring.ranks + s;
    if (j > 0) out.push_back({ring.rank_of(j - 1), s, false, true, mb, chunk, j - 1, j - 1});
  };
  const auto send_forward = [&](int mb, int chunk, std::vector<Half>& out) {
    const int j = chunk * ring.ranks + s;
    out.push_back({s, ring.rank_of(j + 1), true, true, mb, chunk, j, j + 1});
  };
  const auto recv_backward = [&](int mb, int chunk, std::vector<Half>& out) {
    const int j = chunk * ring.ranks + s;
    out.push_back({ring.rank_of(j + 1), s, false, false, mb, chunk, j + 1, j + 1});
  };
  const auto send_backward = [&](int mb, int chunk, std::vector<Half>& out) {
    const int j = chunk * ring.ranks + s;
    out.push_back({s, ring.rank_of(j - 1), true, false, mb, chunk, j, j - 1});
  };
  std::vector<Half> out;
  const int mb = a.micro_batch, c = a.chunk, rmb = a.recv_micro_batch, rc = a.recv_chunk;
  switch (a.kind) {
    case ActionKind::kRecvForward: recv_forward(mb, c, out); break;
    case ActionKind::kSendForward: send_forward(mb, c, out); break;
    case ActionKind::kRecvBackward: recv_backward(mb, c, out); break;
    case ActionKind::kSendBackward: send_backward(mb, c, out); break;
    case ActionKind::kSendForwardRecvBackward:
      send_forward(mb, c, out);
      recv_backward(rmb, rc, out);
      break;
    case ActionKind::kSendBackwardRecvForward:
      send_backward(mb, c, out);
      recv_forward(rmb, rc, out);
      break;
    case ActionKind::kSendForwardRecvForward:
      send_forward(mb, c, out);
      recv_forward(rmb, rc, out);
      break;
    case ActionKind::kSendBackwardRecvBackward:
      send_backward(mb, c, out);
      recv_backward(rmb, rc, out);
      break;
    case ActionKind::kForward:
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight: break;
  }
  return out;
}

// "activation of micro-batch 3" (one chunk) or "activation of micro-batch 3 chunk 1".
std::string data_str(const Half& h, const Ring& ring) {
  return fmt::format("{} of micro-batch {}{}", h.forward ? "activation" : "gradient", h.micro_batch,
                     ring.chunks > 1 ? fmt::format(" chunk {}", h.chunk) : std::string());
}

std::string half_str(const Half& h, const Ring& ring) {
  const int peer = h.send ? h.to : h.from;
  const std::string where = peer >= 0 ? fmt::format("stage {}", peer)
                            : ring.chunks > 1 ? fmt::format("virtual stage {}", h.peer_stage)
                                              : fmt::format("stage {}", h.peer_stage);
  return fmt::format("{} {} {} {}", h.send ? "send" : "receive", data_str(h, ring), h.send ? "to" : "from", where);
}

int compute_ticks(ActionKind kind, const SimCosts& costs) {
  switch (kind) {
    case ActionKind::kForward: return costs.forward_ticks;
    case ActionKind::kBackward: return costs.backward_ticks;
    case ActionKind::kBackwardInput: return costs.backward_input_ticks;
    case ActionKind::kBackwardWeight: return costs.backward_weight_ticks;
    default: return 1;  // a transfer (once matched) or a load
  }
}

// The first action that names a chunk or a stage that does not exist;
// empty when none.
std::string table_problem(const std::vector<std::vector<Action>>& tables, const Ring& ring) {
  const int p = int(tables.size());
  const bool chunked = ring.chunks > 1;
  for (int s = 0; s < p; ++s)
    for (std::size_t i = 0; i < tables[std::size_t(s)].size(); ++i) {
      const Action& a = tables[std::size_t(s)][i];
      if (a.chunk < 0 || a.recv_chunk < 0)
        return fmt::format("stage {} action {} ({}) names a negative chunk", s, i, action_str(a, chunked));
      for (const Half& h : halves(a, s, ring))
        if (h.from < 0 || h.to < 0)
          return fmt::format("stage {} action {} ({}) would {}, which does not exist in {} stages{}", s, i,
                             action_str(a, chunked), half_str(h, ring), p,
                             chunked ? fmt::format(" of {} chunks", ring.chunks) : std::string());
    }
  return {};
}

// The simulator between two ticks: each stage's next action, whether it is
// posted, its transfer halves still pending and the ticks its compute or
// load has left.
struct Simulation {
  const std::vector<std::vector<Action>>& tables;
  const SimCosts& costs;
  Ring ring;
  std::vector<std::size_t> pc;
  std::vector<std::vector<Half>> pending;
  std::vector<bool> posted;
  std::vector<int> ticks_left;

  Simulation(const std::vector<std::vector<Action>>& t, const SimCosts& c, Ring r)
      : tables(t), costs(c), ring(r), pc(t.size(), 0), pending(t.size()), posted(t.size(), false),
        ticks_left(t.size(), 0) {}

  int stages() const { return int(tables.size()); }
  bool done(int s) const { return pc[std::size_t(s)] >= tables[std::size_t(s)].size(); }
  const Action& current(int s) const { return tables[std::size_t(s)][pc[std::size_t(s)]]; }
  std::string str(int s) const { return action_str(current(s), ring.chunks > 1); }

  // Every stage without a posted action posts its next.
  void post() {
    for (int s = 0; s < stages(); ++s)
      if (!done(s) && !posted[std::size_t(s)]) {
        pending[std::size_t(s)] = halves(current(s), s, ring);
        ticks_left[std::size_t(s)] = compute_ticks(current(s).kind, costs);
        posted[std::size_t(s)] = true;
      }
  }

  // Matches pending sends with pending receives on the same link; returns
  // the halves left pending. A pair that meets with another micro-batch,
  // direction or producer sets `problem`.
  std::vector<std::vector<Half>> match(int tick, bool& progress, std::string& problem) const {
    std::vector<std::vector<Half>> left = pending;
    for (int s = 0; s < stages(); ++s)
      for (const Half& h : pending[std::size_t(s)]) {
        if (!h.send) continue;
        std::vector<Half>& peer = left[std::size_t(h.to)];
        const auto it = std::find_if(peer.begin(), peer.end(),
                                     [&](const Half& q) { return !q.send && q.from == h.from && q.to == h.to; });
        if (it == peer.end()) continue;
        if (it->forward != h.forward || it->micro_batch != h.micro_batch || it->producer != h.producer) {
          problem = mismatch(tick, s, h, *it);
          return left;
        }
        peer.erase(it);
        std::vector<Half>& mine = left[std::size_t(s)];
        mine.erase(std::find_if(mine.begin(), mine.end(), [&](const Half& q) {
          return q.send && q.from == h.from && q.to == h.to;
        }));
        progress = true;
      }
    return left;
  }

  std::string mismatch(int tick, int s, const Half& h, const Half& q) const {
    if (ring.chunks == 1 && q.forward == h.forward)
      return fmt::format("tick {}: stage {} sends the {} of micro-batch {} to stage {}, which receives micro-batch {}",
                         tick, s, h.forward ? "activation" : "gradient", h.micro_batch, h.to, q.micro_batch);
    return fmt::format("tick {}: stage {} sends the {} of micro-batch {} from virtual stage {} to stage {}, which "
                       "expects the {} of micro-batch {} from virtual stage {}",
                       tick, s, h.forward ? "activation" : "gradient", h.micro_batch, h.producer, h.to,
                       q.forward ? "activation" : "gradient", q.micro_batch, q.producer);
  }

  // Completes what finished at `tick` (a compute or load once its ticks
  // are spent, a transfer once all its halves matched) into `order`;
  // returns whether every stage is done.
  bool complete(std::vector<std::vector<Half>> left, int tick, bool& progress, std::vector<SimEvent>& order) {
    bool all_done = true;
    for (int s = 0; s < stages(); ++s) {
      if (done(s)) continue;
      const bool had_halves = !halves(current(s), s, ring).empty();
      pending[std::size_t(s)] = std::move(left[std::size_t(s)]);
      if (pending[std::size_t(s)].empty()) {
        if (!had_halves) {
          progress = true;
          if (--ticks_left[std::size_t(s)] > 0) {
            all_done = false;
            continue;
          }
        }
        order.push_back({s, int(pc[std::size_t(s)]), tick});
        ++pc[std::size_t(s)];
        posted[std::size_t(s)] = false;
      }
      all_done = all_done && done(s);
    }
    return all_done;
  }

  // Every stage not done, its action and the halves it waits on.
  std::string blocked() const {
    std::string out;
    for (int s = 0; s < stages(); ++s) {
      if (done(s)) continue;
      std::vector<std::string> waits;
      for (const Half& h : pending[std::size_t(s)]) waits.push_back(half_str(h, ring));
      out += fmt::format("{}stage {} at action {} ({}: {})", out.empty() ? "" : "; ", s, pc[std::size_t(s)], str(s),
                         fmt::join(waits, ", "));
    }
    return out;
  }
};

}  // namespace

SimResult simulate(const std::vector<std::vector<Action>>& tables, const SimCosts& costs) {
  HT_CHECK_ARG(costs.forward_ticks >= 1 && costs.backward_ticks >= 1 && costs.backward_input_ticks >= 1 &&
                   costs.backward_weight_ticks >= 1,
               "simulate: every compute costs at least one tick, got forward {}, backward {}, backward-input {}, "
               "backward-weight {}",
               costs.forward_ticks, costs.backward_ticks, costs.backward_input_ticks, costs.backward_weight_ticks);
  // Each rank's current action is posted; its transfer halves are pending
  // until matched. Per round: every compute or load advances (and completes
  // once its ticks are spent); for each pending send half whose receiver's
  // current action has a pending receive half on the same link, both
  // complete (in-order matching per link follows, since each rank posts one
  // action at a time). An action completes when all its halves have; the
  // rank then posts its next.
  SimResult r;
  Ring ring{int(tables.size()), 1};
  for (const auto& t : tables)
    for (const Action& a : t) ring.chunks = std::max({ring.chunks, a.chunk + 1, a.recv_chunk + 1});
  r.problem = table_problem(tables, ring);
  if (!r.problem.empty()) return r;
  Simulation sim(tables, costs, ring);
  for (int tick = 1;; ++tick) {
    sim.post();
    bool progress = false;
    std::vector<std::vector<Half>> left = sim.match(tick, progress, r.problem);
    r.ticks = tick;
    if (!r.problem.empty()) return r;
    if (sim.complete(std::move(left), tick, progress, r.order)) {
      r.completed = true;
      return r;
    }
    if (!progress) {
      r.problem = fmt::format("deadlock at tick {}: {}", tick, sim.blocked());
      return r;
    }
  }
}

}  // namespace ht::parallel
