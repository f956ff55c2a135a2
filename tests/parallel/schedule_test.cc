// Pipeline schedule tables, exhaustively for 1-8 stages and 1-16
// micro-batches (interleaved: 1-6 ranks, 1-4 chunks): today's executor
// order, one forward and one backward per micro-batch (and chunk), matching
// transfers, no deadlock under blocking sends, the activations held, and
// what the new schedules buy in simulated ticks.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "ht/parallel/schedule.h"
#include "test_util.h"

namespace ht::parallel {
namespace {

using K = ActionKind;

std::string str(const std::vector<Action>& t, bool with_chunk = false) {
  std::string out;
  for (const Action& a : t) out += (out.empty() ? "" : " ") + action_str(a, with_chunk);
  return out;
}

TEST(Schedule, WorkedExampleFromTheHeader) {
  EXPECT_EQ(str(stage_actions(Schedule::k1F1B, 0, 2, 3)),
            "R0 F0 S0 R1 F1 SFRB(1,0) b0 R2 F2 SFRB(2,1) b1 r2 b2");
  EXPECT_EQ(str(stage_actions(Schedule::k1F1B, 1, 2, 3)), "R0 F0 b0 SBRF(0,1) F1 b1 SBRF(1,2) F2 b2 s2");
  EXPECT_EQ(str(stage_actions(Schedule::k1F1B, 1, 4, 4)),
            "R0 F0 S0 R1 F1 S1 R2 F2 SFRB(2,0) b0 SBRF(0,3) F3 SFRB(3,1) b1 s1 r2 b2 s2 r3 b3 s3");
  EXPECT_EQ(str(stage_actions(Schedule::kZeroBubbleH1, 0, 2, 3)),
            "R0 F0 S0 R1 F1 SFRB(1,0) B0 R2 W0 F2 SFRB(2,1) B1 W1 r2 B2 W2");
  EXPECT_EQ(str(stage_actions(Schedule::kZeroBubbleH1, 1, 2, 3)),
            "R0 F0 B0 SBRF(0,1) W0 F1 B1 SBRF(1,2) W1 F2 B2 s2 W2");
  EXPECT_EQ(str(stage_actions(Schedule::kInterleaved, 0, 2, 2, 2), true),
            "R0.0 F0.0 S0.0 R1.0 F1.0 SFRF(1.0,0.1) F0.1 SFRF(0.1,1.1) F1.1 S1.1 r0.1 b0.1 "
            "SBRB(0.1,1.1) b1.1 SBRB(1.1,0.0) b0.0 r1.0 b1.0");
  EXPECT_EQ(str(stage_actions(Schedule::kInterleaved, 1, 2, 2, 2), true),
            "R0.0 F0.0 SFRF(0.0,1.0) F1.0 SFRF(1.0,0.1) F0.1 R1.1 b0.1 s0.1 F1.1 b1.1 "
            "SBRB(1.1,0.0) b0.0 SBRB(0.0,1.0) b1.0 s1.0");
  // Without with_chunk, and for chunk 0, the strings are the old ones.
  EXPECT_EQ(action_str({K::kSendForwardRecvForward, 1, 0, 0, 1}), "SFRF(1,0)");
  EXPECT_EQ(action_str({K::kForward, 3, -1, 0, 0}, true), "F3.0");
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
      case K::kBackwardInput:  // ZB-H1's B takes b's place
        if (s < p - 1) {
          EXPECT_EQ(dy, a.micro_batch) << "backward without its output's gradient";
        }
        dx = a.micro_batch;
        break;
      case K::kBackwardWeight: break;  // reads what its B kept, sends nothing
      case K::kSendForwardRecvForward:
      case K::kSendBackwardRecvBackward: ADD_FAILURE() << "interleaved's exchange in a table without chunks"; break;
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
  EXPECT_EQ(parse_schedule("interleaved"), Schedule::kInterleaved);
  EXPECT_EQ(parse_schedule("zb-h1"), Schedule::kZeroBubbleH1);
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubbleH1})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  EXPECT_TRUE(test::throws_error(
      [] { parse_schedule("zb"); }, ErrorKind::kConfig,
      {"--schedule 'zb' is not a pipeline schedule: choose gpipe, 1f1b, interleaved or zb-h1"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::k1F1B, 2, 2, 4); },
                                 ErrorKind::kInvalidArgument, {"stage 2 outside a pipeline of 2"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::kGPipe, 0, 2, 0); },
                                 ErrorKind::kInvalidArgument, {"at least one micro-batch"}));
  EXPECT_EQ(action_kind_name(K::kSendBackwardRecvForward), "send-backward-recv-forward");
}


