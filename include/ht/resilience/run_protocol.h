// ht::resilience's run protocol: everything a training program and its
// supervisor (htrun, ht-report) exchange through the run directory, written
// down once — phases, exit codes and kinds, incident kinds, the records and
// where each lives. docs/htrun.md is the same contract in prose.
//
// Records and text. Each record type has one writer, format_<record>(), that
// gives one line of JSON (no newline), and one reader, parse_<record>(),
// that takes what a file holds. Readers never crash on damaged text: a
// heartbeat or exit record that is not one reads as std::nullopt (the file
// may be half replaced; the next poll reads it whole), and a metrics line
// that is damaged throws ProtocolError saying what is wrong. A field that is
// missing reads as the member's default. The field names and their JSON
// types are those of docs/htrun.md and ht/train/metrics.h; times are wall
// clock milliseconds since the Unix epoch ("time_ms"), as the names say.
//
// Everything here is a pure function of its arguments and thread-safe;
// nothing touches the file system (the paths are only composed).
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ht::resilience {

/// A metrics line that is not what the protocol says (cut short by a crash,
/// damaged by hand or by a disk): the message names the field and what it
/// holds. Heartbeats and exit records, which a reader may find half
/// replaced, read as std::nullopt instead.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------- phases

/// Where a rank is, as its heartbeat says: before training (kLaunch: the
/// launcher started the process, MPI is not up; kStart: building the model,
/// loading the checkpoint), then the phases of a step in the engine's order
/// (train::Engine::step), then after a step (kEvaluate, kFinish). The
/// enumerators are in that order, so phases compare as the engine runs them:
/// at the same step, a rank in a smaller phase got less far.
/// kOther stands for a phase this protocol does not name, which a program
/// of one's own may write: not starting, its step not completed, after every
/// named phase.
enum class Phase : int {
  kLaunch,             // "launch"
  kStart,              // "start"
  kData,               // "data"
  kForwardBackward,    // "forward-backward"
  kGradientReduction,  // "gradient-reduction"
  kOptimizer,          // "optimizer"
  kReplicaCheck,       // "replica-check" (the step's own; a check before a save reports the save's phase)
  kLossReduction,      // "loss-reduction"
  kCheckpoint,         // "checkpoint"
  kSnapshot,           // "snapshot"
  kStepDone,           // "step-done"
  kEvaluate,           // "evaluate"
  kFinish,             // "finish"
  kOther,              // "other"
};
inline constexpr int kPhaseCount = 14;  // kOther included

/// The phase's name in records ("forward-backward"); static storage, never null.
const char* phase_name(Phase phase);
/// The phase named `name`; nullopt for a name the protocol does not know
/// ("other" is kOther's).
std::optional<Phase> parse_phase(std::string_view name);
/// Whether a rank in `phase` has completed the step its record names
/// (kStepDone, kEvaluate, kFinish): that step is done, else only the one before.
bool step_completed_in(Phase phase);
/// The last step a rank at `step` in `phase` has completed.
std::int64_t completed_step(std::int64_t step, Phase phase);
/// Whether `phase` is start-up (kLaunch, kStart), which a supervisor's start
/// timeout covers rather than its hang timeout.
bool starting(Phase phase);

// ---------------------------------------------------------- exit codes

/// Exit codes with a meaning for the supervisor (docs/htrun.md, "Exit codes").
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 2,        // an error in the input (configuration, files): retrying cannot help
  kExitCommFailure = 74, // a collective failed or timed out (a peer is gone or stuck)
  kExitHang = 75,        // the watchdog saw no progress
  kExitDivergence = 76,  // non-finite loss for too many steps
  kExitPreempted = 77,   // SIGTERM/SIGUSR1: checkpoint saved, clean exit
  kExitCorruption = 78,  // silent data corruption: replicas disagree
  kExitStraggler = 79,   // a persistent straggler (named in the record), checkpoint saved
  kExitFenced = 80,      // a newer launch owns the run directory: this one was given up
};

