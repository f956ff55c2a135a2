// The run protocol's names, rules and records (ht/resilience/run_protocol.h):
// the only place that spells a record's fields out in JSON.
#include "ht/resilience/run_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "ht/core/error.h"
#include "resilience/json_record.h"

namespace ht::resilience {
namespace {

using nlohmann::json;
using detail::FieldReader;
using detail::integer_of;
using detail::json_line;
using detail::parse_object;

constexpr std::array<const char*, kPhaseCount> kPhaseNames{
    "launch",     "start",          "data",     "forward-backward", "gradient-reduction",
    "optimizer",  "replica-check",  "loss-reduction", "checkpoint", "snapshot",
    "step-done",  "evaluate",       "finish",   "other"};
constexpr std::array<const char*, 10> kExitKindNames{"ok",         "error",      "comm-failure", "hang",  "divergence",
                                                     "preempted",  "corruption", "straggler",    "fenced", "crash"};
constexpr std::array<const char*, 11> kIncidentKindNames{"crash",      "host-lost",  "comm-failure", "hang",
                                                         "divergence", "corruption", "straggler",    "preemption",
                                                         "error",      "failure",    "no-heartbeat"};

template <class Enum, std::size_t N>
std::optional<Enum> enum_named(const std::array<const char*, N>& names, std::string_view name) {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i]) return Enum(i);
  return std::nullopt;
}

// An open-ended field's value, when FieldValue can hold it.
std::optional<FieldValue> field_value(const json& j) {
  switch (j.type()) {
    case json::value_t::boolean: return j.get<bool>();
    case json::value_t::number_integer: return j.get<std::int64_t>();
    case json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u <= std::uint64_t(std::numeric_limits<std::int64_t>::max())) return std::int64_t(u);
      return u;
    }
    case json::value_t::number_float: return j.get<double>();
    case json::value_t::null: return std::numeric_limits<double>::quiet_NaN();
    case json::value_t::string: return j.get<std::string>();
    case json::value_t::array: {
      std::vector<std::int64_t> values;
      for (const json& e : j) {
        if (!e.is_number_integer()) return std::nullopt;
        if (e.is_number_unsigned() && e.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
          return std::nullopt;
        values.push_back(e.get<std::int64_t>());
      }
      return values;
    }
    default: return std::nullopt;
  }
}

json field_json(const FieldValue& value) {
  return std::visit([](const auto& v) { return json(v); }, value);
}

// The object's fields not in `own`, as FieldValues (those it can hold).
Fields other_fields(const json& object, std::initializer_list<std::string_view> own) {
  Fields out;
  for (const auto& [key, value] : object.items()) {
    if (std::find(own.begin(), own.end(), key) != own.end()) continue;
    if (auto v = field_value(value)) out.emplace(key, std::move(*v));
  }
  return out;
}

// `fields` first: the line's own fields, set after, win over a program's of the same name.
json with_fields(const Fields& fields) {
  json j = json::object();
  for (const auto& [key, value] : fields) j[key] = field_json(value);
  return j;
}

void stamp_epoch(json& j, std::int64_t epoch) {
  if (epoch > 0) j["epoch"] = epoch;
}

json run_json(const RunLine& r) {
  json j = with_fields(r.fields);
  j["type"] = "run";
  j["time_ms"] = r.time_ms;
  if (r.resumed_from >= 0) {
    j["resumed_from"] = r.resumed_from;
    j["resume_tier"] = r.resume_tier;
    j["resume_ms"] = r.resume_ms;
  }
  stamp_epoch(j, r.epoch);
  return j;
}

json step_json(const StepLine& s) {
  json j = with_fields(s.fields);
  j["type"] = "step";
  j["step"] = s.step;
  j["time_ms"] = s.time_ms;
  j["loss"] = s.loss;
  j["lr"] = s.lr;
  j["grad_norm"] = s.grad_norm;
  j["step_ms"] = s.step_ms;
  j["tokens"] = s.tokens;
  j["tokens_per_s"] = s.tokens_per_s;
  j["loss_scale"] = s.loss_scale;
  j["skipped"] = s.skipped;
  j["skipped_steps"] = s.skipped_steps;
  j["checkpoint"] = s.checkpoint;
  j["snapshot"] = s.snapshot;
  stamp_epoch(j, s.epoch);
  return j;
}

