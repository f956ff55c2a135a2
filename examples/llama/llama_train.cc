// llama_train: gpt_train's program for a Llama-style model (RMSNorm, rotary
// positions, grouped-query attention, SwiGLU, untied head; ht/models/llama.h):
// the same flags, plus --kv-heads, --ffn and --rope-theta.
#include "examples/common/token_data.h"
#include "ht/models/llama.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/llama";
  examples::TokenDataFlags data;
  examples::SampleFlags sample;
  models::LlamaConfig model;
  CLI::App app{"Train a Llama-style model on a byte-level text corpus (by default the fortunes package's)."};
  flags.add_to(app);
  data.add_to(app);
  sample.add_to(app);
  app.add_option("--layers", model.n_layer, "transformer blocks");
  app.add_option("--heads", model.n_head, "attention (query) heads");
  app.add_option("--kv-heads", model.n_kv_head, "key/value heads (grouped-query attention; divides --heads)");
  app.add_option("--embd", model.n_embd, "model width");
  app.add_option("--ffn", model.ffn_hidden, "hidden size of the SwiGLU MLP");
  app.add_option("--rope-theta", model.rope_theta, "base of the rotary position embeddings");
  app.add_option("--context", model.context, "maximum sequence length (positions)");
  app.add_option("--vocab", model.vocab_size, "vocabulary size (256 for bytes)");
  app.add_option("--vocab-multiple", model.vocab_multiple,
                 "store the embedding and head with the vocabulary padded to a multiple of this (128 for GPT-2's "
                 "50257 -> 50304; padding ids are never trained on nor sampled)");
  CLI11_PARSE(app, argc, argv);
  flags.model_spec = [&] { return model.spec(data.seq_len); };  // for --auto and --dry-run
  return examples::train_language_model(
      "llama_train", flags, data, sample, model.vocab_size, model.context,
      [&](int tp, int pp) { model.validate_parallel(tp, pp); },
      [&](const nn::Placement& at) { return std::make_unique<models::Llama>(model, at); });
}
