// The emulated NCCL (emu/include/nccl.h): communicators of the processes of
// one host over a POSIX shared-memory segment per communicator.
//
// Collectives move through one slot per rank: in each step every rank puts
// its part in its slot, all wait for all (arrive), each reads what it needs
// (reducing in rank order), all wait again (leave) before the slots are
// reused. Point-to-point calls go through a FIFO per (sender, receiver)
// pair; the calls of a group progress together, so a group's sends and
// receives cannot deadlock on each other. All of it runs on the CUDA stream
// the call names (ht::emu::enqueue_work). A wait ends when its peers arrive,
// when the communicator is aborted, or when a peer's process has exited.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kMaxRanks = 64;
constexpr std::size_t kSlotBytes = std::size_t(1) << 20;      // a rank's part of one collective step
constexpr std::size_t kChannelBytes = std::size_t(256) << 10;  // one (sender, receiver) FIFO

struct alignas(64) Counter {
  std::atomic<std::uint64_t> v;
};

struct Header {
  std::atomic<int> joined;
  std::atomic<int> pid[kMaxRanks];
  Counter arrive[kMaxRanks], leave[kMaxRanks];        // collective steps
  Counter split_arrive[kMaxRanks], split_leave[kMaxRanks];
  std::atomic<int> split_color[kMaxRanks], split_key[kMaxRanks];
};

struct Channel {
  Counter written, read;  // bytes, ever
};

std::size_t segment_bytes(int n) {
  return sizeof(Header) + std::size_t(n) * kSlotBytes + std::size_t(n) * n * (sizeof(Channel) + kChannelBytes);
}

thread_local std::string t_last_error;

ncclResult_t refuse(ncclResult_t r, const std::string& what) {
  t_last_error = what;
  return r;
}

struct CommState {
  std::string id;  // the segment's name
  int n = 0, rank = 0;
  bool blocking = true;
  char* base = nullptr;
  Header* h = nullptr;
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};
  std::mutex m;     // last_error
  std::mutex exec;  // one group at a time on the segment
  std::string last_error;
  std::uint64_t step = 0;   // collective steps taken (under exec)
  std::uint64_t splits = 0; // splits made (host calls, in the same order on every rank)
  std::atomic<bool> unlinked{false};  // the name is gone (rank 0 unlinks it once every rank joined)

  ~CommState() {
    if (base) munmap(base, segment_bytes(n));
    if (rank == 0 && !unlinked.exchange(true)) shm_unlink(id.c_str());
  }

  char* slot(int r) const { return base + sizeof(Header) + std::size_t(r) * kSlotBytes; }
  Channel& channel(int from, int to) const {
    auto* channels = reinterpret_cast<Channel*>(base + sizeof(Header) + std::size_t(n) * kSlotBytes);
    return channels[from * n + to];
  }
  char* channel_data(int from, int to) const {
    char* data = base + sizeof(Header) + std::size_t(n) * kSlotBytes + std::size_t(n) * n * sizeof(Channel);
    return data + std::size_t(from * n + to) * kChannelBytes;
  }

  ncclResult_t fail(ncclResult_t r, const std::string& what) {
    std::lock_guard lock(m);
    if (async_error.load() == ncclSuccess) {
      last_error = what;
      async_error.store(r);
    }
    return r;
  }

  bool all_joined() {
    if (h->joined.load(std::memory_order_acquire) < n) return false;
    if (rank == 0 && !unlinked.exchange(true)) shm_unlink(id.c_str());  // every rank has it open
    return true;
  }

  /// Waits until `ready()`; an error if the communicator is aborted or a
  /// peer's process has exited first.
  template <typename Ready>
  ncclResult_t wait(Ready ready, const char* what) {
    auto last_check = std::chrono::steady_clock::now();
    for (int spins = 0; !ready(); ++spins) {
      if (aborted.load()) return fail(ncclInvalidUsage, std::string("communicator aborted while waiting in ") + what);
      if (spins < 64) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 1000 ? 20 : 200));
      const auto now = std::chrono::steady_clock::now();
      if (now - last_check < std::chrono::milliseconds(200)) continue;
      last_check = now;
      for (int r = 0; r < n; ++r) {
        const int pid = h->pid[r].load();
        if (pid > 0 && kill(pid, 0) == -1 && errno == ESRCH)
          return fail(ncclRemoteError, "rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                                           ") exited while rank " + std::to_string(rank) + " waited in " + what);
      }
    }
    return ncclSuccess;
  }

  /// Sets this rank's `counters` entry to `s`, then waits until every rank's is.
  ncclResult_t meet(Counter* counters, std::uint64_t s, const char* what) {
    counters[rank].v.store(s, std::memory_order_release);
    return wait(
        [&] {
          for (int i = 0; i < n; ++i)
            if (counters[i].v.load(std::memory_order_acquire) < s) return false;
          return true;
        },
        what);
  }

  /// One collective step: `put` fills this rank's slot, then every rank's
  /// slot is readable in `take`.
  ncclResult_t exchange(const std::function<void(char*)>& put, const std::function<void()>& take, const char* what) {
    const std::uint64_t s = ++step;
    put(slot(rank));
    if (ncclResult_t r = meet(h->arrive, s, what); r != ncclSuccess) return r;
    take();
    return meet(h->leave, s, what);
  }

  /// A collective over `count` elements in steps of at most `per`:
  /// put(at, k, slot) and take(at, k) as in exchange(), for elements [at, at + k).
  ncclResult_t steps(std::size_t count, std::size_t per, const char* what,
                     const std::function<void(std::size_t, std::size_t, char*)>& put,
                     const std::function<void(std::size_t, std::size_t)>& take) {
    for (std::size_t at = 0; at < count; at += per) {
      const std::size_t k = std::min(per, count - at);
      const ncclResult_t r = exchange([&](char* slot) { put(at, k, slot); }, [&] { take(at, k); }, what);
      if (r != ncclSuccess) return r;
    }
    return ncclSuccess;
  }
};

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> s;
};