/// What an exit code means ("kind" in exit records).
enum class ExitKind : int {
  kOk,           // "ok"
  kError,        // "error": 2, and any other code up to 128
  kCommFailure,  // "comm-failure"
  kHang,         // "hang"
  kDivergence,   // "divergence"
  kPreempted,    // "preempted"
  kCorruption,   // "corruption"
  kStraggler,    // "straggler"
  kFenced,       // "fenced"
  kCrash,        // "crash": above 128, killed by a signal
};
ExitKind exit_kind_of(int code);
/// The kind's name in records; static storage, never null.
const char* exit_kind_name(ExitKind kind);
std::optional<ExitKind> parse_exit_kind(std::string_view name);
/// exit_kind_name(exit_kind_of(code)): "comm-failure" for 74.
std::string exit_kind(int code);
/// The exit code for an error that ends a rank: kExitCommFailure for
/// communication, kExitDivergence, kExitCorruption, kExitError otherwise.
int exit_code_for(const std::exception& e);

// ------------------------------------------------------- incident kinds

/// What a supervisor says ended a launch (htrun_report.json's "kind"; see
/// docs/htrun.md, "Who is to blame").
enum class IncidentKind : int {
  kCrash,        // "crash": a rank killed by a signal (the launcher says so)
  kHostLost,     // "host-lost": the launcher lost a host, or its ranks went silent or outlived the launcher
  kCommFailure,  // "comm-failure": ranks named a peer that did not answer
  kHang,         // "hang": no progress, or a start that never ended
  kDivergence,   // "divergence"
  kCorruption,   // "corruption"
  kStraggler,    // "straggler"
  kPreemption,   // "preemption": of the supervisor, or of the ranks by someone else
  kError,        // "error": the program refused its input; not retried
  kFailure,      // "failure": an exit nobody explained
  kNoHeartbeat,  // "no-heartbeat": the program does not keep the contract
};
/// The kind's name in reports; static storage, never null.
const char* incident_kind_name(IncidentKind kind);
std::optional<IncidentKind> parse_incident_kind(std::string_view name);
/// The incident a rank's exit record of `kind` reports as its own failure;
/// nullopt for kOk, kFenced (an older launch's) and kCommFailure (a peer's
/// failure seen from here: an effect, judged from every record together).
std::optional<IncidentKind> incident_of_exit(ExitKind kind);

// --------------------------------------------------------------- records

/// A launch's records carry its epoch (HT_LAUNCH_EPOCH): whether a record of
/// `record_epoch` belongs to launch `launch`. Records that say no epoch (0)
/// belong to every launch, and every record to launch 0 (no fencing).
bool of_launch(std::int64_t record_epoch, std::int64_t launch);

/// <run-dir>/heartbeat/rank_R.json: rewritten (atomically) every heartbeat
/// interval from the process's first moment.
struct Heartbeat {
  int rank = -1;
  std::string host;
  int pid = 0;
  std::int64_t step = 0;  // the step the rank is in (0 before the first)
  Phase phase = Phase::kStart;
  std::int64_t time_ms = 0;      // when written
  std::int64_t progress_ms = 0;  // when step or phase last changed
  std::int64_t epoch = 0;        // the launch that wrote it (0: none)
  /// The time the process has spent blocked waiting for communication
  /// (ht::comm::blocked_wait_ns), in all; 0 from a program that does not say.
  std::int64_t comm_wait_ms = 0;

  double time_s() const { return double(time_ms) / 1000; }
  double progress_s() const { return double(progress_ms) / 1000; }
};
/// {"comm_wait_ms", "epoch", "host", "phase", "pid", "progress_ms", "rank", "step", "time_ms"}.
std::string format_heartbeat(const Heartbeat& beat);
/// nullopt unless `text` is a JSON object with "rank", "pid", "step",
/// "phase" (any string: kOther when unnamed), "time_ms" and "progress_ms"
/// of the right types ("host" and "epoch" may be missing).
std::optional<Heartbeat> parse_heartbeat(std::string_view text);

