// Fuzz target: an HDF5 token file (ht::data::read_token_file), and the
// unigram entropy the example programs print from it
// (examples/common/token_data.cc).
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "ht/core/error.h"
#include "ht/data/token_dataset.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become IoError; no stack on stderr per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (!ht::fuzz::hdf5_checksummed(ht::fuzz::as_text(data, size))) return -1;  // legacy format: see fuzz_input.h
  const std::string path = ht::fuzz::write_scratch_file("tokens.h5", ht::fuzz::as_text(data, size));
  try {
    const ht::data::TokenSplits s = ht::data::read_token_file(path);
    (void)ht::data::unigram_entropy(s.val, s.vocab_size);
  } catch (const ht::Error&) {
    // a refused file: the message names it and what is wrong
  }
  return 0;
}
