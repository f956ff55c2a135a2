// llama_reference_export: runs one small Llama through forward, backward and
// one AdamW step on the CPU and writes everything to an HDF5 file, so that
// llama_torch_check.py can redo the same computation in PyTorch and compare.
// gpt_reference_export's counterpart; the file layout is the same.
//
//   llama_reference_export --list          the case names, one per line
//   llama_reference_export CASE OUT.h5     writes one case
//
// File layout (every float dataset f32, in the parameter's own shape):
//   /params/<name>      initial values        attribute weight_decay (0/1)
//   /grads/<name>       gradient of the mean loss
//   /after_step/<name>  values after one AdamW step
//   /tokens, /targets   (B, T) i32
//   /loss               scalar f32
// and the model, batch and optimizer settings as attributes of the root group.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/h5_check.h"
#include "ht/core/rng.h"
#include "ht/models/llama.h"
#include "ht/optim/adamw.h"

namespace {

using ht::detail::H5Dataset;
using ht::detail::H5Dataspace;
using ht::detail::H5File;
using ht::detail::H5Group;

struct Case {
  const char* name;
  ht::models::LlamaConfig model;
  std::int64_t batch, seq_len;
  std::uint64_t seed;
};

// Grouped-query attention (two query heads per key/value head) with an odd
// vocabulary, an odd batch and a sequence shorter than the context (rotary
// table rows past T unused); multi-query attention (one key/value head for
// four query heads) on the full context with Llama 3's rotary base; and plain
// multi-head attention (n_kv_head = n_head). The RMSNorm gains are moved off
// their initial ones in every case (see perturb_gains).
const Case kCases[] = {
    {"gqa",
     {.vocab_size = 61, .context = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .ffn_hidden = 48},
     3, 7, 77},
    {"mqa",
     {.vocab_size = 64,
      .context = 16,
      .n_layer = 2,
      .n_head = 4,
      .n_kv_head = 1,
      .n_embd = 32,
      .ffn_hidden = 40,
      .rope_theta = 500000.f},
     2, 16, 1234},
    {"mha",
     {.vocab_size = 64, .context = 16, .n_layer = 1, .n_head = 2, .n_kv_head = 2, .n_embd = 16, .ffn_hidden = 24},
     4, 12, 5},
};

constexpr float kLr = 1e-3f;
constexpr ht::optim::AdamWOptions kAdamW{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Moves the RMSNorm gains (every 1-D parameter) off 1 after init_weights, so
// that a gain applied on the wrong axis, or not at all, shows in the forward
// pass and not only in the gradients.
void perturb_gains(ht::models::Llama& model, std::uint64_t seed) {
  ht::Rng rng(seed ^ 0x5eedu);
  for (ht::nn::Parameter* p : model.parameters()) {
    if (p->data().shape().size() != 1 || !ends_with(p->name(), "norm.weight")) continue;
    std::vector<float> v = p->data().to_vector<float>();
    for (float& x : v) x += 0.1f * rng.normal();
    p->data().copy_from(ht::Tensor::from_vector(v, p->data().shape()));
  }
}

class Writer {
 public:
  explicit Writer(const std::string& path)
      : path_(path), file_(HT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path)) {
    for (const char* g : {"params", "grads", "after_step"}) {
      const H5Group group(HT_H5_CHECK(H5Gcreate2(file_.get(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path_));
    }
  }

  /// Writes `t` (f32 or i32, copied to the host) as dataset `name`, shape as
  /// is; returns the open dataset (for attributes).
  H5Dataset write(const std::string& name, const ht::Tensor& t) {
    std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
    H5Dataspace space(HT_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr), path_));
    const bool f32 = t.dtype() == ht::DType::kF32;
    const hid_t type = f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32;
    H5Dataset d(HT_H5_CHECK(
        H5Dcreate2(file_.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path_));
    const ht::Tensor host = t.to(ht::Device::cpu());
    HT_H5_CHECK(H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data_ptr()), path_ + ":" + name);
    return d;
  }
  void write_scalar(const std::string& name, float value) {
    H5Dataspace space(HT_H5_CHECK(H5Screate(H5S_SCALAR), path_));
    H5Dataset d(HT_H5_CHECK(H5Dcreate2(file_.get(), name.c_str(), H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT),
                            path_));
    HT_H5_CHECK(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), path_ + ":" + name);
  }
  /// A scalar attribute on object `obj` (the root group by default).
  void attr(const char* name, double value, hid_t obj = -1) {
    H5Dataspace space(HT_H5_CHECK(H5Screate(H5S_SCALAR), path_));
    ht::detail::H5Attribute a(HT_H5_CHECK(
        H5Acreate2(obj < 0 ? file_.get() : obj, name, H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
        path_));
    HT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), path_ + ":" + name);
  }

 private:
  std::string path_;
  H5File file_;
};

