// encoder_train: a transformer encoder classifier of padded sequences
// (examples/encoder/encoder_model.h: the model forward-only, the data with
// its padding mask) trained by the library's engine with the flags every
// program shares (--tp, --pp, --zero, --precision, checkpoints, ...). It
// reports validation accuracy beside the loss (the model's metric), in the
// progress lines and in metrics.jsonl ("val_accuracy").
#include "examples/encoder/encoder_model.h"
#include "ht/train/flags.h"

using namespace ht;

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/encoder";
  flags.engine.steps = 200;
  flags.engine.layout.micro_batch = 16;
  flags.engine.lr = 3e-3f;
  flags.engine.min_lr = 3e-4f;
  flags.engine.warmup_steps = 10;
  flags.engine.eval_every = 50;
  flags.engine.eval_samples = 256;
  examples::EncoderConfig model;
  CLI::App app{"Train a transformer encoder to classify padded sequences of generated tokens."};
  flags.add_to(app);
  app.add_option("--layers", model.layers, "encoder blocks");
  app.add_option("--heads", model.heads, "attention heads (dividing --embd; --tp divides it)");
  app.add_option("--embd", model.dim, "model width");
  app.add_option("--seq-len", model.seq_len, "the longest sequence (shorter ones are padded to it)");
  app.add_option("--vocab", model.vocab, "tokens (the first --classes after 0, the padding, are the markers)");
  app.add_option("--classes", model.classes, "classes to tell apart");
  app.add_option("--dropout", model.dropout, "dropout after attention and MLP (0: none)");
  CLI11_PARSE(app, argc, argv);
  return train::run_job("encoder_train", flags, [&](train::Job& job) {
    HT_CHECK(model.classes >= 2 && model.vocab > model.classes && model.seq_len >= 4, ErrorKind::kConfig,
             "--classes {} needs 2 <= classes < --vocab ({}), and --seq-len {} at least 4", model.classes,
             model.vocab, model.seq_len);
    examples::PaddedSequences data(model);
    train::Engine engine(job, flags.engine,
                         [&](const nn::Placement& at) { return std::make_unique<examples::Encoder>(model, at); }, data);
    flags.fit.run_fields["seq_len"] = model.seq_len;
    train::fit(job, engine, flags.fit);
  });
}
