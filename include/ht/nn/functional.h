// Ops on Vars for forward-only modules (Module::compute): each computes with
// the library's op of the same name (ht/ops) and, when its tape records,
// records how to backpropagate (tape.h). Values keep their dtype: under
// mixed precision a module's activations are in the compute dtype, and so
// are their gradients; losses are f32.
//
//   Var compute(const Var& x) override {
//     const Var h = x + attn_(norm1_(x));          // a residual branch
//     return h + mlp_(norm2_(h));
//   }
//
// Shapes follow PyTorch's, with broadcasting only along the last dimension
// (a 1-d right operand the size of the left's last dimension, as a bias or a
// per-channel gain). Errors are the ops' own (kShapeMismatch naming the
// shapes, kDTypeMismatch, ...). Every result is a new tensor except view().
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ht/nn/loss.h"
#include "ht/nn/tape.h"
#include "ht/ops/attention.h"
#include "ht/ops/matmul.h"
#include "ht/ops/reduce.h"

namespace ht::nn {

/// a + b: the same shape, or b 1-d of a's last dimension (broadcast over rows).
Var operator+(const Var& a, const Var& b);
/// a - b, shaped as a + b.
Var operator-(const Var& a, const Var& b);
/// a * b element-wise, shaped as a + b.
Var operator*(const Var& a, const Var& b);
/// a * s.
Var operator*(const Var& a, float s);
inline Var operator*(float s, const Var& a) { return a * s; }

/// GELU, tanh approximation (GPT-2's).
Var gelu(const Var& x);
/// SiLU, x sigmoid(x).
Var silu(const Var& x);

/// a (..., K) times b: (K, N), or (N, K) with trans_b; the result (..., N).
/// The leading dimensions of a are rows of one GEMM.
Var matmul(const Var& a, const Var& b, bool trans_b = false);

/// The sum or mean over dimension `dim` (negative: from the end), which goes.
Var sum(const Var& x, int dim);
Var mean(const Var& x, int dim);
/// Mean pooling of x (B, T, C) over the positions whose mask (B, T) i32 is
/// non-zero (a padding mask: Tape::side_input("key_mask")): (B, C); a row
/// with no position kept pools to 0.
Var masked_mean(const Var& x, const Var& mask);
/// The entries `index` (1-d i32) of x along `dim`.
Var index_select(const Var& x, int dim, const Var& index);
/// The same values in another shape of the same element count (no copy).
Var view(const Var& x, const Shape& shape);
/// xs side by side along `dim` (negative: from the end): their other
/// dimensions and dtypes equal (torch.cat). At least one.
Var concat(const std::vector<Var>& xs, int dim);
/// x's elements [start, start + length) along `dim`, copied (torch.narrow).
Var narrow(const Var& x, int dim, std::int64_t start, std::int64_t length);
/// x cut along `dim` into consecutive parts of `sizes`, which add up to
/// x.size(dim) (torch.split with a list).
std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, int dim);
/// x with dimensions d0 and d1 swapped, copied (torch.transpose(...).contiguous()).
Var transpose(const Var& x, int d0, int d1);
/// Softmax and log-softmax over the last dimension.
Var softmax(const Var& x);
Var log_softmax(const Var& x);
/// Scaled dot-product attention (ops/attention.h: flash attention,
/// grouped-query heads, scale 1/sqrt(D)): q (B, T, H*D), k and v (B, Tk,
/// KV*D) -> (B, T, H*D). Tk may differ from T (cross-attention: keys and
/// values from an encoder's memory). `key_mask`: the (B, Tk) i32 keys that
/// may be attended (nonzero; a padding mask, e.g. Tape::side_input of its
/// name), or an undefined Var for all. options.causal: query i sees keys
/// j <= i (PyTorch's is_causal). `segment_ids`: self-attention only (Tk ==
/// T), the (B, T) i32 segment of each position (the documents of a packed
/// row, e.g. Tape::side_input(data::kDocumentIdsSide)); query i sees key j
/// only of its own segment. An undefined Var: none.
Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options,
              const Var& key_mask = {}, const Var& segment_ids = {});

/// As PyTorch's F.cross_entropy arguments of the same names.
struct CrossEntropyOptions {
  /// Targets equal to it count for nothing (PyTorch's -100 is a common
  /// choice); none by default, and any target outside [0, V) is an error.
  std::optional<std::int32_t> ignore_index;
  float label_smoothing = 0.f;  // [0, 1)
  /// kMean: over the targets not ignored (0 when all are); kSum.
  ops::Reduction reduction = ops::Reduction::kMean;
};

/// The softmax cross-entropy of logits (..., V) against targets (...) i32
/// in [0, V): an f32 scalar (shape {}).
Var cross_entropy(const Var& logits, const Tensor& targets, const CrossEntropyOptions& options = {});
/// The token-normalised cross-entropy (nn/loss.h): the sum over the
/// targets not ignored, and their count; the engine divides the step's
/// sum by the step's count. options.reduction is not read.
Loss token_cross_entropy(const Var& logits, const Tensor& targets, const CrossEntropyOptions& options = {});
/// How many of `targets` (i32, any device) are not `ignore_index`.
std::int64_t count_targets(const Tensor& targets, std::optional<std::int32_t> ignore_index);
/// The mean squared error of pred against target (one shape): an f32 scalar.
Var mse(const Var& pred, const Tensor& target);

}  // namespace ht::nn
