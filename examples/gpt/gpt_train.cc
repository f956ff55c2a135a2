// gpt_train: prepares a byte-level token dataset from text and trains a GPT
// on it with the library's engine, ending with a sample from the trained
// model. Everything else (the mesh under mpirun, ZeRO, pipelines, mixed
// precision, checkpoints and resume, heartbeats, preemption, the progress
// line and metrics.jsonl) is the library's: see ht/train/run.h and
// ht/train/flags.h.
#include "examples/common/token_data.h"
#include "ht/models/gpt.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/gpt";
  examples::TokenDataFlags data;
  examples::SampleFlags sample;
  models::GPTConfig model;
  CLI::App app{"Train a GPT on a byte-level text corpus (by default the fortunes package's)."};
  flags.add_to(app);
  data.add_to(app);
  sample.add_to(app);
  app.add_option("--layers", model.n_layer, "transformer blocks");
  app.add_option("--heads", model.n_head, "attention heads");
  app.add_option("--embd", model.n_embd, "model width");
  app.add_option("--context", model.context, "maximum sequence length (positions)");
  app.add_option("--vocab", model.vocab_size, "vocabulary size (256 for bytes)");
  app.add_option("--vocab-multiple", model.vocab_multiple,
                 "store the embedding and head with the vocabulary padded to a multiple of this (128 for GPT-2's "
                 "50257 -> 50304; padding ids are never trained on nor sampled)");
  CLI11_PARSE(app, argc, argv);
  flags.model_spec = [&] { return model.spec(data.seq_len); };  // for --auto and --dry-run
  return examples::train_language_model(
      "gpt_train", flags, data, sample, model.vocab_size, model.context,
      [&](int tp, int pp) { model.validate_parallel(tp, pp); },
      [&](const nn::Placement& at) { return std::make_unique<models::GPT>(model, at); });
}
