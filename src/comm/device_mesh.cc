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

DeviceMesh::DeviceMesh(std::unique_ptr<Communicator> world, int tp, int pp, int cp)
    : world_(std::move(world)),
      shape_(checked_shape(world_.get(), tp, pp, cp)),
      coord_(shape_.coord(world_->rank())) {
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
  for (Communicator* c : {tp_.get(), dp_.get(), pp_.get(), cp_.get(), dp_cp_.get(), world_.get()})
    if (c) c->finalize(timeout);
}

void DeviceMesh::abort() noexcept {
  for (Communicator* c : {tp_.get(), dp_.get(), pp_.get(), cp_.get(), dp_cp_.get(), world_.get()})
    if (c) c->abort();
}

}  // namespace ht::comm