namespace {

std::size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

double load_float(ncclDataType_t t, const char* p) {
  switch (t) {
    case ncclFloat16: return __half2float(*reinterpret_cast<const __half*>(p));
    case ncclBfloat16: return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
    case ncclFloat32: return *reinterpret_cast<const float*>(p);
    default: return *reinterpret_cast<const double*>(p);
  }
}

void store_float(ncclDataType_t t, char* p, double v) {
  switch (t) {
    case ncclFloat16: *reinterpret_cast<__half*>(p) = __float2half_rn(float(v)); break;
    case ncclBfloat16: *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(float(v)); break;
    case ncclFloat32: *reinterpret_cast<float*>(p) = float(v); break;
    default: *reinterpret_cast<double*>(p) = v;
  }
}

template <typename T>
void reduce_ints(ncclRedOp_t op, const std::vector<const char*>& parts, char* out, std::size_t count) {
  using U = std::make_unsigned_t<T>;
  for (std::size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, parts[0] + i * sizeof(T), sizeof(T));
    for (std::size_t r = 1; r < parts.size(); ++r) {
      T v;
      std::memcpy(&v, parts[r] + i * sizeof(T), sizeof(T));
      switch (op) {
        case ncclSum:
        case ncclAvg: acc = T(U(acc) + U(v)); break;
        case ncclProd: acc = T(U(acc) * U(v)); break;
        case ncclMax: acc = std::max(acc, v); break;
        case ncclMin: acc = std::min(acc, v); break;
        default: break;
      }
    }
    if (op == ncclAvg) acc = T(acc / T(parts.size()));
    std::memcpy(out + i * sizeof(T), &acc, sizeof(T));
  }
}

