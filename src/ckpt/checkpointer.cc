// ht::ckpt::Checkpointer: host snapshot, background write, commit, load.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <cstring>

#include "ckpt/assemble.h"
#include "ckpt/background_task.h"
#include "ckpt/manifest.h"
#include "ckpt/memory_tier.h"
#include "ckpt/snapshot_image.h"
#include "ckpt/rank_file.h"
#include "ckpt/writer_lock.h"
#include "core/clock.h"
#include "core/files.h"
#include "ht/comm/agreement.h"
#include "ht/ckpt/checkpoint.h"
#include "ht/config.h"
#include "ht/core/fnv.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::ckpt {

namespace fs = std::filesystem;
using detail::Manifest;
using detail::Piece;
using detail::PieceInfo;

namespace {

// CPU time of the calling thread.
double thread_cpu_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
}

// A rank's slots as pieces: each one's description and its values where
// they live (any device). The primary slots only for disk (one copy of each
// piece in the whole checkpoint), every slot for memory (each rank restores
// from its own copy).
struct SlotPiece {
  PieceInfo info;
  Tensor values;
};
std::vector<SlotPiece> slot_pieces(const std::vector<optim::Slot>& slots, optim::Optimizer& optimizer,
                                   bool primary_only) {
  std::vector<SlotPiece> pieces;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const optim::Slot& s = slots[i];
    if (primary_only && !s.primary) continue;
    HT_CHECK(s.source, ErrorKind::kInvalidArgument, "checkpoint: slot {} names no parameter", s.name);
    auto add = [&](const std::string& kind, const Tensor& values) {
      PieceInfo info;
      info.tensor = s.source->name();
      info.kind = kind;
      info.global_shape = s.source->full_shape();
      if (s.source->real_rows() < info.global_shape.at(0)) info.real_rows = s.source->real_rows();
      info.layout = s.source->layout();
      // An unsplit tensor is tp part 0 whichever tp rank holds the copy.
      if (!info.layout.tp_split()) info.layout.tp_rank = 0;
      info.begin = s.offset;
      info.end = s.offset + values.numel();
      pieces.push_back({std::move(info), values.view({-1})});
    };
    add("master", s.param);
    for (auto& [kind, t] : optimizer.slot_state(i)) add(kind, t);
  }
  return pieces;
}

// The host copies of the primary slots, for a save to disk. `spare` holds
// the last copy's buffers, reused when the sizes match: fresh memory's page
// faults would be most of the stall.
std::vector<Piece> host_copy(const std::vector<optim::Slot>& slots, optim::Optimizer& optimizer,
                             std::vector<Tensor>& spare) {
  std::vector<Piece> pieces;
  for (SlotPiece& p : slot_pieces(slots, optimizer, /*primary_only=*/true)) {
    const HostMemory host = p.values.device().is_cpu() ? HostMemory::kPlain : HostMemory::kPinned;
    Tensor copy;
    const std::size_t k = pieces.size();
    if (k < spare.size() && spare[k].numel() == p.values.numel())
      copy = spare[k];
    else
      copy = Tensor::empty({p.values.numel()}, DType::kF32, Device::cpu(), MemCategory::kOther, host);
    copy.copy_from(p.values);
    pieces.push_back({std::move(p.info), std::move(copy)});
  }
  return pieces;
}

void keep_buffers(std::vector<Piece>& pieces, std::mutex& mu, std::vector<Tensor>& spare) {
  std::lock_guard lock(mu);
  spare.clear();
  for (Piece& p : pieces) spare.push_back(std::move(p.data));
  pieces.clear();
}

}  // namespace

void CheckpointOptions::validate() const {
  HT_CHECK(!dir.empty(), ErrorKind::kConfig, "the checkpoint directory is empty: pass --ckpt-dir");
  HT_CHECK(keep >= 1, ErrorKind::kConfig, "--ckpt-keep {} must be at least 1", keep);
}

