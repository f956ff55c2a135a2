// The ops on Vars (nn/functional.h) for ops_torch_check.py, which computes
// the same with PyTorch from the same inputs: each case runs one op on a
// tape, backpropagates a seeded upstream gradient and writes the inputs, the
// output and the input's gradient. --list names the cases.
//
// File layout: /x (the input, f32), other inputs as datasets of their own
// (/targets i32), /out (the output), /dout (the upstream gradient), /dx (the
// gradient of x); the op's settings as attributes of the root group.
#include <functional>
#include <random>

#include "ht/nn/functional.h"
#include "reference_export.h"

namespace ht::test {
namespace {

Tensor uniform(const Shape& shape, std::mt19937& rng, float lo = -2.f, float hi = 2.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

/// Runs `op` on x on a tape, then its backward from `dout` (drawn in the
/// output's shape), and writes x, out, dout and dx.
void run_on_tape(ReferenceWriter& w, const Tensor& x, const std::function<nn::Var(const nn::Var&)>& op,
                 std::mt19937& rng) {
  nn::Context ctx(Device::cpu(), /*save_for_backward=*/true);
  nn::Tape tape(ctx);
  const nn::Var out = op(tape.input(x));
  tape.set_output(out);
  const Tensor dout = uniform(out.shape(), rng);
  const Tensor dx = tape.backward(ctx, dout);
  w.write("x", x);
  w.write("out", out.tensor());
  w.write("dout", dout);
  w.write("dx", dx);
}

struct CrossEntropyCase {
  const char* name;
  std::optional<std::int32_t> ignore_index;
  float smoothing;
  ops::Reduction reduction;
};
const CrossEntropyCase kCrossEntropy[] = {
    {"cross_entropy_mean", std::nullopt, 0.f, ops::Reduction::kMean},
    {"cross_entropy_ignore_smooth_mean", -100, 0.1f, ops::Reduction::kMean},
    {"cross_entropy_ignore_sum", -100, 0.f, ops::Reduction::kSum},
    {"cross_entropy_ignore_other_id_sum", 3, 0.f, ops::Reduction::kSum},  // an id inside the vocabulary
    {"cross_entropy_smooth_sum", std::nullopt, 0.2f, ops::Reduction::kSum},
};

void cross_entropy_case(const CrossEntropyCase& c, const std::string& path) {
  std::mt19937 rng(11);
  const std::int64_t b = 3, t = 5, v = 13;
  const Tensor logits = uniform({b, t, v}, rng, -4.f, 4.f);
  std::uniform_int_distribution<std::int32_t> id(0, std::int32_t(v - 1));
  std::bernoulli_distribution ignored(0.3);
  Tensor targets = Tensor::empty({b, t}, DType::kI32);
  for (std::int64_t i = 0; i < targets.numel(); ++i)
    targets.data<std::int32_t>()[i] = c.ignore_index && ignored(rng) ? *c.ignore_index : id(rng);
  ReferenceWriter w(path);
  const nn::CrossEntropyOptions o{.ignore_index = c.ignore_index, .label_smoothing = c.smoothing,
                                  .reduction = c.reduction};
  run_on_tape(w, logits, [&](const nn::Var& x) { return nn::cross_entropy(x, targets, o); }, rng);
  w.write("targets", targets);
  w.attr("ignore_index", c.ignore_index ? double(*c.ignore_index) : -100.0);
  w.attr("label_smoothing", double(c.smoothing));
  w.attr("sum", c.reduction == ops::Reduction::kSum ? 1.0 : 0.0);
  w.attr("count", double(nn::count_targets(targets, c.ignore_index)));  // token_cross_entropy's
}

/// The shape ops and softmaxes on x (2, 5, 6); ops_torch_check.py runs the
/// same expression in PyTorch for each name.
struct ShapeCase {
  const char* name;
  std::function<nn::Var(const nn::Var&)> op;
};
const ShapeCase kShape[] = {
    {"concat_narrow",  // torch.cat([x[:, 2:5], x, x[:, 0:2]], 1): x's gradient sums three parts
     [](const nn::Var& x) { return nn::concat({nn::narrow(x, 1, 2, 3), x, nn::narrow(x, 1, 0, 2)}, 1); }},
    {"split_concat",  // a, b, c = x.split([1, 3, 2], -1); torch.cat([c, a, b], 0)
     [](const nn::Var& x) {
       const std::vector<nn::Var> p = nn::split(x, {1, 3, 2}, -1);
       return nn::concat({p[2] * 2.f, p[0], p[1]}, -1);
     }},
    {"transpose_0_2", [](const nn::Var& x) { return nn::transpose(x, 0, 2); }},
    {"transpose_1_2", [](const nn::Var& x) { return nn::transpose(x, -1, 1); }},
    {"softmax", [](const nn::Var& x) { return nn::softmax(x); }},
    {"log_softmax", [](const nn::Var& x) { return nn::log_softmax(x); }},
    {"softmax_of_transpose", [](const nn::Var& x) { return nn::softmax(nn::transpose(x, 1, 2)); }},
};

void shape_case(const ShapeCase& c, const std::string& path) {
  std::mt19937 rng(13);
  ReferenceWriter w(path);
  run_on_tape(w, uniform({2, 5, 6}, rng, -3.f, 3.f), c.op, rng);
}

/// Attention with x (2, tq + tk, 24) cut into q (2, tq, 24: 4 heads of 6),
/// and k, v (2, tk, 12 each: 2 key/value heads) from the other rows; the key
/// mask keeps key 0 of every batch entry (no query is left without keys)
/// and masks the last two keys of entry 1. With segments (tq == tk), entry
/// 0 holds documents of 20, 45 and the rest of the positions, entry 1 the
/// unsorted ids (7 j / 5) mod 3.
struct AttentionCase {
  const char* name;
  std::int64_t tq, tk;
  bool causal, masked;
  std::int64_t offset = 0;  // causal: query i sees keys j <= i + offset
  bool segments = false;    // segment ids (document masking)
};
const AttentionCase kAttention[] = {
    {"attention_cross", 3, 5, false, false},
    {"attention_cross_masked", 4, 6, false, true},
    {"attention_cross_causal_masked", 5, 3, true, true},  // queries past the keys see them all
    {"attention_self_causal", 6, 6, true, false},
    {"attention_cross_tiles", 70, 130, false, true},  // several of the CPU driver's 64-row and 64-key tiles
    {"attention_cross_causal_tiles", 130, 70, true, true},
    {"attention_causal_bottom_right", 4, 9, true, true, 5},  // the last 4 of 9 positions
    {"attention_causal_offset_tiles", 70, 200, true, false, 130},
    {"attention_self_documents", 7, 7, false, false, 0, true},
    {"attention_self_causal_documents_masked", 70, 70, true, true, 0, true},  // across the 64-wide tiles
};

void attention_case(const AttentionCase& c, const std::string& path) {
  std::mt19937 rng(17);
  ReferenceWriter w(path);
  std::vector<std::int32_t> keep(std::size_t(2 * c.tk), 1);
  if (c.masked) keep[std::size_t(2 * c.tk - 1)] = keep[std::size_t(2 * c.tk - 2)] = 0;
  const Tensor mask = Tensor::from_vector(keep, {2, c.tk});
  std::vector<std::int32_t> ids(std::size_t(2 * c.tk));
  for (std::int64_t j = 0; j < c.tk; ++j) {
    ids[std::size_t(j)] = j < 20 ? 0 : j < 65 ? 1 : 2;
    ids[std::size_t(c.tk + j)] = std::int32_t(7 * j / 5 % 3);
  }
  const Tensor segments = Tensor::from_vector(ids, {2, c.tk});
  const ops::AttentionOptions o{.n_head = 4, .n_kv_head = 2, .causal = c.causal, .causal_offset = c.offset};
  run_on_tape(
      w, uniform({2, c.tq + c.tk, 24}, rng),
      [&](const nn::Var& x) {
        const nn::Var q = nn::narrow(x, 1, 0, c.tq), kv = nn::narrow(x, 1, c.tq, c.tk);
        const nn::Var k = nn::narrow(kv, 2, 0, 12), v = nn::narrow(kv, 2, 12, 12);
        return nn::attention(q, k, v, o, c.masked ? x.tape().constant(mask) : nn::Var(),
                             c.segments ? x.tape().constant(segments) : nn::Var());
      },
      rng);
  w.write("key_mask", mask);
  if (c.segments) w.write("segment_ids", segments);
  w.attr("tq", double(c.tq));
  w.attr("causal", c.causal ? 1.0 : 0.0);
  w.attr("offset", double(c.offset));
}

}  // namespace
}  // namespace ht::test

int main(int argc, char** argv) {
  using namespace ht::test;
  std::vector<std::string> names;
  for (const CrossEntropyCase& c : kCrossEntropy) names.push_back(c.name);
  for (const ShapeCase& c : kShape) names.push_back(c.name);
  for (const AttentionCase& c : kAttention) names.push_back(c.name);
  return reference_export_main(argc, argv, "ops_reference_export", names,
                               [](const std::string& name, const std::string& path) {
                                 for (const CrossEntropyCase& c : kCrossEntropy)
                                   if (name == c.name) cross_entropy_case(c, path);
                                 for (const ShapeCase& c : kShape)
                                   if (name == c.name) shape_case(c, path);
                                 for (const AttentionCase& c : kAttention)
                                   if (name == c.name) attention_case(c, path);
                               });
}
