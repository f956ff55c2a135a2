// The memory tiers: a node-local snapshot and a peer's replica.
#include "ckpt/memory_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "core/clock.h"
#include "core/files.h"
#include "ht/ckpt/checkpoint.h"
#include "ht/core/fnv.h"

namespace ht::ckpt::detail {

namespace fs = std::filesystem;

namespace {

std::int64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  HT_CHECK(!ec, ErrorKind::kIo, "memory snapshot file '{}' is unreadable: {}", path, ec.message());
  return std::int64_t(n);
}

void read_bytes(const std::string& path, char* dst, std::int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HT_CHECK(fd >= 0, ErrorKind::kIo, "cannot open memory snapshot file '{}': {}", path, std::strerror(errno));
  for (std::int64_t done = 0; done < bytes;) {
    const ssize_t n = ::read(fd, dst + done, std::size_t(bytes - done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      HT_CHECK(false, ErrorKind::kIo, "cannot read memory snapshot file '{}' ({} of {} bytes): {}", path, done, bytes,
               n == 0 ? "it is shorter" : std::strerror(err));
    }
    done += n;
  }
  ::close(fd);
}

// Writes `m` beside the image in `dir`'s <step>.tmp and renames it into
// place (`before_rename` between the two: fault rehearsals), then keeps the
// newest two.
void commit(std::int64_t step, const Manifest& m, const std::string& dir, const std::function<void()>& before_rename) {
  const std::string final_dir = checkpoint_dir(dir, step), tmp = final_dir + ".tmp";
  write_manifest(tmp, m);
  if (before_rename) before_rename();
  std::error_code ignored;
  fs::remove_all(final_dir, ignored);
  fs::rename(tmp, final_dir);
  const std::vector<CommittedCheckpoint> all = committed_checkpoints(dir);
  for (std::size_t i = 0; i + 2 < all.size(); ++i) fs::remove_all(all[i].dir, ignored);
}

// `text` as 32-bit words (empty unless `send`).
Tensor words_of(const std::string& text, bool send) {
  if (!send) return Tensor::empty({0}, DType::kI32);
  Tensor t = Tensor::zeros({std::int64_t(text.size() + 3) / 4}, DType::kI32);
  std::memcpy(t.data_ptr(), text.data(), text.size());
  return t;
}

// A snapshot travels as one buffer of 32-bit words: the rank file, then the
// manifest; the header says how long each is (0 and 0: nothing to send).
struct Sizes {
  std::int64_t file = 0, manifest = 0;
  std::int64_t words() const { return (file + manifest + 3) / 4; }
};

Tensor header_of(const Sizes& s) {
  return Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(s.file & 0x7fffffff), std::int32_t(s.file >> 31),
                                                       std::int32_t(s.manifest & 0x7fffffff),
                                                       std::int32_t(s.manifest >> 31)},
                             {4});
}

Sizes sizes_of(const Tensor& header) {
  const std::vector<std::int32_t> h = header.to_vector<std::int32_t>();
  return {std::int64_t(h[0]) + (std::int64_t(h[1]) << 31), std::int64_t(h[2]) + (std::int64_t(h[3]) << 31)};
}

// A committed step directory as one buffer (empty tensor and zero sizes when
// `step_dir` is "").
Tensor pack(const std::string& step_dir, int rank, Sizes* sizes) {
  *sizes = {};
  if (step_dir.empty()) return Tensor::empty({0}, DType::kI32);
  const std::string file = (fs::path(step_dir) / snapshot_file_name(rank)).string();
  const std::string manifest = (fs::path(step_dir) / kManifestName).string();
  *sizes = {file_bytes(file), file_bytes(manifest)};
  Tensor buffer = Tensor::empty({sizes->words()}, DType::kI32);
  char* bytes = static_cast<char*>(buffer.data_ptr());
  read_bytes(file, bytes, sizes->file);
  read_bytes(manifest, bytes + sizes->file, sizes->manifest);
  return buffer;
}

