// Pipeline schedule tables, exhaustively for 1-8 stages and 1-16
// micro-batches: today's executor order, one forward and one backward per
// micro-batch, matching transfers, no deadlock under blocking sends, and the
// activations held.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "ht/parallel/schedule.h"
#include "test_util.h"

namespace ht::parallel {
namespace {

using K = ActionKind;

std::string str(const std::vector<Action>& t) {
  std::string out;
  for (const Action& a : t) out += (out.empty() ? "" : " ") + action_str(a);
  return out;
}

TEST(Schedule, WorkedExampleFromTheHeader) {
  EXPECT_EQ(str(stage_actions(Schedule::k1F1B, 0, 2, 3)),
            "R0 F0 S0 R1 F1 SFRB(1,0) b0 R2 F2 SFRB(2,1) b1 r2 b2");
  EXPECT_EQ(str(stage_actions(Schedule::k1F1B, 1, 2, 3)), "R0 F0 b0 SBRF(0,1) F1 b1 SBRF(1,2) F2 b2 s2");
  EXPECT_EQ(str(stage_actions(Schedule::k1F1B, 1, 4, 4)),
            "R0 F0 S0 R1 F1 S1 R2 F2 SFRB(2,0) b0 SBRF(0,3) F3 SFRB(3,1) b1 s1 r2 b2 s2 r3 b3 s3");
}

TEST(Schedule, OneF1BFirstOfFourStagesEightMicroBatchesByHand) {
  // Warm-up p - s - 1 = 3 forwards; 5 steady pairs, where stage 0 loads the
  // next micro-batch instead of sending a gradient; 3 backwards to drain.
  const std::vector<Action> want{
      {K::kRecvForward, 0},  {K::kForward, 0}, {K::kSendForward, 0},                  //
      {K::kRecvForward, 1},  {K::kForward, 1}, {K::kSendForward, 1},                  //
      {K::kRecvForward, 2},  {K::kForward, 2}, {K::kSendForward, 2},                  //
      {K::kRecvForward, 3},                                                           //
      {K::kForward, 3},      {K::kSendForwardRecvBackward, 3, 0}, {K::kBackward, 0},  //
      {K::kRecvForward, 4},                                                           //
      {K::kForward, 4},      {K::kSendForwardRecvBackward, 4, 1}, {K::kBackward, 1},  //
      {K::kRecvForward, 5},                                                           //
      {K::kForward, 5},      {K::kSendForwardRecvBackward, 5, 2}, {K::kBackward, 2},  //
      {K::kRecvForward, 6},                                                           //
      {K::kForward, 6},      {K::kSendForwardRecvBackward, 6, 3}, {K::kBackward, 3},  //
      {K::kRecvForward, 7},                                                           //
      {K::kForward, 7},      {K::kSendForwardRecvBackward, 7, 4}, {K::kBackward, 4},  //
      {K::kRecvBackward, 5}, {K::kBackward, 5},                                       //
      {K::kRecvBackward, 6}, {K::kBackward, 6},                                       //
      {K::kRecvBackward, 7}, {K::kBackward, 7},
  };
  EXPECT_EQ(stage_actions(Schedule::k1F1B, 0, 4, 8), want);
}

// Pipeline::train_step and evaluate at d69d5a5 (src/parallel/pipeline.cc),
// their loops copied with tensors replaced by a recorder of Step's calls: the
// micro-batch of each call follows from Step's counters, as it does there.
class TodayStep {
 public:
  TodayStep(int stage, int stages) : first_(stage == 0), last_(stage == stages - 1) {}
  int recv_forward() {
    log_.push_back({K::kRecvForward, forwards_});  // stage 0 loads batches_[forwards_]
    return 0;
  }
  int forward(int) {
    log_.push_back({K::kForward, forwards_++});
    return 0;
  }
  void send_forward(int) {
    if (!last_) log_.push_back({K::kSendForward, forwards_ - 1});
  }
  int recv_backward() {
    if (!last_) log_.push_back({K::kRecvBackward, backwards_});
    return 0;
  }
  int send_forward_recv_backward(int) {
    if (!last_) log_.push_back({K::kSendForwardRecvBackward, forwards_ - 1, backwards_});
    return 0;
  }
  int backward(int) {
    log_.push_back({K::kBackward, backwards_++});
    return 0;
  }
  void send_backward(int) {
    if (!first_) log_.push_back({K::kSendBackward, backwards_ - 1});
  }
  int send_backward_recv_forward(int) {
    if (first_)
      log_.push_back({K::kRecvForward, forwards_});
    else
      log_.push_back({K::kSendBackwardRecvForward, backwards_ - 1, forwards_});
    return 0;
  }
  const std::vector<Action>& log() const { return log_; }

