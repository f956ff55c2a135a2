// ht::comm::DeviceMesh: the communicators of a mesh pp x dp x cp x tp, built
// once at start-up from the world communicator and the requested tp, pp and
// cp.
//
// The rank arithmetic is MeshShape's (mesh_shape.h): dp = world / (tp * pp *
// cp), rank order tp fastest, then cp, then dp, then pp. Beside the four
// axes, the dp x cp group (the ranks holding the same parameters: gradients
// are reduced over it) is one more split when cp > 1, and the dp group
// itself when cp is 1. The mesh owns the world and one
// communicator per axis, each a split of the world with colour
// MeshShape::group_index and key the coordinate along the axis, so a rank's
// position in its tp group is its tp coordinate. Groups are named
// "<axis>.<group index>" ("tp.0", "dp.1", "pp.0", "cp.0", "dpcp.1"), as messages and flight-
// recorder dumps show them. An axis of size 1 still has its (one-rank)
// communicator, so callers never test for absence.
//
// Expert parallelism (ep > 1) carves each dp group into runs of ep
// consecutive dp ranks (Megatron-Core's order): the expert-parallel group
// ("ep.<i>"), over which a mixture-of-experts layer's experts are split and
// its tokens exchanged, and the expert-data-parallel group ("edp.<i>"), the
// dp ranks with the same ep coordinate (dp_rank % ep), which hold the same
// experts and reduce their gradients. With ep 1 the ep group is one rank
// and the edp group is the dp group itself.
//
// No globals: the mesh is passed explicitly to whoever needs a group.
// Construction, finalize() and the axes' collectives follow the Communicator
// contract (collective over the world, deadlines from its options).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/comm/mesh_shape.h"

namespace ht::comm {

class DeviceMesh {
 public:
  /// Collective over `world`: every rank calls it with the same tp, pp and
  /// cp (and ep). Splits the world into the tp, dp, pp and cp groups (and dp
  /// x cp when cp > 1; ep and edp when ep > 1), in that order. Throws
  /// ht::Error(kConfig) naming the sizes and the valid choices when tp * pp
  /// does not divide world->size() (the same verdict on every rank, before
  /// any communication; also when ep does not divide dp, or ep > 1 meets
  /// cp > 1), kInvalidArgument for a null world, and what split
  /// throws (CommTimeout when a rank does not join). On a throw the world is
  /// destroyed with the mesh (aborted, as any unfinalised communicator).
  DeviceMesh(std::unique_ptr<Communicator> world, int tp, int pp, int cp = 1, int ep = 1);
  /// Aborts whatever was not finalised (see Communicator). Never throws.
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  /// This rank in the world, and its coordinates in the mesh.
  int rank() const { return world_->rank(); }
  const MeshCoord& coord() const { return coord_; }
  /// The world ranks of this rank's group along `axis`, by coordinate.
  std::vector<int> group(MeshAxis axis) const { return shape_.group(rank(), axis); }

  Communicator& world() const { return *world_; }
  Communicator& tp_group() const { return *tp_; }
  Communicator& dp_group() const { return *dp_; }
  Communicator& pp_group() const { return *pp_; }
  Communicator& cp_group() const { return *cp_; }
  /// The ranks holding this rank's parameters (dp x cp; the dp group when cp is 1).
  Communicator& dp_cp_group() const { return dp_cp_ ? *dp_cp_ : *dp_; }
  Communicator& axis(MeshAxis axis) const;
  /// Expert parallelism: its size, this rank's coordinate in it (dp_rank %
  /// ep), the group the experts are split over and the group that holds the
  /// same experts (the dp group when ep is 1).
  int ep_size() const { return ep_size_; }
  int ep_rank() const { return coord_.dp_rank % ep_size_; }
  Communicator& ep_group() const { return *ep_; }
  Communicator& edp_group() const { return edp_ ? *edp_ : *dp_; }

  /// Finalises the axis communicators, then the world, each within `timeout`
  /// (see Communicator::finalize). Idempotent.
  void finalize(std::chrono::milliseconds timeout);
  /// Aborts every communicator of the mesh; never blocks, never throws.
  void abort() noexcept;

 private:
  std::unique_ptr<Communicator> world_;  // declared first: destroyed after the groups split from it
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<Communicator> tp_, dp_, pp_, cp_;
  std::unique_ptr<Communicator> dp_cp_;  // null when cp is 1 (dp_ serves)
  int ep_size_ = 1;
  std::unique_ptr<Communicator> ep_, edp_;  // edp_ null when ep is 1 (dp_ serves)
};

}  // namespace ht::comm
