// The emulated device's execution model (see ht_emu/device.h): a grid's
// blocks spread over a pool of host threads, one block at a time per host
// thread, each CUDA thread of a block a fiber there.
#include <signal.h>
#include <sys/mman.h>

#include <boost/context/fiber.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "internal.h"

namespace ctx = boost::context;

namespace ht::emu {

thread_local Thread* detail::current = nullptr;

void detail::outside_kernel(const char* what) {
  std::fprintf(stderr, "ht-emu: %s used outside a kernel\n", what);
  std::abort();
}

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::size_t(std::strtoull(v, nullptr, 10)) : fallback;
}

std::string dim(const dim3& d) { return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")"; }
std::string dim(const uint3& d) { return dim(dim3(d)); }

// Fiber stacks --------------------------------------------------------------

/// Each CUDA thread's stack, HT_EMU_STACK_KIB (64) with a guard page below,
/// reused from block to block on the host thread that made it.
struct StackPool {
  std::size_t size = env_size("HT_EMU_STACK_KIB", 64) * 1024;
  std::vector<void*> free;  // the top of each (stacks grow down)
  ~StackPool() {
    for (void* top : free) munmap(static_cast<char*>(top) - size - 4096, size + 4096);
  }
};
thread_local StackPool t_stacks;

struct StackAllocator {
  ctx::stack_context allocate() {
    StackPool& pool = t_stacks;
    ctx::stack_context sc;
    sc.size = pool.size;
    if (!pool.free.empty()) {
      sc.sp = pool.free.back();
      pool.free.pop_back();
      return sc;
    }
    void* base = mmap(nullptr, pool.size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    mprotect(base, 4096, PROT_NONE);
    sc.sp = static_cast<char*>(base) + 4096 + pool.size;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { t_stacks.free.push_back(sc.sp); }
};

/// A host thread that runs kernels needs a signal stack of its own: a fault
/// in a fiber may be its stack's overflow.
void ensure_signal_stack() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  stack_t ss{};
  ss.ss_size = 64 * 1024;
  ss.ss_sp = std::malloc(ss.ss_size);  // lives as long as the thread (leaked with it)
  if (ss.ss_sp) sigaltstack(&ss, nullptr);
}

// One kernel launch, as its blocks see it ------------------------------------

struct Grid {
  LaunchConfig config;
  std::function<void()> body;
  std::uint64_t seed = 0;  // 0: threads in index order; else by priorities drawn from it
  std::uint64_t blocks = 0;
  std::atomic<std::uint64_t> next{0}, finished{0};
  std::atomic<bool> failed{false};
  std::mutex m;
  std::condition_variable cv;
  std::string error;  // the first block's failure
  int helpers = 0;     // pool threads working on it (under the pool's lock)
};

/// A fiber that runs the block's threads that have not started, one after
/// another, until one of them waits: then the scheduler starts another. A
/// kernel without barriers or warp operations runs its block on one fiber,
/// at the cost of function calls; one that synchronises gets a fiber per
/// thread waiting.
struct Fiber {
  ctx::fiber self;  // empty once it has run out of threads
  ctx::fiber back;  // the scheduler's, while it runs
};

/// One CUDA thread: where it runs and what it waits for.
struct Lane : Thread {
  enum class State : std::uint8_t { kUnstarted, kRunnable, kBarrier, kWarp, kDone };
  State state = State::kUnstarted;
  int rank = 0;             // its index in the block
  Fiber* fiber = nullptr;   // once started
  // Its part of a warp operation.
  std::uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
};

struct Warp {
  unsigned arrived = 0;  // lanes that reached the operation under way
  unsigned mask = 0;
  WarpOp op = WarpOp::kSync;
  int first = -1;  // the lane that started it
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kSync: return "__syncwarp";
    case WarpOp::kBallot: return "__ballot_sync/__any_sync/__all_sync";
    case WarpOp::kIndex: return "__shfl_sync";
    case WarpOp::kXor: return "__shfl_xor_sync";
    case WarpOp::kDown: return "__shfl_down_sync";
    case WarpOp::kUp: return "__shfl_up_sync";
  }
  return "a warp operation";
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

class BlockRun {
 public:
  BlockRun(Grid& grid, std::uint64_t linear) : grid_(grid) {
    const LaunchConfig& c = grid.config;
    block_.grid_dim = dim3(c.grid[0], c.grid[1], c.grid[2]);
    block_.block_dim = dim3(c.block[0], c.block[1], c.block[2]);
    block_.block_idx = uint3{unsigned(linear % c.grid[0]), unsigned(linear / c.grid[0] % c.grid[1]),
                             unsigned(linear / (std::uint64_t(c.grid[0]) * c.grid[1]))};
    linear_ = linear;
    thread_local std::vector<unsigned char> shared;
    if (c.dynamic_shared_bytes > 0) {
      shared.assign(c.dynamic_shared_bytes + 256, 0xFF);  // the fresh-memory pattern, as device memory
      block_.dynamic_shared = shared.data() + (256 - reinterpret_cast<std::uintptr_t>(shared.data()) % 256) % 256;
    }
    const int n = int(c.block[0] * c.block[1] * c.block[2]);
    lanes_.resize(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      Lane& l = lanes_[std::size_t(r)];
      l.rank = r;
      l.block = &block_;
      l.thread_idx = uint3{unsigned(r % int(c.block[0])), unsigned(r / int(c.block[0]) % int(c.block[1])),
                           unsigned(r / int(c.block[0] * c.block[1]))};
    }
    warps_.resize(std::size_t((n + 31) / 32));
  }