// The layouts each schedule runs under, as the engine and the planner ask.
TEST(Schedule, LayoutProblemsNameTheFlag) {
  EXPECT_EQ(schedule_problem(Schedule::k1F1B, 1, 1, 3, 3), "");
  EXPECT_EQ(schedule_problem(Schedule::kInterleaved, 2, 2, 4, 2), "");
  const auto says = [](const std::string& got, const std::string& want) {
    EXPECT_NE(got.find(want), std::string::npos) << got;
  };
  says(schedule_problem(Schedule::kZeroBubbleH1, 2, 2, 4, 0), "--virtual-stages 2: model chunks per pipeline rank");
  says(schedule_problem(Schedule::kInterleaved, 0, 2, 4, 0), "--virtual-stages 0 is not a number of model chunks");
  says(schedule_problem(Schedule::kInterleaved, 2, 1, 4, 0), "needs at least 2 pipeline ranks (--pp), got 1");
  says(schedule_problem(Schedule::kInterleaved, 2, 4, 6, 0), "--grad-accum 6 must be a multiple of 4 (e.g. 8)");
  says(schedule_problem(Schedule::kInterleaved, 2, 2, 4, 3), "with --zero 3 is not supported");
}

// Evaluation with chunks: each micro-batch around the ring in turn, every
// virtual stage's forward once, and no deadlock under blocking sends.
TEST(Schedule, ForwardOnlyWithChunksGoesAroundTheRingAndCompletes) {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int m : {1, 2, 5}) {
        SCOPED_TRACE(::testing::Message() << "p=" << p << " v=" << v << " m=" << m);
        std::vector<std::vector<Action>> eval;
        for (int s = 0; s < p; ++s) eval.push_back(forward_only_actions(s, p, m, v));
        const SimResult r = simulate(eval);
        EXPECT_TRUE(r.completed) << r.problem;
        for (int s = 0; s < p; ++s) {
          std::vector<Action> forwards;
          for (const Action& a : eval[std::size_t(s)])
            if (a.kind == K::kForward) forwards.push_back(a);
          ASSERT_EQ(int(forwards.size()), m * v);
          for (int i = 0; i < m; ++i)
            for (int c = 0; c < v; ++c) {
              EXPECT_EQ(forwards[std::size_t(i * v + c)].micro_batch, i);
              EXPECT_EQ(forwards[std::size_t(i * v + c)].chunk, c);
            }
        }
      }
  // By hand, 2 ranks, 2 chunks, 1 micro-batch: rank 1's chunk 0 output
  // goes to rank 0's chunk 1, whose output comes back to rank 1's chunk 1.
  std::vector<std::string> got;
  for (const Action& a : forward_only_actions(0, 2, 1, 2)) got.push_back(action_str(a, true));
  EXPECT_EQ(got, (std::vector<std::string>{"R0.0", "F0.0", "S0.0", "R0.1", "F0.1", "S0.1"}));
  got.clear();
  for (const Action& a : forward_only_actions(1, 2, 1, 2)) got.push_back(action_str(a, true));
  EXPECT_EQ(got, (std::vector<std::string>{"R0.0", "F0.0", "S0.0", "R0.1", "F0.1"}));
}

// ---- ZB-H1 -----------------------------------------------------------------

// The costs of the same work: a fused backward costs its B and W together
// (the zero-bubble paper's T_F = T_B = T_W).
constexpr SimCosts kSplitCosts{/*forward_ticks=*/1, /*backward_ticks=*/2, /*backward_input_ticks=*/1,
                               /*backward_weight_ticks=*/1};

