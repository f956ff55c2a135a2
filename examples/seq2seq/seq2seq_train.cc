// seq2seq_train: an encoder-decoder transformer (examples/seq2seq/
// seq2seq_model.h: cross-attention over the encoder's memory, two tensors
// between pipeline stages, a token-normalised loss over variable-length
// targets) trained by the library's engine with the flags every program
// shares. It reports validation token accuracy beside the loss, in the
// progress lines and in metrics.jsonl ("val_token_accuracy").
#include "examples/seq2seq/seq2seq_model.h"
#include "ht/train/flags.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/seq2seq";
  flags.engine.steps = 300;
  flags.engine.layout.micro_batch = 16;
  flags.engine.lr = 3e-3f;
  flags.engine.min_lr = 3e-4f;
  flags.engine.warmup_steps = 10;
  flags.engine.eval_every = 50;
  flags.engine.eval_samples = 256;
  examples::Seq2SeqConfig model;
  CLI::App app{"Train an encoder-decoder transformer to translate generated sequences (their mapped reversals)."};
  flags.add_to(app);
  app.add_option("--enc-layers", model.enc_layers, "encoder blocks");
  app.add_option("--dec-layers", model.dec_layers, "decoder blocks (self-attention, cross-attention, MLP)");
  app.add_option("--heads", model.heads, "attention heads (dividing --embd; --tp divides it)");
  app.add_option("--embd", model.dim, "model width");
  app.add_option("--src-len", model.src_len, "the longest source (shorter ones are padded to it)");
  app.add_option("--vocab", model.vocab, "tokens (0 pads, 1 marks the boundaries)");
  CLI11_PARSE(app, argc, argv);
  return train::run_job("seq2seq_train", flags, [&](train::Job& job) {
    HT_CHECK(model.vocab >= 4 && model.src_len >= 2 && model.dec_layers >= 1 && model.enc_layers >= 1,
             ErrorKind::kConfig,
             "--vocab {} must be at least 4, --src-len {} at least 2, and there must be an encoder and a decoder "
             "block (--enc-layers {}, --dec-layers {})",
             model.vocab, model.src_len, model.enc_layers, model.dec_layers);
    examples::Reversals data(model);
    train::Engine engine(job, flags.engine,
                         [&](const nn::Placement& at) { return std::make_unique<examples::Seq2Seq>(model, at); }, data);
    flags.fit.run_fields["src_len"] = model.src_len;
    train::fit(job, engine, flags.fit);
  });
}
