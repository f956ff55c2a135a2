// llama_reference_export: runs one small Llama through forward, backward and
// one AdamW step on the CPU and writes everything to an HDF5 file, so that
// llama_torch_check.py can redo the same computation in PyTorch and compare.
// gpt_reference_export's counterpart; the file layout is the same.
//
//   llama_reference_export --list          the case names, one per line
//   llama_reference_export CASE OUT.h5     writes one case
//
// The file layout is tests/reference/reference_export.h's.
#include <string>
#include <vector>

#include "ht/core/rng.h"
#include "ht/models/llama.h"
#include "reference_export.h"

namespace {

struct Case {
  const char* name;
  ht::models::LlamaConfig model;
  std::int64_t batch, seq_len;
  std::uint64_t seed;
};

// Grouped-query attention (two query heads per key/value head) with an odd
// vocabulary, an odd batch and a sequence shorter than the context (rotary
// table rows past T unused); multi-query attention (one key/value head for
// four query heads) on the full context with Llama 3's rotary base; and plain
// multi-head attention (n_kv_head = n_head). The RMSNorm gains are moved off
// their initial ones in every case (test::perturb).
const Case kCases[] = {
    {"gqa",
     {.vocab_size = 61, .context = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .ffn_hidden = 48},
     3, 7, 77},
    {"mqa",
     {.vocab_size = 64,
      .context = 16,
      .n_layer = 2,
      .n_head = 4,
      .n_kv_head = 1,
      .n_embd = 32,
      .ffn_hidden = 40,
      .rope_theta = 500000.f},
     2, 16, 1234},
    {"mha",
     {.vocab_size = 64, .context = 16, .n_layer = 1, .n_head = 2, .n_kv_head = 2, .n_embd = 16, .ffn_hidden = 24},
     4, 12, 5},
};

void run_case(const Case& c, const std::string& path) {
  using namespace ht;
  models::Llama model(c.model);
  model.init_weights(c.seed);
  // The RMSNorm gains off 1.
  test::perturb(model, c.seed, [](const std::string& n) { return test::ends_with(n, "norm.weight") ? 0.1f : 0.f; });

  test::ReferenceWriter w(path);
  w.attr("vocab_size", double(c.model.vocab_size));
  w.attr("context", double(c.model.context));
  w.attr("n_layer", double(c.model.n_layer));
  w.attr("n_head", double(c.model.n_head));
  w.attr("n_kv_head", double(c.model.n_kv_head));
  w.attr("n_embd", double(c.model.n_embd));
  w.attr("ffn_hidden", double(c.model.ffn_hidden));
  w.attr("rope_theta", double(c.model.rope_theta));
  w.attr("norm_eps", double(c.model.norm_eps));
  const float loss = test::record_reference_step(model, c.model.vocab_size, c.batch, c.seq_len, c.seed, w);
  std::printf("%s: %s, batch %lld x %lld, loss %.6f -> %s\n", c.name, c.model.str().c_str(), (long long)c.batch,
              (long long)c.seq_len, loss, path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (const Case& c : kCases) names.push_back(c.name);
  return ht::test::reference_export_main(argc, argv, "llama_reference_export", names, [](const std::string& name, const std::string& path) {
    for (const Case& c : kCases)
      if (name == c.name) run_case(c, path);
  });
}
