// llama_train: gpt_train's program for a Llama-style model (RMSNorm, rotary
// positions, grouped-query attention, SwiGLU, untied head; ht/models/llama.h):
// the same flags, plus --kv-heads, --ffn and --rope-theta, and the Llama
// presets (llama-small by default, llama2-7b, ...: ht/models/presets.h).
#include "examples/common/token_data.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/llama";
  examples::TokenDataFlags data;
  examples::SampleFlags sample;
  models::ModelFlags model("llama", "llama-small");
  CLI::App app{"Train a Llama-style model on a text corpus (by default the fortunes package's, byte by byte) or on token shards."};
  flags.add_to(app);
  data.add_to(app);
  sample.add_to(app);
  model.add_to(app);
  CLI11_PARSE(app, argc, argv);
  return examples::train_language_model("llama_train", flags, data, sample, model);
}