// Writes a received buffer as the committed step directory `step_dir`;
// `before_commit` runs between the writes and the rename.
void unpack(const Tensor& buffer, const Sizes& sizes, int rank, const std::string& step_dir,
            const std::function<void()>& before_commit = {}) {
  const std::string tmp = step_dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  ec = ht::detail::make_directories(tmp);
  HT_CHECK(!ec, ErrorKind::kIo, "cannot create '{}': {}", tmp, ec.message());
  const char* bytes = static_cast<const char*>(buffer.data_ptr());
  ht::detail::write_file((fs::path(tmp) / snapshot_file_name(rank)).string(),
                         std::string_view(bytes, std::size_t(sizes.file)), /*sync=*/true, "memory snapshot file");
  ht::detail::write_file((fs::path(tmp) / kManifestName).string(),
                         std::string_view(bytes + sizes.file, std::size_t(sizes.manifest)), /*sync=*/true,
                         "memory snapshot manifest");
  if (before_commit) before_commit();
  fs::remove_all(step_dir, ec);
  fs::rename(tmp, step_dir);
}

// One transfer of `t` to `to` and of `in` from `from` (either may be -1).
// A communicator runs its operations one after another, so a rank that
// both sends and receives does so in one operation: two blocking halves in
// a ring would wait for each other.
void transfer(comm::Communicator& c, const Tensor& out, int to, Tensor& in, int from) {
  if (to >= 0 && from >= 0)
    c.send_recv(out, to, in, from)->wait();
  else if (to >= 0)
    c.send(out, to)->wait();
  else if (from >= 0)
    c.recv(in, from)->wait();
}

// Sends `out` to `to` and receives a buffer from `from` (either may be -1):
// the header first, then the words. Returns the received buffer.
Tensor exchange(comm::Communicator& c, const Tensor& out, const Sizes& out_sizes, int to, int from, Sizes* in_sizes) {
  Tensor in_header = Tensor::empty({4}, DType::kI32);
  transfer(c, header_of(out_sizes), to, in_header, from);
  *in_sizes = from >= 0 ? sizes_of(in_header) : Sizes{};
  Tensor in = Tensor::empty({in_sizes->words()}, DType::kI32);
  transfer(c, out, out_sizes.words() > 0 ? to : -1, in, in_sizes->words() > 0 ? from : -1);
  return in;
}

// The newest two committed steps of `dir`, newest first (-1 for none).
std::vector<std::int32_t> newest_two(const std::string& dir) {
  std::vector<std::int32_t> steps{-1, -1};
  if (dir.empty()) return steps;
  const std::vector<CommittedCheckpoint> all = committed_checkpoints(dir);
  for (std::size_t k = 0; k < 2 && k < all.size(); ++k) steps[k] = std::int32_t(all[all.size() - 1 - k].step);
  return steps;
}

}  // namespace

MemoryTier::MemoryTier(std::string dir, std::string node, std::unique_ptr<comm::Communicator> comm)
    : dir_(std::move(dir)), node_(std::move(node)), comm_(std::move(comm)) {
  // Which ranks share a node: every rank's label, hashed, gathered.
  const std::uint64_t h = std::hash<std::string>{}(node_);
  Tensor mine = Tensor::from_vector(
      std::vector<std::int32_t>{std::int32_t(h & 0x7fffffff), std::int32_t((h >> 31) & 0x7fffffff)}, {2});
  const int world = comm_->size();
  Tensor all = Tensor::empty({2 * world}, DType::kI32);
  comm_->all_gather(mine, all)->wait();
  const std::vector<std::int32_t> v = all.to_vector<std::int32_t>();
  std::vector<int>& node_of = node_of_;
  node_of.assign(std::size_t(world), 0);
  std::map<std::pair<int, int>, int> index;  // label hash -> node number, in order of first rank
  for (int r = 0; r < world; ++r)
    node_of[std::size_t(r)] =
        index.emplace(std::pair{v[std::size_t(2 * r)], v[std::size_t(2 * r + 1)]}, int(index.size())).first->second;
  const int nodes = int(index.size());
  bool blocks = nodes >= 2 && world % nodes == 0;
  const int slots = world / nodes;
  for (int r = 0; blocks && r < world; ++r) blocks = node_of[std::size_t(r)] == r / slots;
  if (blocks) {
    peer_ = (rank() + slots) % world;
    source_ = (rank() - slots + world) % world;
  } else if (nodes >= 2 && rank() == 0) {
    std::fprintf(stderr,
                 "warning: memory checkpoints: the %d ranks are not in equal blocks per node (%d nodes), so no rank "
                 "holds a replica of another's snapshot; a lost node's state comes from disk\n",
                 world, nodes);
  }
}

