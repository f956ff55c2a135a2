// ht::resilience::FaultPlan.
#include "ht/resilience/faults.h"

#include <fcntl.h>
#include <csignal>
#include <cstdio>
#include <thread>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ht/core/error.h"

namespace ht::resilience {
namespace {

constexpr const char* kForms =
    "crash:rank=R:step=S, hang:rank=R:step=S, nan:step=S, slow:rank=R:factor=F, bitflip:rank=R:step=S, "
    "ckpt-corrupt:step=S, node-unhealthy:node=N[:while=FILE], snapshot-crash:rank=R:step=S:phase=P (P: copy, write, commit, "
    "replicate, replica-commit)";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

FaultKind kind_of(const std::string& k, const std::string& entry) {
  if (k == "crash") return FaultKind::kCrash;
  if (k == "hang") return FaultKind::kHang;
  if (k == "nan") return FaultKind::kNan;
  if (k == "slow") return FaultKind::kSlow;
  if (k == "bitflip") return FaultKind::kBitflip;
  if (k == "ckpt-corrupt") return FaultKind::kCkptCorrupt;
  if (k == "node-unhealthy") return FaultKind::kNodeUnhealthy;
  if (k == "snapshot-crash") return FaultKind::kSnapshotCrash;
  HT_CHECK(false, ErrorKind::kConfig, "HT_FAULTS entry '{}': unknown fault '{}'; the forms are {}", entry, k, kForms);
  return FaultKind::kCrash;
}

bool is_snapshot_phase(const std::string& p) {
  return p == "copy" || p == "write" || p == "commit" || p == "replicate" || p == "replica-commit";
}

}  // namespace

std::string fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::kCrash: return "crash";
    case FaultKind::kHang: return "hang";
    case FaultKind::kNan: return "nan";
    case FaultKind::kSlow: return "slow";
    case FaultKind::kBitflip: return "bitflip";
    case FaultKind::kCkptCorrupt: return "ckpt-corrupt";
    case FaultKind::kNodeUnhealthy: return "node-unhealthy";
    case FaultKind::kSnapshotCrash: return "snapshot-crash";
  }
  return "?";
}

FaultPlan FaultPlan::parse(const std::string& spec) {
  FaultPlan plan;
  for (const std::string& entry : split(spec, ',')) {
    const std::vector<std::string> parts = split(entry, ':');
    HT_CHECK(!parts.empty(), ErrorKind::kConfig, "HT_FAULTS entry '{}' names no fault; the forms are {}", entry,
             kForms);
    Fault f;
    f.text = entry;
    f.kind = kind_of(parts.front(), entry);
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const auto eq = parts[i].find('=');
      HT_CHECK(eq != std::string::npos, ErrorKind::kConfig, "HT_FAULTS entry '{}': '{}' is not key=value; the forms are {}",
               entry, parts[i], kForms);
      const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
      // The whole value is the number: "rank=1x" is refused, not read as 1.
      std::size_t used = 0;
      try {
        if (key == "rank")
          f.rank = std::stoi(value, &used);
        else if (key == "step")
          f.step = std::stoll(value, &used);
        else if (key == "factor")
          f.factor = std::stod(value, &used);
        else if (key == "node")
          f.node = std::stoi(value, &used);
        else if (key == "phase")
          f.phase = value, used = value.size();
        else if (key == "while")
          f.while_file = value, used = value.size();
        else
          HT_CHECK(false, ErrorKind::kConfig,
                   "HT_FAULTS entry '{}': unknown key '{}' (rank, step, factor, node, phase, while)", entry, key);
      } catch (const std::logic_error&) {
        used = 0;
      }
      HT_CHECK(used == value.size() && !value.empty(), ErrorKind::kConfig, "HT_FAULTS entry '{}': '{}' is not a number",
               entry, value);
    }
    HT_CHECK(f.kind != FaultKind::kNodeUnhealthy || f.node >= 0, ErrorKind::kConfig,
             "HT_FAULTS entry '{}': node-unhealthy needs node=N", entry);
    HT_CHECK(f.kind == FaultKind::kNodeUnhealthy || f.while_file.empty(), ErrorKind::kConfig,
             "HT_FAULTS entry '{}': only node-unhealthy takes while=FILE (unhealthy while FILE exists)", entry);
    HT_CHECK(f.kind == FaultKind::kSnapshotCrash ? is_snapshot_phase(f.phase) : f.phase.empty(), ErrorKind::kConfig,
             "HT_FAULTS entry '{}': {}", entry,
             f.kind == FaultKind::kSnapshotCrash ? "snapshot-crash needs phase=copy, write, commit, replicate or "
                                                   "replica-commit"
                                                 : "only snapshot-crash takes a phase");
    HT_CHECK(f.kind != FaultKind::kSlow || (f.factor >= 1.0 && f.factor <= 1000.0), ErrorKind::kConfig,
             "HT_FAULTS entry '{}': slow needs factor >= 1 and at most 1000 (a step 1000 times as long is a hang "
             "already)",
             entry);
    plan.faults_.push_back(f);
  }
  return plan;
}

