// Pipeline schedule tables (GPipe, 1F1B), their in-flight count, and a
// simulator of all stages with blocking point-to-point transfers.
#include "ht/parallel/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "ht/core/error.h"

namespace ht::parallel {

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::kGPipe;
  if (name == "1f1b") return Schedule::k1F1B;
  HT_CHECK(false, ErrorKind::kConfig, "--schedule '{}' is not a pipeline schedule: choose gpipe or 1f1b", name);
  return Schedule::k1F1B;
}

std::string schedule_name(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

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
  }
  return "?";
}

std::string action_str(const Action& a) {
  switch (a.kind) {
    case ActionKind::kRecvForward: return fmt::format("R{}", a.micro_batch);
    case ActionKind::kForward: return fmt::format("F{}", a.micro_batch);
    case ActionKind::kSendForward: return fmt::format("S{}", a.micro_batch);
    case ActionKind::kRecvBackward: return fmt::format("r{}", a.micro_batch);
    case ActionKind::kBackward: return fmt::format("b{}", a.micro_batch);
    case ActionKind::kSendBackward: return fmt::format("s{}", a.micro_batch);
    case ActionKind::kSendForwardRecvBackward: return fmt::format("SFRB({},{})", a.micro_batch, a.recv_micro_batch);
    case ActionKind::kSendBackwardRecvForward: return fmt::format("SBRF({},{})", a.micro_batch, a.recv_micro_batch);
  }
  return "?";
}

namespace {

void check_shape(int stage, int stages, int micro_batches) {
  HT_CHECK_ARG(stages > 0 && stage >= 0 && stage < stages, "stage {} outside a pipeline of {}", stage, stages);
  HT_CHECK_ARG(micro_batches > 0, "pipeline: a step needs at least one micro-batch, got {}", micro_batches);
}

// The executor's calls, each appending what it does on this stage (nothing
// for a transfer without a peer), in the words of the Pipeline it replaces.
class Builder {
 public:
  Builder(int stage, int stages) : first_(stage == 0), last_(stage == stages - 1) {}

  void recv_forward(int mb) { add(ActionKind::kRecvForward, mb); }
  void forward(int mb) { add(ActionKind::kForward, mb); }
  void send_forward(int mb) {
    if (!last_) add(ActionKind::kSendForward, mb);
  }
  void recv_backward(int mb) {
    if (!last_) add(ActionKind::kRecvBackward, mb);
  }
  void backward(int mb) { add(ActionKind::kBackward, mb); }
  void send_backward(int mb) {
    if (!first_) add(ActionKind::kSendBackward, mb);
  }
  void send_forward_recv_backward(int send_mb, int recv_mb) {
    if (!last_) add(ActionKind::kSendForwardRecvBackward, send_mb, recv_mb);
  }
  void send_backward_recv_forward(int send_mb, int recv_mb) {
    if (first_)
      add(ActionKind::kRecvForward, recv_mb);  // nothing to send; the next micro-batch is loaded
    else
      add(ActionKind::kSendBackwardRecvForward, send_mb, recv_mb);
  }

  std::vector<Action> take() { return std::move(out_); }

 private:
  void add(ActionKind kind, int mb, int recv_mb = -1) { out_.push_back({kind, mb, recv_mb}); }

  bool first_, last_;
  std::vector<Action> out_;
};

}  // namespace

std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int micro_batches) {
  check_shape(stage, stages, micro_batches);
  const int m = micro_batches;
  Builder t(stage, stages);
  if (schedule == Schedule::kGPipe) {
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
    t.backward(i);
    if (i + 1 == steady)
      t.send_backward(i);
    else
      t.send_backward_recv_forward(i, warmup + i + 1);
  }
  for (int i = 0; i < warmup; ++i) {
    t.recv_backward(steady + i);
    t.backward(steady + i);
    t.send_backward(steady + i);
  }
  return t.take();
}

std::vector<Action> forward_only_actions(int stage, int stages, int micro_batches) {
  check_shape(stage, stages, micro_batches);
  Builder t(stage, stages);
  for (int i = 0; i < micro_batches; ++i) {
    t.recv_forward(i);
    t.forward(i);
    t.send_forward(i);
  }
  return t.take();
}

int peak_in_flight(const std::vector<Action>& actions) {
  int now = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::kBackward) --now;
  }
  return peak;
}