std::string MemoryTier::own_dir() const {
  return (fs::path(dir_) / node_ / fmt::format("rank_{:05d}", rank())).string();
}

std::string MemoryTier::replica_dir() const {
  if (source_ < 0) return "";
  return (fs::path(dir_) / node_ / fmt::format("replica_of_rank_{:05d}", source_)).string();
}

// The directory for step `step`'s snapshot under `dir`, as <step>.tmp, made
// of what is already there: a leftover of an interrupted write, else the
// oldest committed step when two are kept (the newest stays whole until the
// new one commits), else a new directory; its manifest goes first, so
// nothing in it reads as committed. Its image `file`, `bytes` long, keeps
// the mapping it had: pages of a mapping written before take writes at
// memory speed, where a fresh mapping's first write of each page costs
// about a microsecond (1.1 s for the 124M model's 742 MB on the reference
// VM, against 45 ms once mapped: docs/benchmarks.md).
std::shared_ptr<MappedFile> MemoryTier::image_for(const std::string& dir, ImageCache& cache, std::int64_t step,
                                                  const std::string& file, std::int64_t bytes, bool* fresh) {
  const std::string name = fs::path(checkpoint_dir(dir, step)).filename().string();
  const std::string tmp = checkpoint_dir(dir, step) + ".tmp";
  std::error_code ec;
  ht::detail::make_directories(dir);
  std::string from_name = name;  // whose directory (and mapping) this becomes
  if (!fs::exists(tmp)) {
    std::string from;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".tmp") from = e.path().string();
    const std::vector<CommittedCheckpoint> all = committed_checkpoints(dir);
    if (from.empty() && all.size() >= 2) from = all.front().dir;
    if (!from.empty()) {
      fs::rename(from, tmp, ec);
      HT_CHECK(!ec, ErrorKind::kIo, "cannot reuse '{}' for the memory snapshot of step {}: {}", from, step,
               ec.message());
      from_name = fs::path(from).stem().string();  // "step_00000010" of ".../step_00000010[.tmp]"
      if (fs::path(from).extension() != ".tmp") from_name = fs::path(from).filename().string();
    }
  }
  fs::remove(fs::path(tmp) / kManifestName, ec);
  ec = ht::detail::make_directories(tmp);
  HT_CHECK(!ec, ErrorKind::kIo, "cannot create '{}' (is the memory tier's directory writable?): {}", tmp,
           ec.message());
  const std::string path = (fs::path(tmp) / file).string();
  std::shared_ptr<MappedFile> mapped;
  if (const auto it = cache.find(from_name);
      it != cache.end() && it->second->bytes() == bytes && fs::exists(path, ec)) {
    mapped = it->second;
    cache.erase(it);
  } else {
    mapped = MappedFile::open(path, bytes);
    if (fresh) *fresh = true;
  }
  // Only the mappings of directories still there stay (a step pruned or
  // recycled goes), and this one under its new name.
  for (auto it = cache.begin(); it != cache.end();)
    it = fs::exists(fs::path(dir) / it->first, ec) ? std::next(it) : cache.erase(it);
  cache[name] = mapped;
  return mapped;
}

