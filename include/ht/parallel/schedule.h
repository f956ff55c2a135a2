// Pipeline schedules as tables made by pure functions: for one stage, the
// ordered list of receives, forwards, backwards and sends it executes in a
// training step; plus what the tables imply (micro-batches in flight) and a
// simulator that runs every stage's table together with blocking sends, so
// that deadlocks and mismatched transfers are found without a communicator.
//
// The executor is a loop over the table, holding one tensor per slot:
//   kRecvForward               x  = stage 0 ? micro-batch tokens : recv(s - 1)
//   kForward                   y  = forward(x)   (last stage: forward and loss)
//   kSendForward               send(y, s + 1)
//   kRecvBackward              dy = recv(s + 1)
//   kBackward                  dx = backward(dy) (last stage: from its loss)
//   kSendBackward              send(dx, s - 1)
//   kSendForwardRecvBackward   dy = send_recv(y to s + 1, from s + 1)
//   kSendBackwardRecvForward   x  = send_recv(dx to s - 1, from s - 1)
// Transfers that have no peer are absent: the last stage never sends
// forward or receives a gradient, the first stage never sends a gradient,
// and where 1F1B's paired kSendBackwardRecvForward would run on the first
// stage its table holds kRecvForward (load the next micro-batch) instead.
// Backwards run in micro-batch order 0, 1, ..., m - 1 in both schedules
// (the oldest context first), so the step's final backward is m - 1's.
//
// Worked example, 1F1B, 2 stages, 3 micro-batches (R/F/S: receive, forward,
// send forward; r/b/s: receive, backward, send backward; SFRB, SBRF paired):
//   stage 0: R0 F0 S0 R1 F1 SFRB(1,0) b0 R2 F2 SFRB(2,1) b1 r2 b2
//   stage 1: R0 F0 b0 SBRF(0,1) F1 b1 SBRF(1,2) F2 b2 s2
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ht::parallel {

/// GPipe: every forward, then every backward (m micro-batches of activations
/// held). 1F1B: p - s - 1 warm-up forwards, then one forward and one backward
/// at a time, then the remaining backwards (at most p - s held).
enum class Schedule { kGPipe, k1F1B };
/// "gpipe" or "1f1b"; throws kConfig naming the choices otherwise.
Schedule parse_schedule(const std::string& name);
std::string schedule_name(Schedule s);

enum class ActionKind {
  kRecvForward,              // the micro-batch's input: from s - 1, or loaded on stage 0
  kForward,                  // forward (with the loss on the last stage)
  kSendForward,              // the output activation to s + 1
  kRecvBackward,             // the output's gradient from s + 1
  kBackward,                 // backward (from the loss on the last stage)
  kSendBackward,             // the input's gradient to s - 1
  kSendForwardRecvBackward,  // one call: output of micro_batch to s + 1, gradient of recv_micro_batch from s + 1
  kSendBackwardRecvForward,  // one call: gradient of micro_batch to s - 1, input of recv_micro_batch from s - 1
};

/// "recv-forward", "forward", ..., "send-backward-recv-forward".
std::string action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::kForward;
  /// The micro-batch computed, received or sent (for a paired transfer: sent).
  int micro_batch = 0;
  /// For a paired transfer, the micro-batch received; -1 otherwise.
  int recv_micro_batch = -1;
  friend bool operator==(const Action&, const Action&) = default;
};

/// "F3", "SFRB(3,0)": the short form of the worked example.
std::string action_str(const Action& a);

/// The actions stage `stage` of `stages` executes in one training step of
/// `micro_batches`, in order, exactly as the executor must run them. Throws
/// kInvalidArgument for stages <= 0, a stage outside [0, stages) or
/// micro_batches <= 0.
std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int micro_batches);

/// Evaluation (no backward): kRecvForward, kForward, kSendForward for each
/// micro-batch in order (transfers without a peer left out as above).
std::vector<Action> forward_only_actions(int stage, int stages, int micro_batches);

/// The most micro-batches whose forward has run and backward not yet, at
/// any point of `actions` (each holds its saved activations): m for GPipe,
/// min(p - s, m) for 1F1B.
int peak_in_flight(const std::vector<Action>& actions);

/// One completed action in a simulation.
struct SimEvent {
  int stage = 0;
  int index = 0;  // into that stage's table
  int tick = 0;   // the round it completed in
};

struct SimResult {
  bool completed = false;
  /// Completed actions in completion order (ordered by tick, then stage).
  std::vector<SimEvent> order;
  /// Rounds taken (compute and a matched transfer each take one).
  int ticks = 0;
  /// Empty when completed; otherwise what went wrong: the deadlock, with
  /// each blocked stage's action, or a transfer matched with the wrong
  /// micro-batch, or a transfer to a stage that does not exist.
  std::string problem;
};

/// Runs `tables[s]` (stage s's actions) for all stages together with
/// blocking point-to-point semantics: each directed link between neighbours
/// matches sends with receives in order; a send completes only when its
/// receive is posted (and vice versa); a paired transfer posts its send and
/// its receive at once and completes when both have matched; compute and
/// stage 0's input loads complete on their own. Each round, every action
/// that can complete does. Pure; never throws for a well-formed table.
SimResult simulate(const std::vector<std::vector<Action>>& tables);

}  // namespace ht::parallel
