// ht::resilience::FaultPlan: failures to rehearse, from HT_FAULTS.
//
// A plan is a comma-separated list of faults, each "kind:key=value:...":
//   crash:rank=2:step=37        rank 2 dies (SIGKILL) at the start of step 37
//   hang:rank=1:step=80         rank 1 stops making progress at step 80
//   nan:step=50                 the loss gradient is NaN from step 50 on (all ranks, or rank=R)
//   slow:rank=3:factor=3        rank 3's steps take 3 times as long
//   bitflip:rank=1:step=60      after step 60's update rank 1 flips a bit of a parameter
//   ckpt-corrupt:step=100       the checkpoint of step 100 is damaged once committed
//   node-unhealthy:node=2       node 2 fails its health check
//   snapshot-crash:rank=1:step=5:phase=replicate
//                               rank 1 dies (SIGKILL) inside the memory snapshot
//                               of step 5, at that phase: copy (the host copy
//                               taken), write (its rank file written, not the
//                               manifest), commit (both written, not renamed),
//                               replicate (committed, before the exchange with
//                               the peer), replica-commit (the source's replica
//                               received and written, not renamed)
// A missing rank means every rank; a missing step means every step. A fault
// that has fired is recorded in the run directory (faults_fired.txt) and does
// not fire again when the job is relaunched, so a rehearsed failure happens
// once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ht/core/tensor.h"

namespace ht::resilience {

enum class FaultKind { kCrash, kHang, kNan, kSlow, kBitflip, kCkptCorrupt, kNodeUnhealthy, kSnapshotCrash };
std::string fault_kind_name(FaultKind k);

struct Fault {
  FaultKind kind = FaultKind::kCrash;
  int rank = -1;            // -1: every rank
  std::int64_t step = -1;   // -1: every step
  double factor = 1.0;      // slow
  int node = -1;            // node-unhealthy
  std::string phase;        // snapshot-crash
  std::string while_file;   // node-unhealthy: only while this file exists (removing it repairs the node)
  std::string text;         // the entry as written, its identity
};

class FaultPlan {
 public:
  FaultPlan() = default;
  /// Throws kConfig naming the bad entry and the accepted forms.
  static FaultPlan parse(const std::string& spec);

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }
  /// The first fault of `kind` for `rank` at `step` (step -1 matches any).
  /// For nan, a fault from an earlier step also matches (it persists).
  std::optional<Fault> find(FaultKind kind, int rank, std::int64_t step) const;
  /// Whether a node-unhealthy fault marks `node`: for good, or while its
  /// while=FILE exists.
  bool node_unhealthy(int node) const;
  /// Drops the faults listed (by text) in `<run_dir>/faults_fired.txt`.
  void drop_fired(const std::string& run_dir);

 private:
  std::vector<Fault> faults_;
};

/// Appends a fired fault to `<run_dir>/faults_fired.txt` (synced), so a
/// relaunched job does not rehearse it again.
void record_fired(const std::string& run_dir, const Fault& f);

// The rehearsals. Each records the fault as fired and says on stderr what it does.
/// Dies at once (SIGKILL), as a crashed process would.
[[noreturn]] void rehearse_crash(const std::string& run_dir, const Fault& f, int rank);
/// Stops making progress, for ever.
[[noreturn]] void rehearse_hang(const std::string& run_dir, const Fault& f, int rank);
/// Flips one bit of the first value of `t` (any device).
void rehearse_bitflip(const std::string& run_dir, const Fault& f, int rank, Tensor& t, const std::string& what);
/// Flips one byte three quarters into `path` (a committed checkpoint file).
void rehearse_file_damage(const std::string& run_dir, const Fault& f, const std::string& path);

}  // namespace ht::resilience
