// MeshShape: rank <-> (tp, dp, pp) arithmetic.
#include "ht/comm/mesh_shape.h"

#include <fmt/format.h>

#include "ht/core/error.h"

namespace ht::comm {

std::string axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kTp: return "tp";
    case MeshAxis::kCp: return "cp";
    case MeshAxis::kDp: return "dp";
    case MeshAxis::kPp: return "pp";
    case MeshAxis::kDpCp: return "dpcp";
  }
  return "?";
}

MeshShape::MeshShape(int world_size, int tp, int pp, int cp) : world_(world_size), tp_(tp), pp_(pp), cp_(cp) {
  HT_CHECK(world_size > 0 && tp > 0 && pp > 0 && cp > 0, ErrorKind::kConfig,
           "mesh sizes must be positive: world {}, tp {}, pp {}, cp {}", world_size, tp, pp, cp);
  if (world_size % (tp * pp * cp) != 0) {
    std::vector<std::string> choices;
    for (int t = 1; t <= world_size; ++t)
      for (int p = 1; t * p * cp <= world_size; ++p)
        if (world_size % (t * p * cp) == 0) choices.push_back(fmt::format("tp{}xpp{}", t, p));
    const std::string cp_part = cp > 1 ? fmt::format(" x cp={}", cp) : "";
    throw Error(ErrorKind::kConfig,
                fmt::format("tp={} x pp={}{} = {} does not divide the world size {}: choose one of {}{}, or run on a "
                            "multiple of {} ranks",
                            tp, pp, cp_part, tp * pp * cp, world_size, fmt::join(choices, " "),
                            cp > 1 ? fmt::format(" (with cp {})", cp) : "", tp * pp * cp));
  }
  dp_ = world_size / (tp * pp * cp);
}

int MeshShape::size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kTp: return tp_;
    case MeshAxis::kCp: return cp_;
    case MeshAxis::kDp: return dp_;
    case MeshAxis::kPp: return pp_;
    case MeshAxis::kDpCp: return dp_ * cp_;
  }
  return 1;
}

MeshCoord MeshShape::coord(int rank) const {
  HT_CHECK(rank >= 0 && rank < world_, ErrorKind::kOutOfRange, "rank {} outside a world of {}", rank, world_);
  return {.tp_rank = rank % tp_,
          .dp_rank = (rank / (tp_ * cp_)) % dp_,
          .pp_rank = rank / (tp_ * cp_ * dp_),
          .cp_rank = (rank / tp_) % cp_};
}

int MeshShape::rank(const MeshCoord& c) const {
  HT_CHECK(c.tp_rank >= 0 && c.tp_rank < tp_ && c.dp_rank >= 0 && c.dp_rank < dp_ && c.pp_rank >= 0 &&
               c.pp_rank < pp_ && c.cp_rank >= 0 && c.cp_rank < cp_,
           ErrorKind::kOutOfRange, "mesh coordinate (tp {}, cp {}, dp {}, pp {}) outside {}", c.tp_rank, c.cp_rank,
           c.dp_rank, c.pp_rank, str());
  return c.tp_rank + tp_ * (c.cp_rank + cp_ * (c.dp_rank + dp_ * c.pp_rank));
}

std::vector<int> MeshShape::group(int rank, MeshAxis axis) const {
  MeshCoord c = coord(rank);
  std::vector<int> out;
  for (int i = 0; i < size(axis); ++i) {
    switch (axis) {
      case MeshAxis::kTp: c.tp_rank = i; break;
      case MeshAxis::kCp: c.cp_rank = i; break;
      case MeshAxis::kDp: c.dp_rank = i; break;
      case MeshAxis::kPp: c.pp_rank = i; break;
      case MeshAxis::kDpCp: c.cp_rank = i % cp_, c.dp_rank = i / cp_; break;
    }
    out.push_back(this->rank(c));
  }
  return out;
}

int MeshShape::group_index(int rank, MeshAxis axis) const {
  const MeshCoord c = coord(rank);
  switch (axis) {
    case MeshAxis::kTp: return c.cp_rank + cp_ * (c.dp_rank + dp_ * c.pp_rank);
    case MeshAxis::kCp: return c.tp_rank + tp_ * (c.dp_rank + dp_ * c.pp_rank);
    case MeshAxis::kDp: return c.tp_rank + tp_ * (c.cp_rank + cp_ * c.pp_rank);
    case MeshAxis::kPp: return c.tp_rank + tp_ * (c.cp_rank + cp_ * c.dp_rank);
    case MeshAxis::kDpCp: return c.tp_rank + tp_ * c.pp_rank;
  }
  return 0;
}

int MeshShape::coordinate(const MeshCoord& c, MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kTp: return c.tp_rank;
    case MeshAxis::kCp: return c.cp_rank;
    case MeshAxis::kDp: return c.dp_rank;
    case MeshAxis::kPp: return c.pp_rank;
    case MeshAxis::kDpCp: return dp_cp_rank(c);
  }
  return 0;
}

std::string MeshShape::str() const {
  if (cp_ == 1) return fmt::format("pp{} x dp{} x tp{}", pp_, dp_, tp_);
  return fmt::format("pp{} x dp{} x cp{} x tp{}", pp_, dp_, cp_, tp_);
}

}  // namespace ht::comm
