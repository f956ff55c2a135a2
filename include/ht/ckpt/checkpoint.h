// ht::ckpt: sharded, asynchronous, crash-consistent checkpoints.
//
// A checkpoint is a directory <dir>/step_NNNNNNNN holding one HDF5 file per
// rank (rank_RRRRR.h5) and a manifest.json. Each rank file holds one dataset
// per piece of tensor state the rank owns (its primary optimizer slots:
// the f32 master values and each optimizer state kind), named
// "<tensor>|<kind>|<tp rank>|<begin>", with attributes: global_shape, the
// tensor-parallel split (tp_split_dim, tp_parts, tp_rank, tp_size), begin
// and end (the piece is elements [begin, end) of the rank's tensor-parallel
// part, flattened) and checksum (see checksum64). Because pieces carry
// global coordinates, a checkpoint saved under one layout (dp, ZeRO stage,
// tp, pp) loads into another for the same model.
//
// Saving: save() copies the state to host memory (the training stall) and
// hands it to a background thread, which writes the rank file into
// step_N.tmp/ and syncs it to disk. When every rank's file is durable (an
// all-reduce on a communicator of the checkpointer's own), rank 0 writes the
// manifest (run state, layout, tensor index with checksums, model config,
// library version), syncs it, and commits by renaming step_N.tmp to step_N.
// A crash at any instant leaves the previous committed checkpoint the newest;
// leftovers (*.tmp) are removed at the next start. The last `keep` committed
// checkpoints are kept. At most one save is in flight; a save that must wait
// for the previous one adds that wait to its stall. A failed save (disk
// full) is reported and training goes on; no committed checkpoint is touched.
//
// Loading: load_latest() tries committed checkpoints newest first; every
// rank reads the pieces its own slots need (assembling each tensor from the
// pieces of every saved rank and verifying checksums) and all ranks agree on
// the outcome; a corrupt or incomplete checkpoint is reported and the next
// older one tried. A checkpoint of another model configuration is refused
// with an error.
//
// Memory tiers (options.memory_dir set): snapshot() copies every slot the
// rank holds (replicas included: each rank restores alone) to host memory
// and hands it to a thread of its own, which writes it under the rank's
// node in memory_dir (node-local shared memory, /dev/shm by default) and
// then sends it to a rank of the next node, which stores it as a replica;
// the newest two of each are kept (ckpt/memory_tier.h). load_latest() then
// tries, before disk, the newest step not older than the newest committed
// checkpoint that every rank can load from its own node's memory or its
// peer's replica (a rank on a replacement node pulls its copy from the
// peer); a snapshot of another layout or one that fails a checksum falls
// back to disk with a warning saying so.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/core/client_state.h"
#include "ht/optim/optimizer.h"
#include "ht/precision/loss_scaler.h"

namespace ht::ckpt {

/// The scalars of a run's state that are not tensors.
struct RunState {
  std::int64_t step = 0;             // training steps taken (skipped ones included)
  std::int64_t optimizer_steps = 0;  // updates applied (AdamW's bias correction)
  precision::LossScalerState scaler;
  /// The model (nn::Model::describe()); a resume must match it.
  std::string model;
  /// The optimizer whose state the checkpoint holds (optim::Optimizer::name();
  /// "adamw" in checkpoints from before it was recorded); a resume must match it.
  std::string optimizer = "adamw";
  /// The layout the run was saved under (parallel::Layout::name(), e.g.
  /// "zero1_dp2_tp2_pp2_1f1b_mb8"; empty in older checkpoints). A record:
  /// a checkpoint loads into any layout.
  std::string layout;
  /// Training samples consumed before the next step (the engine's data
  /// position; data/data_source.h). -1: not recorded (an older checkpoint).
  std::int64_t consumed_samples = -1;
  /// A stream source's position (data::DataSource::state()) and the share
  /// it was drawn in ("dp 2 x micro-batch 8"): a stream resumes only in the
  /// same share. Both empty for a random-access source.
  ClientState data;
  std::string stream_shard;
  /// The program's own state (DeepSpeed's client_state).
  ClientState client;
};

/// `state` as a JSON object's text, e.g. {"position":12,"note":"x"}.
std::string client_state_json(const ClientState& state);

struct CheckpointOptions {
  std::string dir;
  int keep = 3;  // committed checkpoints kept (older ones are deleted)
  /// Rehearsal of a crash during a save: each rank's writer waits this long
  /// after writing its file and before the commit (0 in real runs).
  std::chrono::milliseconds commit_delay{0};
  /// The writing run's directory, named in the writer lock (may be empty).
  std::string run_dir;
  /// The memory tiers' directory (empty: no memory tier; see
  /// default_memory_dir) and this rank's node: a host name, or a simulated
  /// node's label (nodes hold their snapshots apart under it).
  std::string memory_dir;
  std::string node;
  /// Asked right before each commit (a save's, a snapshot's): true when this
  /// run has been superseded by a newer launch (resilience/rank_guard.h's
  /// epochs), and the commit is refused ("superseded by a newer launch").
  /// Empty: never.
  std::function<bool()> superseded;