 private:
  bool first_, last_;
  int forwards_ = 0, backwards_ = 0;
  std::vector<Action> log_;
};

std::vector<Action> train_step_today(Schedule schedule, int stage, int stages, int m) {
  TodayStep s(stage, stages);
  if (schedule == Schedule::kGPipe) {
    for (int i = 0; i < m; ++i) s.send_forward(s.forward(s.recv_forward()));
    for (int i = 0; i < m; ++i) s.send_backward(s.backward(s.recv_backward()));
    return s.log();
  }
  const int warmup = std::min(stages - stage - 1, m);
  const int steady = m - warmup;
  for (int i = 0; i < warmup; ++i) s.send_forward(s.forward(s.recv_forward()));
  int x = steady > 0 ? s.recv_forward() : 0;
  for (int i = 0; i < steady; ++i) {
    const int dy = s.send_forward_recv_backward(s.forward(x));
    const int dx = s.backward(dy);
    if (i + 1 == steady)
      s.send_backward(dx);
    else
      x = s.send_backward_recv_forward(dx);
  }
  for (int i = 0; i < warmup; ++i) s.send_backward(s.backward(s.recv_backward()));
  return s.log();
}

std::vector<Action> evaluate_today(int stage, int stages, int m) {
  TodayStep s(stage, stages);
  for (int i = 0; i < m; ++i) s.send_forward(s.forward(s.recv_forward()));
  return s.log();
}

constexpr Schedule kSchedules[] = {Schedule::kGPipe, Schedule::k1F1B};

TEST(Schedule, TablesAreTodaysOrderOfOperations) {
  for (Schedule sched : kSchedules)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m)
        for (int s = 0; s < p; ++s) {
          ASSERT_EQ(stage_actions(sched, s, p, m), train_step_today(sched, s, p, m))
              << schedule_name(sched) << " stage " << s << " of " << p << ", " << m << " micro-batches";
          ASSERT_EQ(forward_only_actions(s, p, m), evaluate_today(s, p, m));
        }
}

// What an executor holding one tensor per slot (x, y, dy, dx) would see:
// every compute finds its input from the right micro-batch, every send the
// right output, and each transfer has a peer.
void expect_dataflow(const std::vector<Action>& t, int s, int p) {
  int x = -1, y = -1, dy = -1, dx = -1;
  for (const Action& a : t) {
    switch (a.kind) {
      case K::kRecvForward: x = a.micro_batch; break;
      case K::kForward:
        EXPECT_EQ(x, a.micro_batch) << "forward without its input";
        y = a.micro_batch;
        break;
      case K::kSendForward:
        EXPECT_LT(s, p - 1);
        EXPECT_EQ(y, a.micro_batch);
        break;
      case K::kRecvBackward:
        EXPECT_LT(s, p - 1);
        dy = a.micro_batch;
        break;
      case K::kBackward:
        if (s < p - 1) {
          EXPECT_EQ(dy, a.micro_batch) << "backward without its output's gradient";
        }
        dx = a.micro_batch;
        break;
      case K::kSendBackward:
        EXPECT_GT(s, 0);
        EXPECT_EQ(dx, a.micro_batch);
        break;
      case K::kSendForwardRecvBackward:
        EXPECT_LT(s, p - 1);
        EXPECT_EQ(y, a.micro_batch);
        dy = a.recv_micro_batch;
        break;
      case K::kSendBackwardRecvForward:
        EXPECT_GT(s, 0);
        EXPECT_EQ(dx, a.micro_batch);
        x = a.recv_micro_batch;
        break;
    }
  }
}

// The micro-batches stage s sends on (or receives from) a link, in order.
std::vector<int> sent(const std::vector<Action>& t, bool forward) {
  std::vector<int> out;
  for (const Action& a : t) {
    if (forward && (a.kind == K::kSendForward || a.kind == K::kSendForwardRecvBackward)) out.push_back(a.micro_batch);
    if (!forward && (a.kind == K::kSendBackward || a.kind == K::kSendBackwardRecvForward)) out.push_back(a.micro_batch);
  }
  return out;
}
std::vector<int> received(const std::vector<Action>& t, bool forward) {
  std::vector<int> out;
  for (const Action& a : t) {
    if (forward && a.kind == K::kRecvForward) out.push_back(a.micro_batch);
    if (forward && a.kind == K::kSendBackwardRecvForward) out.push_back(a.recv_micro_batch);
    if (!forward && a.kind == K::kRecvBackward) out.push_back(a.micro_batch);
    if (!forward && a.kind == K::kSendForwardRecvBackward) out.push_back(a.recv_micro_batch);
  }
  return out;
}

TEST(Schedule, EverySweepIsConsistentAndCompletesUnderBlockingSends) {
  for (Schedule sched : kSchedules)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) {
        SCOPED_TRACE(schedule_name(sched) + " p " + std::to_string(p) + " m " + std::to_string(m));
        std::vector<std::vector<Action>> tables;
        for (int s = 0; s < p; ++s) tables.push_back(stage_actions(sched, s, p, m));
        std::vector<int> in_order(static_cast<std::size_t>(m), 0);
        for (int i = 0; i < m; ++i) in_order[std::size_t(i)] = i;
        for (int s = 0; s < p; ++s) {
          const std::vector<Action>& t = tables[std::size_t(s)];
          // One forward and one backward per micro-batch, both in micro-batch
          // order, each forward before its backward.
          std::vector<int> forwards, backwards;
          std::map<int, int> forward_at;
          for (std::size_t i = 0; i < t.size(); ++i) {
            if (t[i].kind == K::kForward) {
              forwards.push_back(t[i].micro_batch);
              forward_at[t[i].micro_batch] = int(i);
            }
            if (t[i].kind == K::kBackward) {
              backwards.push_back(t[i].micro_batch);
              ASSERT_TRUE(forward_at.count(t[i].micro_batch)) << "backward before forward, stage " << s;
            }
          }
          EXPECT_EQ(forwards, in_order);
          EXPECT_EQ(backwards, in_order);
          expect_dataflow(t, s, p);
          // Inputs arrive in order on every stage (loaded on the first).
          EXPECT_EQ(received(t, true), in_order);
          // Activations held: at most p - s under 1F1B (exactly min(p - s, m)), m under GPipe.
          const int peak = peak_in_flight(t);
          if (sched == Schedule::k1F1B) {
            EXPECT_LE(peak, p - s);
            EXPECT_EQ(peak, std::min(p - s, m));
          } else {
            EXPECT_EQ(peak, m);
          }
          // Sends match the neighbour's receives: same micro-batches, same order.
          if (s + 1 < p) {
            EXPECT_EQ(sent(t, true), in_order);
            EXPECT_EQ(sent(t, true), received(tables[std::size_t(s) + 1], true));
            EXPECT_EQ(received(t, false), sent(tables[std::size_t(s) + 1], false));
            EXPECT_EQ(received(t, false), in_order);
          } else {
            EXPECT_TRUE(sent(t, true).empty());
            EXPECT_TRUE(received(t, false).empty());
          }
          if (s == 0) {
            EXPECT_TRUE(sent(t, false).empty());
          }
        }
        const SimResult r = simulate(tables);
        ASSERT_TRUE(r.completed) << r.problem;
        EXPECT_TRUE(r.problem.empty());
        std::size_t actions = 0;
        for (const auto& t : tables) actions += t.size();
        EXPECT_EQ(r.order.size(), actions);
        // Causality: a micro-batch's forward on stage s + 1 after its forward on
        // s, its backward on s after its backward on s + 1.
        std::map<std::tuple<int, int, int>, int> tick;  // (stage, kind, mb) -> tick
        for (const SimEvent& e : r.order) {
          const Action& a = tables[std::size_t(e.stage)][std::size_t(e.index)];
          tick[{e.stage, int(a.kind), a.micro_batch}] = e.tick;
        }
        for (int s = 0; s + 1 < p; ++s)
          for (int i = 0; i < m; ++i) {
            EXPECT_LT((tick[{s, int(K::kForward), i}]), (tick[{s + 1, int(K::kForward), i}]));
            EXPECT_GT((tick[{s, int(K::kBackward), i}]), (tick[{s + 1, int(K::kBackward), i}]));
          }
        // Completion order is by tick; each stage completes its table in order.
        std::vector<int> next(static_cast<std::size_t>(p), 0);
        for (std::size_t i = 0; i < r.order.size(); ++i) {
          if (i > 0) {
            EXPECT_LE(r.order[i - 1].tick, r.order[i].tick);
          }
          EXPECT_EQ(r.order[i].index, next[std::size_t(r.order[i].stage)]++);
        }
        // Evaluation tables complete too.
        std::vector<std::vector<Action>> eval;
        for (int s = 0; s < p; ++s) eval.push_back(forward_only_actions(s, p, m));
        EXPECT_TRUE(simulate(eval).completed);
      }
}