  /// Runs every thread of the block to its end; false (with error()) on a failure.
  bool run() {
    BlockRun* const outer = t_block;
    t_block = this;
    start_order_.resize(lanes_.size());
    std::iota(start_order_.begin(), start_order_.end(), 0);
    if (grid_.seed != 0) {
      std::mt19937_64 rng(grid_.seed * 0x9E3779B97F4A7C15ULL + linear_);
      draw_priorities(rng);
      run_by_priority();
    } else {
      run_in_order();
    }
    t_block = outer;
    return error_.empty();
  }

  const std::string& error() const { return error_; }

  void sync_block() {
    Lane& l = lane();
    l.state = Lane::State::kBarrier;
    ++at_barrier_;
    yield(l);
  }

  std::uint64_t warp_collective(unsigned mask, std::uint64_t value, WarpOp op, int arg, int width) {
    Lane& l = lane();
    const int id = l.rank % 32;
    Warp& w = warps_[std::size_t(l.rank / 32)];
    const int lanes_in_warp = std::min(32, int(lanes_.size()) - l.rank / 32 * 32);
    const unsigned existing = lanes_in_warp == 32 ? ~0u : (1u << lanes_in_warp) - 1;
    if ((mask & (1u << id)) == 0)
      fail(l, std::string(op_name(op)) + " with mask " + hex(mask) + ", which leaves out the calling lane " +
                  std::to_string(id));
    else if ((mask & ~existing) != 0)
      fail(l, std::string(op_name(op)) + " with mask " + hex(mask) + " names lanes the warp does not have (it has " +
                  std::to_string(lanes_in_warp) + ")");
    else if (width < 1 || width > 32 || (width & (width - 1)) != 0)
      fail(l, std::string(op_name(op)) + " with width " + std::to_string(width) + " (a power of 2 up to 32)");
    else if (w.arrived != 0 && (w.mask != mask || w.op != op))
      fail(l, std::string(op_name(op)) + " with mask " + hex(mask) + " while lane " + std::to_string(w.first) +
                  " of the warp waits in " + op_name(w.op) + " with mask " + hex(w.mask));
    stop_if_failed(l);
    if (w.arrived == 0) {
      w.mask = mask;
      w.op = op;
      w.first = id;
    }
    l.value = value;
    l.arg = arg;
    l.width = width;
    w.arrived |= 1u << id;
    if (w.arrived == mask) {
      complete(w, l.rank / 32 * 32);
      stop_if_failed(l);  // a bad shuffle fails the block: its lanes go no further
    } else {
      l.state = Lane::State::kWarp;
      yield(l);
    }
    return l.result;
  }

