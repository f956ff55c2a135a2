// Merging flight-recorder dumps: reading them, per-group progress of each
// rank, and the verdict (who is behind, who is stuck in what) as text or JSON.
#include "ht/comm/flight_analysis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "comm/flight_entry_json.h"
#include "core/json_integer.h"
#include "ht/core/error.h"

namespace ht::comm {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Ranks a dump may name: a quarter million, beyond the largest jobs run; a
// rank past it is a damaged dump (the analysis holds a row per rank of the world).
constexpr int kMaxRanks = 1 << 18;

// Field `key` of `j` as an integer of T's range, or `fallback` when absent.
template <std::integral T>
T integer(const Json& j, const char* key, std::optional<T> fallback = std::nullopt) {
  if (fallback && !j.contains(key)) return *fallback;
  return ht::detail::json_integer<T>(j.at(key), key);
}

OpState parse_state(const std::string& s, const std::string& source) {
  for (OpState st : {OpState::kEnqueued, OpState::kStarted, OpState::kCompleted, OpState::kFailed, OpState::kTimedOut})
    if (op_state_name(st) == s) return st;
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: unknown operation state '{}'", source, s));
}

bool is_point_to_point(const FlightEntry& e) {
  return std::strcmp(e.op, "send") == 0 || std::strcmp(e.op, "recv") == 0 || std::strcmp(e.op, "send_recv") == 0;
}

bool is_done(const FlightEntry& e) { return e.state == OpState::kCompleted; }

// "rank 3" / "ranks 0,1,2"
std::string ranks_str(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

// "all_reduce #4 (1000 x f32)", "broadcast #2 (8 x i32, root 1)", "barrier #5"
std::string op_str(const FlightEntry& e) {
  const std::string_view op = e.op;
  if (op == "barrier" || op == "split") return fmt::format("{} #{}", op, e.seq);
  std::string args = fmt::format("{} x {}", e.count, dtype_name(e.dtype));
  if (e.peer >= 0) args += fmt::format(", root {}", e.peer);
  return fmt::format("{} #{} ({})", op, e.seq, args);
}

std::string summarise(const GroupAnalysis& g) {
  std::vector<std::string> parts;
  // Behind ranks, grouped by where they stopped.
  std::map<std::uint64_t, std::vector<int>> by_last;
  for (int r : g.behind)
    for (const RankProgress& p : g.ranks)
      if (p.rank == r) by_last[p.enqueued].push_back(r);
  for (const auto& [seq, ranks] : by_last) {
    const RankProgress* first = nullptr;
    for (const RankProgress& p : g.ranks)
      if (p.rank == ranks.front()) first = &p;
    const char* verb = ranks.size() == 1 ? "is" : "are";
    if (seq == 0) {
      parts.push_back(fmt::format("{} {} behind: entered no collective of this group that its recorder still holds",
                                  ranks_str(ranks), verb));
    } else if (first->last) {
      std::string text = fmt::format("{} {} behind: last entered {} #{}", ranks_str(ranks), verb, first->last->op, seq);
      if (!is_done(*first->last)) text += fmt::format(" ({})", op_state_name(first->last->state));
      parts.push_back(text);
    } else {
      parts.push_back(fmt::format("{} {} behind: last entered #{}", ranks_str(ranks), verb, seq));
    }
  }
  if (!g.no_dump.empty()) parts.push_back(fmt::format("no dump from {}", ranks_str(g.no_dump)));
  if (!g.stuck.empty() && g.stuck_op) {
    const FlightEntry& op = *g.stuck_op;
    std::string text = fmt::format("{} {} stuck in {}", ranks_str(g.stuck), g.stuck.size() == 1 ? "is" : "are",
                                   op_str(op));
    text += fmt::format(", {} {:.1f} s before the dump", op.start_us != 0 ? "started" : "enqueued (not started)",
                        g.stuck_for_s);
    if (op.state == OpState::kTimedOut || op.state == OpState::kFailed)
      text += fmt::format(" ({})", op_state_name(op.state));
    parts.push_back(text);
    if (g.behind.empty() && g.no_dump.empty())
      parts.push_back("no rank is behind: the operation itself did not finish");
  }
  if (parts.empty()) {
    std::vector<int> ranks;
    for (const RankProgress& p : g.ranks) ranks.push_back(p.rank);
    return fmt::format("group '{}': ok: {} completed every collective up to #{}", g.group, ranks_str(ranks),
                       g.frontier);
  }
  return fmt::format("group '{}': {}", g.group, fmt::join(parts, "; "));
}

GroupAnalysis analyse_group(const std::string& name, const std::map<int, std::vector<FlightEntry>>& by_rank,
                            const std::vector<int>& members, const std::map<int, const FlightDump*>& dumps) {
  GroupAnalysis g;
  g.group = name;
  for (int r : members) {
    RankProgress p;
    p.rank = r;
    const auto d = dumps.find(r);
    if (d == dumps.end()) {
      p.has_dump = false;
      g.no_dump.push_back(r);
      g.ranks.push_back(p);
      continue;
    }
    p.dump_us = d->second->dump_us;
    const auto it = by_rank.find(r);
    if (it != by_rank.end()) {
      for (const FlightEntry& e : it->second) {
        p.enqueued = std::max(p.enqueued, e.seq);
        if (e.start_us != 0 || is_done(e)) p.started = std::max(p.started, e.seq);
        if (is_done(e)) p.completed = std::max(p.completed, e.seq);
        if (!is_done(e) && (!p.pending || e.seq < p.pending->seq)) p.pending = e;
      }
      for (const FlightEntry& e : it->second)
        if (e.seq == p.enqueued) p.last = e;
    }
    g.frontier = std::max(g.frontier, p.enqueued);
    g.ranks.push_back(p);
  }
  for (const RankProgress& p : g.ranks) {
    if (!p.has_dump) continue;
    if (p.enqueued < g.frontier)
      g.behind.push_back(p.rank);
    else if (p.pending)
      g.stuck.push_back(p.rank);
  }
  for (const RankProgress& p : g.ranks)
    if (std::find(g.stuck.begin(), g.stuck.end(), p.rank) != g.stuck.end() &&
        (!g.stuck_op || p.pending->seq < g.stuck_op->seq))
      g.stuck_op = p.pending;
  for (const RankProgress& p : g.ranks) {
    if (std::find(g.stuck.begin(), g.stuck.end(), p.rank) == g.stuck.end() || p.pending->seq != g.stuck_op->seq)
      continue;
    const std::int64_t since = p.pending->start_us != 0 ? p.pending->start_us : p.pending->enqueue_us;
    // In double: a damaged dump's times may be any int64, and their difference overflow.
    if (since != 0 && p.dump_us > since)
      g.stuck_for_s = std::max(g.stuck_for_s, (double(p.dump_us) - double(since)) * 1e-6);
  }
  g.summary = summarise(g);
  return g;
}

}  // namespace

FlightDump parse_flight_dump(const std::string& json_text, const std::string& source) {
  FlightDump d;
  d.source = source;
  try {
    const Json doc = Json::parse(json_text);
    d.rank = integer<int>(doc, "rank");
    d.host = doc.value("host", std::string("?"));
    d.pid = integer<int>(doc, "pid", 0);
    d.reason = doc.value("reason", std::string());
    d.dump_us = integer<std::int64_t>(doc, "dump_us", 0);
    for (const Json& j : doc.at("entries")) {
      FlightEntry e;
      e.seq = integer<std::uint64_t>(j, "seq");
      detail::copy_field(e.op, j.at("op").get<std::string>());
      detail::copy_field(e.group, j.at("group").get<std::string>());
      e.count = integer<std::int64_t>(j, "count", 0);
      e.dtype = parse_dtype(j.value("dtype", std::string("f32")));
      e.peer = integer<int>(j, "peer", -1);
      e.state = parse_state(j.at("state").get<std::string>(), source);
      e.enqueue_us = integer<std::int64_t>(j, "enqueue_us", 0);
      e.start_us = integer<std::int64_t>(j, "start_us", 0);
      e.end_us = integer<std::int64_t>(j, "end_us", 0);
      d.entries.push_back(e);
    }
  } catch (const Json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: not a flight-recorder dump: {}", source, e.what()));
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: not a flight-recorder dump: {}", source, e.what()));
  } catch (const Error& e) {
    if (e.message().rfind(source, 0) == 0) throw;
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", source, e.message()));
  }
  if (d.rank < 0 || d.rank >= kMaxRanks)
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: rank {} is outside [0, {}): a damaged dump", source, d.rank, kMaxRanks));
  return d;
}

std::vector<FlightDump> read_flight_dumps(const std::vector<std::string>& paths) {
  std::vector<fs::path> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("flight_recorder_rank", 0) == 0 && entry.path().extension() == ".json")
          found.push_back(entry.path());
      }
      if (ec) throw IoError(ErrorKind::kIo, fmt::format("cannot list directory '{}': {}", p, ec.message()));
      if (found.empty())
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("no flight_recorder_rank<r>.json in directory '{}': pass the run directory the "
                                "communicators dumped to (CommOptions::run_dir)",
                                p));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      files.emplace_back(p);
    } else {
      throw IoError(ErrorKind::kIo, fmt::format("'{}' does not exist", p));
    }
  }
  if (files.empty()) throw Error(ErrorKind::kInvalidArgument, "no flight-recorder dumps given");

  std::vector<FlightDump> dumps;
  std::map<int, std::string> seen;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw IoError(ErrorKind::kIo, fmt::format("cannot read '{}': {}", f.string(), std::strerror(errno)));
    FlightDump d = parse_flight_dump(text.str(), f.string());
    if (const auto [it, fresh] = seen.emplace(d.rank, f.string()); !fresh)
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("two dumps of rank {}: '{}' and '{}'; pass the dumps of one run", d.rank, it->second,
                              f.string()));
    dumps.push_back(std::move(d));
  }
  std::sort(dumps.begin(), dumps.end(), [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  return dumps;
}

FlightAnalysis analyse_flight_dumps(const std::vector<FlightDump>& dumps, int world_size) {
  FlightAnalysis a;
  std::map<int, const FlightDump*> by_rank;
  int highest = -1;
  for (const FlightDump& d : dumps) {
    by_rank[d.rank] = &d;
    highest = std::max(highest, d.rank);
  }
  HT_CHECK(world_size <= kMaxRanks, ErrorKind::kInvalidArgument, "a world of {} ranks is beyond the {} this tool reads",
           world_size, kMaxRanks);
  a.world_size = world_size > 0 ? world_size : highest + 1;
  for (const auto& [r, d] : by_rank) {
    HT_CHECK(r < a.world_size, ErrorKind::kInvalidArgument, "{}: rank {} is outside a world of {} ranks", d->source,
             r, a.world_size);
    a.dumped.push_back(r);
  }
  for (int r = 0; r < a.world_size; ++r)
    if (!by_rank.count(r)) a.missing.push_back(r);

  // group -> rank -> its collective entries
  std::map<std::string, std::map<int, std::vector<FlightEntry>>> groups;
  for (const FlightDump& d : dumps)
    for (const FlightEntry& e : d.entries)
      if (!is_point_to_point(e)) groups[e.group][d.rank].push_back(e);

  std::vector<std::string> names;
  if (groups.count("world") || !a.missing.empty()) names.push_back("world");
  for (const auto& [name, ranks] : groups)
    if (name != "world") names.push_back(name);
  for (const std::string& name : names) {
    std::vector<int> members;
    if (name == "world") {
      for (int r = 0; r < a.world_size; ++r) members.push_back(r);
    } else {
      for (const auto& [r, entries] : groups[name]) members.push_back(r);
    }
    a.groups.push_back(analyse_group(name, groups[name], members, by_rank));
  }
  return a;
}

std::string format_flight_analysis(const FlightAnalysis& a, const std::vector<FlightDump>& dumps) {
  std::string out = fmt::format("# ht-flight-recorder: {} dump{} from a world of {} rank{}\n", dumps.size(),
                                dumps.size() == 1 ? "" : "s", a.world_size, a.world_size == 1 ? "" : "s");
  if (!a.missing.empty()) out += fmt::format("# no dump from {}\n", ranks_str(a.missing));
  for (const FlightDump& d : dumps)
    out += fmt::format("# rank {} ({}, pid {}): {}\n", d.rank, d.host, d.pid, d.reason.empty() ? "-" : d.reason);
  for (const GroupAnalysis& g : a.groups) {
    out += fmt::format("\ngroup '{}' ({} ranks): highest collective sequence numbers\n", g.group, g.ranks.size());
    out += fmt::format("  {:>5} {:>9} {:>9} {:>10}  {}\n", "rank", "enqueued", "started", "completed", "pending");
    for (const RankProgress& p : g.ranks) {
      if (!p.has_dump) {
        out += fmt::format("  {:>5} {:>9} {:>9} {:>10}  {}\n", p.rank, "?", "?", "?", "no dump");
        continue;
      }
      const std::string pending =
          p.pending ? fmt::format("{} {}", op_str(*p.pending), op_state_name(p.pending->state)) : "-";
      out += fmt::format("  {:>5} {:>9} {:>9} {:>10}  {}\n", p.rank, p.enqueued, p.started, p.completed, pending);
    }
  }
  out += "\n";
  for (const GroupAnalysis& g : a.groups) out += g.summary + "\n";
  return out;
}

std::string flight_analysis_json(const FlightAnalysis& a, const std::vector<FlightDump>& dumps) {
  const auto entry_json = detail::flight_entry_json;
  OrderedJson doc;
  doc["world_size"] = a.world_size;
  doc["dumped_ranks"] = a.dumped;
  doc["missing_ranks"] = a.missing;
  OrderedJson dumps_json = OrderedJson::array();
  for (const FlightDump& d : dumps)
    dumps_json.push_back({{"rank", d.rank}, {"host", d.host}, {"pid", d.pid}, {"reason", d.reason},
                          {"dump_us", d.dump_us}, {"source", d.source}});
  doc["dumps"] = std::move(dumps_json);
  OrderedJson groups = OrderedJson::array();
  for (const GroupAnalysis& g : a.groups) {
    OrderedJson ranks = OrderedJson::array();
    for (const RankProgress& p : g.ranks) {
      OrderedJson r{{"rank", p.rank}, {"has_dump", p.has_dump}};
      if (p.has_dump) {
        r["enqueued"] = p.enqueued;
        r["started"] = p.started;
        r["completed"] = p.completed;
        r["pending"] = p.pending ? entry_json(*p.pending) : OrderedJson(nullptr);
      }
      ranks.push_back(std::move(r));
    }
    groups.push_back({{"group", g.group},
                      {"healthy", g.healthy()},
                      {"frontier", g.frontier},
                      {"behind", g.behind},
                      {"stuck", g.stuck},
                      {"stuck_op", g.stuck_op ? entry_json(*g.stuck_op) : OrderedJson(nullptr)},
                      {"stuck_for_s", g.stuck_for_s},
                      {"no_dump", g.no_dump},
                      {"summary", g.summary},
                      {"ranks", std::move(ranks)}});
  }
  doc["groups"] = std::move(groups);
  return doc.dump(1) + "\n";
}

}  // namespace ht::comm