namespace {

// The halves of a transfer: which directed link, which end, which micro-batch.
struct Half {
  int from = 0, to = 0;  // the link from -> to
  bool send = false;
  int micro_batch = 0;
  bool forward = false;  // an activation (from -> from + 1) rather than a gradient
};

// The transfers of action `a` on stage s (none for compute and stage 0's loads).
std::vector<Half> halves(const Action& a, int s) {
  switch (a.kind) {
    case ActionKind::kRecvForward:
      if (s == 0) return {};
      return {{s - 1, s, false, a.micro_batch, true}};
    case ActionKind::kSendForward: return {{s, s + 1, true, a.micro_batch, true}};
    case ActionKind::kRecvBackward: return {{s + 1, s, false, a.micro_batch, false}};
    case ActionKind::kSendBackward: return {{s, s - 1, true, a.micro_batch, false}};
    case ActionKind::kSendForwardRecvBackward:
      return {{s, s + 1, true, a.micro_batch, true}, {s + 1, s, false, a.recv_micro_batch, false}};
    case ActionKind::kSendBackwardRecvForward:
      return {{s, s - 1, true, a.micro_batch, false}, {s - 1, s, false, a.recv_micro_batch, true}};
    case ActionKind::kForward:
    case ActionKind::kBackward: return {};
  }
  return {};
}

std::string half_str(const Half& h) {
  const int peer = h.send ? h.to : h.from;
  return fmt::format("{} {} of micro-batch {} {} stage {}", h.send ? "send" : "receive",
                     h.forward ? "activation" : "gradient", h.micro_batch, h.send ? "to" : "from", peer);
}

}  // namespace

SimResult simulate(const std::vector<std::vector<Action>>& tables) {
  // Each stage's current action is posted; its transfer halves are pending
  // until matched. Per round: every compute or load completes; for each
  // pending send half whose receiver's current action has the matching
  // pending receive half on the same link, both complete (in-order matching
  // per link follows, since each stage posts one action at a time). An action
  // completes when all its halves have; the stage then posts its next.
  const int p = int(tables.size());
  SimResult r;
  for (int s = 0; s < p; ++s)
    for (std::size_t i = 0; i < tables[std::size_t(s)].size(); ++i)
      for (const Half& h : halves(tables[std::size_t(s)][i], s))
        if (h.from < 0 || h.from >= p || h.to < 0 || h.to >= p) {
          r.problem = fmt::format("stage {} action {} ({}) would {}, which does not exist in {} stages", s, i,
                                  action_str(tables[std::size_t(s)][i]), half_str(h), p);
          return r;
        }

  const std::size_t stages = tables.size();
  std::vector<std::size_t> pc(stages, 0);
  std::vector<std::vector<Half>> pending(stages);
  std::vector<bool> posted(stages, false);
  auto done = [&](int s) { return pc[std::size_t(s)] >= tables[std::size_t(s)].size(); };
  for (int tick = 1;; ++tick) {
    for (int s = 0; s < p; ++s)
      if (!done(s) && !posted[std::size_t(s)]) {
        pending[std::size_t(s)] = halves(tables[std::size_t(s)][pc[std::size_t(s)]], s);
        posted[std::size_t(s)] = true;
      }
    // Match pending sends with pending receives on the same link.
    std::vector<std::vector<Half>> left = pending;
    bool progress = false;
    for (int s = 0; s < p; ++s)
      for (const Half& h : pending[std::size_t(s)]) {
        if (!h.send) continue;
        std::vector<Half>& peer = left[std::size_t(h.to)];
        const auto it = std::find_if(peer.begin(), peer.end(),
                                     [&](const Half& q) { return !q.send && q.from == h.from && q.to == h.to; });
        if (it == peer.end()) continue;
        if (it->micro_batch != h.micro_batch) {
          r.problem = fmt::format("tick {}: stage {} sends the {} of micro-batch {} to stage {}, which receives "
                                  "micro-batch {}",
                                  tick, s, h.forward ? "activation" : "gradient", h.micro_batch, h.to,
                                  it->micro_batch);
          r.ticks = tick;
          return r;
        }
        peer.erase(it);
        std::vector<Half>& mine = left[std::size_t(s)];
        mine.erase(std::find_if(mine.begin(), mine.end(),
                                [&](const Half& q) { return q.send && q.from == h.from && q.to == h.to; }));
        progress = true;
      }
    bool all_done = true;
    for (int s = 0; s < p; ++s) {
      if (done(s)) continue;
      const std::size_t i = pc[std::size_t(s)];
      const bool had_halves = !halves(tables[std::size_t(s)][i], s).empty();
      pending[std::size_t(s)] = left[std::size_t(s)];
      if (pending[std::size_t(s)].empty()) {
        // A compute or load completes this round; a transfer once all its halves matched.
        r.order.push_back({s, int(i), tick});
        ++pc[std::size_t(s)];
        posted[std::size_t(s)] = false;
        progress = progress || !had_halves;
      }
      all_done = all_done && done(s);
    }
    if (all_done) {
      r.completed = true;
      r.ticks = tick;
      return r;
    }
    if (!progress) {
      std::string blocked;
      for (int s = 0; s < p; ++s) {
        if (done(s)) continue;
        const std::size_t i = pc[std::size_t(s)];
        std::vector<std::string> waits;
        for (const Half& h : pending[std::size_t(s)]) waits.push_back(half_str(h));
        blocked += fmt::format("{}stage {} at action {} ({}: {})", blocked.empty() ? "" : "; ", s, i,
                               action_str(tables[std::size_t(s)][i]), fmt::join(waits, ", "));
      }
      r.problem = fmt::format("deadlock at tick {}: {}", tick, blocked);
      r.ticks = tick;
      return r;
    }
  }
}

}  // namespace ht::parallel
