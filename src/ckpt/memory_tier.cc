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

#include "core/clock.h"
#include "core/files.h"
#include "ht/ckpt/checkpoint.h"

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
  std::vector<int> node_of(std::size_t(world), 0);
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

int MemoryTier::Plan::pulled() const { return int(std::count(from_peer.begin(), from_peer.end(), true)); }

MemoryTier::Plan MemoryTier::newest_common(std::int64_t at_least) {
  const int world = comm_->size();
  std::vector<std::int32_t> mine = newest_two(own_dir());
  for (std::int32_t s : newest_two(replica_dir())) mine.push_back(s);
  Tensor all = Tensor::empty({4 * world}, DType::kI32);
  comm_->all_gather(Tensor::from_vector(mine, {4}), all)->wait();
  const std::vector<std::int32_t> v = all.to_vector<std::int32_t>();
  auto own_has = [&](int r, std::int64_t s) { return v[std::size_t(4 * r)] == s || v[std::size_t(4 * r + 1)] == s; };
  // Rank r's replica is held by its peer, the rank whose source r is.
  auto peer_has = [&](int r, std::int64_t s) {
    if (peer_ < 0) return false;
    const int slots = (peer_ - rank() + world) % world;
    const int holder = (r + slots) % world;
    return v[std::size_t(4 * holder + 2)] == s || v[std::size_t(4 * holder + 3)] == s;
  };
  std::vector<std::int64_t> candidates;
  for (std::int32_t s : v)
    if (s >= 0 && s >= at_least) candidates.push_back(s);
  std::sort(candidates.rbegin(), candidates.rend());
  for (std::int64_t s : candidates) {
    Plan plan{s, std::vector<bool>(std::size_t(world), false)};
    bool everyone = true;
    for (int r = 0; r < world && everyone; ++r) {
      everyone = own_has(r, s) || peer_has(r, s);
      plan.from_peer[std::size_t(r)] = !own_has(r, s);
    }
    if (everyone) return plan;
  }
  return {};
}

std::string MemoryTier::fetch(const Plan& plan) {
  const std::string own = checkpoint_dir(own_dir(), plan.step);
  std::string error;
  if (peer_ >= 0 && plan.pulled() > 0) {
    // Each rank sends the replica it holds when its source needs it, and
    // receives its own copy from its peer when it needs it.
    const bool source_needs = plan.from_peer[std::size_t(source_)];
    const bool i_need = plan.from_peer[std::size_t(rank())];
    Sizes out_sizes, in_sizes;
    Tensor out = Tensor::empty({0}, DType::kI32);
    try {
      if (source_needs) out = pack(checkpoint_dir(replica_dir(), plan.step), source_, &out_sizes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: [rank %d] the replica of rank %d's memory snapshot of step %lld is unreadable: %s\n",
                   rank(), source_, (long long)plan.step, e.what());
      out_sizes = {};
    }
    const Tensor in = exchange(*comm_, out, out_sizes, source_needs ? source_ : -1, i_need ? peer_ : -1, &in_sizes);
    if (i_need) {
      HT_CHECK(in_sizes.file > 0, ErrorKind::kIo,
               "rank {}, which holds this rank's replica, could not send the memory snapshot of step {}", peer_,
               plan.step);
      unpack(in, in_sizes, rank(), own);
    }
  }
  HT_CHECK(fs::exists(fs::path(own) / kManifestName), ErrorKind::kIo,
           "memory snapshot of step {} is missing from '{}'", plan.step, own);
  return own;
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
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : path.string()) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("/dev/shm/hypertrain-{:016x}", h);
}

}  // namespace ht::ckpt
