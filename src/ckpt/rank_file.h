// Private: one rank's checkpoint file (HDF5) — its pieces of tensor state,
// each a dataset with its global coordinates and checksum as attributes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/core/tensor.h"
#include "ht/nn/parameter.h"

namespace ht::ckpt::detail {

/// Where a piece belongs: elements [begin, end) of tp part `layout.tp_rank`
/// of tensor `tensor`'s state `kind` ("master", "exp_avg", ...), flattened.
struct PieceInfo {
  std::string tensor, kind;
  Shape global_shape;
  /// A padded vocabulary matrix (nn::Parameter::real_rows): rows from this
  /// one of global_shape on are padding (stored; ht-ckpt export leaves them
  /// out). -1: none. A dataset attribute and a manifest field, written only
  /// when padded (absent in checkpoints from before padding existed).
  std::int64_t real_rows = -1;
  nn::ParamLayout layout;  // the tensor-parallel fields
  std::int64_t begin = 0, end = 0;
  std::uint64_t checksum = 0;
  std::string file;     // file name within the step directory
  std::string dataset;  // dataset name within the file
  /// A piece of a raw image (a memory snapshot, ckpt/snapshot_image.h): its
  /// byte offset in `file`, f32 values back to back. -1: an HDF5 dataset.
  std::int64_t offset = -1;
};

struct Piece {
  PieceInfo info;
  Tensor data;  // host f32, end - begin elements
};

/// "<tensor>|<kind>|<tp rank>|<begin>"
std::string dataset_name(const PieceInfo& p);

/// The largest tensor-parallel group (and number of stacked parts) a piece
/// may claim: far beyond any real layout, small enough that a loop over the
/// parts of a damaged file's claim stays short.
inline constexpr int kMaxTpSize = 1 << 16;

/// Checks what a piece says about its tensor before anything is sized or
/// looped over from it (the readers call it on every piece they return):
/// global shape dimensions >= 0 whose nonzero ones multiply to at most 2^62
/// elements, tp_size and tp_parts in [1, kMaxTpSize], tp_split_dim -1 or a
/// dimension, real_rows -1 or at most the first dimension. Ranges and tp
/// ranks are left to tiling_problems (ckpt/assemble.h). Throws Error (kIo)
/// naming `source` (the file) and the piece.
void check_piece_info(const PieceInfo& p, const std::string& source);

/// Writes `pieces` (checksums computed here) to `path` and syncs the file to
/// disk. Returns the file's size. Throws IoError naming the path.
std::int64_t write_rank_file(const std::string& path, std::vector<Piece>& pieces);
/// The pieces' descriptions (attributes only) of a rank file; `file` is set to `file_name`.
std::vector<PieceInfo> read_piece_index(const std::string& path, const std::string& file_name);
/// Reads one piece's data and verifies its checksum (IoError naming the file
/// and dataset otherwise, and before allocating anything when the piece's
/// range is invalid or claims more values than the file's size could hold).
/// An HDF5 dataset, or a raw image's bytes at info.offset.
Tensor read_piece(const std::string& path, const PieceInfo& info);

/// fsync of a file or directory; throws IoError naming it.
void sync_path(const std::string& path);

}  // namespace ht::ckpt::detail