  unsigned active_mask() {
    Lane& l = lane();
    const int first = l.rank / 32 * 32;
    unsigned m = 0;
    for (int i = 0; i < 32 && first + i < int(lanes_.size()); ++i)
      if (lanes_[std::size_t(first + i)].state != Lane::State::kDone) m |= 1u << i;
    return m;
  }

  std::string where(const Lane& l) const {
    return "kernel " + std::string(grid_.config.kernel) + ", block " + dim(block_.block_idx) + " of " +
           dim(block_.grid_dim) + ", thread " + dim(l.thread_idx) + " of " + dim(block_.block_dim);
  }

  static thread_local BlockRun* t_block;

 private:
  Lane& lane() { return static_cast<Lane&>(*detail::current); }

  // Threads start in index order, and each round resumes every runnable
  // thread once, lowest index first.
  void run_in_order() {
    const int n = int(lanes_.size());
    while (done_ < n && error_.empty()) {
      bool ran = false;
      for (Lane& l : lanes_) {
        if (l.state != Lane::State::kRunnable) continue;
        resume(*l.fiber);
        ran = true;
        if (!error_.empty()) break;
      }
      if (!ran && error_.empty() && next_start_ < n) {
        start_fiber();
        ran = true;
      }
      if (!ran && error_.empty()) all_waiting();
    }
  }

  // A random priority for each warp, and for each lane within its warp;
  // threads start in priority order.
  void draw_priorities(std::mt19937_64& rng) {
    const std::size_t n = lanes_.size();
    std::vector<std::uint32_t> warp_rank(warps_.size()), lane_rank(32);
    std::iota(warp_rank.begin(), warp_rank.end(), 0u);
    std::shuffle(warp_rank.begin(), warp_rank.end(), rng);
    std::iota(lane_rank.begin(), lane_rank.end(), 0u);
    std::shuffle(lane_rank.begin(), lane_rank.end(), rng);
    priority_.resize(n);
    for (std::size_t r = 0; r < n; ++r) priority_[r] = warp_rank[r / 32] * 32 + lane_rank[r % 32];
    std::sort(start_order_.begin(), start_order_.end(),
              [&](int a, int b) { return priority_[std::size_t(a)] > priority_[std::size_t(b)]; });
  }

  // Each step runs the thread of highest priority that can run (or starts
  // the next one, if its priority is higher): a warp runs ahead through
  // several barrier-free stretches, warp operations included, before a
  // lower one runs its first. That is what exposes a missing barrier
  // between two uses of shared memory, which an order that lets every
  // thread take one stretch in turn would hide.
  void run_by_priority() {
    const int n = int(lanes_.size());
    while (done_ < n && error_.empty()) {
      const bool can_start = next_start_ < n;
      if (ready_.empty() && !can_start) {
        all_waiting();
        continue;
      }
      const std::uint32_t next_priority =
          can_start ? priority_[std::size_t(start_order_[std::size_t(next_start_)])] : 0;
      if (ready_.empty() || (can_start && next_priority > ready_.top().first)) {
        start_fiber();
        continue;
      }
      Lane& l = lanes_[std::size_t(ready_.top().second)];
      ready_.pop();
      resume(*l.fiber);
    }
  }

  // No thread can run: a barrier every thread reached opens, else the block is stuck.
  void all_waiting() {
    if (at_barrier_ != int(lanes_.size())) return diagnose_stall();
    at_barrier_ = 0;
    for (Lane& l : lanes_) mark_runnable(l);
  }