std::uint64_t checksum64(const void* data, std::size_t bytes) {
  // Four FNV-1a lanes over interleaved 8-byte words (a multiply's latency
  // per word would otherwise cap the speed below the disk's), folded at the end.
  const auto* p = static_cast<const unsigned char*>(data);
  // The lanes start from FNV's offset and three rotations of it.
  std::uint64_t lane[4] = {kFnvOffset ^ std::uint64_t(bytes), 0x84222325cbf29ce4ull, 0x9ce484222325cbf2ull,
                           0x2325cbf29ce48422ull};
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    for (int k = 0; k < 4; ++k) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * std::size_t(k), 8);
      lane[k] = fnv_fold(lane[k], w);
    }
  std::uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k) h = fnv_fold(h, lane[k]);
  for (; i < bytes; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<std::size_t>(8, bytes - i));
    h = fnv_fold(h, w);
  }
  return h;
}

std::vector<CommittedCheckpoint> committed_checkpoints(const std::string& dir) {
  std::vector<CommittedCheckpoint> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = checkpoint_step(e.path().filename().string());
    if (step >= 0 && e.is_directory() && fs::exists(e.path() / detail::kManifestName))
      found.push_back({step, e.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

// ---------------------------------------------------------------------------

struct Checkpointer::Impl {
  comm::DeviceMesh& mesh;
  std::unique_ptr<comm::Communicator> comm;  // the disk writer's own
  CheckpointOptions options;
  std::string layout;
  SaveStats* stats;
  std::optional<detail::WriterLock> writer_lock;  // world rank 0's, for the checkpointer's life

  std::mutex mu;                      // guards the spare buffers
  std::vector<Tensor> spare_buffers;  // the last save's host copies, for reuse
  std::optional<detail::MemoryTier> memory;
  std::function<void(std::int64_t, const std::string&)> snapshot_hook;  // fault rehearsals
  // Last: their destructors wait for the tasks in flight, which use the members above.
  detail::BackgroundTask disk_task;
  std::optional<detail::BackgroundTask> memory_task;

  Impl(comm::DeviceMesh& m, const CheckpointOptions& o, SaveStats* s) : mesh(m), options(o), stats(s) {}

  // Every rank writes its file; once all are durable rank 0 writes the
  // manifest and commits. Returns what went wrong ("" if committed).
  std::string write_and_commit(std::int64_t step, const RunState& run, std::vector<Piece>& pieces) {
    const int rank = comm->rank();
    const std::string tmp = checkpoint_dir(options.dir, step) + ".tmp";
    std::string error;
    const double t0 = now_ms();
    try {
      const std::error_code ec = ht::detail::make_directories(tmp);
      HT_CHECK(!ec, ErrorKind::kIo, "cannot create '{}': {}", tmp, ec.message());
      stats->bytes = detail::write_rank_file((fs::path(tmp) / rank_file_name(rank)).string(), pieces);
    } catch (const std::exception& e) {
      error = e.what();
    }
    stats->write_ms = now_ms() - t0;
    keep_buffers(pieces, mu, spare_buffers);
    if (options.commit_delay.count() > 0) std::this_thread::sleep_for(options.commit_delay);
    try {
      const bool all_written = comm::agree_min(*comm, error.empty() ? 1 : 0) == 1;
      if (rank == 0 && all_written) commit(step, run, tmp);
      if (!all_written && error.empty()) error = "another rank could not write its file";
      if (!all_written && rank == 0) {
        // Every rank is done with the directory: free the space of the partial save now.
        std::error_code ec;
        fs::remove_all(tmp, ec);
      }
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
    if (!error.empty()) return fmt::format("checkpoint of step {} not saved: {}", step, error);
    return "";
  }

  void commit(std::int64_t step, const RunState& run, const std::string& tmp) {
    // A launch given up by its supervisor (a host cut off, replaced) must
    // not commit over the directory its successor now writes.
    if (options.superseded && options.superseded()) {
      std::error_code ignored;
      fs::remove_all(tmp, ignored);
      throw IoError(ErrorKind::kIo, fmt::format("not committed: this run was superseded by a newer launch of it (its "
                                                "supervisor gave it up), which now writes {}",
                                                options.dir));
    }
    Manifest m;
    m.run = run;
    m.layout = layout;
    m.world = comm->size();
    for (int r = 0; r < m.world; ++r) {
      const std::string name = rank_file_name(r), path = (fs::path(tmp) / name).string();
      for (PieceInfo& p : detail::read_piece_index(path, name)) m.pieces.push_back(std::move(p));
      m.files.push_back({r, name, std::int64_t(fs::file_size(path))});
    }
    detail::write_manifest(tmp, m);
    detail::sync_path(tmp);
    const std::string final_dir = checkpoint_dir(options.dir, step);
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    detail::sync_path(options.dir);
    // Retention: the newest `keep` committed checkpoints stay.
    const std::vector<CommittedCheckpoint> all = committed_checkpoints(options.dir);
    for (std::size_t i = 0; i + std::size_t(options.keep) < all.size(); ++i) fs::remove_all(all[i].dir);
  }
};

namespace {
// How long a launch waits for an earlier launch of its run to let go of the
// writer lock: several heartbeats (2 s by default), after which that launch
// has seen it was superseded and exited.
constexpr std::chrono::seconds kEarlierLaunchWait{10};
}  // namespace

Checkpointer::Checkpointer(const CheckpointOptions& options, comm::DeviceMesh& mesh) : options_(options) {
  options_.validate();
  comm::Communicator& world = mesh.world();
  // Rank 0 creates the directory, takes the writer lock and (holding it: the
  // leftovers are no other run's saves in flight) clears leftovers of
  // interrupted saves; then every rank proves it can write there.
  std::string error;
  std::optional<detail::WriterLock> lock;
  bool locked_out = false;
  if (world.rank() == 0) {
    const std::error_code ec = ht::detail::make_directories(options_.dir);
    if (ec) {
      error = ec.message();
    } else {
      try {
        lock = detail::WriterLock::try_acquire(options_.dir, options_.run_dir);
        // Held by an earlier launch of this very run (its supervisor gave
        // it up: a host cut off, whose ranks fence themselves at their next
        // heartbeat, resilience/rank_guard.h): wait for it to go, a while.
        const auto until = std::chrono::steady_clock::now() + kEarlierLaunchWait;
        while (!lock && !options_.run_dir.empty() &&
               detail::read_writer_lock(options_.dir).run_dir == options_.run_dir &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          lock = detail::WriterLock::try_acquire(options_.dir, options_.run_dir);
        }
        locked_out = !lock;
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (lock) {
      std::error_code ignored;
      for (const auto& e : fs::directory_iterator(options_.dir, ignored))
        if (e.path().extension() == ".tmp") fs::remove_all(e.path(), ignored);
    }
  }
  const int created = comm::agree_min(world, locked_out ? -1 : error.empty() ? 1 : 0);
  // Every rank reads the holder itself (the directory is on a file system all ranks see).
  HT_CHECK(created != -1, ErrorKind::kIo, "{}",
           detail::writer_lock_message(options_.dir, detail::read_writer_lock(options_.dir)));
  if (created == 1) {
    const std::string probe = (fs::path(options_.dir) / fmt::format(".probe_{}", world.rank())).string();
    if (std::FILE* f = std::fopen(probe.c_str(), "w")) {
      const bool ok = std::fputs("probe", f) >= 0 && std::fflush(f) == 0;
      std::fclose(f);
      std::remove(probe.c_str());
      if (!ok) error = "cannot write to it (disk full?)";
    } else {
      error = std::strerror(errno);
    }
  } else if (error.empty()) {
    error = "rank 0 could not create it";
  }
  const bool ok = comm::agree_min(world, error.empty() ? 1 : 0) == 1;
  HT_CHECK(ok, ErrorKind::kIo,
           "checkpoint directory '{}' is not usable{}: choose a writable --ckpt-dir on a file system every rank sees",
           options_.dir, error.empty() ? " on another rank" : fmt::format(" ({})", error));
  impl_ = std::make_unique<Impl>(mesh, options_, &stats_);
  impl_->writer_lock = std::move(lock);
  impl_->layout = mesh.shape().str();
  impl_->comm = world.split(0, world.rank(), "ckpt");
  if (!options_.memory_dir.empty()) {
    impl_->memory.emplace(options_.memory_dir, options_.node.empty() ? "node" : options_.node,
                          world.split(0, world.rank(), "ckpt-memory"));
    impl_->memory_task.emplace();
  }
}

Checkpointer::~Checkpointer() {
  for (const std::string& error : {wait(), wait_snapshot()})
    if (!error.empty()) std::fprintf(stderr, "warning: %s\n", error.c_str());
}

std::string Checkpointer::wait() { return impl_->disk_task.wait(); }

std::string Checkpointer::save(const RunState& state, const std::vector<optim::Slot>& slots,
                               optim::Optimizer& optimizer) {
  const double t0 = now_ms();
  const std::string previous = wait();
  const double waited = now_ms() - t0;
  auto pieces = std::make_shared<std::vector<Piece>>(
      host_copy(slots, optimizer, impl_->spare_buffers));
  stats_ = {};
  stats_.step = state.step;
  impl_->disk_task.start([impl = impl_.get(), state, pieces] {
    return impl->write_and_commit(state.step, state, *pieces);
  });
  stats_.wait_ms = waited;
  stats_.stall_ms = now_ms() - t0;
  return previous;
}

bool Checkpointer::has_memory_tier() const { return impl_->memory.has_value(); }

void Checkpointer::set_snapshot_hook(std::function<void(std::int64_t, const std::string&)> hook) {
  impl_->snapshot_hook = hook;
  if (impl_->memory) impl_->memory->set_phase_hook(std::move(hook));
}

bool Checkpointer::snapshot_busy() const { return impl_->memory_task && impl_->memory_task->busy(); }

std::string Checkpointer::wait_snapshot() { return impl_->memory_task ? impl_->memory_task->wait() : ""; }

std::string Checkpointer::snapshot(const RunState& state, const std::vector<optim::Slot>& slots,
                                   optim::Optimizer& optimizer) {
  HT_CHECK(impl_->memory, ErrorKind::kConfig, "snapshot: no memory tier was configured");
  const double t0 = now_ms();
  const std::string previous = wait_snapshot();
  // The training state goes straight into the image's pages (reused from
  // the older snapshot), each piece's checksum computed as it is copied:
  // the one pass the training thread waits for.
  const std::vector<SlotPiece> sources = slot_pieces(slots, optimizer, /*primary_only=*/false);
  std::vector<std::int64_t> sizes;
  for (const SlotPiece& p : sources) sizes.push_back(std::int64_t(p.values.nbytes()));
  const detail::ImageLayout layout = detail::image_layout(sizes);
  Manifest m;
  m.run = state;
  m.layout = impl_->layout;
  m.world = impl_->mesh.world().size();
  std::shared_ptr<detail::MappedFile> image;
  std::string error;
  try {
    image = impl_->memory->begin(state.step, layout.bytes);
    const std::string file = detail::snapshot_file_name(impl_->memory->rank());
    for (std::size_t k = 0; k < sources.size(); ++k) {
      PieceInfo info = sources[k].info;
      const Tensor& values = sources[k].values;
      info.offset = layout.offsets[k];
      info.file = file;
      info.dataset = detail::dataset_name(info);
      char* at = image->data() + info.offset;
      if (values.device().is_cpu()) {
        info.checksum = detail::copy_checksum64(at, values.data_ptr(), values.nbytes());
      } else {
        Tensor into = detail::view_of(image, info.offset, values.numel(), DType::kF32);
        into.copy_from(values);
        info.checksum = checksum64(at, values.nbytes());
      }
      m.pieces.push_back(std::move(info));
    }
    m.files = {{impl_->memory->rank(), file, layout.bytes}};
  } catch (const std::exception& e) {
    error = e.what();
    image.reset();
  }
  if (impl_->snapshot_hook) impl_->snapshot_hook(state.step, "copy");
  snapshot_stats_ = {};
  snapshot_stats_.step = state.step;
  snapshot_stats_.bytes = image ? layout.bytes : 0;
  snapshot_stats_.fresh_image = image && impl_->memory->last_image_fresh();
  impl_->memory_task->start(
      [impl = impl_.get(), stats = &snapshot_stats_, m = std::move(m), image, error]() mutable {
        const double cpu0 = thread_cpu_ms(), comm0 = impl->memory->comm_cpu_ms();
        const std::string failure =
            impl->memory->write(m.run.step, std::move(m), std::move(image), error, &stats->write_ms, &stats->replicate_ms);
        stats->cpu_ms = thread_cpu_ms() - cpu0 + impl->memory->comm_cpu_ms() - comm0;
        return failure;
      });
  snapshot_stats_.stall_ms = now_ms() - t0;
  return previous;
}

void Checkpointer::discard_memory(bool final_saved) {
  if (!impl_->memory) return;
  wait_snapshot();  // and, agreed below, no rank still sends a replica
  if (comm::agree_min(impl_->mesh.world(), final_saved ? 1 : 0) == 1) impl_->memory->discard();
}

namespace {

// Reads the tensors a rank's slots need from one checkpoint. Where the saved
// tensor-parallel layout of a tensor is this run's, a rank reads only the
// pieces that overlap its own range (a dp-sharded run reads its share, not
// the whole model); otherwise it assembles the full tensor from every piece
// and cuts its part (one tensor at a time).
class Restorer {
 public:
  Restorer(const std::string& step_dir, const Manifest& m)
      : dir_(step_dir), index_(detail::pieces_by_tensor(m.pieces)) {}

  // Elements [offset, offset + dst.numel()) of this rank's tp part of (tensor, kind) into dst.
  void fill(const nn::Parameter& p, const std::string& kind, std::int64_t offset, Tensor& dst) {
    const std::string key = p.name() + "|" + kind;
    const std::vector<PieceInfo>& pieces = pieces_of(p, kind, key);
    const std::int64_t end = offset + dst.numel();
    const std::int64_t part_numel = shape_numel(nn::tp_part_shape(p.full_shape(), p.layout()));
    HT_CHECK(end <= part_numel, ErrorKind::kIo,
             "checkpoint '{}': {} ({}) is too small for this layout's piece [{}, {})", dir_, p.name(), kind, offset,
             end);
    if (const int part = saved_part(pieces.front().layout, p.layout()); part >= 0) {
      fill_from_pieces(p, kind, pieces, part, offset, dst);
      return;
    }
    if (key != cached_key_) {
      cached_ = detail::assemble_tensor(dir_, pieces);
      cached_key_ = key;
    }
    const Tensor whole = nn::tp_part_of(cached_, p.layout()).view({-1});
    dst.view({-1}).copy_from(whole.slice(offset, end).to(dst.device()));
  }

 private:
  const std::vector<PieceInfo>& pieces_of(const nn::Parameter& p, const std::string& kind, const std::string& key) {
    const auto it = index_.find(key);
    HT_CHECK(it != index_.end(), ErrorKind::kIo, "checkpoint '{}' lacks {} ({}): incomplete, or of another optimizer",
             dir_, p.name(), kind);
    const Shape& global = it->second.front().global_shape;
    HT_CHECK(global == p.full_shape(), ErrorKind::kIo, "checkpoint '{}': {} is {} where the model has {}", dir_,
             p.name(), shape_str(global), shape_str(p.full_shape()));
    return it->second;
  }

  // The saved tp part that is exactly this rank's part, or -1 when the
  // layouts cut the tensor differently.
  static int saved_part(const nn::ParamLayout& saved, const nn::ParamLayout& now) {
    if (!saved.tp_split() && !now.tp_split()) return 0;
    if (saved.tp_split() && now.tp_split() && saved.tp_split_dim == now.tp_split_dim &&
        saved.tp_size == now.tp_size && saved.tp_parts == now.tp_parts)
      return now.tp_rank;
    return -1;
  }

  // Copies [offset, offset + dst.numel()) of saved tp part `part` from the
  // pieces overlapping it, which must cover it without a gap.
  void fill_from_pieces(const nn::Parameter& p, const std::string& kind, const std::vector<PieceInfo>& pieces,
                        int part, std::int64_t offset, Tensor& dst) {
    std::vector<const PieceInfo*> overlapping;
    const std::int64_t end = offset + dst.numel();
    for (const PieceInfo& q : pieces)
      if (q.layout.tp_rank == part && q.begin < end && q.end > offset) overlapping.push_back(&q);
    std::sort(overlapping.begin(), overlapping.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    Tensor host = dst.device().is_cpu() ? dst.view({-1}) : Tensor::empty({dst.numel()}, DType::kF32);
    std::int64_t covered = offset;
    for (const PieceInfo* q : overlapping) {
      if (q->end <= covered) continue;  // a duplicate of what is already copied
      HT_CHECK(q->begin <= covered, ErrorKind::kIo,
               "checkpoint '{}' lacks a shard of {} ({}): tp part {} has elements up to {}, then a piece at {}", dir_,
               p.name(), kind, part, covered, q->begin);
      const Tensor data = detail::read_piece((std::filesystem::path(dir_) / q->file).string(), *q);
      const std::int64_t stop = std::min(q->end, end);
      host.slice(covered - offset, stop - offset).copy_from(data.slice(covered - q->begin, stop - q->begin));
      covered = stop;
      if (covered == end) break;
    }
    HT_CHECK(covered == end, ErrorKind::kIo,
             "checkpoint '{}' lacks a shard of {} ({}): tp part {} has elements up to {} of the [{}, {}) this rank "
             "needs",
             dir_, p.name(), kind, part, covered, offset, end);
    if (!dst.device().is_cpu()) dst.view({-1}).copy_from(host.to(dst.device()));
  }

  std::string dir_;
  std::map<std::string, std::vector<PieceInfo>> index_;
  std::string cached_key_;
  Tensor cached_;
};

}  // namespace

namespace {

enum Status { kWrongModel = 0, kUnusable = 1, kLoaded = 2 };

// Loads the step directory `dir` into every slot and the optimizer state.
// Returns the status and, unless loaded, why; `layout`/`world`, when given,
// must match the manifest's (a memory snapshot holds one rank's pieces of
// one layout).
Status load_dir(const std::string& dir, const std::string& expected_model, const std::vector<optim::Slot>& slots,
                optim::Optimizer& optimizer, const std::string* layout, int world, RunState* run,
                std::string* message) {
  try {
    const Manifest m = detail::read_manifest(dir);
    *run = m.run;
    if (m.run.model != expected_model) {
      *message = fmt::format("checkpoint '{}' holds model {}, but this run builds {}: resume with the same model "
                             "flags, or use another --ckpt-dir",
                             dir, m.run.model, expected_model);
      return kWrongModel;
    }
    if (m.run.optimizer != optimizer.name()) {
      *message = fmt::format("checkpoint '{}' holds the state of optimizer {}, but this run steps with {}: resume with "
                             "the same --optimizer, or use another --ckpt-dir",
                             dir, m.run.optimizer, optimizer.name());
      return kWrongModel;
    }
    if (layout && (m.layout != *layout || m.world != world)) {
      *message = fmt::format("it was taken under layout {} on {} ranks, and this run is {} on {}", m.layout, m.world,
                             *layout, world);
      return kUnusable;
    }
    Restorer restorer(dir, m);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const optim::Slot& s = slots[i];
      Tensor values = s.param;
      restorer.fill(*s.source, "master", s.offset, values);
      for (auto& [kind, t] : optimizer.slot_state(i)) restorer.fill(*s.source, kind, s.offset, t);
    }
    return kLoaded;
  } catch (const std::exception& e) {
    *message = e.what();
    return kUnusable;
  }
}

}  // namespace

std::optional<RunState> Checkpointer::load_latest(const std::string& expected_model,
                                                  const std::vector<optim::Slot>& slots,
                                                  optim::Optimizer& optimizer) {
  const double t0 = now_ms();
  load_stats_ = {};
  comm::Communicator& world = impl_->mesh.world();
  // Rank 0's listing decides which checkpoints are tried, newest first.
  std::vector<std::int32_t> steps;
  if (world.rank() == 0)
    for (const CommittedCheckpoint& c : committed_checkpoints(options_.dir))
      steps.insert(steps.begin(), std::int32_t(c.step));
  Tensor count = Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(steps.size())}, {1});
  world.broadcast(count, 0)->wait();
  steps.resize(std::size_t(count.data<std::int32_t>()[0]));
  if (!steps.empty()) {
    Tensor list = Tensor::from_vector(steps, {std::int64_t(steps.size())});
    world.broadcast(list, 0)->wait();
    steps = list.to_vector<std::int32_t>();
  }

  // Memory first, when it holds a step at least as new as the newest on disk.
  if (impl_->memory) {
    const detail::MemoryTier::Plan plan = impl_->memory->newest_common(steps.empty() ? 0 : steps.front());
    if (plan.step >= 0) {
      RunState run;
      std::string message;
      Status status = kUnusable;
      try {
        const std::string dir = impl_->memory->fetch(plan);
        status = load_dir(dir, expected_model, slots, optimizer, &impl_->layout, world.size(), &run, &message);
        // Another model's snapshot (a stale one) is not this run's: disk decides.
        if (status == kWrongModel) status = kUnusable;
      } catch (const std::exception& e) {
        message = e.what();
      }
      const int verdict = comm::agree_min(world, status);
      if (verdict == kLoaded) {
        load_stats_ = {plan.step, plan.pulled() > 0 ? "memory+peer" : "memory", plan.pulled(), now_ms() - t0};
        return run;
      }
      if (status != kLoaded)
        std::fprintf(stderr, "warning: [rank %d] the memory snapshot of step %lld is unusable: %s\n", world.rank(),
                     (long long)plan.step, message.c_str());
      if (world.rank() == 0)
        std::fprintf(stderr, "warning: the memory snapshot of step %lld cannot be loaded on every rank; %s\n",
                     (long long)plan.step,
                     steps.empty() ? "no checkpoint on disk: starting from scratch"
                                   : fmt::format("loading step {} from disk", steps.front()).c_str());
    }
  }

  for (std::size_t k = 0; k < steps.size(); ++k) {
    const std::string dir = checkpoint_dir(options_.dir, steps[k]);
    RunState run;
    std::string message;
    const Status status = load_dir(dir, expected_model, slots, optimizer, nullptr, 0, &run, &message);
    const int verdict = comm::agree_min(world, status);
    if (verdict == kLoaded) {
      load_stats_ = {steps[k], "disk", 0, now_ms() - t0};
      return run;
    }
    HT_CHECK(verdict != kWrongModel, ErrorKind::kConfig, "{}",
             status == kWrongModel ? message : fmt::format("checkpoint '{}' holds another model configuration", dir));
    if (status != kLoaded)
      std::fprintf(stderr, "warning: [rank %d] checkpoint %s is unusable: %s\n", world.rank(), dir.c_str(),
                   message.c_str());
    if (world.rank() == 0)
      std::fprintf(stderr, "warning: checkpoint %s is corrupt or incomplete; %s\n", dir.c_str(),
                   k + 1 < steps.size() ? fmt::format("falling back to step {}", steps[k + 1]).c_str()
                                        : "no older checkpoint left: starting from scratch");
  }
  return std::nullopt;
}

}  // namespace ht::ckpt
