// MPI handle owners and type mapping.
#include "comm/mpi_handles.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "core/mpi_check.h"

namespace ht::comm::detail {
namespace {
std::atomic<long> g_abandoned{0};
}

void add_abandoned_mpi_operations(long n) noexcept { g_abandoned.fetch_add(n); }
long abandoned_mpi_operations() noexcept { return g_abandoned.load(); }

RequestSet::~RequestSet() {
  if (const long n = active_count(); n > 0) add_abandoned_mpi_operations(n);
}

MPI_Request* RequestSet::add() {
  requests_.push_back(MPI_REQUEST_NULL);
  return &requests_.back();
}

void RequestSet::clear() {
  HT_CHECK(!active(), ErrorKind::kInternal, "RequestSet::clear() with {} requests still active", active_count());
  requests_.clear();
  statuses_.clear();
}

void RequestSet::cancel() noexcept {
  for (MPI_Request& r : requests_)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
}

bool RequestSet::test() {
  if (requests_.empty()) return true;
  statuses_.resize(requests_.size());
  int done = 0;
  HT_MPI_CHECK(MPI_Testall(int(requests_.size()), requests_.data(), &done, statuses_.data()));
  return done != 0;
}

long RequestSet::active_count() const {
  long n = 0;
  for (MPI_Request r : requests_)
    if (r != MPI_REQUEST_NULL) ++n;
  return n;
}

MPI_Datatype wire_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    case DType::kF16:
    case DType::kBF16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

bool idup_until(MPI_Comm parent, MPI_Comm* out, std::chrono::steady_clock::time_point deadline) {
  // MPI writes the new handle when the request completes, so its target must
  // outlive an abandoned request: a heap cell, leaked on a missed deadline.
  auto target = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request req = MPI_REQUEST_NULL;
  HT_MPI_CHECK(MPI_Comm_idup(parent, target.get(), &req));
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    int done = 0;
    HT_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      add_abandoned_mpi_operations(1);
      (void)target.release();
      *out = MPI_COMM_NULL;
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
  *out = *target;
  HT_MPI_CHECK(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
  return true;
}

}  // namespace ht::comm::detail
