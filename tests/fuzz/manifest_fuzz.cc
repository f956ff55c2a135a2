// Fuzz target: a checkpoint's manifest.json (ckpt::detail::read_manifest),
// then what ht-ckpt verify and export do with its piece list: the tiling
// check of every (tensor, kind) and, where that finds nothing wrong, the
// assembly (whose rank files do not exist here: it must fail cleanly, before
// allocating what the manifest claims).
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "ckpt/assemble.h"
#include "ckpt/manifest.h"
#include "fuzz_input.h"
#include "ht/core/error.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become IoError; no stack on stderr per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ht::ckpt::detail;
  const std::string dir = ht::fuzz::scratch_dir().string();
  ht::fuzz::write_scratch_file(kManifestName, ht::fuzz::as_text(data, size));
  try {
    const Manifest m = read_manifest(dir);
    for (const auto& [key, pieces] : pieces_by_tensor(m.pieces))
      if (tiling_problems(pieces).empty()) {
        try {
          (void)assemble_tensor(dir, pieces);
        } catch (const ht::Error&) {
        }
      }
  } catch (const ht::Error&) {
    // a refused manifest: the message names the file and what is wrong
  }
  return 0;
}