std::vector<std::vector<Action>> all_tables(Schedule sched, int p, int m, int v = 1) {
  std::vector<std::vector<Action>> tables;
  for (int s = 0; s < p; ++s) tables.push_back(stage_actions(sched, s, p, m, v));
  return tables;
}

TEST(Schedule, ZeroBubbleH1IsOneF1BWithTheBackwardSplitAndFinishesSooner) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE("zb-h1 p " + std::to_string(p) + " m " + std::to_string(m));
      const auto tables = all_tables(Schedule::kZeroBubbleH1, p, m);
      for (int s = 0; s < p; ++s) {
        const std::vector<Action>& t = tables[std::size_t(s)];
        // B where 1F1B has b, W added: nothing else differs.
        std::vector<Action> fused;
        for (const Action& a : t) {
          if (a.kind == K::kBackwardWeight) continue;
          fused.push_back(a.kind == K::kBackwardInput ? Action{K::kBackward, a.micro_batch} : a);
        }
        EXPECT_EQ(fused, stage_actions(Schedule::k1F1B, s, p, m));
        // One F, one B and one W per micro-batch, F before B before W, the
        // Bs in micro-batch order; W one or two actions after its B (the
        // transfer that follows B between them); no fused backward.
        std::map<int, int> f_at, b_at, w_at;
        std::vector<int> bs;
        for (std::size_t i = 0; i < t.size(); ++i) {
          const Action& a = t[i];
          EXPECT_NE(a.kind, K::kBackward);
          EXPECT_EQ(a.chunk, 0);
          if (a.kind == K::kForward) {
            EXPECT_TRUE(f_at.emplace(a.micro_batch, int(i)).second);
          }
          if (a.kind == K::kBackwardInput) {
            EXPECT_TRUE(b_at.emplace(a.micro_batch, int(i)).second);
            bs.push_back(a.micro_batch);
          }
          if (a.kind == K::kBackwardWeight) {
            EXPECT_TRUE(w_at.emplace(a.micro_batch, int(i)).second);
          }
        }
        ASSERT_EQ(int(f_at.size()), m);
        ASSERT_EQ(int(b_at.size()), m);
        ASSERT_EQ(int(w_at.size()), m) << "every W in the step: the optimizer needs all gradients";
        for (int i = 0; i < m; ++i) {
          EXPECT_EQ(bs[std::size_t(i)], i);
          EXPECT_LT(f_at[i], b_at[i]);
          EXPECT_GT(w_at[i] - b_at[i], 0);
          EXPECT_LE(w_at[i] - b_at[i], 2);
        }
        expect_dataflow(t, s, p);
        // 1F1B's activation memory: at most p - s micro-batches from F to W.
        EXPECT_EQ(peak_in_flight(t), std::min(p - s, m));
      }
      for (const SimCosts& costs : {SimCosts{}, kSplitCosts}) {
        const SimResult r = simulate(tables, costs);
        ASSERT_TRUE(r.completed) << r.problem;
        std::size_t actions = 0;
        for (const auto& t : tables) actions += t.size();
        EXPECT_EQ(r.order.size(), actions);
        // B crosses the pipeline backwards; each W after its own B.
        std::map<std::tuple<int, int, int>, int> tick;  // (stage, kind, mb) -> tick
        for (const SimEvent& e : r.order) {
          const Action& a = tables[std::size_t(e.stage)][std::size_t(e.index)];
          tick[{e.stage, int(a.kind), a.micro_batch}] = e.tick;
        }
        for (int s = 0; s < p; ++s)
          for (int i = 0; i < m; ++i) {
            EXPECT_LT((tick[{s, int(K::kBackwardInput), i}]), (tick[{s, int(K::kBackwardWeight), i}]));
            if (s + 1 < p) {
              EXPECT_LT((tick[{s, int(K::kForward), i}]), (tick[{s + 1, int(K::kForward), i}]));
              EXPECT_GT((tick[{s, int(K::kBackwardInput), i}]), (tick[{s + 1, int(K::kBackwardInput), i}]));
            }
          }
      }
      // The point of it: with the same work (b = B + W), fewer ticks than
      // 1F1B on every pipeline (p - 1 fewer with the simulator's one-tick
      // transfers; the same on one stage, where there is no bubble).
      const int zb = simulate(tables, kSplitCosts).ticks;
      const int one = simulate(all_tables(Schedule::k1F1B, p, m), kSplitCosts).ticks;
      if (p > 1) {
        EXPECT_LT(zb, one);
      } else {
        EXPECT_EQ(zb, one);
      }
    }
}

