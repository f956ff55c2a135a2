// Post-mortem analysis of flight-recorder dumps (flight_recorder.h): merge
// the dumps of all ranks and say, for each group, how far each rank got and
// which ranks fell behind, and the collective the others are stuck in.
// The tool `ht-flight-recorder` is a thin command line over these functions.
//
// The analysis looks at collectives only (their sequence numbers are the same
// on every rank of a group; point-to-point numbers are per rank). A group's
// members are the ranks whose dumps hold entries for it; the group "world"
// holds every rank of the world, so a rank without a dump is named there.
// Group names are taken to identify groups (DeviceMesh's "tp.0", "dp.1", ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ht/comm/flight_recorder.h"

namespace ht::comm {

/// One rank's dump, as FlightRecorder::dump writes it.
struct FlightDump {
  int rank = -1;
  std::string host;
  int pid = 0;
  std::string reason;
  std::int64_t dump_us = 0;
  std::vector<FlightEntry> entries;
  std::string source;  // the file it came from, for messages
};

/// Parses one dump's JSON text; `source` names it in errors. Throws
/// ht::Error(kInvalidArgument) naming the source and what is wrong.
FlightDump parse_flight_dump(const std::string& json_text, const std::string& source);
/// Reads dumps from files and directories (every flight_recorder_rank*.json
/// inside, not recursively). Throws IoError for an unreadable path, Error
/// (kInvalidArgument) for a malformed dump, for two dumps of the same rank or
/// when no dump is found.
std::vector<FlightDump> read_flight_dumps(const std::vector<std::string>& paths);

/// How far one rank got in one group (highest sequence numbers; 0: none).
struct RankProgress {
  int rank = -1;
  bool has_dump = true;  // false: a world member without a dump (progress unknown)
  std::uint64_t enqueued = 0, started = 0, completed = 0;
  std::optional<FlightEntry> last;     // the entry of `enqueued`, if still held
  std::optional<FlightEntry> pending;  // the oldest entry not completed, if any
  std::int64_t dump_us = 0;
};

struct GroupAnalysis {
  std::string group;
  std::vector<RankProgress> ranks;  // by rank
  std::uint64_t frontier = 0;       // the highest sequence number any rank enqueued
  std::vector<int> behind;          // dumped ranks that never enqueued `frontier`
  std::vector<int> stuck;           // ranks that enqueued `frontier` (or an earlier op) and did not complete it
  std::optional<FlightEntry> stuck_op;  // what the stuck ranks are in (the lowest pending one among them)
  double stuck_for_s = 0;               // longest time from its start (or enqueue) to a dump, among the stuck
  std::vector<int> no_dump;             // members without a dump
  std::string summary;                  // one line, as the tool prints it
  bool healthy() const { return behind.empty() && stuck.empty() && no_dump.empty(); }
};

struct FlightAnalysis {
  int world_size = 0;
  std::vector<int> dumped;   // ranks with a dump
  std::vector<int> missing;  // ranks in [0, world_size) without one
  std::vector<GroupAnalysis> groups;  // by name
};

/// Merges the dumps. `world_size` 0: one more than the highest rank dumped.
/// Throws Error(kInvalidArgument) for a dump whose rank is outside the world.
FlightAnalysis analyse_flight_dumps(const std::vector<FlightDump>& dumps, int world_size = 0);

/// The report the tool prints: a table of progress per group and its summary
/// line, e.g. "group 'world': rank 3 is behind: last entered all_reduce #3;
/// ranks 0,1,2 are stuck in all_reduce #4 (1000 x f32), started 2.0 s before
/// the dump".
std::string format_flight_analysis(const FlightAnalysis& analysis, const std::vector<FlightDump>& dumps);
/// The same as one JSON document (field names with units).
std::string flight_analysis_json(const FlightAnalysis& analysis, const std::vector<FlightDump>& dumps);

}  // namespace ht::comm
