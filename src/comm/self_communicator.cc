// ht::comm::SelfCommunicator: collectives over a group of one.
#include "ht/comm/self_communicator.h"

namespace ht::comm {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  Device device() const override { return Device::cpu(); }

  WorkPtr all_reduce(const Tensor& in, Tensor& out, ReduceOp op) override {
    HT_CHECK_ARG(!(in.dtype() == DType::kI32 && op == ReduceOp::kAvg), "all_reduce: avg is not defined for i32");
    return copy("all_reduce", in, out);
  }
  WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) override { return copy("reduce_scatter", in, out); }
  WorkPtr all_gather(const Tensor& in, Tensor& out) override { return copy("all_gather", in, out); }
  WorkPtr broadcast(Tensor&, int root) override {
    check_peer("broadcast root", root);
    return done();
  }
  WorkPtr reduce(const Tensor& in, Tensor& out, ReduceOp, int root) override {
    check_peer("reduce root", root);
    return copy("reduce", in, out);
  }
  WorkPtr all_to_all(const Tensor& in, Tensor& out) override { return copy("all_to_all", in, out); }
  WorkPtr all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                       const std::vector<std::int64_t>& recv_counts) override {
    HT_CHECK_ARG(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0],
                 "all_to_all_v on group '{}' of one rank: one count each way, the same, not {} and {} entries",
                 name_, send_counts.size(), recv_counts.size());
    HT_CHECK_ARG(in.numel() == 0 || in.data_ptr() != out.data_ptr(), "all_to_all_v on group '{}': not in place",
                 name_);
    return copy("all_to_all_v", in, out);
  }
  WorkPtr send(const Tensor&, int peer) override { return no_peer("send", peer); }
  WorkPtr recv(Tensor&, int peer) override { return no_peer("recv", peer); }
  WorkPtr send_recv(const Tensor&, int dst, Tensor&, int) override { return no_peer("send_recv", dst); }
  WorkPtr barrier() override { return done(); }

  std::unique_ptr<Communicator> split(int color, int, const std::string& name) override {
    if (color < 0) return nullptr;
    return std::make_unique<SelfCommunicator>(name);
  }
  void finalize(std::chrono::milliseconds) override {}
  void abort() noexcept override {}

 private:
  static WorkPtr done() { return std::make_shared<DoneWork>(); }

  WorkPtr copy(const char* op, const Tensor& in, Tensor& out) {
    HT_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype(), ErrorKind::kShapeMismatch,
             "{} on group '{}' of one rank: in {} {} and out {} {} must match", op, name_, shape_str(in.shape()),
             dtype_name(in.dtype()), shape_str(out.shape()), dtype_name(out.dtype()));
    if (in.numel() > 0 && in.data_ptr() != out.data_ptr()) out.copy_from(in.view(out.shape()));
    return done();
  }
  void check_peer(const char* what, int peer) const {
    HT_CHECK_ARG(peer == 0, "{} {} outside group '{}' of one rank", what, peer, name_);
  }
  WorkPtr no_peer(const char* op, int peer) {
    HT_CHECK(false, ErrorKind::kInvalidArgument, "{} to/from rank {}: group '{}' has one rank and no peer", op, peer,
             name_);
    return done();
  }

  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace ht::comm