// ---- Interleaved -------------------------------------------------------------

// The rank that runs virtual stage j = chunk * p + rank.
int rank_of(int j, int p) { return j % p; }

// Megatron's order, built from its description rather than from the
// library's arithmetic: micro-batches in groups of p; a group's forwards
// through chunk 0, then 1, ...; its backwards through chunk v - 1, then v - 2, ...
std::vector<std::pair<int, int>> megatron_order(int p, int m, int v, bool forward) {
  std::vector<std::pair<int, int>> out;
  for (int group = 0; group < m / p; ++group)
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < p; ++i) out.push_back({group * p + i, forward ? c : v - 1 - c});
  return out;
}

// One message on a link: kind, micro-batch, the virtual stage that computed it.
using Message = std::tuple<bool, int, int>;

// The halves of a transfer action, each called with (micro-batch, chunk):
// sends and receives of activations and of gradients. Returns false for an
// action that transfers nothing (compute).
template <class F>
bool for_each_half(const Action& a, const F& send_fwd, const F& recv_fwd, const F& send_bwd, const F& recv_bwd) {
  switch (a.kind) {
    case K::kRecvForward: recv_fwd(a.micro_batch, a.chunk); return true;
    case K::kSendForward: send_fwd(a.micro_batch, a.chunk); return true;
    case K::kRecvBackward: recv_bwd(a.micro_batch, a.chunk); return true;
    case K::kSendBackward: send_bwd(a.micro_batch, a.chunk); return true;
    case K::kSendForwardRecvForward:
      send_fwd(a.micro_batch, a.chunk);
      recv_fwd(a.recv_micro_batch, a.recv_chunk);
      return true;
    case K::kSendBackwardRecvBackward:
      send_bwd(a.micro_batch, a.chunk);
      recv_bwd(a.recv_micro_batch, a.recv_chunk);
      return true;
    case K::kSendForwardRecvBackward:
      send_fwd(a.micro_batch, a.chunk);
      recv_bwd(a.recv_micro_batch, a.recv_chunk);
      return true;
    case K::kSendBackwardRecvForward:
      send_bwd(a.micro_batch, a.chunk);
      recv_fwd(a.recv_micro_batch, a.recv_chunk);
      return true;
    case K::kForward:
    case K::kBackward:
    case K::kBackwardInput:
    case K::kBackwardWeight: return false;
  }
  return false;
}

// What each rank sends on, and receives from, each link (from, to), in order.
struct Traffic {
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
};

void add_traffic(const std::vector<Action>& t, int r, int p, int v, Traffic& out) {
  const int last = p * v - 1;
  const auto send_fwd = [&](int mb, int c) {
    const int j = c * p + r;
    ASSERT_LT(j, last) << "the last virtual stage sends no activation";
    out.sent[{r, rank_of(j + 1, p)}].push_back({true, mb, j});
  };
  const auto recv_fwd = [&](int mb, int c) {
    const int j = c * p + r;
    if (j > 0) out.received[{rank_of(j - 1, p), r}].push_back({true, mb, j - 1});  // virtual stage 0 loads
  };
  const auto send_bwd = [&](int mb, int c) {
    const int j = c * p + r;
    ASSERT_GT(j, 0) << "virtual stage 0 sends no gradient";
    out.sent[{r, rank_of(j - 1, p)}].push_back({false, mb, j});
  };
  const auto recv_bwd = [&](int mb, int c) {
    const int j = c * p + r;
    ASSERT_LT(j, last) << "the last virtual stage's gradient comes from its loss";
    out.received[{rank_of(j + 1, p), r}].push_back({false, mb, j + 1});
  };
  const std::function<void(int, int)> sf = send_fwd, rf = recv_fwd, sb = send_bwd, rb = recv_bwd;
  for (const Action& a : t) for_each_half(a, sf, rf, sb, rb);
}