  /// Throws kConfig naming the bad value.
  void validate() const;
};

/// Timings of the last save.
struct SaveStats {
  std::int64_t step = 0;
  double stall_ms = 0;        // training paused: waiting for the previous save + copying to host
  double wait_ms = 0;         // of which waiting for the previous save
  double write_ms = 0;        // background: writing and syncing the rank file
  std::int64_t bytes = 0;     // this rank's file
};

/// Timings of the last memory snapshot.
struct SnapshotStats {
  std::int64_t step = 0;
  double stall_ms = 0;      // training paused: copying to host
  double write_ms = 0;      // background: writing it into this node's memory
  double replicate_ms = 0;  // background: the exchange with the peer, and storing its replica
  /// CPU time of the snapshot thread and of the exchange's copies on the
  /// communication thread: what it takes from training on busy cores.
  double cpu_ms = 0;
  std::int64_t bytes = 0;   // this rank's snapshot file
  /// The copy went into pages mapped afresh (a run's first snapshot, or a
  /// changed size): slower than the snapshots after it, so not what an
  /// interval should be chosen by (the next image is mapped and written
  /// ahead of time, in the background).
  bool fresh_image = false;
};

/// Where the last load_latest() found its state.
struct LoadStats {
  std::int64_t step = -1;  // -1: nothing was loaded
  /// "memory" (every rank from its node's memory), "memory+peer" (some
  /// ranks pulled their copy from the peer's replica) or "disk".
  std::string tier;
  int pulled = 0;  // ranks whose copy came from the peer
  double ms = 0;   // the whole load, fallbacks included
};

class Checkpointer {
 public:
  /// Collective over the mesh's world. Creates `dir` (rank 0, mode 0755)
  /// and takes its writer lock for the checkpointer's life: world rank 0
  /// holds an exclusive flock on <dir>/.writer.lock, which names the holder
  /// (host, pid, run directory, start time); the kernel releases it when the
  /// process ends, however it ends. If another process holds it, every rank
  /// throws kIo naming the directory and the holder ("... is being written
  /// by pid P on host H (run dir R) since T: stop that run or give another
  /// --ckpt-dir"). Then checks that every rank can write there (kIo naming
  /// the directory otherwise), removes leftovers of interrupted saves, and
  /// splits the checkpointer's own communicator. Directories are created
  /// 0755 and files 0644, whatever the umask (a stricter one still applies).
  /// Reading a checkpoint (ht-ckpt) takes no lock.
  Checkpointer(const CheckpointOptions& options, comm::DeviceMesh& mesh);
  /// Waits for the save in flight (and reports its failure, if any, on stderr).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  /// Collective over the world. Starts saving `state` and the slots' values
  /// and optimizer state (the primary slots only). Returns after the host
  /// copy; a failure of the previous save is returned as a message (empty if
  /// none) and training can go on.
  std::string save(const RunState& state, const std::vector<optim::Slot>& slots, optim::Optimizer& optimizer);
  /// Waits until no save is in flight; returns its failure message (empty if it committed).
  std::string wait();
  const SaveStats& last_save() const { return stats_; }

  bool has_memory_tier() const;
  /// Collective over the world, memory tiers only. Starts a snapshot of
  /// every slot (primary or not) and its optimizer state; returns after the
  /// host copy, with the previous snapshot's failure ("" if none). Call it
  /// only when snapshot_busy() is false on every rank (the engine agrees on
  /// it with its per-step all-reduce), so it never waits.
  std::string snapshot(const RunState& state, const std::vector<optim::Slot>& slots, optim::Optimizer& optimizer);
  /// Called at each phase of a snapshot with its step: "copy" (the host copy
  /// taken, on the training thread), then on the snapshot thread "write",
  /// "commit", "replicate", "replica-commit" (ckpt/memory_tier.h). For fault
  /// rehearsals (HT_FAULTS snapshot-crash); set it before the first snapshot.
  void set_snapshot_hook(std::function<void(std::int64_t step, const std::string& phase)> hook);
  /// Whether this rank's snapshot thread is still writing or replicating.
  bool snapshot_busy() const;
  /// Waits for the snapshot in flight; returns its failure message ("" if none).
  std::string wait_snapshot();
  const SnapshotStats& last_snapshot() const { return snapshot_stats_; }
  /// Collective: at the end of a run whose final checkpoint is on disk
  /// (`final_saved` on every rank), removes this rank's snapshots and the
  /// replicas it holds; otherwise keeps them.
  void discard_memory(bool final_saved);
  const LoadStats& last_load() const { return load_stats_; }

  /// Collective over the world. Loads the newest committed checkpoint that
  /// verifies into the slots' values and the optimizer's state and returns
  /// its run state; nullopt when there is none. Throws kConfig when the
  /// newest readable checkpoint's model configuration differs from
  /// `expected_model`.
  std::optional<RunState> load_latest(const std::string& expected_model, const std::vector<optim::Slot>& slots,
                                      optim::Optimizer& optimizer);

  const CheckpointOptions& options() const { return options_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CheckpointOptions options_;
  SaveStats stats_;
  SnapshotStats snapshot_stats_;
  LoadStats load_stats_;
};

/// The memory tiers' default directory for a checkpoint directory:
/// /dev/shm/hypertrain-<16 hex digits of its absolute path>, the same for
/// every launch of a run and for htrun.
std::string default_memory_dir(const std::string& ckpt_dir);

struct CommittedCheckpoint {
  std::int64_t step = 0;
  std::string dir;  // <dir>/step_NNNNNNNN
};
/// The committed checkpoints under `dir` (step directories with a manifest), oldest first.
std::vector<CommittedCheckpoint> committed_checkpoints(const std::string& dir);
/// "<dir>/step_00000100": where the checkpoint of `step` lives.
std::string checkpoint_dir(const std::string& dir, std::int64_t step);
/// The step of a "step_NNNNNNNN" directory name, or -1.
std::int64_t checkpoint_step(const std::string& name);
/// "rank_00003.h5": a rank's file in a step directory.
std::string rank_file_name(int rank);

/// 64-bit checksum of a byte range: four FNV-1a lanes over interleaved
/// 8-byte little-endian words, seeded with the length and folded, then the
/// tail (zero-padded words).
std::uint64_t checksum64(const void* data, std::size_t bytes);

}  // namespace ht::ckpt