// 1F1B with each paired transfer split into a blocking send then a receive:
// neighbours both send first and wait for each other.
std::vector<Action> unpaired(const std::vector<Action>& t) {
  std::vector<Action> out;
  for (const Action& a : t) {
    if (a.kind == K::kSendForwardRecvBackward) {
      out.push_back({K::kSendForward, a.micro_batch});
      out.push_back({K::kRecvBackward, a.recv_micro_batch});
    } else if (a.kind == K::kSendBackwardRecvForward) {
      out.push_back({K::kSendBackward, a.micro_batch});
      out.push_back({K::kRecvForward, a.recv_micro_batch});
    } else {
      out.push_back(a);
    }
  }
  return out;
}

TEST(Simulator, FindsTheDeadlockThatPairedTransfersAvoid) {
  std::vector<std::vector<Action>> tables;
  for (int s = 0; s < 2; ++s) tables.push_back(unpaired(stage_actions(Schedule::k1F1B, s, 2, 2)));
  const SimResult r = simulate(tables);
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.problem.find("deadlock"), std::string::npos) << r.problem;
  EXPECT_NE(r.problem.find("stage 0 at action 5 (S1: send activation of micro-batch 1 to stage 1)"), std::string::npos)
      << r.problem;
  EXPECT_NE(r.problem.find("stage 1 at action 3 (s0: send gradient of micro-batch 0 to stage 0)"), std::string::npos)
      << r.problem;
  // Every 1F1B with two or more stages and micro-batches deadlocks so.
  for (int p = 2; p <= 6; ++p)
    for (int m = 2; m <= 8; ++m) {
      std::vector<std::vector<Action>> t;
      for (int s = 0; s < p; ++s) t.push_back(unpaired(stage_actions(Schedule::k1F1B, s, p, m)));
      EXPECT_FALSE(simulate(t).completed) << p << " stages, " << m << " micro-batches";
    }
}

