// The routing communicator: each call to the plane that moves its tensors.
#include "ht/comm/routing_communicator.h"

#include <fmt/format.h>

#include <initializer_list>

#include "ht/core/error.h"

namespace ht::comm {
namespace {

class RoutingCommunicator final : public Communicator {
 public:
  RoutingCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<Communicator> device)
      : host_(std::move(host)), device_(std::move(device)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  bool debug() const override { return host_->debug() || device_->debug(); }
  Device device() const override { return device_->device(); }

  WorkPtr all_reduce(const Tensor& in, Tensor& out, ReduceOp op) override {
    return plane("all_reduce", {&in, &out}).all_reduce(in, out, op);
  }
  WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    return plane("reduce_scatter", {&in, &out}).reduce_scatter(in, out, op);
  }
  WorkPtr all_gather(const Tensor& in, Tensor& out) override {
    return plane("all_gather", {&in, &out}).all_gather(in, out);
  }
  WorkPtr broadcast(Tensor& t, int root) override { return plane("broadcast", {&t}).broadcast(t, root); }
  WorkPtr reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) override {
    return plane("reduce", {&in, &out}).reduce(in, out, op, root);
  }
  WorkPtr all_to_all(const Tensor& in, Tensor& out) override {
    return plane("all_to_all", {&in, &out}).all_to_all(in, out);
  }
  WorkPtr all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                       const std::vector<std::int64_t>& recv_counts) override {
    return plane("all_to_all_v", {&in, &out}).all_to_all_v(in, send_counts, out, recv_counts);
  }
  WorkPtr send(const Tensor& t, int peer) override { return plane("send", {&t}).send(t, peer); }
  WorkPtr recv(Tensor& t, int peer) override { return plane("recv", {&t}).recv(t, peer); }
  WorkPtr send_recv(const Tensor& send, int dst, Tensor& recv, int src) override {
    return plane("send_recv", {&send, &recv}).send_recv(send, dst, recv, src);
  }
  WorkPtr barrier() override { return host_->barrier(); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    auto host = host_->split(color, key, name);
    auto device = device_->split(color, key, name);
    if (!host || !device) return nullptr;  // a negative colour: no group on either plane
    return std::make_unique<RoutingCommunicator>(std::move(host), std::move(device));
  }

  void finalize(std::chrono::milliseconds timeout) override {
    device_->finalize(timeout);
    host_->finalize(timeout);
  }
  void abort() noexcept override {
    device_->abort();
    host_->abort();
  }
  double own_threads_cpu_ms() const override {
    return host_->own_threads_cpu_ms() + device_->own_threads_cpu_ms();
  }

 private:
  // The plane of a call's tensors; undefined ones (reduce's output off the
  // root) have no say.
  Communicator& plane(const char* op, std::initializer_list<const Tensor*> tensors) {
    const Tensor* first = nullptr;
    for (const Tensor* t : tensors) {
      if (!t->defined()) continue;
      if (!first) {
        first = t;
        continue;
      }
      HT_CHECK(t->device().is_cuda() == first->device().is_cuda(), ErrorKind::kDeviceMismatch,
               "{} on group '{}': one tensor is on {} and another on {}; a call moves host tensors (over {}'s "
               "host plane) or device tensors (over its device plane), not both",
               op, name(), first->device().str(), t->device().str(), name());
    }
    return first && first->device().is_cuda() ? *device_ : *host_;
  }

  std::unique_ptr<Communicator> host_, device_;
};

}  // namespace

std::unique_ptr<Communicator> make_routing_communicator(std::unique_ptr<Communicator> host,
                                                        std::unique_ptr<Communicator> device) {
  HT_CHECK_ARG(host && device, "make_routing_communicator needs a host and a device communicator");
  HT_CHECK_ARG(host->size() == device->size() && host->rank() == device->rank(),
               "the host plane '{}' (rank {} of {}) and the device plane '{}' (rank {} of {}) of a routing "
               "communicator must span the same ranks in the same order",
               host->name(), host->rank(), host->size(), device->name(), device->rank(), device->size());
  return std::make_unique<RoutingCommunicator>(std::move(host), std::move(device));
}

}  // namespace ht::comm