json eval_json(const EvalLine& e) {
  json j = json::object();
  for (const auto& [name, value] : e.metrics) j["val_" + name] = value;
  j["type"] = "eval";
  j["step"] = e.step;
  j["val_loss"] = e.val_loss;
  j["val_samples"] = e.val_samples;
  stamp_epoch(j, e.epoch);
  return j;
}

RunLine run_line(const json& j, FieldReader& f) {
  RunLine r;
  f.integer("time_ms", r.time_ms);
  f.integer("resumed_from", r.resumed_from);
  f.text("resume_tier", r.resume_tier);
  f.number("resume_ms", r.resume_ms);
  f.integer("epoch", r.epoch);
  r.fields = other_fields(j, {"type", "time_ms", "resumed_from", "resume_tier", "resume_ms", "epoch"});
  return r;
}

StepLine step_line(const json& j, FieldReader& f) {
  StepLine s;
  f.integer("step", s.step);
  f.integer("time_ms", s.time_ms);
  f.number("loss", s.loss);
  f.number("lr", s.lr);
  f.number("grad_norm", s.grad_norm);
  f.number("step_ms", s.step_ms);
  f.integer("tokens", s.tokens);
  f.number("tokens_per_s", s.tokens_per_s);
  f.number("loss_scale", s.loss_scale);
  f.flag("skipped", s.skipped);
  f.integer("skipped_steps", s.skipped_steps);
  f.flag("checkpoint", s.checkpoint);
  f.flag("snapshot", s.snapshot);
  f.integer("epoch", s.epoch);
  s.fields = other_fields(j, {"type", "step", "time_ms", "loss", "lr", "grad_norm", "step_ms", "tokens",
                              "tokens_per_s", "loss_scale", "skipped", "skipped_steps", "checkpoint", "snapshot",
                              "epoch"});
  return s;
}

EvalLine eval_line(const json& j, FieldReader& f) {
  EvalLine e;
  f.integer("step", e.step);
  f.number("val_loss", e.val_loss);
  f.integer("val_samples", e.val_samples);
  f.integer("epoch", e.epoch);
  for (const auto& [key, value] : j.items()) {
    if (!key.starts_with("val_") || key == "val_loss" || key == "val_samples") continue;
    double v = 0;
    f.number(key.c_str(), v);
    e.metrics[key.substr(4)] = v;
  }
  return e;
}

}  // namespace

const char* phase_name(Phase phase) {
  const auto i = std::size_t(phase);
  return i < kPhaseNames.size() ? kPhaseNames[i] : "other";
}

std::optional<Phase> parse_phase(std::string_view name) { return enum_named<Phase>(kPhaseNames, name); }

bool step_completed_in(Phase phase) {
  return phase == Phase::kStepDone || phase == Phase::kEvaluate || phase == Phase::kFinish;
}

std::int64_t completed_step(std::int64_t step, Phase phase) { return step_completed_in(phase) ? step : step - 1; }

bool starting(Phase phase) { return phase == Phase::kLaunch || phase == Phase::kStart; }

ExitKind exit_kind_of(int code) {
  switch (code) {
    case kExitOk: return ExitKind::kOk;
    case kExitError: return ExitKind::kError;
    case kExitCommFailure: return ExitKind::kCommFailure;
    case kExitHang: return ExitKind::kHang;
    case kExitDivergence: return ExitKind::kDivergence;
    case kExitPreempted: return ExitKind::kPreempted;
    case kExitCorruption: return ExitKind::kCorruption;
    case kExitStraggler: return ExitKind::kStraggler;
    case kExitFenced: return ExitKind::kFenced;
    default: return code > 128 ? ExitKind::kCrash : ExitKind::kError;
  }
}

