// Names for the Communicator vocabulary, shared by every backend.
#include "ht/comm/communicator.h"

namespace ht::comm {

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