void MemoryTier::prepare_spare(const std::string& dir, ImageCache& cache, const std::string& file,
                               std::int64_t bytes) {
  if (cache.size() >= 2) return;
  const std::string spare = (fs::path(dir) / "step_spare.tmp").string();
  std::error_code ec;
  if (fs::exists(spare, ec)) return;
  ec = ht::detail::make_directories(spare);
  if (ec) return;  // the next snapshot maps its image itself
  try {
    cache["step_spare"] = MappedFile::open((fs::path(spare) / file).string(), bytes, /*touch=*/true);
  } catch (const std::exception&) {
    fs::remove_all(spare, ec);
  }
}

std::shared_ptr<MappedFile> MemoryTier::begin(std::int64_t step, std::int64_t bytes) {
  if (first_begin_) {
    first_begin_ = false;
    remove_stale_dirs();
  }
  last_fresh_ = false;
  return image_for(own_dir(), own_images_, step, snapshot_file_name(rank()), bytes, &last_fresh_);
}

std::string MemoryTier::write(std::int64_t step, Manifest manifest, std::shared_ptr<MappedFile> image,
                              std::string error, double* write_ms, double* replicate_ms) {
  const double t0 = now_ms();
  const std::string own = checkpoint_dir(own_dir(), step);
  if (!error.empty()) error = fmt::format("memory snapshot of step {} not written: {}", step, error);
  if (image) {
    try {
      if (hook_) hook_(step, "write");
      commit(step, manifest, own_dir(), [&] {
        if (hook_) hook_(step, "commit");
      });
      prepare_spare(own_dir(), own_images_, snapshot_file_name(rank()), image->bytes());
    } catch (const std::exception& e) {
      error = fmt::format("memory snapshot of step {} not written: {}", step, e.what());
      image.reset();
    }
  }
  const double t1 = now_ms();
  *write_ms = t1 - t0;
  if (hook_) hook_(step, "replicate");
  // Every rank takes part in the exchange, sending nothing when its own copy
  // failed: the image's own pages go to the peer, which receives them into
  // its replica's image (no copy read back, none made in between).
  if (peer_ >= 0) {
    try {
      const std::string text = manifest_text(manifest);
      const Sizes out_sizes = image ? Sizes{image->bytes(), std::int64_t(text.size())} : Sizes{};
      Tensor in_header = Tensor::empty({4}, DType::kI32);
      transfer(*comm_, header_of(out_sizes), peer_, in_header, source_);
      const Sizes in = sizes_of(in_header);
      std::shared_ptr<MappedFile> replica;
      std::string replica_error;
      Tensor in_image = Tensor::empty({0}, DType::kI32);
      if (in.file > 0) {
        try {
          replica = image_for(replica_dir(), replica_images_, step, snapshot_file_name(source_), in.file);
          in_image = view_of(replica, 0, in.file / 4, DType::kI32);
        } catch (const std::exception& e) {  // received all the same, into scratch, so the peer is not left waiting
          replica_error = e.what();
          in_image = Tensor::empty({in.file / 4}, DType::kI32);
        }
      }
      const Tensor out_image = image ? view_of(image, 0, image->bytes() / 4, DType::kI32) : Tensor::empty({0}, DType::kI32);
      transfer(*comm_, out_image, out_sizes.file > 0 ? peer_ : -1, in_image, in.file > 0 ? source_ : -1);
      Tensor in_text = Tensor::empty({(in.manifest + 3) / 4}, DType::kI32);
      transfer(*comm_, words_of(text, out_sizes.manifest > 0), out_sizes.manifest > 0 ? peer_ : -1, in_text,
               in.manifest > 0 ? source_ : -1);
      HT_CHECK(replica_error.empty(), ErrorKind::kIo, "{}", replica_error);
      if (replica) {
        const std::string where = checkpoint_dir(replica_dir(), step);
        const Manifest received =
            parse_manifest(std::string(static_cast<const char*>(in_text.data_ptr()), std::size_t(in.manifest)),
                           where + " (received from rank " + std::to_string(source_) + ")", where);
        commit(step, received, replica_dir(), [&] {
          if (hook_) hook_(step, "replica-commit");
        });
        prepare_spare(replica_dir(), replica_images_, snapshot_file_name(source_), in.file);
      }
    } catch (const std::exception& e) {
      if (error.empty()) error = fmt::format("memory snapshot of step {} not replicated: {}", step, e.what());
    }
  }
  *replicate_ms = now_ms() - t1;
  return error;
}

