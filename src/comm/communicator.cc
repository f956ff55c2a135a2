// Names for the Communicator vocabulary, and the process's blocked-wait
// clock, shared by every backend.
#include "ht/comm/communicator.h"

#include <atomic>

#include "ht/comm/work.h"

namespace ht::comm {
namespace {
std::atomic<std::int64_t> g_blocked_wait_ns{0};
}  // namespace

std::int64_t blocked_wait_ns() { return g_blocked_wait_ns.load(std::memory_order_relaxed); }

void detail::add_blocked_wait(std::chrono::steady_clock::duration blocked) {
  g_blocked_wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(blocked).count(),
                              std::memory_order_relaxed);
}

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

}  // namespace ht::comm