/// out[i] = parts[0][i] op parts[1][i] op ..., in rank order.
void reduce(ncclDataType_t t, ncclRedOp_t op, const std::vector<const char*>& parts, char* out, std::size_t count) {
  switch (t) {
    case ncclInt8: return reduce_ints<std::int8_t>(op, parts, out, count);
    case ncclUint8: return reduce_ints<std::uint8_t>(op, parts, out, count);
    case ncclInt32: return reduce_ints<std::int32_t>(op, parts, out, count);
    case ncclUint32: return reduce_ints<std::uint32_t>(op, parts, out, count);
    case ncclInt64: return reduce_ints<std::int64_t>(op, parts, out, count);
    case ncclUint64: return reduce_ints<std::uint64_t>(op, parts, out, count);
    default: break;
  }
  const std::size_t es = type_bytes(t);
  for (std::size_t i = 0; i < count; ++i) {
    double acc = load_float(t, parts[0] + i * es);
    for (std::size_t r = 1; r < parts.size(); ++r) {
      const double v = load_float(t, parts[r] + i * es);
      switch (op) {
        case ncclSum:
        case ncclAvg: acc += v; break;
        case ncclProd: acc *= v; break;
        case ncclMax: acc = std::isnan(v) ? v : std::max(acc, v); break;
        case ncclMin: acc = std::isnan(v) ? v : std::min(acc, v); break;
        default: break;
      }
    }
    if (op == ncclAvg) acc /= double(parts.size());
    store_float(t, out + i * es, acc);
  }
}

// Operations --------------------------------------------------------------

/// One call, as a group holds it until it runs on its stream.
struct Op {
  std::shared_ptr<CommState> comm;
  cudaStream_t stream = nullptr;
  std::function<ncclResult_t(CommState&)> collective;  // set for collectives
  // Point to point: bytes moved so far of `bytes`.
  bool send = false;
  const char* send_buf = nullptr;
  char* recv_buf = nullptr;
  std::size_t bytes = 0, done = 0;
  int peer = 0;
  const char* name = "";
};

/// Moves what it can of a send or receive without waiting; true if it moved any.
bool progress(Op& op) {
  CommState& c = *op.comm;
  const int from = op.send ? c.rank : op.peer, to = op.send ? op.peer : c.rank;
  Channel& ch = c.channel(from, to);
  char* data = c.channel_data(from, to);
  const std::uint64_t w = ch.written.v.load(std::memory_order_acquire), r = ch.read.v.load(std::memory_order_acquire);
  const std::size_t left = op.bytes - op.done;
  if (op.send) {
    const std::size_t k = std::min({kChannelBytes - std::size_t(w - r), left, kChannelBytes - std::size_t(w % kChannelBytes)});
    if (k == 0) return false;
    std::memcpy(data + w % kChannelBytes, op.send_buf + op.done, k);
    ch.written.v.store(w + k, std::memory_order_release);
    op.done += k;
  } else {
    const std::size_t k = std::min({std::size_t(w - r), left, kChannelBytes - std::size_t(r % kChannelBytes)});
    if (k == 0) return false;
    std::memcpy(op.recv_buf + op.done, data + r % kChannelBytes, k);
    ch.read.v.store(r + k, std::memory_order_release);
    op.done += k;
  }
  return true;
}

/// Runs a group's calls in order (point-to-point ones together), on the
/// stream's thread.
void run_group(std::vector<Op>& ops) {
  std::vector<CommState*> comms;
  for (Op& op : ops) comms.push_back(op.comm.get());
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (CommState* c : comms) locks.emplace_back(c->exec);
  for (CommState* c : comms) {
    if (c->async_error.load() != ncclSuccess) return;  // a failed communicator runs nothing more
    if (c->wait([c] { return c->all_joined(); }, "initialisation") != ncclSuccess) return;
  }
  std::vector<Op*> p2p;
  for (Op& op : ops) {
    if (op.collective) {
      if (op.collective(*op.comm) != ncclSuccess) return;
    } else {
      p2p.push_back(&op);
    }
  }
  while (!p2p.empty()) {
    bool moved = false;
    for (Op* op : p2p) moved |= progress(*op);
    p2p.erase(std::remove_if(p2p.begin(), p2p.end(), [](Op* op) { return op->done == op->bytes; }), p2p.end());
    if (p2p.empty() || moved) continue;
    // Nothing moved: wait a little for the peers (or learn that they are gone).
    Op& first = *p2p.front();
    bool any = false;
    if (first.comm->wait(
            [&] {
              for (Op* op : p2p)
                if (progress(*op)) any = true;
              return any;
            },
            first.name) != ncclSuccess)
      return;
  }
}

