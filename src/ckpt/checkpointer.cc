// ht::ckpt::Checkpointer: host snapshot, background write, commit, load.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <cstring>

#include "ckpt/assemble.h"
#include "ckpt/manifest.h"
#include "ckpt/rank_file.h"
#include "ckpt/writer_lock.h"
#include "core/files.h"
#include "ht/ckpt/checkpoint.h"
#include "ht/config.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::ckpt {

namespace fs = std::filesystem;
using detail::Manifest;
using detail::Piece;
using detail::PieceInfo;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The verdict of every rank: the minimum of `value` over the group.
int agree_min(comm::Communicator& c, int value) {
  Tensor t = Tensor::from_vector(std::vector<std::int32_t>{value}, {1});
  c.all_reduce(t, t, comm::ReduceOp::kMin)->wait();
  return t.data<std::int32_t>()[0];
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
  std::uint64_t lane[4] = {0xcbf29ce484222325ull ^ std::uint64_t(bytes), 0x84222325cbf29ce4ull, 0x9ce484222325cbf2ull,
                           0x2325cbf29ce48422ull};
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    for (int k = 0; k < 4; ++k) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * std::size_t(k), 8);
      lane[k] = (lane[k] ^ w) * kPrime;
    }
  std::uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k) h = (h ^ lane[k]) * kPrime;
  for (; i < bytes; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<std::size_t>(8, bytes - i));
    h = (h ^ w) * kPrime;
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
  struct Job {
    std::int64_t step = 0;
    RunState run;
    std::vector<Piece> pieces;
  };

  comm::DeviceMesh& mesh;
  std::unique_ptr<comm::Communicator> comm;  // the writer thread's own
  CheckpointOptions options;
  std::string layout;
  SaveStats* stats;

  std::mutex mu;
  std::condition_variable cv;
  std::optional<Job> job;
  bool busy = false, stop = false;
  std::string last_error;
  std::vector<Tensor> spare_buffers;  // the last save's host copies, for reuse
  std::optional<detail::WriterLock> writer_lock;  // world rank 0's, for the checkpointer's life
  std::thread worker;

  Impl(comm::DeviceMesh& m, const CheckpointOptions& o, SaveStats* s) : mesh(m), options(o), stats(s) {}

  void run() {
    for (;;) {
      Job j;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return job.has_value() || stop; });
        if (!job) return;
        j = std::move(*job);
        job.reset();
      }
      const std::string error = write_and_commit(j);
      {
        std::lock_guard lock(mu);
        last_error = error;
        busy = false;
      }
      cv.notify_all();
    }
  }

  // Every rank writes its file; once all are durable rank 0 writes the
  // manifest and commits. Returns what went wrong ("" if committed).
  std::string write_and_commit(Job& j) {
    const int rank = comm->rank();
    const std::string tmp = checkpoint_dir(options.dir, j.step) + ".tmp";
    std::string error;
    const double t0 = now_ms();
    try {
      const std::error_code ec = ht::detail::make_directories(tmp);
      HT_CHECK(!ec, ErrorKind::kIo, "cannot create '{}': {}", tmp, ec.message());
      stats->bytes = detail::write_rank_file((fs::path(tmp) / rank_file_name(rank)).string(), j.pieces);
    } catch (const std::exception& e) {
      error = e.what();
    }
    stats->write_ms = now_ms() - t0;
    {
      // The host buffers are kept for the next save: reusing them spares the
      // training thread the page faults of fresh memory (most of the stall).
      std::lock_guard lock(mu);
      spare_buffers.clear();
      for (Piece& p : j.pieces) spare_buffers.push_back(std::move(p.data));
    }
    j.pieces.clear();
    if (options.commit_delay.count() > 0) std::this_thread::sleep_for(options.commit_delay);
    try {
      const bool all_written = agree_min(*comm, error.empty() ? 1 : 0) == 1;
      if (rank == 0 && all_written) commit(j, tmp);
      if (!all_written && error.empty()) error = "another rank could not write its file";
      if (!all_written && rank == 0) {
        // Every rank is done with the directory: free the space of the partial save now.
        std::error_code ec;
        fs::remove_all(tmp, ec);
      }
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
    if (!error.empty()) return fmt::format("checkpoint of step {} not saved: {}", j.step, error);
    return "";
  }

  void commit(const Job& j, const std::string& tmp) {
    Manifest m;
    m.run = j.run;
    m.layout = layout;
    m.world = comm->size();
    for (int r = 0; r < m.world; ++r) {
      const std::string name = rank_file_name(r), path = (fs::path(tmp) / name).string();
      for (PieceInfo& p : detail::read_piece_index(path, name)) m.pieces.push_back(std::move(p));
      m.files.push_back({r, name, std::int64_t(fs::file_size(path))});
    }
    detail::write_manifest(tmp, m);
    detail::sync_path(tmp);
    const std::string final_dir = checkpoint_dir(options.dir, j.step);
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    detail::sync_path(options.dir);
    // Retention: the newest `keep` committed checkpoints stay.
    const std::vector<CommittedCheckpoint> all = committed_checkpoints(options.dir);
    for (std::size_t i = 0; i + std::size_t(options.keep) < all.size(); ++i) fs::remove_all(all[i].dir);
  }
};

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
  const int created = agree_min(world, locked_out ? -1 : error.empty() ? 1 : 0);
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
  const bool ok = agree_min(world, error.empty() ? 1 : 0) == 1;
  HT_CHECK(ok, ErrorKind::kIo,
           "checkpoint directory '{}' is not usable{}: choose a writable --ckpt-dir on a file system every rank sees",
           options_.dir, error.empty() ? " on another rank" : fmt::format(" ({})", error));
  impl_ = std::make_unique<Impl>(mesh, options_, &stats_);
  impl_->writer_lock = std::move(lock);
  impl_->layout = mesh.layout().str();
  impl_->comm = world.split(0, world.rank(), "ckpt");
  impl_->worker = std::thread([this] { impl_->run(); });
}