/// <run-dir>/exit/rank_R.json: written once, before a deliberate exit.
struct ExitRecord {
  int rank = -1;
  int code = 0;
  ExitKind kind = ExitKind::kOk;  // as written; exit_kind_of(code) when the name is not the protocol's
  std::int64_t step = 0;          // the step it was in
  Phase phase = Phase::kOther;
  std::int64_t time_ms = 0;
  std::string message;
  /// World ranks the writer names as the cause (a straggler; the peers a
  /// collective timed out on), if any.
  std::vector<int> blamed_ranks;
  std::int64_t epoch = 0;

  double time_s() const { return double(time_ms) / 1000; }
};
/// {"blamed_ranks", "code", "epoch", "kind", "message", "phase", "rank", "step", "time_ms"}.
std::string format_exit_record(const ExitRecord& record);
/// nullopt unless `text` is a JSON object whose fields, those present, have
/// the right types (every field may be missing).
std::optional<ExitRecord> parse_exit_record(std::string_view text);

/// A value of a metrics line's open-ended fields (a run's description, a
/// program's own fields): what JSON holds there. Integers that fit read as
/// std::int64_t, larger ones as std::uint64_t; a list holds integers.
using FieldValue = std::variant<bool, std::int64_t, std::uint64_t, double, std::string, std::vector<std::int64_t>>;
using Fields = std::map<std::string, FieldValue, std::less<>>;

/// Lines of rank 0's <run-dir>/metrics.jsonl (ht/train/metrics.h), each
/// flushed as written. The "epoch" field is written only when > 0.
/// {"type": "run"}: training began (after start-up and the checkpoint load).
struct RunLine {
  std::int64_t time_ms = 0;  // when written (0: not said)
  /// A resumed launch: the step it resumed from, the tier that held it
  /// ("memory", "memory+peer", "disk") and how long the load took; all three
  /// are written when resumed_from >= 0.
  std::int64_t resumed_from = -1;
  std::string resume_tier;
  double resume_ms = 0;
  /// The rest: the run's description (version, model, mesh, options) and
  /// the program's own fields, by name. A field JSON holds but FieldValue
  /// cannot (an object, a list of non-integers, null) is not read.
  Fields fields;
  std::int64_t epoch = 0;

  double time_s() const { return double(time_ms) / 1000; }
};

/// {"type": "step"}: one optimizer step completed.
struct StepLine {
  std::int64_t step = 0;
  std::int64_t time_ms = 0;  // when written: when the step completed
  /// Written as null when non-finite; null (and a missing loss) reads as NaN.
  double loss = std::numeric_limits<double>::quiet_NaN(), lr = 0, grad_norm = 0;
  double step_ms = 0;                      // the step's own time
  std::int64_t tokens = 0;                 // target elements of the whole global batch
  double tokens_per_s = 0, loss_scale = 1;
  bool skipped = false;             // an overflow: no update
  std::int64_t skipped_steps = 0;   // so far
  bool checkpoint = false, snapshot = false;  // a save, a memory snapshot of this step started
  /// The program's own fields (FitOptions::step_fields: "*_bytes", ...) and
  /// fit's "flops_per_token" (the model's own, at the step's shape) and
  /// "mfu" (percent, against the run line's "peak_tflops"); a field named as
  /// one of the line's own above is not written.
  Fields fields;
  std::int64_t epoch = 0;

  double time_s() const { return double(time_ms) / 1000; }
};

/// {"type": "eval"}: an evaluation over the validation samples.
struct EvalLine {
  std::int64_t step = 0;  // the step it follows (0: before the first)
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // as StepLine::loss
  std::int64_t val_samples = 0;
  /// The model's metrics, written as "val_<name>".
  std::map<std::string, double> metrics;
  std::int64_t epoch = 0;
};

