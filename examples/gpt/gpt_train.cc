// gpt_train: prepares a byte-level token dataset from text and trains a GPT
// on it, printing one progress line per step, writing metrics as JSON Lines
// to the run directory, and ending with a sample from the trained model.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ht/core/error.h"
#include "ht/train/metrics.h"
#include "ht/train/trainer.h"

namespace fs = std::filesystem;
using namespace ht;

namespace {

struct Args {
  train::TrainerOptions train;
  std::string device = "cpu";
  std::string run_dir = "runs/gpt";
  std::string data;                 // token file; default <run_dir>/tokens.h5
  std::vector<std::string> text;    // text inputs to tokenise; default: the fortunes corpus
  double val_fraction = 0.05;
  bool prepare_only = false;
  int sample_tokens = 200;
  float temperature = 0.8f;
  std::string prompt = "The ";
};

std::string human(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

data::TokenSplits load_or_prepare(const Args& a, const std::string& path) {
  // An explicitly named token file is only read, never invented: a typo in
  // --data must not silently train on the default corpus.
  HT_CHECK(a.data.empty() || !a.text.empty() || fs::exists(path), ErrorKind::kIo,
           "token file '{}' (--data) does not exist; pass --text FILES to create it, or omit --data to use "
           "<run-dir>/tokens.h5 prepared from {}",
           path, data::kDefaultCorpusDir);
  if (!a.text.empty() || !fs::exists(path)) {
    const std::vector<std::string> inputs = a.text.empty() ? std::vector<std::string>{data::kDefaultCorpusDir} : a.text;
    std::printf("# preparing %s from %zu text input(s): %s%s\n", path.c_str(), inputs.size(), inputs.front().c_str(),
                inputs.size() > 1 ? ", ..." : "");
    data::write_token_file(path, data::tokenize_bytes(inputs, a.val_fraction));
  }
  return data::read_token_file(path);
}

int run(Args& a) {
  a.train.device = parse_device(a.device);
  a.train.validate();
  std::error_code ec;
  fs::create_directories(a.run_dir, ec);
  HT_CHECK(!ec && fs::is_directory(a.run_dir), ErrorKind::kIo, "cannot create run directory '{}': {}", a.run_dir,
           ec.message());
  const std::string data_path = a.data.empty() ? (fs::path(a.run_dir) / "tokens.h5").string() : a.data;
  const data::TokenSplits splits = load_or_prepare(a, data_path);
  std::printf("# %s\n# data %s: %zu train / %zu val tokens, vocab %lld, unigram entropy %.4f nats\n",
              train::build_description().c_str(), data_path.c_str(), splits.train.size(), splits.val.size(),
              (long long)splits.vocab_size, train::unigram_entropy(splits.val, splits.vocab_size));
  if (a.prepare_only) return 0;

  train::Trainer trainer(a.train, splits);
  const auto& o = trainer.options();
  std::printf("# model %s, %s parameters, device %s; batch %lld x %lld tokens x %d accumulation\n",
              o.model.str().c_str(), human(double(trainer.model().num_parameters())).c_str(), o.device.str().c_str(),
              (long long)o.micro_batch, (long long)o.seq_len, o.grad_accum);
  train::MetricsWriter metrics((fs::path(a.run_dir) / "metrics.jsonl").string());
  metrics.write_run(o, trainer.model().num_parameters());

  const float val0 = trainer.evaluate();
  std::printf("step %lld/%lld | val loss %.4f\n", 0LL, (long long)o.steps, val0);
  metrics.write_eval(0, val0);
  for (std::int64_t i = 0; i < o.steps; ++i) {
    const train::StepStats s = trainer.step();
    std::printf("step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f ms | %s tok/s\n", (long long)s.step,
                (long long)o.steps, s.loss, s.lr, s.grad_norm, s.ms, human(s.tokens_per_s()).c_str());
    std::fflush(stdout);
    metrics.write_step(s);
    if ((o.eval_every > 0 && s.step % o.eval_every == 0) || s.step == o.steps) {
      const float val = trainer.evaluate();
      std::printf("step %lld/%lld | val loss %.4f\n", (long long)s.step, (long long)o.steps, val);
      metrics.write_eval(s.step, val);
    }
  }

  if (a.sample_tokens > 0) {
    Rng rng(a.train.seed);
    std::vector<std::int32_t> prompt(a.prompt.begin(), a.prompt.end());
    for (auto& t : prompt) t = std::int32_t(static_cast<unsigned char>(t));
    const auto out = trainer.model().generate(prompt, a.sample_tokens, a.temperature, rng);
    std::string text = a.prompt;
    for (std::int32_t t : out) text.push_back(char(t));
    std::printf("# sample (temperature %.2f):\n%s\n", a.temperature, text.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  auto& t = a.train;
  CLI::App app{"Train a GPT on a byte-level text corpus (by default the fortunes package's)."};
  app.option_defaults()->always_capture_default();
  app.add_option("--steps", t.steps, "optimizer steps")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", t.seed, "seed for weights, data order and sampling");
  app.add_option("--run-dir", a.run_dir, "where metrics.jsonl (and the token file by default) go");
  app.add_option("--data", a.data, "HDF5 token file (default <run-dir>/tokens.h5; created if missing)");
  app.add_option("--text", a.text, "text files or directories to tokenise into --data (default: " +
                                       std::string(data::kDefaultCorpusDir) + ")");
  app.add_option("--val-fraction", a.val_fraction, "fraction of the text kept for validation")->check(CLI::Range(0.001, 0.5));
  app.add_flag("--prepare-only", a.prepare_only, "write the token file and stop");
  app.add_option("--device", a.device, "cpu, cuda or cuda:N");
  app.add_option("--layers", t.model.n_layer, "transformer blocks");
  app.add_option("--heads", t.model.n_head, "attention heads");
  app.add_option("--embd", t.model.n_embd, "model width");
  app.add_option("--context", t.model.context, "maximum sequence length (positions)");
  app.add_option("--vocab", t.model.vocab_size, "vocabulary size (256 for bytes)");
  app.add_option("--micro-batch", t.micro_batch, "sequences per micro-batch");
  app.add_option("--seq-len", t.seq_len, "tokens per sequence");
  app.add_option("--grad-accum", t.grad_accum, "micro-batches per optimizer step");
  app.add_option("--lr", t.lr, "peak learning rate");
  app.add_option("--min-lr", t.min_lr, "final learning rate of the cosine schedule");
  app.add_option("--warmup", t.warmup_steps, "linear warm-up steps");
  app.add_option("--clip", t.grad_clip, "max global gradient norm (0: off)");
  app.add_option("--weight-decay", t.adamw.weight_decay, "AdamW decoupled weight decay");
  app.add_option("--eval-every", t.eval_every, "steps between validation passes (0: only at the end)");
  app.add_option("--eval-batches", t.eval_batches, "validation micro-batches per pass");
  app.add_option("--sample-tokens", a.sample_tokens, "bytes to sample at the end (0: none)");
  app.add_option("--temperature", a.temperature, "sampling temperature (0: greedy)");
  app.add_option("--prompt", a.prompt, "text the sample starts from");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "gpt_train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_train: %s\n", e.what());
    return 2;
  }
}
