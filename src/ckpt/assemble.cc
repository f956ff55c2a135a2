// Full tensors from a checkpoint's pieces, and the tiling check behind ht-ckpt verify.
#include "ckpt/assemble.h"

#include <algorithm>
#include <filesystem>

#include "ht/nn/tensor_parallel.h"

namespace ht::ckpt::detail {
namespace {

// The pieces of each tp part 0..tp-1, each part's ordered by their first
// element (pieces of ranks outside the group are left out). One pass, not
// one per part: a damaged layout may claim kMaxTpSize parts.
std::vector<std::vector<const PieceInfo*>> pieces_by_part(const std::vector<PieceInfo>& pieces, int tp) {
  std::vector<std::vector<const PieceInfo*>> parts(std::size_t(std::max(tp, 1)));
  for (const PieceInfo& q : pieces)
    if (q.layout.tp_rank >= 0 && q.layout.tp_rank < tp) parts[std::size_t(q.layout.tp_rank)].push_back(&q);
  for (auto& mine : parts)
    std::stable_sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  return parts;
}

std::string layout_str(const nn::ParamLayout& l) {
  return fmt::format("split dim {}, {} stacked part(s), tp size {}", l.tp_split_dim, l.tp_parts, l.tp_size);
}

}  // namespace

std::map<std::string, std::vector<PieceInfo>> pieces_by_tensor(const std::vector<PieceInfo>& pieces) {
  std::map<std::string, std::vector<PieceInfo>> out;
  for (const PieceInfo& p : pieces) out[p.tensor + "|" + p.kind].push_back(p);
  return out;
}

// Each tp part is assembled flat from its pieces in order of `begin`: the
// first must start at 0 and each next one where the previous ended, and the
// last must end at the part's size. The parts then join into the full
// tensor as the saved layout says (e.g. rows of a column-parallel weight).
// Nothing is allocated before every part is seen to be covered exactly and
// every piece's file to be large enough for its range: a damaged manifest
// claiming a 2^40-element tensor then fails here, not in the allocator.
Tensor assemble_tensor(const std::string& step_dir, const std::vector<PieceInfo>& pieces) {
  HT_CHECK_ARG(!pieces.empty(), "assemble_tensor: no pieces (checkpoint '{}')", step_dir);
  for (const PieceInfo& q : pieces) check_piece_info(q, step_dir);
  const PieceInfo& first = pieces.front();
  const std::string& name = first.tensor;
  const std::string& kind = first.kind;
  nn::ParamLayout saved = first.layout;
  const int tp = std::max(saved.tp_size, 1);
  const Shape part_shape = nn::tp_part_shape(first.global_shape, saved);
  const std::int64_t part_numel = shape_numel(part_shape);
  const auto by_part = pieces_by_part(pieces, tp);
  for (int r = 0; r < tp; ++r) {
    std::int64_t covered = 0;
    for (const PieceInfo* q : by_part[std::size_t(r)]) {
      HT_CHECK(q->begin == covered && q->end >= q->begin && q->end <= part_numel, ErrorKind::kIo,
               "checkpoint '{}' lacks a shard of {} ({}): tp part {} has elements up to {}, then a piece at {}",
               step_dir, name, kind, r, covered, q->begin);
      const std::string path = (std::filesystem::path(step_dir) / q->file).string();
      std::error_code ec;
      const std::uintmax_t file_bytes = std::filesystem::file_size(path, ec);
      HT_CHECK(!ec, ErrorKind::kIo,
               "checkpoint file '{}', which holds a piece of {} ({}), is missing or unreadable: {}", path, name, kind,
               ec.message());
      HT_CHECK(std::uintmax_t(q->end - q->begin) <= file_bytes / sizeof(float), ErrorKind::kIo,
               "checkpoint '{}': {} ({}) piece '{}' claims {} values, more than its file '{}' holds ({} bytes): the "
               "checkpoint is corrupt",
               step_dir, name, kind, q->dataset, q->end - q->begin, path, file_bytes);
      covered = q->end;
    }
    HT_CHECK(covered == part_numel, ErrorKind::kIo,
             "checkpoint '{}' lacks a shard of {} ({}): tp part {} covers {} of {} elements", step_dir, name, kind, r,
             covered, part_numel);
  }
  std::vector<Tensor> parts;
  for (int r = 0; r < tp; ++r) {
    Tensor part = Tensor::empty({part_numel}, DType::kF32, Device::cpu(), MemCategory::kOther);
    for (const PieceInfo* q : by_part[std::size_t(r)])
      part.slice(q->begin, q->end).copy_from(read_piece((std::filesystem::path(step_dir) / q->file).string(), *q));
    parts.push_back(part.view(part_shape));
  }
  saved.tp_rank = 0;
  return nn::tp_assemble(parts, saved);
}

// Works on the element ranges alone, part by part, sorted by `begin`: a
// piece starting after the end of the coverage so far leaves a gap, one
// starting before it overlaps. Example: part size 10 with pieces [0,4),
// [3,8) and [9,10) gives "overlap at [3,4)" and "gap [8,9)".
std::vector<std::string> tiling_problems(const std::vector<PieceInfo>& pieces) {
  std::vector<std::string> out;
  if (pieces.empty()) return out;
  const PieceInfo& first = pieces.front();
  const std::string what = fmt::format("{} ({})", first.tensor, first.kind);
  bool consistent = true;
  for (const PieceInfo& q : pieces) {
    if (q.global_shape != first.global_shape) {
      out.push_back(fmt::format("{}: piece '{}' in {} has global shape {} where '{}' has {}", what, q.dataset, q.file,
                                shape_str(q.global_shape), first.dataset, shape_str(first.global_shape)));
      consistent = false;
    }
    const nn::ParamLayout &a = q.layout, &b = first.layout;
    if (a.tp_split_dim != b.tp_split_dim || a.tp_parts != b.tp_parts || a.tp_size != b.tp_size) {
      out.push_back(fmt::format("{}: piece '{}' in {} has tensor-parallel layout ({}) where '{}' has ({})", what,
                                q.dataset, q.file, layout_str(a), first.dataset, layout_str(b)));
      consistent = false;
    }
  }
  if (!consistent) return out;  // no single part size to check ranges against
  const int tp = std::max(first.layout.tp_size, 1);
  if (tp > kMaxTpSize) {
    out.push_back(fmt::format("{}: tp size {} is beyond any layout (at most {})", what, tp, kMaxTpSize));
    return out;
  }
  for (const PieceInfo& q : pieces)
    if (q.layout.tp_rank < 0 || q.layout.tp_rank >= tp)
      out.push_back(fmt::format("{}: piece '{}' in {} is for tp rank {}, outside a group of {}", what, q.dataset,
                                q.file, q.layout.tp_rank, tp));
  std::int64_t part_numel = 0;
  try {
    part_numel = shape_numel(nn::tp_part_shape(first.global_shape, first.layout));
  } catch (const Error& e) {
    out.push_back(fmt::format("{}: global shape {} does not split as its layout says: {}", what,
                              shape_str(first.global_shape), e.message()));
    return out;
  }
  const auto by_part = pieces_by_part(pieces, tp);
  for (int r = 0; r < tp; ++r) {
    const std::string part = tp > 1 ? fmt::format("{}, tp part {}", what, r) : what;
    std::int64_t covered = 0;
    for (const PieceInfo* q : by_part[std::size_t(r)]) {
      if (q->begin < 0 || q->end < q->begin) {
        out.push_back(fmt::format("{}: piece '{}' in {} has the invalid range [{}, {})", part, q->dataset, q->file,
                                  q->begin, q->end));
        continue;
      }
      if (q->begin > covered)
        out.push_back(fmt::format("{}: elements [{}, {}) of {} are in no piece (gap before '{}' in {})", part, covered,
                                  q->begin, part_numel, q->dataset, q->file));
      else if (q->begin < covered)
        out.push_back(fmt::format("{}: elements [{}, {}) are in more than one piece (overlap: '{}' in {})", part,
                                  q->begin, std::min(covered, q->end), q->dataset, q->file));
      if (q->end > part_numel)
        out.push_back(fmt::format("{}: piece '{}' in {} ends at element {}, past the part's {} elements", part,
                                  q->dataset, q->file, q->end, part_numel));
      covered = std::max(covered, q->end);
    }
    if (covered < part_numel)
      out.push_back(fmt::format("{}: elements [{}, {}) of {} are in no piece", part, covered, part_numel, part_numel));
  }
  return out;
}

}  // namespace ht::ckpt::detail