int MemoryTier::Plan::pulled() const { return int(std::count_if(holder.begin(), holder.end(), [](int h) { return h >= 0; })); }

namespace {
// The rank a directory of a node's memory holds ("rank_R", "replica_of_rank_R"), -1 for another name.
int subject_of(const std::string& name) {
  for (const std::string prefix : {"rank_", "replica_of_rank_"})
    if (name.rfind(prefix, 0) == 0 && name.size() == prefix.size() + 5 &&
        std::all_of(name.begin() + std::ptrdiff_t(prefix.size()), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::stoi(name.substr(prefix.size()));
  return -1;
}
}  // namespace

std::string MemoryTier::held_copy(int subject, std::int64_t step) const {
  for (const std::string& name : {fmt::format("rank_{:05d}", subject), fmt::format("replica_of_rank_{:05d}", subject)}) {
    const std::string d = checkpoint_dir((fs::path(dir_) / node_ / name).string(), step);
    std::error_code ec;
    if (fs::exists(fs::path(d) / kManifestName, ec)) return d;
  }
  return "";
}

bool MemoryTier::speaks_for_node() const {
  const int me = rank();
  for (int r = 0; r < me; ++r)
    if (node_of_[std::size_t(r)] == node_of_[std::size_t(me)]) return false;
  return true;
}

void MemoryTier::remove_stale_dirs() const {
  // The node's lowest rank decides for the node; its ranks write only
  // their own directories and the replicas of their sources.
  if (!speaks_for_node()) return;
  const int me = rank(), world = comm_->size();
  std::set<std::string> kept;
  for (int r = me; r < world; ++r) {
    if (node_of_[std::size_t(r)] != node_of_[std::size_t(me)]) continue;
    kept.insert(fmt::format("rank_{:05d}", r));
    if (source_ >= 0) kept.insert(fmt::format("replica_of_rank_{:05d}", (r - (me - source_) + world) % world));
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(dir_) / node_, ec)) {
    const std::string name = e.path().filename().string();
    if (subject_of(name) >= 0 && !kept.count(name)) {
      std::error_code ignored;
      fs::remove_all(e.path(), ignored);
    }
  }
}

MemoryTier::Plan MemoryTier::newest_common(std::int64_t at_least) {
  const int world = comm_->size();
  // What this node holds, as (rank, step) pairs: every directory of its
  // memory, its newest two steps, said by the rank that speaks for the
  // node (so it is also the holder that sends a copy).
  std::vector<std::int32_t> mine;
  std::error_code ec;
  if (speaks_for_node())
    for (const fs::directory_entry& e : fs::directory_iterator(fs::path(dir_) / node_, ec)) {
      const int subject = subject_of(e.path().filename().string());
      if (subject < 0 || subject >= world) continue;
      for (std::int32_t s : newest_two(e.path().string()))
        if (s >= 0 && s >= at_least) mine.insert(mine.end(), {subject, s});
    }
  Tensor counts = Tensor::empty({world}, DType::kI32);
  comm_->all_gather(Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(mine.size())}, {1}), counts)->wait();
  const std::vector<std::int32_t> count = counts.to_vector<std::int32_t>();
  const std::int32_t width = std::max(2, *std::max_element(count.begin(), count.end()));
  mine.resize(std::size_t(width), -1);
  Tensor all = Tensor::empty({std::int64_t(width) * world}, DType::kI32);
  comm_->all_gather(Tensor::from_vector(mine, {width}), all)->wait();
  const std::vector<std::int32_t> v = all.to_vector<std::int32_t>();
  // holds[{r, s}]: the ranks whose node holds rank r's snapshot of step s.
  std::map<std::pair<int, std::int64_t>, std::vector<int>> holds;
  std::vector<std::int64_t> candidates;
  for (int q = 0; q < world; ++q)
    for (std::int32_t k = 0; k + 1 < count[std::size_t(q)]; k += 2) {
      const std::int32_t subject = v[std::size_t(q * width + k)], s = v[std::size_t(q * width + k + 1)];
      holds[{subject, s}].push_back(q);
      candidates.push_back(s);
    }
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (std::int64_t s : candidates) {
    Plan plan{s, std::vector<int>(std::size_t(world), -1)};
    bool everyone = true;
    for (int r = 0; r < world && everyone; ++r) {
      const auto it = holds.find({r, s});
      everyone = it != holds.end();
      if (!everyone) break;
      const bool on_its_node = std::any_of(it->second.begin(), it->second.end(),
                                           [&](int q) { return node_of_[std::size_t(q)] == node_of_[std::size_t(r)]; });
      if (!on_its_node) plan.holder[std::size_t(r)] = it->second.front();
    }
    if (everyone) return plan;
  }
  return {};
}