TEST(Simulator, FindsMismatchedAndImpossibleTransfers) {
  std::vector<std::vector<Action>> tables{{{K::kRecvForward, 0}, {K::kForward, 0}, {K::kSendForward, 0}},
                                          {{K::kRecvForward, 1}, {K::kForward, 1}}};
  SimResult r = simulate(tables);
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.problem.find("stage 0 sends the activation of micro-batch 0 to stage 1, which receives micro-batch 1"),
            std::string::npos)
      << r.problem;
  r = simulate({{{K::kForward, 0}, {K::kSendForward, 0}}});
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.problem.find("send activation of micro-batch 0 to stage 1, which does not exist in 1 stages"),
            std::string::npos)
      << r.problem;
  EXPECT_TRUE(simulate({}).completed);
}

TEST(Schedule, NamesAndBadArguments) {
  EXPECT_EQ(parse_schedule("gpipe"), Schedule::kGPipe);
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::k1F1B);
  for (Schedule s : kSchedules) EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  EXPECT_TRUE(test::throws_error([] { parse_schedule("zb"); }, ErrorKind::kConfig,
                                 {"--schedule 'zb' is not a pipeline schedule: choose gpipe or 1f1b"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::k1F1B, 2, 2, 4); },
                                 ErrorKind::kInvalidArgument, {"stage 2 outside a pipeline of 2"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::kGPipe, 0, 2, 0); },
                                 ErrorKind::kInvalidArgument, {"at least one micro-batch"}));
  EXPECT_EQ(action_kind_name(K::kSendBackwardRecvForward), "send-backward-recv-forward");
}

}  // namespace
}  // namespace ht::parallel
