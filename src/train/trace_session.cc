// ht::train::TraceSession: the chosen steps recorded and written as this
// rank's Chrome trace-event file.
#include "train/trace_session.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/files.h"
#include "ht/comm/flight_recorder.h"
#include "ht/core/version.h"

namespace ht::train {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

TraceSession::TraceSession(std::string path, std::int64_t first, std::int64_t last, comm::DeviceMesh& mesh)
    : path_(std::move(path)), first_(first), last_(last), mesh_(mesh) {}

TraceSession::~TraceSession() {
  if (recording_) write_or_warn();
}

// A trace that cannot be written is reported, and training goes on.
void TraceSession::write_or_warn() {
  try {
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: the trace of steps %lld-%lld was not written (%s); training goes on\n",
                 (long long)first_traced_, (long long)last_traced_, e.what());
  }
}

std::string TraceSession::rank_path(const std::string& path, int rank) {
  const fs::path p(path);
  const std::string ext = p.has_extension() ? p.extension().string() : ".json";
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + ext)).string();
}

void TraceSession::begin_step(std::int64_t step) {
  trace::Recorder& r = trace::Recorder::global();
  r.set_step(step);
  // A run resumed inside the range starts at the step it resumes with.
  if (recording_ || step < first_ || step > last_) return;
  mesh_.world().barrier()->wait();
  sync_us_ = epoch_us();
  first_traced_ = step;
  recording_ = true;
  r.start(step);
}

void TraceSession::end_step(std::int64_t step, bool final) {
  phases_.enter(nullptr);
  if (!recording_) return;
  last_traced_ = step;
  if (step >= last_ || final) write_or_warn();
}

namespace {

// Rows in display order: the engine's phases, the computation, then one
// per communicator (named as the flight recorder names its group).
int row_id(std::map<std::string, int>& rows, const std::string& row) {
  if (row == "step") return 1;
  if (row == "compute") return 2;
  return rows.emplace(row, 3 + int(rows.size())).first->second;
}

Json span(const std::string& name, const char* cat, int pid, int tid, std::int64_t begin_us, std::int64_t end_us,
          Json args) {
  return {{"name", name}, {"cat", cat},  {"ph", "X"},        {"ts", begin_us},
          {"dur", std::max<std::int64_t>(0, end_us - begin_us)}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

Json metadata(const char* what, int pid, int tid, Json args) {
  Json m{{"name", what}, {"ph", "M"}, {"pid", pid}};
  if (tid >= 0) m["tid"] = tid;
  m["args"] = std::move(args);
  return m;
}

}  // namespace

void TraceSession::write() {
  recording_ = false;
  const std::int64_t end_us = epoch_us();
  const std::vector<trace::Event> spans = trace::Recorder::global().stop();
  const std::vector<comm::FlightEntry> ops = comm::FlightRecorder::global().entries();
  const int rank = mesh_.rank();
  const comm::MeshCoord& c = mesh_.coord();
  std::map<std::string, int> comm_rows;
  Json events = Json::array();
  for (const trace::Event& e : spans) {
    Json args{{"step", e.step}};
    if (e.micro_batch >= 0) args["micro_batch"] = e.micro_batch;
    if (e.chunk >= 0) args["chunk"] = e.chunk;
    // "forward 3", or "forward 3.1" for micro-batch 3 through chunk 1.
    std::string name = e.name;
    if (e.micro_batch >= 0) name += " " + std::to_string(e.micro_batch);
    if (e.chunk >= 0) name += "." + std::to_string(e.chunk);
    events.push_back(span(name,
                          e.cat.c_str(), rank, row_id(comm_rows, e.row), e.begin_us - sync_us_,
                          e.end_us - sync_us_, std::move(args)));
  }
  // The ring keeps the newest entries: when it is full and its oldest came
  // after the start, earlier operations of the traced steps were lost.
  bool complete = true;
  if (!ops.empty() && ops.front().enqueue_us >= sync_us_ &&
      ops.size() >= std::size_t(comm::FlightRecorder::global().capacity()))
    complete = false;
  for (const comm::FlightEntry& e : ops) {
    if (e.enqueue_us < sync_us_) continue;
    const int tid = row_id(comm_rows, std::string("comm ") + e.group);
    Json args{{"seq", e.seq}, {"count", e.count}, {"dtype", std::string(dtype_name(e.dtype))},
              {"state", comm::op_state_name(e.state)}};
    if (e.peer >= 0) args["peer"] = e.peer;
    const std::int64_t start = e.start_us > 0 ? e.start_us : end_us;
    events.push_back(span("queued", "comm-queued", rank, tid, e.enqueue_us - sync_us_, start - sync_us_, args));
    if (e.start_us > 0)
      events.push_back(span(e.op, "comm", rank, tid, e.start_us - sync_us_,
                            (e.end_us > 0 ? e.end_us : end_us) - sync_us_, std::move(args)));
  }
  events.push_back(metadata("process_name", rank, -1,
                            {{"name", fmt::format("rank {} (pp {}, dp {}, tp {})", rank, c.pp_rank, c.dp_rank,
                                                  c.tp_rank)}}));
  events.push_back(metadata("process_sort_index", rank, -1, {{"sort_index", rank}}));
  std::map<int, std::string> names{{1, "step"}, {2, "compute"}};
  for (const auto& [row, tid] : comm_rows) names[tid] = row;
  for (const auto& [tid, name] : names) {
    events.push_back(metadata("thread_name", rank, tid, {{"name", name}}));
    events.push_back(metadata("thread_sort_index", rank, tid, {{"sort_index", tid}}));
  }
  const Json file{{"traceEvents", std::move(events)},
                  {"displayTimeUnit", "ms"},
                  {"otherData",
                   {{"hypertrain_trace", 1},
                    {"rank", rank},
                    {"world_size", mesh_.world().size()},
                    {"mesh", mesh_.shape().str()},
                    {"coord", {{"pp", c.pp_rank}, {"dp", c.dp_rank}, {"tp", c.tp_rank}}},
                    {"steps", {first_traced_, last_traced_}},
                    {"time_zero", "the end of a world barrier before the first traced step (microseconds)"},
                    {"collectives_complete", complete},
                    {"build", build_description()}}}};
  const std::string path = rank_path(path_, rank);
  if (fs::path(path).has_parent_path()) ht::detail::make_directories(fs::path(path).parent_path());
  ht::detail::write_file_replacing(path, file.dump() + "\n", /*sync=*/false, "trace file");
}

}  // namespace ht::train