// What an executor keeping one tensor per (micro-batch, chunk) would see:
// each forward's input arrived (or, on virtual stage 0, was loaded) and is
// used once; each activation sent after its forward; each backward's
// output gradient arrived after the forward (the last virtual stage starts
// from its loss); each gradient sent after its backward.
void expect_chunk_dataflow(const std::vector<Action>& t, int r, int p, int v) {
  using Piece = std::pair<int, int>;
  std::set<Piece> inputs, forwarded, output_grads, backwarded;
  const bool last_rank = r == p - 1;
  const auto recv_fwd = [&](int mb, int c) { EXPECT_TRUE(inputs.insert({mb, c}).second) << "input twice"; };
  const auto send_fwd = [&](int mb, int c) { EXPECT_TRUE(forwarded.count({mb, c})) << "activation sent before its forward"; };
  const auto recv_bwd = [&](int mb, int c) {
    EXPECT_TRUE(forwarded.count({mb, c})) << "gradient received before the forward";
    EXPECT_TRUE(output_grads.insert({mb, c}).second) << "gradient twice";
  };
  const auto send_bwd = [&](int mb, int c) { EXPECT_TRUE(backwarded.count({mb, c})) << "gradient sent before its backward"; };
  const std::function<void(int, int)> sf = send_fwd, rf = recv_fwd, sb = send_bwd, rb = recv_bwd;
  for (const Action& a : t) {
    if (a.kind == K::kSendForwardRecvBackward || a.kind == K::kSendBackwardRecvForward) {
      ADD_FAILURE() << "interleaved table holds " << action_kind_name(a.kind);
      continue;
    }
    if (for_each_half(a, sf, rf, sb, rb)) continue;
    switch (a.kind) {
      case K::kForward:
        EXPECT_TRUE(inputs.count({a.micro_batch, a.chunk})) << "forward " << a.micro_batch << "." << a.chunk
                                                            << " without its input on rank " << r;
        EXPECT_TRUE(forwarded.insert({a.micro_batch, a.chunk}).second);
        break;
      case K::kBackward:
        if (!(last_rank && a.chunk == v - 1)) {
          EXPECT_TRUE(output_grads.count({a.micro_batch, a.chunk}))
              << "backward " << a.micro_batch << "." << a.chunk << " without its output's gradient on rank " << r;
        }
        EXPECT_TRUE(forwarded.count({a.micro_batch, a.chunk}));
        EXPECT_TRUE(backwarded.insert({a.micro_batch, a.chunk}).second);
        break;
      default: ADD_FAILURE() << "interleaved table holds " << action_kind_name(a.kind); break;
    }
  }
}