  void mark_runnable(Lane& l) {
    l.state = Lane::State::kRunnable;
    if (grid_.seed != 0) ready_.emplace(priority_[std::size_t(l.rank)], l.rank);
  }

  // A fiber that takes the threads not yet started, in start order.
  void start_fiber() {
    fibers_.emplace_back();
    Fiber* f = &fibers_.back();
    f->self = ctx::fiber(std::allocator_arg, StackAllocator{}, [this, f](ctx::fiber&& back) {
      f->back = std::move(back);
      while (next_start_ < int(lanes_.size()) && error_.empty()) {
        Lane& l = lanes_[std::size_t(start_order_[std::size_t(next_start_++)])];
        l.fiber = f;
        l.state = Lane::State::kRunnable;
        detail::current = &l;
        try {
          grid_.body();
        } catch (const ctx::detail::forced_unwind&) {
          throw;
        } catch (const std::exception& e) {
          fail(l, std::string("threw ") + e.what());
        }
        detail::current = nullptr;
        l.state = Lane::State::kDone;
        ++done_;
      }
      return std::move(f->back);
    });
    resume(*f);
  }

  void resume(Fiber& f) {
    f.self = std::move(f.self).resume();
    detail::current = nullptr;
  }

  // The calling thread waits: back to the scheduler until it is runnable.
  void yield(Lane& l) {
    detail::current = nullptr;
    l.fiber->back = std::move(l.fiber->back).resume();
    detail::current = &l;
  }

  void fail(const Lane& l, const std::string& what) {
    if (error_.empty()) error_ = where(l) + ": " + what;
  }

  // After a failure the calling thread never runs again: the scheduler stops
  // and the block's fibers are unwound.
  void stop_if_failed(Lane& l) {
    if (error_.empty()) return;
    l.state = Lane::State::kDone;
    yield(l);
  }

  // The lanes of warp `w` (lanes first..first+31) all reached the operation.
  void complete(Warp& w, int first) {
    std::uint64_t ballot = 0;
    if (w.op == WarpOp::kBallot)
      for (int j = 0; j < 32; ++j)
        if ((w.mask & (1u << j)) && lanes_[std::size_t(first + j)].value != 0) ballot |= 1u << j;
    for (int i = 0; i < 32; ++i) {
      if ((w.mask & (1u << i)) == 0) continue;
      Lane& l = lanes_[std::size_t(first + i)];
      const int seg = i / l.width * l.width;
      int src = i;
      switch (w.op) {
        case WarpOp::kSync: break;
        case WarpOp::kBallot: break;
        case WarpOp::kIndex: src = seg + ((l.arg % l.width) + l.width) % l.width; break;
        case WarpOp::kXor: src = (i ^ l.arg) < seg + l.width ? (i ^ l.arg) : i; break;
        case WarpOp::kDown: src = i + l.arg < seg + l.width ? i + l.arg : i; break;
        case WarpOp::kUp: src = i - l.arg >= seg ? i - l.arg : i; break;
      }
      if (w.op == WarpOp::kBallot) {
        l.result = ballot;
      } else if (src < 0 || src >= 32 || (w.mask & (1u << src)) == 0) {
        fail(l, std::string(op_name(w.op)) + " reads lane " + std::to_string(src) + ", which is not in the mask " +
                    hex(w.mask));
        l.result = 0;
      } else {
        l.result = lanes_[std::size_t(first + src)].value;
      }
      if (l.state == Lane::State::kWarp) mark_runnable(l);
    }
    w.arrived = 0;
  }

