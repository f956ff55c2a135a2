// custom_program: a model of one's own trained by hypertrain's engine, as an
// outside project would write it against the installed package. A two-layer
// MLP learns to classify random vectors by a hidden linear rule (the argmax
// of a fixed random projection).
//
// Everything that is not the model or the data comes from the library, so
// the program trains one process or many (mpirun: data parallelism and ZeRO
// 1-3, --tp splitting both layers), in fp32, fp16 or bf16, with checkpoints,
// --resume auto, and under htrun's supervision, with no code of its own for
// any of it. It prints the engine's progress lines and, at the end, a
// checksum of the trained weights ("# weights <hex>"); a fresh run whose
// validation loss did not halve exits 1.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "ht/ckpt/checkpoint.h"
#include "ht/core/rng.h"
#include "ht/data/data_source.h"
#include "ht/nn/functional.h"
#include "ht/nn/linear.h"
#include "ht/nn/model.h"
#include "ht/nn/model_spec.h"
#include "ht/train/flags.h"

namespace {

using namespace ht;

constexpr std::int64_t kIn = 16, kHidden = 64, kClasses = 4;

// ---- the model: fc1 -> GELU -> fc2, cross-entropy over the classes ---------

class Mlp : public nn::Model {
 public:
  explicit Mlp(const nn::Placement& at)
      : Model("mlp", at),  // tensor parallelism splits fc1's outputs and fc2's inputs
        fc1_(add_module(std::make_unique<nn::Linear>("fc1", kIn, kHidden, true, at.device, at.tp, nn::LinearSplit::kColumn))),
        fc2_(add_module(std::make_unique<nn::Linear>("fc2", kHidden, kClasses, true, at.device, at.tp, nn::LinearSplit::kRow))) {
    require_single_stage();  // no pipeline split
  }
  std::string describe() const override { return fmt::format("MLP {}-{}-{}", kIn, kHidden, kClasses); }
  // Forward only: the backward comes from the tape (nn/tape.h).
  nn::Var compute(const nn::Var& x) override { return fc2_(nn::gelu(fc1_(x))); }
  nn::Loss loss(const nn::Var& logits, const Tensor& labels) override { return nn::cross_entropy(logits, labels); }

 private:
  nn::Linear& fc1_;
  nn::Linear& fc2_;
};

// ---- the data: labelled random vectors, a function of the sample index ------

class TeacherData : public data::DataSource {
 public:
  void attach(const data::DataShard& shard) override {
    seed_ = shard.seed;
    Rng rng(seed_ ^ 0x7eac4e7ull);
    teacher_.resize(std::size_t(kClasses * kIn));
    for (float& w : teacher_) w = rng.normal();
  }
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override { return make(first, count, 0x7a1aull); }
  bool has_validation() const override { return true; }
  data::MicroBatch validation_samples(std::int64_t first, std::int64_t count) override {
    return make(first, count, 0x7e57ull);
  }

 private:
  // Sample i depends on (seed, stream, i) only: any layout reads the same rows.
  data::MicroBatch make(std::int64_t first, std::int64_t count, std::uint64_t stream) const {
    std::vector<float> x(static_cast<std::size_t>(count * kIn));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(count));
    for (std::int64_t r = 0; r < count; ++r) {
      Rng rng;
      rng.set_state(seed_ ^ stream, std::uint64_t(2 * kIn * (first + r)));
      float* row = x.data() + r * kIn;
      for (std::int64_t i = 0; i < kIn; ++i) row[i] = rng.normal();
      float best = -INFINITY;
      for (std::int64_t k = 0; k < kClasses; ++k) {
        float score = 0;
        for (std::int64_t i = 0; i < kIn; ++i) score += row[i] * teacher_[std::size_t(k * kIn + i)];
        if (score > best) {
          best = score;
          labels[std::size_t(r)] = std::int32_t(k);
        }
      }
    }
    return {.input = Tensor::from_vector(x, {count, kIn}), .target = Tensor::from_vector(labels, {count})};
  }

  std::uint64_t seed_ = 0;
  std::vector<float> teacher_;
};

}  // namespace

// ---- the model as the planner sees it (--dry-run, --auto) ---------------------

/// One layer (the whole MLP: it does not split into pipeline stages), per
/// row: fc1's weight and bias and fc2's weight split over tp, fc2's bias
/// whole; forward keeps fc1's input (whole), h and GELU(h) (split), the
/// logits (whole: fc2's output is summed over tp) and the loss's lse.
nn::ModelSpec mlp_spec() {
  nn::ModelSpec s;
  s.description = fmt::format("MLP {}-{}-{}", kIn, kHidden, kClasses);
  s.seq_len = 1;  // a row is one "token"
  s.width = kIn;
  s.tp_divides = {kHidden};
  nn::LayerSpec l;
  l.name = "mlp";
  l.params_split = kIn * kHidden + kHidden + kHidden * kClasses;
  l.params_replicated = kClasses;
  l.gemm_flops = 2.0 * double(kIn * kHidden + kHidden * kClasses);
  const nn::TokenElements kept{.split = 2.0 * kHidden, .replicated = double(kIn + kClasses), .f32_replicated = 1};
  l.saved = {kept, kept, kept};
  l.backward_workspace = {.split = double(kHidden), .replicated = double(kIn)};
  l.traffic = {.split = 4.0 * kHidden};
  l.tp_allreduce = double(kClasses);
  l.tp_allreduces = 1;
  l.ops = 6;
  s.layers.push_back(l);
  return s;
}

// ---- the program: flags, data, model, engine ---------------------------------

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/custom";
  flags.engine.steps = 150;
  flags.engine.layout.micro_batch = 64;
  flags.engine.lr = 1e-2f;
  flags.engine.min_lr = 1e-3f;
  flags.engine.warmup_steps = 10;
  flags.engine.eval_every = 50;
  flags.engine.eval_samples = 256;
  CLI::App app{"Train an MLP classifier of one's own with hypertrain's engine."};
  flags.add_to(app);
  CLI11_PARSE(app, argc, argv);
  flags.model_spec = mlp_spec;  // for --dry-run and --auto
  return train::run_job("custom_program", flags, [&](train::Job& job) {
    TeacherData data;
    train::Engine engine(job, flags.engine, [](const nn::Placement& at) { return std::make_unique<Mlp>(at); }, data);
    const bool fresh = engine.resumed_from() == 0;
    const double before = engine.evaluate().loss;
    flags.fit.at_end = [&](train::Engine& e) {
      const double after = e.evaluate().loss;
      const auto weights = e.full_parameters();  // rank 0 holds them all
      if (!job.rank0()) return;
      std::uint64_t h = 0;
      for (const auto& [name, t] : weights) h = h * 0x100000001b3ull ^ ckpt::checksum64(t.data_ptr(), t.nbytes());
      std::printf("# weights %016llx\n# val loss %.4f -> %.4f\n", (unsigned long long)h, before, after);
      HT_CHECK(!fresh || after < 0.5 * before, ErrorKind::kInternal,
               "the validation loss did not halve ({:.4f} -> {:.4f}): training is broken", before, after);
    };
    train::fit(job, engine, flags.fit);
  });
}