TEST(Schedule, InterleavedSweepIsConsistentAndCompletesUnderBlockingSends) {
  for (int p = 1; p <= 6; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= std::max(3 * p, 16); m += p) {
        SCOPED_TRACE("interleaved p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m));
        const auto tables = all_tables(Schedule::kInterleaved, p, m, v);
        if (v == 1) {
          // No ring: exactly 1F1B's table.
          for (int r = 0; r < p; ++r) EXPECT_EQ(tables[std::size_t(r)], stage_actions(Schedule::k1F1B, r, p, m));
        }
        Traffic traffic;
        for (int r = 0; r < p; ++r) {
          const std::vector<Action>& t = tables[std::size_t(r)];
          // Every (micro-batch, chunk) exactly once forward and once backward,
          // in Megatron's order, forward first.
          std::vector<std::pair<int, int>> forwards, backwards;
          std::map<std::pair<int, int>, int> forward_at;
          for (std::size_t i = 0; i < t.size(); ++i) {
            const Action& a = t[i];
            EXPECT_GE(a.chunk, 0);
            EXPECT_LT(a.chunk, v);
            if (a.kind == K::kForward) {
              forwards.push_back({a.micro_batch, a.chunk});
              forward_at[{a.micro_batch, a.chunk}] = int(i);
            }
            if (a.kind == K::kBackward) {
              backwards.push_back({a.micro_batch, a.chunk});
              EXPECT_TRUE(forward_at.count({a.micro_batch, a.chunk})) << "backward before forward, rank " << r;
            }
          }
          if (v > 1) {
            EXPECT_EQ(forwards, megatron_order(p, m, v, true));
            EXPECT_EQ(backwards, megatron_order(p, m, v, false));
            expect_chunk_dataflow(t, r, p, v);
            // Megatron's warm-up, 2 (p - r - 1) + (v - 1) p forwards, plus one.
            EXPECT_EQ(peak_in_flight(t), std::min(v * m, (v + 1) * p - 1 - 2 * r));
          } else {
            EXPECT_EQ(peak_in_flight(t), std::min(p - r, m));
          }
          add_traffic(t, r, p, v, traffic);
        }
        // Every link carries the same messages in the same order at both ends
        // (two ranks share one link each way for activations and gradients).
        EXPECT_EQ(traffic.sent, traffic.received);

        const SimResult r = simulate(tables);
        ASSERT_TRUE(r.completed) << r.problem;
        std::size_t actions = 0;
        for (const auto& t : tables) actions += t.size();
        EXPECT_EQ(r.order.size(), actions);
        // Causality along the virtual stages, including the wrap-around.
        std::map<std::tuple<int, int, int>, int> tick;  // (virtual stage, kind, mb) -> tick
        for (const SimEvent& e : r.order) {
          const Action& a = tables[std::size_t(e.stage)][std::size_t(e.index)];
          tick[{a.chunk * p + e.stage, int(a.kind), a.micro_batch}] = e.tick;
        }
        for (int j = 0; j + 1 < p * v; ++j)
          for (int i = 0; i < m; ++i) {
            EXPECT_LT((tick[{j, int(K::kForward), i}]), (tick[{j + 1, int(K::kForward), i}]));
            EXPECT_GT((tick[{j, int(K::kBackward), i}]), (tick[{j + 1, int(K::kBackward), i}]));
          }
        std::vector<int> next(static_cast<std::size_t>(p), 0);
        for (std::size_t i = 0; i < r.order.size(); ++i) {
          if (i > 0) {
            EXPECT_LE(r.order[i - 1].tick, r.order[i].tick);
          }
          EXPECT_EQ(r.order[i].index, next[std::size_t(r.order[i].stage)]++);
        }
      }
}

TEST(Schedule, InterleavedFinishesSoonerThanOneF1BWhenComputeOutweighsTransfers) {
  // The same model on the same p ranks: a 1F1B stage is v chunks, so it
  // costs v times a chunk. Interleaving shrinks the bubble from (p - 1)
  // stage passes to (p - 1) chunk passes but sends v times as many
  // activations and gradients (one tick each here); it wins where a chunk's
  // compute outweighs the extra transfers, checked with a chunk's forward at
  // 8 ticks and its backward at 16, for m up to 3p.
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 3 * p; m += p) {
        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m));
        const SimResult interleaved = simulate(all_tables(Schedule::kInterleaved, p, m, v), {8, 16, 8, 8});
        const SimResult one = simulate(all_tables(Schedule::k1F1B, p, m), {8 * v, 16 * v, 8 * v, 8 * v});
        ASSERT_TRUE(interleaved.completed) << interleaved.problem;
        ASSERT_TRUE(one.completed) << one.problem;
        EXPECT_LT(interleaved.ticks, one.ticks);
      }
  // With every compute at one tick a chunk costs what a whole stage does,
  // and the transfers as much: interleaving then only adds ticks (p 4, m 8,
  // v 2: 79 against 42), which is why the comparison above scales the costs.
  EXPECT_EQ(simulate(all_tables(Schedule::k1F1B, 4, 8)).ticks, 42);
  EXPECT_EQ(simulate(all_tables(Schedule::kInterleaved, 4, 8, 2)).ticks, 79);
  EXPECT_EQ(simulate(all_tables(Schedule::kZeroBubbleH1, 4, 8)).ticks, 50);
  EXPECT_EQ(simulate(all_tables(Schedule::k1F1B, 4, 8), kSplitCosts).ticks, 53);
  EXPECT_EQ(simulate(all_tables(Schedule::kZeroBubbleH1, 4, 8), kSplitCosts).ticks, 50);
  // p 4, m 8 with a stage's forward at 16 ticks and its backward at 32
  // (B and W 16 each), a transfer 1: 1F1B 548, ZB-H1 500, interleaved
  // (v 2, a chunk half of that) 497.
  EXPECT_EQ(simulate(all_tables(Schedule::k1F1B, 4, 8), {16, 32, 16, 16}).ticks, 548);
  EXPECT_EQ(simulate(all_tables(Schedule::kZeroBubbleH1, 4, 8), {16, 32, 16, 16}).ticks, 500);
  EXPECT_EQ(simulate(all_tables(Schedule::kInterleaved, 4, 8, 2), {8, 16, 8, 8}).ticks, 497);
}