std::optional<Fault> FaultPlan::find(FaultKind kind, int rank, std::int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.kind != kind || (f.rank >= 0 && f.rank != rank)) continue;
    const bool persists = kind == FaultKind::kNan || kind == FaultKind::kSlow;
    if (f.step < 0 || step < 0 || f.step == step || (persists && step > f.step)) return f;
  }
  return std::nullopt;
}

bool FaultPlan::node_unhealthy(int node) const {
  for (const Fault& f : faults_)
    if (f.kind == FaultKind::kNodeUnhealthy && f.node == node &&
        (f.while_file.empty() || std::filesystem::exists(f.while_file)))
      return true;
  return false;
}

void FaultPlan::drop_fired(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "faults_fired.txt");
  std::vector<std::string> fired;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) fired.push_back(line);
  std::erase_if(faults_, [&](const Fault& f) { return std::find(fired.begin(), fired.end(), f.text) != fired.end(); });
}

void record_fired(const std::string& run_dir, const Fault& f) {
  const std::string path = (std::filesystem::path(run_dir) / "faults_fired.txt").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string line = f.text + "\n";
  [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
  ::fsync(fd);
  ::close(fd);
}

void rehearse_crash(const std::string& run_dir, const Fault& f, int rank) {
  record_fired(run_dir, f);
  std::fprintf(stderr, "[rank %d] fault injected: crash (%s)\n", rank, f.text.c_str());
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::_Exit(137);  // not reached
}

void rehearse_hang(const std::string& run_dir, const Fault& f, int rank) {
  record_fired(run_dir, f);
  std::fprintf(stderr, "[rank %d] fault injected: hang (%s)\n", rank, f.text.c_str());
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void rehearse_bitflip(const std::string& run_dir, const Fault& f, int rank, Tensor& t, const std::string& what) {
  record_fired(run_dir, f);
  Tensor host = t.to(Device::cpu());
  static_cast<std::uint8_t*>(host.data_ptr())[1] ^= 0x10;
  t.copy_from(host.to(t.device()));
  std::fprintf(stderr, "[rank %d] fault injected: bit flip in %s (%s)\n", rank, what.c_str(), f.text.c_str());
}

void rehearse_file_damage(const std::string& run_dir, const Fault& f, const std::string& path) {
  record_fired(run_dir, f);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size < 2) return;
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(std::streamoff(size * 3 / 4));
  char c = 0;
  file.get(c);
  file.seekp(std::streamoff(size * 3 / 4));
  file.put(char(c ^ 0x5a));
  std::fprintf(stderr, "fault injected: damaged %s (%s)\n", path.c_str(), f.text.c_str());
}

}  // namespace ht::resilience