  // No thread can run: say which wait cannot end.
  void diagnose_stall() {
    for (std::size_t wi = 0; wi < warps_.size(); ++wi) {
      const Warp& w = warps_[wi];
      if (w.arrived == 0) continue;
      const unsigned missing = w.mask & ~w.arrived;
      for (int i = 0; i < 32; ++i) {
        if ((missing & (1u << i)) == 0) continue;
        const Lane& m = lanes_[wi * 32 + std::size_t(i)];
        const Lane& waiter = lanes_[wi * 32 + std::size_t(w.first)];
        fail(waiter, std::string("deadlock: waits in ") + op_name(w.op) + " (mask " + hex(w.mask) + ") for lane " +
                         std::to_string(i) + ", which " +
                         (m.state == Lane::State::kDone ? "has exited" : "waits at __syncthreads()"));
        return;
      }
    }
    for (const Lane& l : lanes_)
      if (l.state == Lane::State::kDone && at_barrier_ > 0) {
        const Lane* waiter = nullptr;
        for (const Lane& o : lanes_)
          if (o.state == Lane::State::kBarrier) waiter = waiter ? waiter : &o;
        fail(*waiter, "__syncthreads() reached by " + std::to_string(at_barrier_) + " of " +
                          std::to_string(lanes_.size()) + " threads: thread " + dim(l.thread_idx) +
                          " exited without reaching it");
        return;
      }
    fail(lanes_[0], "deadlock: no thread of the block can go on");
  }

  Grid& grid_;
  Block block_;
  std::uint64_t linear_ = 0;
  std::vector<Lane> lanes_;
  std::vector<Warp> warps_;
  std::deque<Fiber> fibers_;     // stable addresses; destroyed (unwound) with the block
  std::vector<int> start_order_;
  // Seeded order: each thread's priority, and the waiting threads that can run again, highest first.
  std::vector<std::uint32_t> priority_;
  std::priority_queue<std::pair<std::uint32_t, int>> ready_;
  int next_start_ = 0;
  int at_barrier_ = 0, done_ = 0;
  std::string error_;
};

thread_local BlockRun* BlockRun::t_block = nullptr;

BlockRun& running_block(const char* what) {
  if (!BlockRun::t_block || !detail::current) detail::outside_kernel(what);
  return *BlockRun::t_block;
}

// Running a grid ------------------------------------------------------------

/// Runs blocks of a grid until none is left.
void work_on(Grid& g) {
  ensure_signal_stack();
  for (;;) {
    const std::uint64_t b = g.next.fetch_add(1);
    if (b >= g.blocks) return;
    if (!g.failed.load()) {
      BlockRun block(g, b);
      if (!block.run()) {
        std::lock_guard lock(g.m);
        if (!g.failed.exchange(true)) g.error = block.error();
      }
    }
    if (g.finished.fetch_add(1) + 1 == g.blocks) {
      std::lock_guard lock(g.m);
      g.cv.notify_all();
    }
  }
}

/// Host threads that help the stream threads run blocks: HT_EMU_THREADS
/// (default: the machine's cores) counting the stream's own.
class WorkerPool {
 public:
  WorkerPool() {
    const std::size_t n = std::max<std::size_t>(env_size("HT_EMU_THREADS", std::thread::hardware_concurrency()), 1);
    for (std::size_t i = 1; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }

  void run(Grid& g) {
    {
      std::lock_guard lock(m_);
      jobs_.push_back(&g);
    }
    cv_.notify_all();
    work_on(g);
    {
      std::unique_lock lock(g.m);
      g.cv.wait(lock, [&] { return g.finished.load() == g.blocks; });
    }
    // No helper may still hold the grid when it goes: each counts itself in
    // and out under the pool's lock.
    std::unique_lock lock(m_);
    jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &g));
    cv_.wait(lock, [&] { return g.helpers == 0; });
  }