thread_local int t_group_depth = 0;
thread_local std::vector<Op> t_group;

/// Enqueues the calls on the first call's stream; other streams the calls
/// name wait for it, and it for them, as one NCCL group would.
ncclResult_t launch(std::vector<Op> ops) {
  if (ops.empty()) return ncclSuccess;
  const cudaStream_t stream = ops.front().stream;
  std::vector<cudaStream_t> others;
  for (const Op& op : ops)
    if (op.stream != stream && std::find(others.begin(), others.end(), op.stream) == others.end())
      others.push_back(op.stream);
  for (cudaStream_t o : others) {
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventRecord(e, o);
    cudaStreamWaitEvent(stream, e, 0);
    cudaEventDestroy(e);
  }
  auto shared = std::make_shared<std::vector<Op>>(std::move(ops));
  if (ht::emu::enqueue_work(stream, [shared] { run_group(*shared); }) != cudaSuccess)
    return refuse(ncclUnhandledCudaError, "the stream could not take the call (a CUDA error)");
  for (cudaStream_t o : others) {
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventRecord(e, stream);
    cudaStreamWaitEvent(o, e, 0);
    cudaEventDestroy(e);
  }
  return ncclSuccess;
}

/// Checks what every call needs, then runs it now or adds it to the group.
ncclResult_t submit(ncclComm_t comm, Op op, std::size_t count, ncclDataType_t t) {
  if (!comm || !comm->s) return refuse(ncclInvalidArgument, std::string(op.name) + ": no communicator");
  if (type_bytes(t) == 0) return refuse(ncclInvalidArgument, std::string(op.name) + ": unknown datatype");
  if (const int e = comm->s->async_error.load(); e != ncclSuccess) return ncclResult_t(e);
  op.comm = comm->s;
  if (count == 0) return ncclSuccess;  // as NCCL: an empty call moves nothing and waits for no one
  if (t_group_depth > 0) {
    t_group.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(op));
  return launch(std::move(one));
}

bool valid_op(ncclRedOp_t op) { return op >= ncclSum && op <= ncclAvg; }