using MetricsLine = std::variant<RunLine, StepLine, EvalLine>;

std::string format_metrics_line(const MetricsLine& line);
/// One line of metrics.jsonl. nullopt for a JSON object of another "type"
/// (or none). Throws ProtocolError when `text` is not a JSON object, or a
/// field the line's type defines holds another type (a number where a string
/// belongs); the message names the field.
std::optional<MetricsLine> parse_metrics_line(std::string_view text);

// ------------------------------------------------- the node agent's channel

/// Under htrun every host runs a node agent (ht-agent), and each rank speaks
/// to its host's agent over a Unix socket of type SOCK_SEQPACKET (one
/// message a record, the job owner's alone) at
/// agent_socket_path(<HT_AGENT_DIR>, host label): heartbeats and exit
/// records go there instead of the run directory. Each message is one JSON
/// object with a "type": rank to agent {"type": "beat", <Heartbeat's
/// fields>} and {"type": "exit", <ExitRecord's fields>}; agent to rank
/// {"type": "fence", "epoch": E} (launch E superseded the rank's: it writes
/// nothing more and exits with kExitFenced). docs/htrun.md, "Node agents".
struct Fence {
  std::int64_t epoch = 0;
};
using AgentMessage = std::variant<Heartbeat, ExitRecord, Fence>;
std::string format_agent_message(const AgentMessage& message);
/// nullopt unless `text` is one of the three, read as parse_heartbeat and
/// parse_exit_record read theirs.
std::optional<AgentMessage> parse_agent_message(std::string_view text);

// ----------------------------------------------------------- environment

/// What htrun sets in the ranks' environment, by name.
inline constexpr const char* kEnvLaunchEpoch = "HT_LAUNCH_EPOCH";        // the launch's epoch
inline constexpr const char* kEnvSimulatedNodes = "HT_SIMULATED_NODES";  // "<slots>:<id>,<id>,..." (simulated nodes)
inline constexpr const char* kEnvAgentDir = "HT_AGENT_DIR";              // the node agents' socket directory
inline constexpr const char* kEnvCommTimeout = "HT_COMM_TIMEOUT";        // the ranks' communication timeout (s)
/// The MFU peak an earlier launch of the job measured (its run line's
/// "peak_tflops" and "peak_source"): a relaunch takes it rather than
/// measuring again (a third of a second on a CPU, at every recovery).
inline constexpr const char* kEnvMfuPeak = "HT_MFU_PEAK";                // TFLOP/s a rank
inline constexpr const char* kEnvMfuPeakSource = "HT_MFU_PEAK_SOURCE";  // how it was measured

// ----------------------------------------------------------------- paths

/// Where the records live in a run directory.
std::string heartbeat_dir(const std::string& run_dir);                 // <run_dir>/heartbeat
std::string heartbeat_path(const std::string& run_dir, int rank);      // <run_dir>/heartbeat/rank_R.json
std::string exit_record_dir(const std::string& run_dir);               // <run_dir>/exit
std::string exit_record_path(const std::string& run_dir, int rank);    // <run_dir>/exit/rank_R.json
std::string metrics_path(const std::string& run_dir);                  // <run_dir>/metrics.jsonl
/// <run_dir>/launch_epoch: the newest launch's epoch, one decimal number.
std::string launch_epoch_path(const std::string& run_dir);
std::string checkpoint_dir(const std::string& run_dir);           // <run_dir>/checkpoints
std::string supervisor_report_path(const std::string& run_dir);   // <run_dir>/htrun_report.json
std::string job_log_path(const std::string& run_dir);             // <run_dir>/htrun_job.log
/// A node agent's socket: <agent_dir>/<host_label>.sock.
std::string agent_socket_path(const std::string& agent_dir, const std::string& host_label);

}  // namespace ht::resilience
