// regressor_train: a residual MLP regressor of one's own, forward-only, on
// the library's engine: vectors in, one number out, mean-squared error. A
// second shape of user model beside examples/encoder (no sequence, no mask,
// f32 inputs, an MSE loss), split into pipeline stages by its residual
// blocks, its MLPs over tensor parallelism: every flag the other programs
// take applies.
#include <cmath>
#include <memory>
#include <vector>

#include "ht/core/rng.h"
#include "ht/nn/functional.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/linear.h"
#include "ht/nn/mlp.h"
#include "ht/nn/model.h"
#include "ht/nn/sequential.h"
#include "ht/parallel/tables.h"
#include "ht/train/flags.h"

using namespace ht;

namespace {

struct RegressorConfig {
  std::int64_t features = 16, width = 64;
  int blocks = 4;
};

// in -> blocks x (x + MLP(LayerNorm(x))) -> LayerNorm -> out (one number).
class Regressor : public nn::Model {
 public:
  Regressor(const RegressorConfig& c, const nn::Placement& at) : Model("regressor", at), c_(c) {
    const auto [first, last] = parallel::stage_range(c.blocks, at.stage.rank, at.stage.size, at.stage.boundaries);
    if (first_stage()) in_ = &add_built(std::make_unique<nn::Linear>("in", c.features, c.width, true, at.device));
    for (int b = first; b < last; ++b) {
      auto block = std::make_unique<nn::Sequential>("mlp_norm");
      block->add(std::make_unique<nn::LayerNorm>("ln", c.width, at.device));
      block->add(std::make_unique<nn::MLP>("mlp", c.width, 2 * c.width, at.device, at.tp));
      blocks_.push_back(&add_built(std::make_unique<nn::Residual>(fmt::format("h.{}", b), std::move(block))));
    }
    if (last_stage()) {
      norm_ = &add_built(std::make_unique<nn::LayerNorm>("ln_f", c.width, at.device));
      out_ = &add_built(std::make_unique<nn::Linear>("out", c.width, 1, true, at.device));
    }
  }
  nn::Var compute(const nn::Var& x) override {
    nn::Var h = in_ ? (*in_)(x) : x;
    for (nn::Residual* block : blocks_) h = (*block)(h);
    return last_stage() ? nn::view((*out_)((*norm_)(h)), {x.size(0)}) : h;
  }
  nn::Loss loss(const nn::Var& y, const Tensor& target) override { return nn::mse(y, target); }
  Shape stage_input_shape(const Shape& input) const override { return {input[0], c_.width}; }
  int num_layers() const override { return c_.blocks; }
  std::string describe() const override {
    return fmt::format("Regressor F{} W{} B{}", c_.features, c_.width, c_.blocks);
  }

 private:
  RegressorConfig c_;
  nn::Linear* in_ = nullptr;
  std::vector<nn::Residual*> blocks_;
  nn::LayerNorm* norm_ = nullptr;
  nn::Linear* out_ = nullptr;
};

/// Sample i: x uniform in [-1, 1]^F drawn from (seed, i), y = sin(3 x.a) +
/// x.b^2 / 2 for fixed random directions a and b.
class SmoothTarget : public data::DataSource {
 public:
  explicit SmoothTarget(std::int64_t features) : f_(features) {}
  void attach(const data::DataShard& shard) override {
    seed_ = shard.seed;
    Rng rng(seed_ ^ 0xd1ec7ull);
    dirs_.resize(std::size_t(2 * f_));
    for (float& d : dirs_) d = rng.normal() / std::sqrt(float(f_));
  }
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override { return make(first, count, 1); }
  bool has_validation() const override { return true; }
  data::MicroBatch validation_samples(std::int64_t first, std::int64_t count) override {
    return make(first, count, 2);
  }

 private:
  data::MicroBatch make(std::int64_t first, std::int64_t count, std::uint64_t stream) const {
    std::vector<float> x(static_cast<std::size_t>(count * f_)), y(static_cast<std::size_t>(count));
    for (std::int64_t r = 0; r < count; ++r) {
      Rng rng;
      rng.set_state(seed_ ^ (stream << 60), std::uint64_t(first + r) * std::uint64_t(f_));
      float a = 0, b = 0;
      for (std::int64_t i = 0; i < f_; ++i) {
        const float v = x[std::size_t(r * f_ + i)] = 2.f * rng.uniform() - 1.f;
        a += v * dirs_[std::size_t(i)];
        b += v * dirs_[std::size_t(f_ + i)];
      }
      y[std::size_t(r)] = std::sin(3.f * a) + 0.5f * b * b;
    }
    return {.input = Tensor::from_vector(x, {count, f_}), .target = Tensor::from_vector(y, {count})};
  }

  std::int64_t f_;
  std::uint64_t seed_ = 0;
  std::vector<float> dirs_;
};

}  // namespace

int main(int argc, char** argv) {
  train::TrainFlags flags;
  flags.job.run_dir = "runs/regressor";
  flags.engine.steps = 200;
  flags.engine.layout.micro_batch = 32;
  flags.engine.lr = 3e-3f;
  flags.engine.min_lr = 3e-4f;
  flags.engine.warmup_steps = 10;
  flags.engine.eval_every = 50;
  flags.engine.eval_samples = 512;
  RegressorConfig model;
  CLI::App app{"Train a residual MLP to regress a smooth function of random vectors."};
  flags.add_to(app);
  app.add_option("--features", model.features, "input features");
  app.add_option("--width", model.width, "the residual stream's width");
  app.add_option("--layers", model.blocks, "residual MLP blocks");
  CLI11_PARSE(app, argc, argv);
  return train::run_job("regressor_train", flags, [&](train::Job& job) {
    SmoothTarget data(model.features);
    train::Engine engine(job, flags.engine,
                         [&](const nn::Placement& at) { return std::make_unique<Regressor>(model, at); }, data);
    train::fit(job, engine, flags.fit);
  });
}