const char* exit_kind_name(ExitKind kind) {
  const auto i = std::size_t(kind);
  return i < kExitKindNames.size() ? kExitKindNames[i] : "error";
}

std::optional<ExitKind> parse_exit_kind(std::string_view name) { return enum_named<ExitKind>(kExitKindNames, name); }

std::string exit_kind(int code) { return exit_kind_name(exit_kind_of(code)); }

int exit_code_for(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  if (!err) return kExitError;
  switch (err->kind()) {
    case ErrorKind::kComm: return kExitCommFailure;
    case ErrorKind::kDivergence: return kExitDivergence;
    case ErrorKind::kCorruption: return kExitCorruption;
    default: return kExitError;
  }
}

const char* incident_kind_name(IncidentKind kind) {
  const auto i = std::size_t(kind);
  return i < kIncidentKindNames.size() ? kIncidentKindNames[i] : "failure";
}

std::optional<IncidentKind> parse_incident_kind(std::string_view name) {
  return enum_named<IncidentKind>(kIncidentKindNames, name);
}

std::optional<IncidentKind> incident_of_exit(ExitKind kind) {
  switch (kind) {
    case ExitKind::kOk:
    case ExitKind::kCommFailure:
    case ExitKind::kFenced: return std::nullopt;
    case ExitKind::kError: return IncidentKind::kError;
    case ExitKind::kHang: return IncidentKind::kHang;
    case ExitKind::kDivergence: return IncidentKind::kDivergence;
    case ExitKind::kPreempted: return IncidentKind::kPreemption;
    case ExitKind::kCorruption: return IncidentKind::kCorruption;
    case ExitKind::kStraggler: return IncidentKind::kStraggler;
    case ExitKind::kCrash: return IncidentKind::kCrash;
  }
  return IncidentKind::kFailure;
}

bool of_launch(std::int64_t record_epoch, std::int64_t launch) {
  return launch == 0 || record_epoch == 0 || record_epoch == launch;
}

std::string format_heartbeat(const Heartbeat& b) {
  return json_line({{"rank", b.rank},
                    {"host", b.host},
                    {"pid", b.pid},
                    {"step", b.step},
                    {"phase", phase_name(b.phase)},
                    {"time_ms", b.time_ms},
                    {"progress_ms", b.progress_ms},
                    {"epoch", b.epoch},
                    {"comm_wait_ms", b.comm_wait_ms}});
}

std::optional<Heartbeat> parse_heartbeat(std::string_view text) {
  const auto j = parse_object(text);
  if (!j) return std::nullopt;
  for (const char* key : {"rank", "pid", "step", "phase", "time_ms", "progress_ms"})
    if (!j->contains(key)) return std::nullopt;
  Heartbeat b;
  FieldReader f(*j);
  f.integer("rank", b.rank);
  f.text("host", b.host);
  f.integer("pid", b.pid);
  f.integer("step", b.step);
  f.phase("phase", b.phase);
  f.integer("time_ms", b.time_ms);
  f.integer("progress_ms", b.progress_ms);
  f.integer("epoch", b.epoch);
  f.integer("comm_wait_ms", b.comm_wait_ms);
  if (!f.bad().empty()) return std::nullopt;
  return b;
}

std::string format_exit_record(const ExitRecord& r) {
  return json_line({{"rank", r.rank},
                    {"code", r.code},
                    {"kind", exit_kind_name(r.kind)},
                    {"step", r.step},
                    {"phase", phase_name(r.phase)},
                    {"time_ms", r.time_ms},
                    {"message", r.message},
                    {"blamed_ranks", r.blamed_ranks},
                    {"epoch", r.epoch}});
}