void run_case(const Case& c, const std::string& path) {
  using namespace ht;
  models::Llama model(c.model);
  model.init_weights(c.seed);
  perturb_gains(model, c.seed);

  // Tokens and targets from one random stream per row of T + 1 ids, so
  // targets are the next tokens, as in training; a small vocabulary repeats
  // tokens, which exercises the accumulation in the embedding's backward.
  Rng rng(c.seed);
  std::vector<std::int32_t> tokens, targets;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    std::vector<std::int32_t> row;
    for (std::int64_t t = 0; t <= c.seq_len; ++t)
      row.push_back(std::int32_t(rng.below(std::uint64_t(c.model.vocab_size))));
    tokens.insert(tokens.end(), row.begin(), row.end() - 1);
    targets.insert(targets.end(), row.begin() + 1, row.end());
  }
  const Tensor tok = Tensor::from_vector(tokens, {c.batch, c.seq_len});
  const Tensor tgt = Tensor::from_vector(targets, {c.batch, c.seq_len});

  Writer w(path);
  w.attr("vocab_size", double(c.model.vocab_size));
  w.attr("context", double(c.model.context));
  w.attr("n_layer", double(c.model.n_layer));
  w.attr("n_head", double(c.model.n_head));
  w.attr("n_kv_head", double(c.model.n_kv_head));
  w.attr("n_embd", double(c.model.n_embd));
  w.attr("ffn_hidden", double(c.model.ffn_hidden));
  w.attr("rope_theta", double(c.model.rope_theta));
  w.attr("norm_eps", double(c.model.norm_eps));
  w.attr("batch", double(c.batch));
  w.attr("seq_len", double(c.seq_len));
  w.attr("seed", double(c.seed));
  w.attr("lr", double(kLr));
  w.attr("beta1", double(kAdamW.beta1));
  w.attr("beta2", double(kAdamW.beta2));
  w.attr("eps", double(kAdamW.eps));
  w.attr("weight_decay", double(kAdamW.weight_decay));
  w.write("tokens", tok);
  w.write("targets", tgt);
  for (nn::Parameter* p : model.parameters()) {
    const H5Dataset d = w.write("params/" + p->name(), p->data());
    w.attr("weight_decay", p->weight_decay() ? 1.0 : 0.0, d.get());
  }

  nn::Context ctx;
  model.zero_grad();
  const float loss = model.forward_loss(ctx, tok, tgt);
  model.backward_loss(ctx);
  w.write_scalar("loss", loss);
  for (nn::Parameter* p : model.parameters()) w.write("grads/" + p->name(), p->grad());

  optim::AdamW adamw(optim::slots_of(model.parameters()), kAdamW);
  adamw.step(kLr);
  for (nn::Parameter* p : model.parameters()) w.write("after_step/" + p->name(), p->data());
  std::printf("%s: %s, batch %lld x %lld, loss %.6f -> %s\n", c.name, c.model.str().c_str(), (long long)c.batch,
              (long long)c.seq_len, loss, path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Case& c : kCases) std::printf("%s\n", c.name);
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s --list | CASE OUT.h5\n", argv[0]);
    return 2;
  }
  for (const Case& c : kCases) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      run_case(c, argv[2]);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "llama_reference_export: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "llama_reference_export: unknown case '%s' (see --list)\n", argv[1]);
  return 2;
}
