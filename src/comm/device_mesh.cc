// DeviceMesh: the per-axis communicators of a pp x dp x tp mesh, split from
// the world by MeshShape's arithmetic.
#include "ht/comm/device_mesh.h"

#include <fmt/format.h>

#include "ht/core/error.h"

namespace ht::comm {
namespace {

// The shape for `world`, or a kConfig error that says it was the mesh that
// could not be built (MeshShape's message names the sizes and the choices).
MeshShape checked_shape(const Communicator* world, int tp, int pp) {
  HT_CHECK(world != nullptr, ErrorKind::kInvalidArgument, "DeviceMesh needs a world communicator, got null");
  try {
    return MeshShape(world->size(), tp, pp);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("cannot build the device mesh (tp={}, pp={}) over '{}' of {} ranks: {}", tp,
                                      pp, world->name(), world->size(), e.message()));
  }
}

int coordinate(const MeshCoord& c, MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kTp: return c.tp_rank;
    case MeshAxis::kDp: return c.dp_rank;
    case MeshAxis::kPp: return c.pp_rank;
  }
  return 0;
}

}  // namespace

DeviceMesh::DeviceMesh(std::unique_ptr<Communicator> world, int tp, int pp)
    : world_(std::move(world)), shape_(checked_shape(world_.get(), tp, pp)), coord_(shape_.coord(world_->rank())) {
  // Every rank makes the three splits in the same order; each is collective
  // over the world and names its group by the colour, which MeshShape makes
  // the same for all members and distinct between groups.
  const auto split_axis = [&](MeshAxis axis) {
    const int colour = shape_.group_index(world_->rank(), axis);
    auto group = world_->split(colour, coordinate(coord_, axis), fmt::format("{}.{}", axis_name(axis), colour));
    HT_CHECK(group != nullptr && group->size() == shape_.size(axis), ErrorKind::kInternal,
             "split of '{}' for the {} axis gave a group of {} ranks where the shape {} says {}", world_->name(),
             axis_name(axis), group ? group->size() : 0, shape_.str(), shape_.size(axis));
    return group;
  };
  tp_ = split_axis(MeshAxis::kTp);
  dp_ = split_axis(MeshAxis::kDp);
  pp_ = split_axis(MeshAxis::kPp);
}

DeviceMesh::~DeviceMesh() = default;

Communicator& DeviceMesh::axis(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kTp: return *tp_;
    case MeshAxis::kDp: return *dp_;
    case MeshAxis::kPp: return *pp_;
  }
  return *world_;
}

void DeviceMesh::finalize(std::chrono::milliseconds timeout) {
  for (Communicator* c : {tp_.get(), dp_.get(), pp_.get(), world_.get()}) c->finalize(timeout);
}

void DeviceMesh::abort() noexcept {
  for (Communicator* c : {tp_.get(), dp_.get(), pp_.get(), world_.get()}) c->abort();
}

}  // namespace ht::comm
