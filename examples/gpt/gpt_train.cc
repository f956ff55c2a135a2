// gpt_train: prepares a token dataset from text (byte by byte, or with
// --tokenizer: GPT-2's BPE, tiktoken, SentencePiece), or reads token shards
// (--shards), and trains a GPT on it with the library's engine, ending with
// a sample from the trained model. Everything else (the mesh under mpirun, ZeRO, pipelines, mixed
// precision, checkpoints and resume, heartbeats, preemption, the progress
// line and metrics.jsonl) is the library's: see ht/train/run.h and
// ht/train/flags.h. The model's flags (--preset, --layers, ...) are
// ht/models/model_flags.h's.
#include "examples/common/token_data.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/gpt";
  examples::TokenDataFlags data;
  examples::SampleFlags sample;
  models::ModelFlags model("gpt", "gpt-small");
  CLI::App app{"Train a GPT on a text corpus (by default the fortunes package's, byte by byte) or on token shards."};
  flags.add_to(app);
  data.add_to(app);
  sample.add_to(app);
  model.add_to(app);
  CLI11_PARSE(app, argc, argv);
  return examples::train_language_model("gpt_train", flags, data, sample, model);
}
