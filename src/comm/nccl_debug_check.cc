// HT_COMM_DEBUG for NCCL: before each collective, every rank all-gathers a
// fixed-size signature of the call it is about to make, and all of them throw
// if the signatures differ.
#include <cstring>
#include <iterator>
#include <string>

#include "comm/nccl_state.h"

namespace ht::comm {

using detail::Clock;
using detail::kSignatureWords;
using detail::PendingOp;

namespace {

// Operation codes of the debug-mode signature (the order is part of no
// format: all ranks run the same build).
constexpr const char* kOpNames[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                    "reduce",     "all_to_all",     "barrier",    "send",
                                    "recv",       "send_recv",      "split",      "all_to_all_v"};

int op_code(const char* op) {
  for (int i = 0; i < int(std::size(kOpNames)); ++i)
    if (std::strcmp(kOpNames[i], op) == 0) return i;
  return -1;
}

const char* op_from_code(int code) { return code >= 0 && code < int(std::size(kOpNames)) ? kOpNames[code] : "?"; }

}  // namespace

void NcclCommunicator::Impl::debug_check(PendingOp& op) {
  // Every rank all-gathers a fixed-size signature of the call it is about to
  // make. The exchange has the same shape whatever the call, so a mismatch
  // is reported on every rank instead of hanging or corrupting memory.
  std::int32_t* host = debug_host_.data<std::int32_t>();
  std::int32_t* dev = debug_dev_.data<std::int32_t>();
  std::int32_t* mine = host + std::int64_t(size) * kSignatureWords;
  const auto count = std::uint64_t(op.info.count);
  // A root is the same on every rank; a split's colour is not.
  const int root = std::strcmp(op.info.peer_name, "root") == 0 ? op.info.peer : -1;
  ++collective_seq_;  // counts collectives only: point-to-point calls differ between ranks
  const std::int32_t signature[kSignatureWords] = {op_code(op.info.op),
                                                   int(op.info.dtype),
                                                   std::int32_t(count & 0x7fffffffu),
                                                   std::int32_t(count >> 31),
                                                   root,
                                                   op.info.reduce_op,
                                                   std::int32_t(collective_seq_ & 0x7fffffffu),
                                                   0};
  std::memcpy(mine, signature, sizeof signature);
  std::int32_t* slot = dev + std::int64_t(rank) * kSignatureWords;
  const cudaStream_t s = stream_.get();
  HT_CUDA_CHECK(cudaMemcpyAsync(slot, mine, sizeof signature, cudaMemcpyHostToDevice, s));
  nccl(op, "ncclAllGather (HT_COMM_DEBUG signature)",
       [&](ncclComm_t c) { return ncclAllGather(slot, dev, kSignatureWords, ncclInt32, c, s); });
  HT_CUDA_CHECK(cudaMemcpyAsync(host, dev, std::size_t(size) * sizeof signature, cudaMemcpyDeviceToHost, s));
  HT_CUDA_CHECK(cudaEventRecord(debug_done_.get(), s));

  detail::Backoff backoff;
  for (;;) {
    const cudaError_t q = cudaEventQuery(debug_done_.get());
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) fail_cuda(q, op);
    const ncclResult_t state = async_state();
    if (state != ncclSuccess && state != ncclInProgress) fail_nccl(state, "the HT_COMM_DEBUG signature exchange", &op);
    if (Clock::now() > op.deadline)
      fail_timeout(&op, fmt::format("did not get past the HT_COMM_DEBUG signature exchange within {} ms",
                                    options.timeout.count()));
    backoff.pause();
  }

  bool same = true;
  for (int r = 0; r < size && same; ++r)
    same = std::memcmp(host + std::int64_t(r) * kSignatureWords, host, sizeof signature) == 0;
  if (same) return;

  std::string calls;
  for (int r = 0; r < size; ++r) {
    const std::int32_t* w = host + std::int64_t(r) * kSignatureWords;
    const std::int64_t n = std::int64_t(w[2]) | (std::int64_t(w[3]) << 31);
    const bool known_dtype = w[1] >= 0 && w[1] <= int(DType::kI32);
    calls += fmt::format("{}rank {}: collective #{} {}({} x {}{}{})", r ? "; " : "", r, w[6], op_from_code(w[0]), n,
                         known_dtype ? dtype_name(DType(w[1])) : "?", w[4] >= 0 ? fmt::format(", root {}", w[4]) : "",
                         w[5] >= 0 ? fmt::format(", {}", reduce_op_name(ReduceOp(w[5]))) : "");
  }
  const std::string message = fmt::format(
      "HT_COMM_DEBUG: the ranks of NCCL group '{}' disagree on the collective they call ({}). Every "
      "rank of a group must make the same collective calls, with the same counts and dtypes, in the "
      "same order; the communicator is aborted",
      name, calls);
  FlightRecorder::global().update(op.flight_id, OpState::kFailed);
  abort_now(message, true);
  throw CommError(ErrorKind::kComm, message);
}

}  // namespace ht::comm
