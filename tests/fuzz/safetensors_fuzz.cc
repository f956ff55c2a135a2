// Fuzz target: a safetensors file (ht::ckpt::SafetensorsFile): the header
// parser's checks, then every tensor read whole, by rows and by bytes.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "ht/ckpt/safetensors.h"
#include "ht/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ht::fuzz::write_scratch_file("model.safetensors", ht::fuzz::as_text(data, size));
  try {
    const ht::ckpt::SafetensorsFile f = ht::ckpt::SafetensorsFile::open(path);
    for (const ht::ckpt::SafetensorsEntry& e : f.entries()) {
      (void)f.bytes(e.name);
      if (!e.tensor_dtype()) continue;
      (void)f.read(e.name);
      if (!e.shape.empty() && e.shape[0] > 0) (void)f.read_rows(e.name, e.shape[0] / 2, e.shape[0]);
    }
  } catch (const ht::Error&) {
    // a refused file: the message names it and what is wrong
  }
  return 0;
}
