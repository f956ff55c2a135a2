// DeviceMesh: the per-axis communicators of a pp x dp x tp mesh, split from
// the world by MeshShape's arithmetic.
#include "ht/comm/device_mesh.h"

#include <fmt/format.h>

#include "ht/core/error.h"

namespace ht::comm {
namespace {

// The shape for `world`, or a kConfig error that says it was the mesh that
// could not be built (MeshShape's message names the sizes and the choices).
MeshShape checked_shape(const Communicator* world, int tp, int pp, int cp) {
  HT_CHECK(world != nullptr, ErrorKind::kInvalidArgument, "DeviceMesh needs a world communicator, got null");
  try {
    return MeshShape(world->size(), tp, pp, cp);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("cannot build the device mesh (tp={}, pp={}{}) over '{}' of {} ranks: {}", tp,
                                      pp, cp > 1 ? fmt::format(", cp={}", cp) : "", world->name(), world->size(),
                                      e.message()));
  }
}

}  // namespace

DeviceMesh::DeviceMesh(std::unique_ptr<Communicator> world, int tp, int pp, int cp, int ep)
    : world_(std::move(world)),
      shape_(checked_shape(world_.get(), tp, pp, cp)),
      coord_(shape_.coord(world_->rank())),
      ep_size_(ep) {
  HT_CHECK(ep >= 1 && shape_.dp_size() % ep == 0, ErrorKind::kConfig,
           "expert parallelism over {} ranks does not divide the {} data-parallel ranks of the mesh {} (world {}): "
           "the experts are split over runs of ep data-parallel ranks; choose an ep that divides {}",
           ep, shape_.dp_size(), shape_.str(), world_->size(), shape_.dp_size());
  HT_CHECK(ep == 1 || cp == 1, ErrorKind::kConfig,
           "expert parallelism (ep {}) with context parallelism (cp {}) is not supported yet: choose one of them",
           ep, cp);
  // Every rank makes the splits in the same order; each is collective
  // over the world and names its group by the colour, which MeshShape makes
  // the same for all members and distinct between groups.
  const auto split_axis = [&](MeshAxis axis) {
    const int colour = shape_.group_index(world_->rank(), axis);
    auto group =
        world_->split(colour, shape_.coordinate(coord_, axis), fmt::format("{}.{}", axis_name(axis), colour));
    HT_CHECK(group != nullptr && group->size() == shape_.size(axis), ErrorKind::kInternal,
             "split of '{}' for the {} axis gave a group of {} ranks where the shape {} says {}", world_->name(),
             axis_name(axis), group ? group->size() : 0, shape_.str(), shape_.size(axis));
    return group;
  };
  tp_ = split_axis(MeshAxis::kTp);
  dp_ = split_axis(MeshAxis::kDp);
  pp_ = split_axis(MeshAxis::kPp);
  cp_ = split_axis(MeshAxis::kCp);
  if (shape_.cp_size() > 1) dp_cp_ = split_axis(MeshAxis::kDpCp);
  // The ep and edp groups: runs of ep consecutive dp ranks, and the dp ranks
  // with the same place in their run. Colours count the dp groups' runs
  // (resp. places), so every group has its own.
  const int dp_group = shape_.group_index(world_->rank(), MeshAxis::kDp);
  const int run = coord_.dp_rank / ep, place = coord_.dp_rank % ep;
  const int runs = shape_.dp_size() / ep;
  ep_ = world_->split(dp_group * runs + run, place, fmt::format("ep.{}", dp_group * runs + run));
  if (ep > 1) edp_ = world_->split(dp_group * ep + place, run, fmt::format("edp.{}", dp_group * ep + place));
  HT_CHECK(ep_ && ep_->size() == ep && edp_group().size() == runs, ErrorKind::kInternal,
           "the expert-parallel splits of '{}' gave groups of {} and {} ranks where ep {} over dp {} says {} and {}",
           world_->name(), ep_ ? ep_->size() : 0, edp_group().size(), ep, shape_.dp_size(), ep, runs);
}

DeviceMesh::~DeviceMesh() = default;

Communicator& DeviceMesh::axis(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kTp: return *tp_;
    case MeshAxis::kCp: return *cp_;
    case MeshAxis::kDp: return *dp_;
    case MeshAxis::kPp: return *pp_;
    case MeshAxis::kDpCp: return dp_cp_group();
  }
  return *world_;
}

void DeviceMesh::finalize(std::chrono::milliseconds timeout) {
  for (Communicator* c : {tp_.get(), dp_.get(), pp_.get(), cp_.get(), dp_cp_.get(), ep_.get(), edp_.get(), world_.get()})
    if (c) c->finalize(timeout);
}

void DeviceMesh::abort() noexcept {
  for (Communicator* c : {tp_.get(), dp_.get(), pp_.get(), cp_.get(), dp_cp_.get(), ep_.get(), edp_.get(), world_.get()})
    if (c) c->abort();
}

}  // namespace ht::comm
