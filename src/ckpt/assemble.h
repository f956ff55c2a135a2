// Private: the full tensor of one (tensor, kind) from the pieces a
// checkpoint's manifest lists — shared by Checkpointer::load_latest and the
// ht-ckpt tool — and a pure check of how those pieces tile the tensor.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ckpt/rank_file.h"

namespace ht::ckpt::detail {

/// The pieces of each (tensor, kind), keyed "<tensor>|<kind>", in the order given.
std::map<std::string, std::vector<PieceInfo>> pieces_by_tensor(const std::vector<PieceInfo>& pieces);

/// Reads the pieces of one (tensor, kind) from the step directory `step_dir`
/// (read_piece: checksums verified) and returns the full tensor: host f32, of
/// the pieces' global shape. The first piece's tensor-parallel layout says
/// how many parts there are (tp_size) and how they join (nn::tp_assemble);
/// the pieces of each part, ordered by `begin`, must cover its elements
/// exactly. Throws Error (kIo) naming the checkpoint, tensor, kind and part
/// when a part has a gap, an overlap or a piece past its end, and read_piece's
/// error when a file or dataset is missing or fails its checksum.
/// `pieces` must be non-empty and all of one (tensor, kind) (kInvalidArgument).
Tensor assemble_tensor(const std::string& step_dir, const std::vector<PieceInfo>& pieces);

/// Everything wrong with how `pieces` (all of one (tensor, kind)) tile the
/// tensor, without reading any data: pieces that disagree on the global
/// shape or the tensor-parallel layout, tp ranks outside the group, a split
/// that does not divide, and per tp part every gap, overlap, empty or
/// reversed range and piece past the part's end. Empty when every part is
/// covered exactly once. Each message names the tensor, kind and part.
std::vector<std::string> tiling_problems(const std::vector<PieceInfo>& pieces);

}  // namespace ht::ckpt::detail