std::optional<ExitRecord> parse_exit_record(std::string_view text) {
  const auto j = parse_object(text);
  if (!j) return std::nullopt;
  ExitRecord r;
  FieldReader f(*j);
  f.integer("rank", r.rank);
  f.integer("code", r.code);
  std::string kind;
  f.text("kind", kind);
  r.kind = parse_exit_kind(kind).value_or(exit_kind_of(r.code));
  f.integer("step", r.step);
  f.phase("phase", r.phase);
  f.integer("time_ms", r.time_ms);
  f.text("message", r.message);
  f.integers("blamed_ranks", r.blamed_ranks);
  f.integer("epoch", r.epoch);
  if (!f.bad().empty()) return std::nullopt;
  return r;
}

std::string format_agent_message(const AgentMessage& message) {
  json j;
  if (const auto* b = std::get_if<Heartbeat>(&message)) {
    j = json::parse(format_heartbeat(*b));
    j["type"] = "beat";
  } else if (const auto* r = std::get_if<ExitRecord>(&message)) {
    j = json::parse(format_exit_record(*r));
    j["type"] = "exit";
  } else {
    j = {{"type", "fence"}, {"epoch", std::get<Fence>(message).epoch}};
  }
  return json_line(j);
}

std::optional<AgentMessage> parse_agent_message(std::string_view text) {
  const auto j = parse_object(text);
  if (!j) return std::nullopt;
  const auto type = j->find("type");
  if (type == j->end() || !type->is_string()) return std::nullopt;
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "beat") {
    if (auto b = parse_heartbeat(text)) return AgentMessage(std::move(*b));
  } else if (name == "exit") {
    if (auto r = parse_exit_record(text)) return AgentMessage(std::move(*r));
  } else if (name == "fence") {
    Fence f;
    FieldReader fields(*j);
    fields.integer("epoch", f.epoch);
    if (fields.has("epoch") && fields.bad().empty()) return AgentMessage(f);
  }
  return std::nullopt;
}

std::string format_metrics_line(const MetricsLine& line) {
  if (const auto* r = std::get_if<RunLine>(&line)) return json_line(run_json(*r));
  if (const auto* s = std::get_if<StepLine>(&line)) return json_line(step_json(*s));
  return json_line(eval_json(std::get<EvalLine>(line)));
}

std::optional<MetricsLine> parse_metrics_line(std::string_view text) {
  const auto j = parse_object(text);
  if (!j) throw ProtocolError(fmt::format("not a JSON object: '{:.80}'", text));
  const auto type = j->find("type");
  if (type == j->end() || !type->is_string()) return std::nullopt;
  FieldReader f(*j);
  std::optional<MetricsLine> line;
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "run") line = run_line(*j, f);
  else if (name == "step") line = step_line(*j, f);
  else if (name == "eval") line = eval_line(*j, f);
  else return std::nullopt;
  if (!f.bad().empty()) throw ProtocolError(fmt::format("a '{}' line whose {}", name, f.bad()));
  return line;
}

std::string heartbeat_dir(const std::string& run_dir) { return (std::filesystem::path(run_dir) / "heartbeat").string(); }

std::string heartbeat_path(const std::string& run_dir, int rank) {
  return (std::filesystem::path(heartbeat_dir(run_dir)) / fmt::format("rank_{}.json", rank)).string();
}

std::string exit_record_dir(const std::string& run_dir) { return (std::filesystem::path(run_dir) / "exit").string(); }

std::string exit_record_path(const std::string& run_dir, int rank) {
  return (std::filesystem::path(exit_record_dir(run_dir)) / fmt::format("rank_{}.json", rank)).string();
}

std::string metrics_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "metrics.jsonl").string();
}

std::string launch_epoch_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "launch_epoch").string();
}

std::string checkpoint_dir(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "checkpoints").string();
}

std::string supervisor_report_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "htrun_report.json").string();
}

std::string job_log_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "htrun_job.log").string();
}

std::string agent_socket_path(const std::string& agent_dir, const std::string& host_label) {
  return (std::filesystem::path(agent_dir) / (host_label + ".sock")).string();
}

}  // namespace ht::resilience