// Interleaved with each exchange split into a blocking send then a receive:
// around the ring every rank sends first and waits for its successor.
std::vector<Action> unpaired_exchanges(const std::vector<Action>& t) {
  std::vector<Action> out;
  for (const Action& a : t) {
    if (a.kind == K::kSendForwardRecvForward) {
      out.push_back({K::kSendForward, a.micro_batch, -1, a.chunk});
      out.push_back({K::kRecvForward, a.recv_micro_batch, -1, a.recv_chunk});
    } else if (a.kind == K::kSendBackwardRecvBackward) {
      out.push_back({K::kSendBackward, a.micro_batch, -1, a.chunk});
      out.push_back({K::kRecvBackward, a.recv_micro_batch, -1, a.recv_chunk});
    } else {
      out.push_back(a);
    }
  }
  return out;
}

TEST(Simulator, FindsTheRingDeadlockThatInterleavedExchangesAvoid) {
  for (int p = 2; p <= 5; ++p)
    for (int v = 2; v <= 3; ++v) {
      std::vector<std::vector<Action>> t;
      for (int r = 0; r < p; ++r) t.push_back(unpaired_exchanges(stage_actions(Schedule::kInterleaved, r, p, p, v)));
      const SimResult r = simulate(t);
      EXPECT_FALSE(r.completed) << p << " ranks, " << v << " chunks";
      EXPECT_NE(r.problem.find("deadlock"), std::string::npos) << r.problem;
    }
  std::vector<std::vector<Action>> t;
  for (int r = 0; r < 2; ++r) t.push_back(unpaired_exchanges(stage_actions(Schedule::kInterleaved, r, 2, 2, 2)));
  const SimResult r = simulate(t);
  EXPECT_NE(r.problem.find("stage 0 at action 5 (S1.0: send activation of micro-batch 1 chunk 0 to stage 1)"),
            std::string::npos)
      << r.problem;
  EXPECT_NE(r.problem.find("stage 1 at action 2 (S0.0: send activation of micro-batch 0 chunk 0 to stage 0)"),
            std::string::npos)
      << r.problem;
}

TEST(Simulator, FindsMismatchedTransfersBetweenChunks) {
  // Two ranks share the link 1 -> 0 for rank 1's gradients and its
  // activations into chunk 1: a gradient where rank 0 waits for an
  // activation is a mismatch, not a match.
  SimResult r = simulate({{{K::kRecvForward, 0}, {K::kForward, 0}, {K::kRecvForward, 0, -1, 1}},
                          {{K::kForward, 0}, {K::kSendBackward, 0}}});
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.problem.find("stage 1 sends the gradient of micro-batch 0 from virtual stage 1 to stage 0, which "
                           "expects the activation of micro-batch 0 from virtual stage 1"),
            std::string::npos)
      << r.problem;
  // The same kind, another chunk's data.
  r = simulate({{{K::kRecvForward, 0, -1, 1}}, {{K::kSendForward, 0, -1, 1}}, {{K::kRecvForward, 0, -1, 0}}});
  EXPECT_NE(r.problem.find("stage 1 sends the activation of micro-batch 0 from virtual stage 4"), std::string::npos)
      << r.problem;
  // Past the last virtual stage.
  r = simulate({{{K::kForward, 0, -1, 1}}, {{K::kForward, 0, -1, 1}, {K::kSendForward, 0, -1, 1}}});
  EXPECT_NE(r.problem.find("stage 1 action 1 (S0.1) would send activation of micro-batch 0 chunk 1 to virtual stage "
                           "4, which does not exist in 2 stages of 2 chunks"),
            std::string::npos)
      << r.problem;
  r = simulate({{{K::kForward, 0, -1, -1}}});
  EXPECT_NE(r.problem.find("negative chunk"), std::string::npos) << r.problem;
}

