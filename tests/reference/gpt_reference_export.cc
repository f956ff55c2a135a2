// gpt_reference_export: runs one small GPT through forward, backward and one
// AdamW step on the CPU and writes everything to an HDF5 file, so that
// gpt_torch_check.py can redo the same computation in PyTorch and compare.
//
//   gpt_reference_export --list          the case names, one per line
//   gpt_reference_export CASE OUT.h5     writes one case
//
// The file layout is tests/reference/reference_export.h's.
#include <string>
#include <vector>

#include "ht/core/rng.h"
#include "ht/models/gpt.h"
#include "reference_export.h"

namespace {

struct Case {
  const char* name;
  ht::models::GPTConfig model;
  std::int64_t batch, seq_len;
  std::uint64_t seed;
  // Moves biases off 0 and LayerNorm gains off 1 after init_weights, so that a
  // bias added along the wrong axis, or a gain and bias swapped, shows in the
  // forward pass and not only in the gradients.
  bool perturb_affine;
};

// A full context with two heads as GPT-2's init leaves it, and an awkward one:
// four heads, odd batch and sequence (shorter than the context, so wpe rows
// past T get no gradient but still decay), an odd vocabulary, non-trivial
// biases and gains.
const Case kCases[] = {
    {"base", {.vocab_size = 64, .context = 16, .n_layer = 2, .n_head = 2, .n_embd = 32}, 4, 16, 1234, false},
    {"odd", {.vocab_size = 61, .context = 16, .n_layer = 2, .n_head = 4, .n_embd = 32}, 3, 7, 77, true},
};

void run_case(const Case& c, const std::string& path) {
  using namespace ht;
  models::GPT model(c.model);
  model.init_weights(c.seed);
  // Biases off 0, LayerNorm gains off 1.
  if (c.perturb_affine)
    test::perturb(model, c.seed, [](const std::string& n) {
      if (test::ends_with(n, ".bias")) return 0.02f;
      return n.find("ln_") != std::string::npos && test::ends_with(n, ".weight") ? 0.1f : 0.f;
    });

  test::ReferenceWriter w(path);
  w.attr("vocab_size", double(c.model.vocab_size));
  w.attr("context", double(c.model.context));
  w.attr("n_layer", double(c.model.n_layer));
  w.attr("n_head", double(c.model.n_head));
  w.attr("n_embd", double(c.model.n_embd));
  const float loss = test::record_reference_step(model, c.model.vocab_size, c.batch, c.seq_len, c.seed, w);
  std::printf("%s: %s, batch %lld x %lld, loss %.6f -> %s\n", c.name, c.model.str().c_str(), (long long)c.batch,
              (long long)c.seq_len, loss, path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (const Case& c : kCases) names.push_back(c.name);
  return ht::test::reference_export_main(argc, argv, "gpt_reference_export", names, [](const std::string& name, const std::string& path) {
    for (const Case& c : kCases)
      if (name == c.name) run_case(c, path);
  });
}
