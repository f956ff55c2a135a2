// Fuzz target: one rank's HDF5 checkpoint file (ckpt::detail::read_piece_index
// and read_piece), and the assembly of the tensors its pieces describe
// (tiling_problems, then assemble_tensor where the tiling is sound).
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "ckpt/assemble.h"
#include "ckpt/rank_file.h"
#include "fuzz_input.h"
#include "ht/core/error.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become IoError; no stack on stderr per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ht::ckpt::detail;
  if (!ht::fuzz::hdf5_checksummed(ht::fuzz::as_text(data, size))) return -1;  // legacy format: see fuzz_input.h
  const std::string name = "rank_00000.h5";
  const std::string path = ht::fuzz::write_scratch_file(name, ht::fuzz::as_text(data, size));
  try {
    const std::vector<PieceInfo> index = read_piece_index(path, name);
    for (const PieceInfo& p : index) {
      try {
        (void)read_piece(path, p);
      } catch (const ht::Error&) {
      }
    }
    for (const auto& [key, pieces] : pieces_by_tensor(index))
      if (tiling_problems(pieces).empty()) (void)assemble_tensor(ht::fuzz::scratch_dir().string(), pieces);
  } catch (const ht::Error&) {
    // a refused file: the message names it and what is wrong
  }
  return 0;
}
