// gpt_train: prepares a byte-level token dataset from text and trains a GPT
// on it with the library's engine, ending with a sample from the trained
// model. Everything else (the mesh under mpirun, ZeRO, pipelines, mixed
// precision, checkpoints and resume, heartbeats, preemption, the progress
// line and metrics.jsonl) is the library's: see ht/train/run.h and
// ht/train/flags.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/common/token_data.h"
#include "ht/models/gpt.h"
#include "ht/parallel/gather_parameters.h"
#include "ht/train/flags.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/gpt";
  models::GPTConfig model;
  examples::TokenDataFlags data;
  examples::SampleFlags sample;
  CLI::App app{"Train a GPT on a byte-level text corpus (by default the fortunes package's)."};
  flags.add_to(app);
  data.add_to(app);
  sample.add_to(app);
  app.add_option("--layers", model.n_layer, "transformer blocks");
  app.add_option("--heads", model.n_head, "attention heads");
  app.add_option("--embd", model.n_embd, "model width");
  app.add_option("--context", model.context, "maximum sequence length (positions)");
  app.add_option("--vocab", model.vocab_size, "vocabulary size (256 for bytes)");
  CLI11_PARSE(app, argc, argv);
  return train::run_job("gpt_train", flags, [&](train::Job& job) {
    model.validate_parallel(flags.job.tp, flags.job.pp);
    const data::TokenSplits splits = data.load(job, model.vocab_size, model.context);
    if (data.prepare_only) return;
    data::TokenBatches batches(splits, data.seq_len);
    train::Engine engine(job, flags.engine,
                         [&](const nn::Placement& at) { return std::make_unique<models::GPT>(model, at); }, batches);
    flags.fit.run_fields = {{"seq_len", data.seq_len}};
    flags.fit.at_end = [&](train::Engine& e) {
      sample.print(e, job, [&] { return std::make_unique<models::GPT>(model); });
    };
    train::fit(job, engine, flags.fit);
  });
}
