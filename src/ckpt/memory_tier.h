// Private: the memory tiers of a checkpoint — each rank's snapshot in its
// node's memory, and a replica of it on a rank of another node.
//
// Under the tier's directory (node-local shared memory, /dev/shm by default):
//   <dir>/<node>/rank_RRRRR/step_NNNNNNNN/               this rank's snapshot
//   <dir>/<node>/replica_of_rank_RRRRR/step_NNNNNNNN/    the replica it holds of rank R
// Each step directory is a one-rank checkpoint: rank_RRRRR.snap (a raw image
// of every slot the rank holds: ckpt/snapshot_image.h; each piece's offset
// and checksum in the manifest) and manifest.json (run state, layout,
// world), written as <step>.tmp and committed by a rename, so a crash leaves
// no torn copy under a committed name. The newest two of each are kept, and
// the older of them becomes the next step's .tmp (its image's pages reused).
//
// The replica's holder ("peer") is the rank of the same local index on the
// next node, when the nodes hold equal, consecutive blocks of ranks (htrun's
// and mpirun's by-slot placement); with one node there is none.
//
// A resume finds rank R's state wherever a node still holds it — under
// rank_R or replica_of_rank_R, whichever rank wrote it there before the
// nodes changed (a spare brought in moves the ranks): read in place on the
// node the new rank R runs on, else sent by a rank of the node that holds it.
// Directories no rank of the node writes any more go at its first snapshot.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/rank_file.h"
#include "ckpt/snapshot_image.h"
#include "ht/comm/communicator.h"

namespace ht::ckpt::detail {

class MemoryTier {
 public:
  /// Collective over `comm`, the tier's own communicator over the world.
  /// `node` names this rank's node (a host name, or a simulated node's label).
  MemoryTier(std::string dir, std::string node, std::unique_ptr<comm::Communicator> comm);

  int rank() const { return comm_->rank(); }
  int peer() const { return peer_; }      // holds this rank's replica; -1: none
  int source() const { return source_; }  // whose replica this rank holds; -1: none
  const std::string& node() const { return node_; }
  std::string own_dir() const;
  std::string replica_dir() const;  // of the source's replica ("" without one)

  /// The image of step `step`'s snapshot, `bytes` long, for the host copy
  /// to write into (on the training thread): the older of the two snapshots
  /// kept, or a leftover of an interrupted one, becomes <step>.tmp. Throws
  /// IoError (no room in the tier's file system, say).
  std::shared_ptr<MappedFile> begin(std::int64_t step, std::int64_t bytes);
  /// Whether the last begin() mapped its image afresh (SnapshotStats::fresh_image).
  bool last_image_fresh() const { return last_fresh_; }
  /// CPU time (ms) its communicator's own thread has used: the exchanges'
  /// copies.
  double comm_cpu_ms() const { return comm_->own_threads_cpu_ms(); }
  /// Commits the image begin() gave, filled, with `manifest` (its pieces'
  /// offsets and checksums), then sends it to the peer and stores the
  /// source's (collective over the tier's communicator: every rank calls it
  /// for the same step whatever failed locally; `image` null and `error`
  /// saying why when this rank has nothing to commit). Runs on the snapshot
  /// thread. Returns what went wrong ("" if both copies committed).
  std::string write(std::int64_t step, Manifest manifest, std::shared_ptr<MappedFile> image, std::string error,
                    double* write_ms, double* replicate_ms);

  /// What every rank can load from memory: the newest step, not older than
  /// `at_least`, of which each rank's state is in its own node's memory or
  /// in another node's.
  struct Plan {
    std::int64_t step = -1;   // -1: none
    std::vector<int> holder;  // per rank: the rank that sends its copy, -1 when its node holds it
    int pulled() const;
  };
  /// Collective.
  Plan newest_common(std::int64_t at_least);
  /// Collective: brings the plan's snapshot into this node's memory (from
  /// its holder where the plan says so) and returns its step directory.
  /// Throws (after taking part in every transfer) when this rank's copy
  /// could not be had.
  std::string fetch(const Plan& plan);

  /// Removes this rank's snapshots and the replicas it holds (a finished run).
  void discard();

  /// Called at each phase of write() ("write", "commit", "replicate",
  /// "replica-commit") with the step: fault rehearsals kill the rank there.
  using PhaseHook = std::function<void(std::int64_t step, const std::string& phase)>;
  void set_phase_hook(PhaseHook hook) { hook_ = std::move(hook); }

 private:
  // The mappings of the images this rank keeps (its own, and the replicas
  // it holds), by their step directory's name ("step_00000012").
  using ImageCache = std::map<std::string, std::shared_ptr<MappedFile>>;
  std::shared_ptr<MappedFile> image_for(const std::string& dir, ImageCache& cache, std::int64_t step,
                                        const std::string& file, std::int64_t bytes, bool* fresh = nullptr);
  /// Until `dir` has two images mapped, maps and writes a spare one of
  /// `bytes` ahead of time (<dir>/step_spare.tmp, which the next step takes
  /// over), on the snapshot thread, so that the next snapshot's copy is not
  /// the first write of fresh pages.
  void prepare_spare(const std::string& dir, ImageCache& cache, const std::string& file, std::int64_t bytes);

  /// The step directory of `subject`'s snapshot of `step` on this node
  /// (its own or a replica, whoever wrote it), "" when there is none.
  std::string held_copy(int subject, std::int64_t step) const;
  /// Removes the directories of this node that no rank of it writes any
  /// more (left by ranks placed otherwise before a resume).
  void remove_stale_dirs() const;
  /// Whether this rank is its node's lowest: the one that acts on the
  /// node's memory for all of its ranks (they see the same directories).
  bool speaks_for_node() const;

  std::string dir_, node_;
  std::unique_ptr<comm::Communicator> comm_;
  int peer_ = -1, source_ = -1;
  std::vector<int> node_of_;  // per rank: its node's number
  bool first_begin_ = true;
  PhaseHook hook_;
  ImageCache own_images_, replica_images_;
  bool last_fresh_ = false;
};

}  // namespace ht::ckpt::detail
