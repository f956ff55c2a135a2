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
// Backwards run in micro-batch order 0, 1, ..., m - 1 in GPipe, 1F1B and
// ZB-H1 (the oldest context first), so the step's final backward (ZB-H1: its
// final W) is m - 1's; interleaved's is m - 1's through chunk 0.
//
// Worked example, 1F1B, 2 stages, 3 micro-batches (R/F/S: receive, forward,
// send forward; r/b/s: receive, backward, send backward; SFRB, SBRF paired):
//   stage 0: R0 F0 S0 R1 F1 SFRB(1,0) b0 R2 F2 SFRB(2,1) b1 r2 b2
//   stage 1: R0 F0 b0 SBRF(0,1) F1 b1 SBRF(1,2) F2 b2 s2
//
// ZB-H1 (zero bubble, Qi et al. 2024) splits the backward in two:
//   kBackwardInput             dx = backward_input(dy)  (B: what s - 1 waits for)
//   kBackwardWeight            backward_weight(micro-batch) (W: the weight
//                              gradients; frees the micro-batch's activations)
// Its table is 1F1B's with each b replaced by B, and W placed right after
// the action that follows B (the gradient's send, or the next load on stage
// 0), or right after B where none does: B's gradient leaves before W runs,
// the backward chain crosses the pipeline one W sooner per stage, and W
// fills time 1F1B spent waiting in its cool-down. W(i) still precedes the
// next forward, so 1F1B's activation memory holds. Worked example, 2
// stages, 3 micro-batches:
//   stage 0: R0 F0 S0 R1 F1 SFRB(1,0) B0 R2 W0 F2 SFRB(2,1) B1 W1 r2 B2 W2
//   stage 1: R0 F0 B0 SBRF(0,1) W0 F1 B1 SBRF(1,2) W1 F2 B2 s2 W2
//
// Interleaved 1F1B (Megatron-LM's virtual pipeline) gives each of the p
// ranks v model chunks: chunk c of rank r is virtual stage c p + r, so an
// activation goes from rank r to r + 1 within a chunk and from rank p - 1,
// chunk c, to rank 0, chunk c + 1 (and gradients the opposite way): the
// links form a ring. Every action names its chunk (Action::chunk; "F3.1" is
// micro-batch 3's forward through chunk 1), and the executor keeps one
// activation (and gradient) per (micro-batch, chunk) it holds; "stage s - 1"
// and "stage s + 1" above read "the rank of the previous / next virtual
// stage", and only virtual stage 0 (rank 0, chunk 0) loads its input. The
// ring's two further paired transfers, each one call to the ring neighbours:
//   kSendForwardRecvForward    x' = send_recv(y to next rank, from previous rank)
//   kSendBackwardRecvBackward  dy' = send_recv(dx to previous rank, from next rank)
// On the ring 1F1B's pairing (a send to the next rank with a receive from
// it) cannot close: every rank would wait on its successor. Interleaved's
// table therefore runs in lock-step rounds, the same on every rank: forward,
// then the forward exchange (send its output, receive the next forward's
// input), then backward, then the backward exchange. In each exchange every
// send meets a receive that its neighbour posts in the same exchange, and
// all ranks run the exchanges in the same order, so none waits for a
// transfer that its peer would post only later: the tables cannot deadlock.
// Rank r runs its k-th forward in round r + k and its k-th backward in round
// (v + 1) p - 2 - r + k; forwards go in Megatron's order (micro-batches in
// groups of p: p forwards through chunk 0, then chunk 1, ..., then the next
// group), backwards the same with the chunks reversed. This is Megatron's
// warm-up of 2 (p - r - 1) + (v - 1) p forwards; where m = p Megatron runs
// every forward first, these rounds hold less on the later ranks. With one
// rank the exchanges are with the rank itself.
// Worked example, 2 ranks, 2 chunks, 2 micro-batches (SFRF, SBRB paired):
//   rank 0: R0.0 F0.0 S0.0 R1.0 F1.0 SFRF(1.0,0.1) F0.1 SFRF(0.1,1.1) F1.1 S1.1 r0.1 b0.1
//           SBRB(0.1,1.1) b1.1 SBRB(1.1,0.0) b0.0 r1.0 b1.0
//   rank 1: R0.0 F0.0 SFRF(0.0,1.0) F1.0 SFRF(1.0,0.1) F0.1 R1.1 b0.1 s0.1 F1.1 b1.1
//           SBRB(1.1,0.0) b0.0 SBRB(0.0,1.0) b1.0 s1.0
// With one chunk (v = 1) there is no ring and the table is 1F1B's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ht::parallel {

/// GPipe: every forward, then every backward (m micro-batches of activations
/// held). 1F1B: p - s - 1 warm-up forwards, then one forward and one backward
/// at a time, then the remaining backwards (at most p - s held).
/// Interleaved: 1F1B over v chunks per rank (see the top of this file);
/// bubble (p - 1) / (v m) of 1F1B's step instead of (p - 1) / m, for v times
/// the point-to-point transfers; needs m a multiple of p (as Megatron's);
/// holds at most min(v m, (v + 1) p - 1 - 2 r) (micro-batch, chunk)
/// activations on rank r, each 1/v of a stage's.
/// ZeroBubbleH1: 1F1B with the backward split into B and W, W deferred into
/// the cool-down; at most p - s micro-batches held (from F until W), as 1F1B.
enum class Schedule { kGPipe, k1F1B, kInterleaved, kZeroBubbleH1 };
/// "gpipe", "1f1b", "interleaved" or "zb-h1" (schedule_name's words);
/// throws kConfig naming the choices otherwise.
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
  kBackwardInput,            // ZB-H1's B: the input's gradient only (from the loss on the last stage)
  kBackwardWeight,           // ZB-H1's W: the weights' gradient of micro_batch, after its B
  kSendForwardRecvForward,   // one call: output of micro_batch to the next rank, input of recv_micro_batch from the previous
  kSendBackwardRecvBackward, // one call: gradient of micro_batch to the previous rank, output gradient of recv_micro_batch from the next
};