Checkpointer::~Checkpointer() {
  const std::string error = wait();
  if (!error.empty()) std::fprintf(stderr, "warning: %s\n", error.c_str());
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

std::string Checkpointer::wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return !impl_->busy; });
  return std::exchange(impl_->last_error, std::string());
}

std::string Checkpointer::save(const RunState& state, const std::vector<optim::Slot>& slots,
                               optim::Optimizer& optimizer) {
  const double t0 = now_ms();
  const std::string previous = wait();
  const double waited = now_ms() - t0;
  Impl::Job job;
  job.step = state.step;
  job.run = state;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const optim::Slot& s = slots[i];
    if (!s.primary) continue;
    HT_CHECK(s.source, ErrorKind::kInvalidArgument, "checkpoint: slot {} names no parameter", s.name);
    auto add = [&](const std::string& kind, const Tensor& values) {
      PieceInfo info;
      info.tensor = s.source->name();
      info.kind = kind;
      info.global_shape = s.source->full_shape();
      if (s.source->real_rows() < info.global_shape.at(0)) info.real_rows = s.source->real_rows();
      info.layout = s.source->layout();
      info.begin = s.offset;
      info.end = s.offset + values.numel();
      const HostMemory host = values.device().is_cpu() ? HostMemory::kPlain : HostMemory::kPinned;
      Tensor copy;
      const std::size_t k = job.pieces.size();
      if (k < impl_->spare_buffers.size() && impl_->spare_buffers[k].numel() == values.numel())
        copy = impl_->spare_buffers[k];
      else
        copy = Tensor::empty({values.numel()}, DType::kF32, Device::cpu(), MemCategory::kOther, host);
      copy.copy_from(values.view({-1}));
      job.pieces.push_back({std::move(info), std::move(copy)});
    };
    add("master", s.param);
    for (auto& [kind, t] : optimizer.slot_state(i)) add(kind, t);
  }
  stats_ = {};
  stats_.step = state.step;
  {
    std::lock_guard lock(impl_->mu);
    impl_->job = std::move(job);
    impl_->busy = true;
  }
  impl_->cv.notify_all();
  stats_.wait_ms = waited;
  stats_.stall_ms = now_ms() - t0;
  return previous;
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

std::optional<RunState> Checkpointer::load_latest(const std::string& expected_model,
                                                  const std::vector<optim::Slot>& slots,
                                                  optim::Optimizer& optimizer) {
  comm::Communicator& world = impl_->mesh.world();
  // Rank 0's listing decides which checkpoints are tried, newest first.
  std::vector<std::int32_t> steps;
  if (world.rank() == 0)
    for (const CommittedCheckpoint& c : committed_checkpoints(options_.dir))
      steps.insert(steps.begin(), std::int32_t(c.step));
  Tensor count = Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(steps.size())}, {1});
  world.broadcast(count, 0)->wait();
  steps.resize(std::size_t(count.data<std::int32_t>()[0]));
  if (steps.empty()) return std::nullopt;
  Tensor list = Tensor::from_vector(steps, {std::int64_t(steps.size())});
  world.broadcast(list, 0)->wait();
  steps = list.to_vector<std::int32_t>();

  enum Status { kWrongModel = 0, kUnusable = 1, kLoaded = 2 };
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const std::string dir = checkpoint_dir(options_.dir, steps[k]);
    int status = kLoaded;
    std::string message;
    RunState run;
    try {
      const Manifest m = detail::read_manifest(dir);
      run = m.run;
      if (m.run.model != expected_model) {
        status = kWrongModel;
        message = fmt::format("checkpoint '{}' holds model {}, but this run builds {}: resume with the same model "
                              "flags, or use another --ckpt-dir",
                              dir, m.run.model, expected_model);
      } else {
        Restorer restorer(dir, m);
        for (std::size_t i = 0; i < slots.size(); ++i) {
          const optim::Slot& s = slots[i];
          Tensor values = s.param;
          restorer.fill(*s.source, "master", s.offset, values);
          for (auto& [kind, t] : optimizer.slot_state(i)) restorer.fill(*s.source, kind, s.offset, t);
        }
      }
    } catch (const std::exception& e) {
      status = kUnusable;
      message = e.what();
    }
    const int verdict = agree_min(world, status);
    if (verdict == kLoaded) return run;
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