std::string MemoryTier::fetch(const Plan& plan) {
  const int me = rank();
  std::string error;
  // Each copy not on its rank's node travels from its holder, one transfer
  // after another in rank order (every rank walks the same list, so the
  // pairs meet), into the rank's own directory.
  for (int r = 0; r < comm_->size(); ++r) {
    const int from = plan.holder[std::size_t(r)];
    if (from < 0 || (me != from && me != r)) continue;
    Sizes out_sizes, in_sizes;
    Tensor out = Tensor::empty({0}, DType::kI32);
    if (me == from) {
      try {
        out = pack(held_copy(r, plan.step), r, &out_sizes);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "warning: [rank %d] the copy of rank %d's memory snapshot of step %lld is unreadable: %s\n",
                     me, r, (long long)plan.step, e.what());
        out_sizes = {};
      }
    }
    const Tensor in = exchange(*comm_, out, out_sizes, me == from ? r : -1, me == r ? from : -1, &in_sizes);
    if (me != r) continue;
    if (in_sizes.file <= 0) {
      error = fmt::format("rank {}, whose node holds this rank's memory snapshot of step {}, could not send it", from,
                          plan.step);
      continue;
    }
    try {
      unpack(in, in_sizes, me, checkpoint_dir(own_dir(), plan.step));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  HT_CHECK(error.empty(), ErrorKind::kIo, "{}", error);
  const std::string held = held_copy(me, plan.step);
  HT_CHECK(!held.empty(), ErrorKind::kIo, "memory snapshot of step {} of rank {} is missing from '{}'", plan.step, me,
           (fs::path(dir_) / node_).string());
  return held;
}

void MemoryTier::discard() {
  std::error_code ec;
  fs::remove_all(own_dir(), ec);
  if (source_ >= 0) fs::remove_all(replica_dir(), ec);
  // The node's and the tier's directories go with their last rank.
  fs::remove(fs::path(dir_) / node_, ec);
  fs::remove(dir_, ec);
}

}  // namespace ht::ckpt::detail

namespace ht::ckpt {

std::string default_memory_dir(const std::string& ckpt_dir) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::weakly_canonical(std::filesystem::absolute(ckpt_dir, ec), ec);
  if (path.empty()) path = ckpt_dir;
  // FNV-1a of the path: the same in every process and every build.
  return fmt::format("/dev/shm/hypertrain-{:016x}", fnv1a(path.string()));
}

}  // namespace ht::ckpt