/// What keeps a layout from running `schedule` with `virtual_stages` model
/// chunks per rank on `stages` pipeline ranks, `micro_batches` a step and
/// ZeRO stage `zero_stage`, in the flags' words; empty when nothing does.
/// Chunks are the interleaved schedule's only (v 1 elsewhere), which needs
/// at least 2 ranks, micro-batches in groups of the ranks, and ZeRO 0-2
/// (ZeRO-3 gathers each of the model's units around its use, and a rank's
/// chunks would be one unit each). The engine, the plan's models and its
/// search all ask it.
std::string schedule_problem(Schedule schedule, int virtual_stages, int stages, int micro_batches, int zero_stage);

/// "recv-forward", "forward", ..., "send-backward-recv-forward", "backward-input",
/// "backward-weight", "send-forward-recv-forward", "send-backward-recv-backward".
std::string action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::kForward;
  /// The micro-batch computed, received or sent (for a paired transfer: sent).
  int micro_batch = 0;
  /// For a paired transfer, the micro-batch received; -1 otherwise.
  int recv_micro_batch = -1;
  /// The model chunk of micro_batch's computation or transfer (interleaved
  /// schedules; 0 in the others).
  int chunk = 0;
  /// For a paired transfer, the chunk of recv_micro_batch (0 when unused).
  int recv_chunk = 0;
  friend bool operator==(const Action&, const Action&) = default;
};

/// "F3", "SFRB(3,0)": the short form of the worked examples; with
/// `with_chunk` (for the tables of a schedule that uses chunks) each
/// micro-batch is followed by its chunk: "F3.1", "SFRF(0.1,1.1)".
std::string action_str(const Action& a, bool with_chunk = false);

/// The actions stage `stage` of `stages` executes in one training step of
/// `micro_batches`, in order, exactly as the executor must run them. Throws
/// kInvalidArgument for stages <= 0, a stage outside [0, stages) or
/// micro_batches <= 0. The same as the overload below with one chunk.
std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int micro_batches);

/// As above, with `virtual_stages` model chunks per rank (v; Megatron's
/// virtual pipeline size): `stage` is then the rank and `stages` the ranks.
/// Throws kInvalidArgument also for virtual_stages < 1, virtual_stages != 1
/// with a schedule other than kInterleaved, and kInterleaved with
/// micro_batches not a multiple of stages.
std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int micro_batches,
                                  int virtual_stages);

/// Evaluation (no backward): kRecvForward, kForward, kSendForward for each
/// micro-batch in order (transfers without a peer left out as above), and
/// with `virtual_stages` chunks per rank for each chunk of a micro-batch in
/// turn: each micro-batch goes around the ring before the next starts (an
/// evaluation is a few micro-batches; this order needs no schedule of its
/// own to be free of deadlocks).
std::vector<Action> forward_only_actions(int stage, int stages, int micro_batches, int virtual_stages = 1);

/// The most micro-batches whose forward has run and backward not yet, at
/// any point of `actions` (each holds its saved activations): m for GPipe,
/// min(p - s, m) for 1F1B and ZB-H1. A forward takes one in, a fused
/// backward or a W lets it go (a B does not: W still needs the activations).
/// In an interleaved table each (micro-batch, chunk) counts once:
/// min(v m, (v + 1) p - 1 - 2 r) on rank r for v > 1.
int peak_in_flight(const std::vector<Action>& actions);

/// What each kind of action costs in a simulation, in ticks (each at least
/// 1). Transfers and loads take one tick. Compare schedules with the costs
/// of the same work: a fused backward costs what its B and W cost together
/// (ZB-H1 against 1F1B), and a chunk 1/v of a stage (interleaved against
/// 1F1B).
struct SimCosts {
  int forward_ticks = 1;
  int backward_ticks = 1;  // the fused backward, kBackward
  int backward_input_ticks = 1;
  int backward_weight_ticks = 1;
};

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
  /// Rounds taken (a matched transfer takes one, a compute its cost).
  int ticks = 0;
  /// Empty when completed; otherwise what went wrong: the deadlock, with
  /// each blocked stage's action, or a transfer matched with the wrong
  /// micro-batch, or a transfer to a stage that does not exist.
  std::string problem;
};

/// Runs `tables[s]` (stage s's actions) for all stages together with
/// blocking point-to-point semantics: each directed link between two ranks
/// matches sends with receives in order (one ordered channel, as NCCL's
/// point-to-point without tags: with two ranks of an interleaved pipeline,
/// activations and gradients share it); a send completes only when its
/// receive is posted (and vice versa); a paired transfer posts its send and
/// its receive at once and completes when both have matched; compute and
/// virtual stage 0's input loads complete on their own, compute after its
/// cost in ticks. Each round, every action that can complete does. The
/// chunks per rank are 1 + the highest chunk any action names; the peers
/// follow from virtual stage chunk * p + s (rank p - 1's last chunk sends to
/// rank 0's next). A transfer matches only the data its peer expects: the
/// same kind, micro-batch and virtual stage. Pure; never throws for a
/// well-formed table (kInvalidArgument for a cost below 1).
SimResult simulate(const std::vector<std::vector<Action>>& tables, const SimCosts& costs = {});

}  // namespace ht::parallel