 private:
  void loop() {
    std::unique_lock lock(m_);
    for (;;) {
      // `next` moves without the lock: look once, and wait if nothing was left.
      Grid* g = nullptr;
      cv_.wait(lock, [&] {
        auto it = std::find_if(jobs_.begin(), jobs_.end(), [](Grid* j) { return j->next.load() < j->blocks; });
        g = it == jobs_.end() ? nullptr : *it;
        return g != nullptr;
      });
      ++g->helpers;
      lock.unlock();
      work_on(*g);
      lock.lock();
      if (--g->helpers == 0) cv_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Grid*> jobs_;
  std::vector<std::thread> threads_;  // detached at exit with the process
};

WorkerPool& pool() {
  static auto* p = new WorkerPool;  // never destroyed: its threads live until the process ends
  return *p;
}

std::atomic<std::uint64_t> g_seed{env_size("HT_EMU_SCHEDULE_SEED", 0)};

}  // namespace

void set_schedule_seed(std::uint64_t seed) { g_seed.store(seed); }

// The built-ins -------------------------------------------------------------

void sync_block() { running_block("__syncthreads").sync_block(); }

std::uint64_t warp_collective(unsigned mask, std::uint64_t value, WarpOp op, int arg, int width) {
  return running_block("a warp operation").warp_collective(mask, value, op, arg, width);
}

unsigned active_mask() { return running_block("__activemask").active_mask(); }

std::string running_kernel_description() {
  if (!BlockRun::t_block || !detail::current) return "";
  return BlockRun::t_block->where(static_cast<const Lane&>(*detail::current));
}

// Launches ------------------------------------------------------------------

LaunchConfig make_config(const char* name, const void* function, dim3 grid, dim3 block, std::size_t smem,
                         CUstream_st* stream) {
  LaunchConfig c;
  c.kernel = name;
  c.function = function;
  c.grid[0] = grid.x, c.grid[1] = grid.y, c.grid[2] = grid.z;
  c.block[0] = block.x, c.block[1] = block.y, c.block[2] = block.z;
  c.dynamic_shared_bytes = smem;
  c.stream = stream;
  return c;
}

namespace {

// What the runtime refuses at launch, or "".
std::string config_problem(const LaunchConfig& c) {
  const std::uint64_t threads = std::uint64_t(c.block[0]) * c.block[1] * c.block[2];
  if (threads == 0 || c.grid[0] == 0 || c.grid[1] == 0 || c.grid[2] == 0) return "an empty grid or block";
  if (threads > 1024) return std::to_string(threads) + " threads per block (at most 1024)";
  if (c.block[2] > 64) return "block z " + std::to_string(c.block[2]) + " (at most 64)";
  if (c.grid[0] > 0x7fffffffu || c.grid[1] > 65535 || c.grid[2] > 65535) return "a grid past 2^31-1 x 65535 x 65535";
  const std::size_t limit = max_dynamic_shared(c.function);
  if (c.dynamic_shared_bytes > limit)
    return std::to_string(c.dynamic_shared_bytes) + " bytes of dynamic shared memory (the kernel's limit is " +
           std::to_string(limit) + "; cudaFuncSetAttribute raises it)";
  return "";
}

}  // namespace

cudaError_t launch_kernel(const LaunchConfig& config, std::function<void()> body) {
  CUstream_st* stream = resolve(config.stream);
  if (!stream) return set_last_error(cudaErrorInvalidResourceHandle);
  if (const std::string problem = config_problem(config); !problem.empty()) {
    std::fprintf(stderr, "ht-emu: launch of %s refused: %s\n", config.kernel, problem.c_str());
    return set_last_error(cudaErrorInvalidConfiguration);
  }
  if (sticky_error() != cudaSuccess) return result(cudaSuccess);
  auto grid = std::make_shared<Grid>();
  grid->config = config;
  grid->body = std::move(body);
  grid->seed = g_seed.load();
  grid->blocks = std::uint64_t(config.grid[0]) * config.grid[1] * config.grid[2];
  enqueue(stream, [grid] {
    if (sticky_error() != cudaSuccess) return;  // the device has failed: nothing more runs
    pool().run(*grid);
    if (grid->failed.load()) fail_device(cudaErrorLaunchFailure, grid->error);
  });
  return cudaSuccess;
}

}  // namespace ht::emu

void __nanosleep(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }
