// MeshShape: rank <-> (tp, dp, pp) arithmetic.
#include "ht/comm/mesh_shape.h"

#include <fmt/format.h>

#include "ht/core/error.h"

namespace ht::comm {

std::string axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kTp: return "tp";
    case MeshAxis::kDp: return "dp";
    case MeshAxis::kPp: return "pp";
  }
  return "?";
}

MeshShape::MeshShape(int world_size, int tp, int pp) : world_(world_size), tp_(tp), pp_(pp) {
  HT_CHECK(world_size > 0 && tp > 0 && pp > 0, ErrorKind::kConfig,
           "mesh sizes must be positive: world {}, tp {}, pp {}", world_size, tp, pp);
  if (world_size % (tp * pp) != 0) {
    std::vector<std::string> choices;
    for (int t = 1; t <= world_size; ++t)
      for (int p = 1; t * p <= world_size; ++p)
        if (world_size % (t * p) == 0) choices.push_back(fmt::format("tp{}xpp{}", t, p));
    throw Error(ErrorKind::kConfig,
                fmt::format("tp={} x pp={} = {} does not divide the world size {}: choose one of {}, or run on a "
                            "multiple of {} ranks",
                            tp, pp, tp * pp, world_size, fmt::join(choices, " "), tp * pp));
  }
  dp_ = world_size / (tp * pp);
}

int MeshShape::size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kTp: return tp_;
    case MeshAxis::kDp: return dp_;
    case MeshAxis::kPp: return pp_;
  }
  return 1;
}

MeshCoord MeshShape::coord(int rank) const {
  HT_CHECK(rank >= 0 && rank < world_, ErrorKind::kOutOfRange, "rank {} outside a world of {}", rank, world_);
  return {rank % tp_, (rank / tp_) % dp_, rank / (tp_ * dp_)};
}

int MeshShape::rank(const MeshCoord& c) const {
  HT_CHECK(c.tp_rank >= 0 && c.tp_rank < tp_ && c.dp_rank >= 0 && c.dp_rank < dp_ && c.pp_rank >= 0 && c.pp_rank < pp_, ErrorKind::kOutOfRange,
           "mesh coordinate (tp {}, dp {}, pp {}) outside {}", c.tp_rank, c.dp_rank, c.pp_rank, str());
  return c.tp_rank + tp_ * (c.dp_rank + dp_ * c.pp_rank);
}

std::vector<int> MeshShape::group(int rank, MeshAxis axis) const {
  MeshCoord c = coord(rank);
  std::vector<int> out;
  for (int i = 0; i < size(axis); ++i) {
    (axis == MeshAxis::kTp ? c.tp_rank : axis == MeshAxis::kDp ? c.dp_rank : c.pp_rank) = i;
    out.push_back(this->rank(c));
  }
  return out;
}

int MeshShape::group_index(int rank, MeshAxis axis) const {
  const MeshCoord c = coord(rank);
  switch (axis) {
    case MeshAxis::kTp: return c.dp_rank + dp_ * c.pp_rank;
    case MeshAxis::kDp: return c.tp_rank + tp_ * c.pp_rank;
    case MeshAxis::kPp: return c.tp_rank + tp_ * c.dp_rank;
  }
  return 0;
}

std::string MeshShape::str() const { return fmt::format("pp{} x dp{} x tp{}", pp_, dp_, tp_); }

}  // namespace ht::comm