TEST(Simulator, ComputeTakesItsCostTransfersOneTick) {
  SimResult r = simulate({{{K::kRecvForward, 0}, {K::kForward, 0}, {K::kBackward, 0}}}, {3, 2, 1, 1});
  ASSERT_TRUE(r.completed) << r.problem;
  EXPECT_EQ(r.ticks, 6);
  ASSERT_EQ(r.order.size(), 3u);
  EXPECT_EQ(r.order[0].tick, 1);
  EXPECT_EQ(r.order[1].tick, 4);
  EXPECT_EQ(r.order[2].tick, 6);
  r = simulate({{{K::kForward, 0}, {K::kSendForward, 0}}, {{K::kRecvForward, 0}, {K::kForward, 0}}}, {4, 1, 1, 1});
  ASSERT_TRUE(r.completed) << r.problem;
  EXPECT_EQ(r.ticks, 9);  // 4 forward, 1 transfer, 4 forward
  EXPECT_TRUE(test::throws_error([] { simulate({}, {1, 0, 1, 1}); }, ErrorKind::kInvalidArgument,
                                 {"every compute costs at least one tick", "backward 0"}));
}

TEST(Schedule, VirtualStagesBadArguments) {
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::kInterleaved, 0, 4, 10, 2); },
                                 ErrorKind::kInvalidArgument,
                                 {"10 micro-batches is not a multiple of the 4 pipeline ranks",
                                  "use 8 or 12 micro-batches, or the 1f1b schedule"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::kInterleaved, 0, 4, 3, 2); },
                                 ErrorKind::kInvalidArgument, {"use 4 micro-batches"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::kInterleaved, 0, 4, 10, 1); },
                                 ErrorKind::kInvalidArgument, {"not a multiple of the 4 pipeline ranks"}));
  for (int v : {0, -1})
    EXPECT_TRUE(test::throws_error([v] { stage_actions(Schedule::kInterleaved, 0, 2, 4, v); },
                                   ErrorKind::kInvalidArgument, {"use 1 or more"}));
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kZeroBubbleH1})
    for (int v : {0, 2})
      EXPECT_TRUE(test::throws_error([s, v] { stage_actions(s, 0, 2, 4, v); }, ErrorKind::kInvalidArgument,
                                     {"only the interleaved schedule has: pass virtual_stages=1, or use "
                                      "Schedule::kInterleaved"}));
  EXPECT_TRUE(test::throws_error([] { stage_actions(Schedule::kInterleaved, 4, 4, 8, 2); },
                                 ErrorKind::kInvalidArgument, {"stage 4 outside a pipeline of 4"}));
  // The four-argument form is one chunk.
  EXPECT_EQ(stage_actions(Schedule::kInterleaved, 1, 2, 4), stage_actions(Schedule::k1F1B, 1, 2, 4));
  EXPECT_EQ(stage_actions(Schedule::kZeroBubbleH1, 1, 3, 5), stage_actions(Schedule::kZeroBubbleH1, 1, 3, 5, 1));
  EXPECT_EQ(action_kind_name(K::kBackwardInput), "backward-input");
  EXPECT_EQ(action_kind_name(K::kBackwardWeight), "backward-weight");
  EXPECT_EQ(action_kind_name(K::kSendForwardRecvForward), "send-forward-recv-forward");
  EXPECT_EQ(action_kind_name(K::kSendBackwardRecvBackward), "send-backward-recv-backward");
}

}  // namespace
}  // namespace ht::parallel
