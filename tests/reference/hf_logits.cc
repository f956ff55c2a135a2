// hf_logits: loads a Hugging Face GPT-2 or Llama directory into the engine
// on the layout its flags give (--tp, --pp, --zero, ...; under mpirun), and
// writes what hf_torch_check.py compares with PyTorch:
//   OUT.loss    the engine's validation loss on the token windows (every
//               layout's own forward: tensor-parallel, pipelined, sharded)
//   OUT.logits  the logits (B, T, vocab) f32, little-endian, of the model
//               gathered from the layout onto rank 0 (engine.full_parameters),
//               so a part read into the wrong place shows in every number
// and, with --ckpt-dir, a checkpoint of the loaded weights (step 0) for
// `ht-ckpt export --format hf`.
//
//   hf_logits HF_DIR TOKENS OUT --seq-len T [--vocab-multiple N] [train flags]
//
// TOKENS is a file of little-endian int32 ids, B T + 1 of them: window b is
// ids [b T, b T + T] (inputs, then targets one further), as data::
// TokenBatches cuts its validation split.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <vector>

#include "ht/data/token_batches.h"
#include "ht/models/hf_format.h"
#include "ht/parallel/gather_parameters.h"
#include "ht/train/engine.h"
#include "ht/train/flags.h"
#include "ht/train/job.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  std::string hf_dir, tokens_path, out;
  std::int64_t seq_len = 0, vocab_multiple = 1;
  CLI::App app{"Load a Hugging Face model on a layout; write its loss and gathered logits"};
  flags.add_to(app);
  app.add_option("HF_DIR", hf_dir)->required();
  app.add_option("TOKENS", tokens_path)->required();
  app.add_option("OUT", out)->required();
  app.add_option("--seq-len", seq_len)->required();
  app.add_option("--vocab-multiple", vocab_multiple, "pad the vocabulary rows to a multiple of this");
  CLI11_PARSE(app, argc, argv);

  return train::run_job("hf_logits", flags, [&](train::Job& job) {
    models::ModelConfig config = models::read_hf_config(hf_dir);
    std::visit([&](auto& c) { c.vocab_multiple = vocab_multiple; }, config);
    const models::HFWeights weights = models::HFWeights::open(hf_dir, config);
    std::vector<std::int32_t> ids;
    {
      std::ifstream in(tokens_path, std::ios::binary);
      std::int32_t v;
      while (in.read(reinterpret_cast<char*>(&v), sizeof v)) ids.push_back(v);
    }
    HT_CHECK(ids.size() > std::size_t(seq_len), ErrorKind::kIo, "'{}' holds {} ids: fewer than one window",
             tokens_path, ids.size());
    const std::int64_t windows = std::int64_t(ids.size() - 1) / seq_len;
    const data::TokenSplits splits{.train = ids, .val = ids, .vocab_size = models::vocab_size(config)};
    data::TokenBatches batches(splits, seq_len);
    flags.engine.initial_values = [&](const nn::Parameter& p) { return weights.initial_value(p); };
    flags.engine.eval_samples = windows;
    const auto make_model = [&](const nn::Placement& at) { return models::make_model(config, at); };
    train::Engine engine(job, flags.engine, make_model, batches);
    const train::EvalStats eval = engine.evaluate();
    const auto full = engine.full_parameters();
    if (!flags.engine.ckpt_dir.empty()) {
      std::string error = engine.save_checkpoint();  // step 0: the weights as loaded
      if (error.empty()) error = engine.wait_for_checkpoint();
      HT_CHECK(error.empty(), ErrorKind::kIo, "checkpoint: {}", error);
    }
    if (!job.rank0()) return;
    std::ofstream(out + ".loss") << fmt::format("{:.9g}\n", eval.loss);
    std::unique_ptr<models::CausalLM> whole = make_model({});
    parallel::load_full_parameters(*whole, full);
    std::ofstream logits_out(out + ".logits", std::ios::binary);
    const std::int64_t vocab = models::vocab_size(config);
    for (std::int64_t b = 0; b < windows; ++b) {
      std::vector<std::int32_t> window(ids.begin() + b * seq_len, ids.begin() + (b + 1) * seq_len);
      nn::Context ctx(whole->device(), /*save_for_backward=*/false);
      const Tensor logits = whole->forward(ctx, Tensor::from_vector(window, {1, seq_len}));
      const std::int64_t rows = logits.size(2);  // the padded vocabulary's columns
      for (std::int64_t t = 0; t < seq_len; ++t)
        logits_out.write(reinterpret_cast<const char*>(logits.data<float>() + t * rows),
                         std::streamsize(vocab * sizeof(float)));
    }
    std::printf("# %s on %s: loss %.6f over %lld windows\n", models::describe(config).c_str(),
                flags.engine.layout.name().c_str(), eval.loss, (long long)windows);
  });
}