std::string hex_id(std::uint64_t a, std::uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/ht-emu-nccl-%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::uint64_t fnv1a(const std::string& s, std::uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

ncclResult_t init(ncclComm_t* out, int nranks, const std::string& id, int rank, const ncclConfig_t* config) {
  if (!out) return refuse(ncclInvalidArgument, "ncclCommInitRank: no place for the communicator");
  if (nranks < 1 || nranks > kMaxRanks)
    return refuse(ncclInvalidArgument, "ncclCommInitRank: " + std::to_string(nranks) + " ranks (the emulated NCCL "
                                           "takes 1 to " + std::to_string(kMaxRanks) + ")");
  if (rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  const int fd = shm_open(id.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) return refuse(ncclSystemError, "shm_open(" + id + "): " + std::strerror(errno));
  const std::size_t bytes = segment_bytes(nranks);
  if (ftruncate(fd, off_t(bytes)) != 0) {
    close(fd);
    return refuse(ncclSystemError, "ftruncate(" + id + "): " + std::strerror(errno));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return refuse(ncclSystemError, "mmap(" + id + "): " + std::strerror(errno));
  auto s = std::make_shared<CommState>();
  s->id = id;
  s->n = nranks;
  s->rank = rank;
  s->blocking = !config || config->blocking != 0;
  s->base = static_cast<char*>(base);
  s->h = reinterpret_cast<Header*>(base);
  s->h->pid[rank].store(getpid());
  s->h->joined.fetch_add(1, std::memory_order_acq_rel);
  *out = new ncclComm{s};
  if (s->blocking) return s->wait([&] { return s->all_joined(); }, "ncclCommInitRank");
  return s->all_joined() ? ncclSuccess : ncclInProgress;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::random_device rd;
  const std::uint64_t a = (std::uint64_t(rd()) << 32) | rd(), b = (std::uint64_t(rd()) << 32) | rd();
  std::memset(id->internal, 0, sizeof id->internal);
  const std::string name = hex_id(a, b);
  std::memcpy(id->internal, name.c_str(), name.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  id.internal[NCCL_UNIQUE_ID_BYTES - 1] = 0;
  if (std::strncmp(id.internal, "/ht-emu-nccl-", 13) != 0)
    return refuse(ncclInvalidArgument, "ncclCommInitRank: not an id of ncclGetUniqueId");
  return init(comm, nranks, id.internal, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!comm || !newcomm) return refuse(ncclInvalidArgument, "ncclCommSplit: no communicator");
  CommState& c = *comm->s;
  if (const int e = c.async_error.load(); e != ncclSuccess) return ncclResult_t(e);
  if (ncclResult_t r = c.wait([&] { return c.all_joined(); }, "ncclCommSplit"); r != ncclSuccess) return r;
  // Every rank's (colour, key), through a board of its own: the slots may be
  // in use by calls still on a stream.
  const std::uint64_t k = ++c.splits;
  c.h->split_color[c.rank].store(color);
  c.h->split_key[c.rank].store(key);
  if (ncclResult_t r = c.meet(c.h->split_arrive, k, "ncclCommSplit"); r != ncclSuccess) return r;
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of this colour
  for (int i = 0; i < c.n; ++i)
    if (c.h->split_color[i].load() == color) members.emplace_back(c.h->split_key[i].load(), i);
  if (ncclResult_t r = c.meet(c.h->split_leave, k, "ncclCommSplit"); r != ncclSuccess) return r;
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  std::sort(members.begin(), members.end());
  const int new_rank = int(std::find(members.begin(), members.end(), std::make_pair(key, c.rank)) - members.begin());
  const std::string seed = c.id + ":" + std::to_string(k) + ":" + std::to_string(color);
  return init(newcomm, int(members.size()), hex_id(fnv1a(seed, 0xcbf29ce484222325ULL), fnv1a(seed, 0x84222325cbf29ce4ULL)),
              new_rank, config);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommFinalize: no communicator");
  const int e = comm->s->async_error.load();
  return ncclResult_t(e);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  delete comm;  // its state lives on while calls on a stream still hold it
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  comm->s->aborted.store(true);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return ncclInvalidArgument;
  CommState& c = *comm->s;
  const int e = c.async_error.load();
  *async_error = e != ncclSuccess ? ncclResult_t(e) : c.all_joined() ? ncclSuccess : ncclInProgress;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->s->n;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->s->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  copy = t_last_error;
  if (comm && comm->s) {
    std::lock_guard lock(comm->s->m);
    if (!comm->s->last_error.empty()) copy = comm->s->last_error;
  }
  return copy.c_str();
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(t_group);
  t_group.clear();
  return launch(std::move(ops));
}

namespace {

/// All-reduce (root < 0: every rank gets the result) or reduce to `root`.
ncclResult_t reduce_call(const char* name, const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t t,
                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (!valid_op(op)) return refuse(ncclInvalidArgument, std::string(name) + ": unknown reduction");
  if (comm && root >= comm->s->n) return refuse(ncclInvalidArgument, std::string(name) + ": root out of range");
  if (count > 0 && (!sendbuff || !recvbuff)) return refuse(ncclInvalidArgument, std::string(name) + ": a null buffer");
  const std::size_t es = type_bytes(t);
  Op o;
  o.stream = stream;
  o.name = name;
  o.collective = [=](CommState& c) {
    return c.steps(
        count, kSlotBytes / es, name,
        [&](std::size_t at, std::size_t k, char* slot) {
          std::memcpy(slot, static_cast<const char*>(sendbuff) + at * es, k * es);
        },
        [&](std::size_t at, std::size_t k) {
          if (root >= 0 && c.rank != root) return;
          std::vector<const char*> parts;
          for (int i = 0; i < c.n; ++i) parts.push_back(c.slot(i));
          reduce(t, op, parts, static_cast<char*>(recvbuff) + at * es, k);
        });
  };
  return submit(comm, std::move(o), count, t);
}

}  // namespace

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return reduce_call("ncclAllReduce", sendbuff, recvbuff, count, t, op, -1, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (root < 0) return refuse(ncclInvalidArgument, "ncclReduce: root out of range");
  return reduce_call("ncclReduce", sendbuff, recvbuff, count, t, op, root, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!valid_op(op)) return refuse(ncclInvalidArgument, "ncclReduceScatter: unknown reduction");
  const std::size_t es = type_bytes(t);
  Op o;
  o.stream = stream;
  o.name = "ncclReduceScatter";
  o.collective = [=](CommState& c) {
    // Each step carries a piece of every rank's block: n pieces per slot.
    return c.steps(
        recvcount, kSlotBytes / es / std::size_t(c.n), "ncclReduceScatter",
        [&](std::size_t at, std::size_t k, char* slot) {
          for (int b = 0; b < c.n; ++b)
            std::memcpy(slot + std::size_t(b) * k * es,
                        static_cast<const char*>(sendbuff) + (std::size_t(b) * recvcount + at) * es, k * es);
        },
        [&](std::size_t at, std::size_t k) {
          std::vector<const char*> parts;
          for (int i = 0; i < c.n; ++i) parts.push_back(c.slot(i) + std::size_t(c.rank) * k * es);
          reduce(t, op, parts, static_cast<char*>(recvbuff) + at * es, k);
        });
  };
  return submit(comm, std::move(o), recvcount, t);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t es = type_bytes(t);
  Op o;
  o.stream = stream;
  o.name = "ncclAllGather";
  o.collective = [=](CommState& c) {
    return c.steps(
        sendcount, kSlotBytes / es, "ncclAllGather",
        [&](std::size_t at, std::size_t k, char* slot) {
          std::memcpy(slot, static_cast<const char*>(sendbuff) + at * es, k * es);
        },
        [&](std::size_t at, std::size_t k) {
          for (int i = 0; i < c.n; ++i)
            std::memcpy(static_cast<char*>(recvbuff) + (std::size_t(i) * sendcount + at) * es, c.slot(i), k * es);
        });
  };
  return submit(comm, std::move(o), sendcount, t);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (comm && (root < 0 || root >= comm->s->n)) return refuse(ncclInvalidArgument, "ncclBroadcast: root out of range");
  const std::size_t es = type_bytes(t);
  Op o;
  o.stream = stream;
  o.name = "ncclBroadcast";
  o.collective = [=](CommState& c) {
    return c.steps(
        count, kSlotBytes / es, "ncclBroadcast",
        [&](std::size_t at, std::size_t k, char* slot) {
          if (c.rank == root) std::memcpy(slot, static_cast<const char*>(sendbuff) + at * es, k * es);
        },
        [&](std::size_t at, std::size_t k) {
          std::memmove(static_cast<char*>(recvbuff) + at * es, c.slot(root), k * es);
        });
  };
  return submit(comm, std::move(o), count, t);
}

ncclResult_t ncclSend(const void* sendbuff, std::size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (comm && (peer < 0 || peer >= comm->s->n)) return refuse(ncclInvalidArgument, "ncclSend: peer out of range");
  if (count > 0 && !sendbuff) return refuse(ncclInvalidArgument, "ncclSend: a null buffer");
  Op o;
  o.stream = stream;
  o.name = "ncclSend";
  o.send = true;
  o.send_buf = static_cast<const char*>(sendbuff);
  o.bytes = count * type_bytes(t);
  o.peer = peer;
  return submit(comm, std::move(o), count, t);
}

ncclResult_t ncclRecv(void* recvbuff, std::size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (comm && (peer < 0 || peer >= comm->s->n)) return refuse(ncclInvalidArgument, "ncclRecv: peer out of range");
  if (count > 0 && !recvbuff) return refuse(ncclInvalidArgument, "ncclRecv: a null buffer");
  Op o;
  o.stream = stream;
  o.name = "ncclRecv";
  o.recv_buf = static_cast<char*>(recvbuff);
  o.bytes = count * type_bytes(t);
  o.peer = peer;
  return submit(comm, std::move(o), count, t);
}
