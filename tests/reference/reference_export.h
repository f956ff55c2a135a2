// What gpt_reference_export and llama_reference_export share: the HDF5 file
// they write for the PyTorch checks, one model's forward, backward and AdamW
// step recorded into it, and the command line (--list | CASE OUT.h5).
//
// File layout (every float dataset f32, in the parameter's own shape):
//   /params/<name>      initial values        attribute weight_decay (0/1)
//   /grads/<name>       gradient of the mean loss
//   /after_step/<name>  values after one AdamW step
//   /tokens, /targets   (B, T) i32
//   /loss               scalar f32
// and the model, batch and optimizer settings as attributes of the root group.
#pragma once

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/h5_check.h"
#include "ht/core/rng.h"
#include "ht/nn/model.h"
#include "ht/optim/adamw.h"

namespace ht::test {

inline constexpr float kReferenceLr = 1e-3f;
inline constexpr optim::AdamWOptions kReferenceAdamW{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

class ReferenceWriter {
 public:
  explicit ReferenceWriter(const std::string& path)
      : path_(path),
        file_(HT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path)) {
    for (const char* g : {"params", "grads", "after_step"}) {
      const detail::H5Group group(HT_H5_CHECK(H5Gcreate2(file_.get(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path_));
    }
  }

  /// Writes `t` (f32 or i32, copied to the host) as dataset `name`, shape as
  /// is; returns the open dataset (for attributes).
  detail::H5Dataset write(const std::string& name, const Tensor& t) {
    std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
    detail::H5Dataspace space(HT_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr), path_));
    const bool f32 = t.dtype() == DType::kF32;
    const hid_t type = f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32;
    detail::H5Dataset d(HT_H5_CHECK(
        H5Dcreate2(file_.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path_));
    const Tensor host = t.to(Device::cpu());
    HT_H5_CHECK(H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data_ptr()), path_ + ":" + name);
    return d;
  }
  void write_scalar(const std::string& name, float value) {
    detail::H5Dataspace space(HT_H5_CHECK(H5Screate(H5S_SCALAR), path_));
    detail::H5Dataset d(HT_H5_CHECK(H5Dcreate2(file_.get(), name.c_str(), H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT,
                                               H5P_DEFAULT, H5P_DEFAULT),
                                    path_));
    HT_H5_CHECK(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), path_ + ":" + name);
  }
  /// A scalar attribute on object `obj` (the root group by default).
  void attr(const char* name, double value, hid_t obj = -1) {
    detail::H5Dataspace space(HT_H5_CHECK(H5Screate(H5S_SCALAR), path_));
    detail::H5Attribute a(HT_H5_CHECK(
        H5Acreate2(obj < 0 ? file_.get() : obj, name, H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
        path_));
    HT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), path_ + ":" + name);
  }

 private:
  std::string path_;
  detail::H5File file_;
};

/// Moves the parameters `scale_of(name)` gives a non-zero scale for off their
/// initial values by scale x N(0, 1) draws (seeded), so that a bias or gain
/// applied on the wrong axis, or not at all, shows in the forward pass and
/// not only in the gradients.
inline void perturb(nn::Model& model, std::uint64_t seed, const std::function<float(const std::string&)>& scale_of) {
  Rng rng(seed ^ 0x5eedu);
  for (nn::Parameter* p : model.parameters()) {
    const float scale = scale_of(p->name());
    if (scale == 0.f) continue;
    std::vector<float> v = p->data().to_vector<float>();
    for (float& x : v) x += scale * rng.normal();
    p->data().copy_from(Tensor::from_vector(v, p->data().shape()));
  }
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Records one batch of `model` (initialised) into `w`: the batch (tokens
/// and targets from one random stream per row of T + 1 ids, so targets are
/// the next tokens; a small vocabulary repeats tokens, which exercises the
/// accumulation in the embedding's backward), the parameters, the loss, the
/// gradients and the values after one AdamW step, with the batch and
/// optimizer settings as attributes. Returns the loss.
inline float record_reference_step(nn::Model& model, std::int64_t vocab, std::int64_t batch, std::int64_t seq_len,
                                   std::uint64_t seed, ReferenceWriter& w) {
  Rng rng(seed);
  std::vector<std::int32_t> tokens, targets;
  for (std::int64_t b = 0; b < batch; ++b) {
    std::vector<std::int32_t> row;
    for (std::int64_t t = 0; t <= seq_len; ++t) row.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
    tokens.insert(tokens.end(), row.begin(), row.end() - 1);
    targets.insert(targets.end(), row.begin() + 1, row.end());
  }
  const Tensor tok = Tensor::from_vector(tokens, {batch, seq_len});
  const Tensor tgt = Tensor::from_vector(targets, {batch, seq_len});
  w.attr("batch", double(batch));
  w.attr("seq_len", double(seq_len));
  w.attr("seed", double(seed));
  w.attr("lr", double(kReferenceLr));
  w.attr("beta1", double(kReferenceAdamW.beta1));
  w.attr("beta2", double(kReferenceAdamW.beta2));
  w.attr("eps", double(kReferenceAdamW.eps));
  w.attr("weight_decay", double(kReferenceAdamW.weight_decay));
  w.write("tokens", tok);
  w.write("targets", tgt);
  for (nn::Parameter* p : model.parameters()) {
    const detail::H5Dataset d = w.write("params/" + p->name(), p->data());
    w.attr("weight_decay", p->weight_decay() ? 1.0 : 0.0, d.get());
  }
  nn::Context ctx;
  model.zero_grad();
  const float loss = float(model.forward_loss(ctx, tok, tgt).value);
  model.backward_loss(ctx, 1.f);
  w.write_scalar("loss", loss);
  for (nn::Parameter* p : model.parameters()) w.write("grads/" + p->name(), p->grad());
  optim::AdamW adamw(optim::slots_of(model.parameters()), kReferenceAdamW);
  adamw.step(kReferenceLr);
  for (nn::Parameter* p : model.parameters()) w.write("after_step/" + p->name(), p->data());
  return loss;
}

/// main() of an exporter: `--list` prints `names`, `CASE OUT.h5` runs
/// `run(case, path)`. Exit 0, 1 on an error, 2 on a usage error.
inline int reference_export_main(int argc, char** argv, const char* program, const std::vector<std::string>& names,
                                 const std::function<void(const std::string&, const std::string&)>& run) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const std::string& n : names) std::printf("%s\n", n.c_str());
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s --list | CASE OUT.h5\n", argv[0]);
    return 2;
  }
  for (const std::string& n : names) {
    if (n != argv[1]) continue;
    try {
      run(n, argv[2]);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", program, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "%s: unknown case '%s' (see --list)\n", program, argv[1]);
  return 2;
}

}  // namespace ht::test
