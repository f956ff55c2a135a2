// Ops on Vars: each op's forward, and the backward its tape node runs.
#include "ht/nn/functional.h"

#include "ht/ops/cross_entropy.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/index_select.h"
#include "ht/ops/movement.h"
#include "ht/ops/mse.h"
#include "ht/ops/reduce.h"
#include "ht/ops/silu.h"
#include "ht/ops/softmax.h"

namespace ht::nn {
namespace {

Tensor like(const Tensor& t, DType dtype) {
  return Tensor::empty(t.shape(), dtype, t.device(), MemCategory::kActivations);
}
Tensor like(const Tensor& t) { return like(t, t.dtype()); }

/// Whether b broadcasts over a's rows (1-d, a's last dimension) rather than matching a.
bool broadcasts(const Var& a, const Var& b) {
  return b.ndim() == 1 && a.ndim() > 1 && b.size(0) == a.shape().back();
}

/// The gradient of a broadcast operand: the column sums of g over a's rows.
Tensor column_sums(const Tensor& g) {
  Tensor db = Tensor::zeros({g.shape().back()}, g.dtype(), g.device(), MemCategory::kActivations);
  ops::bias_grad(g.flatten_rows(), db);
  return db;
}

/// a + s b (s = 1 or -1).
Var add_scaled(const Var& a, const Var& b, float s) {
  Tensor out = like(a.tensor());
  const bool bc = broadcasts(a, b);
  if (bc) {
    out.copy_from(a.tensor());
    Tensor bias = b.tensor();
    if (s != 1.f) {
      bias = b.tensor().clone();
      ops::scale(bias, s);
    }
    Tensor rows = out.flatten_rows();
    ops::bias_add(rows, bias);
  } else if (s == 1.f) {
    ops::add(a.tensor(), b.tensor(), out);
  } else {
    out.copy_from(b.tensor());
    ops::scale(out, s);
    ops::add(a.tensor(), out, out);
  }
  return a.tape().record(std::move(out), {a, b}, {},
                         [bc, s](Context&, const Tensor& dy, const std::vector<Tensor>&, const std::vector<bool>& needs) {
                           Tensor db;
                           if (needs[1]) {
                             db = bc ? column_sums(dy) : dy;
                             if (s != 1.f) {
                               db = db.clone();
                               ops::scale(db, s);
                             }
                           }
                           return std::vector<Tensor>{needs[0] ? dy : Tensor(), db};
                         });
}

}  // namespace

Var operator+(const Var& a, const Var& b) { return add_scaled(a, b, 1.f); }
Var operator-(const Var& a, const Var& b) { return add_scaled(a, b, -1.f); }

Var operator*(const Var& a, const Var& b) {
  Tensor out = like(a.tensor());
  ops::mul(a.tensor(), b.tensor(), out);
  return a.tape().record(std::move(out), {a, b}, {a.tensor(), b.tensor()},
                         [](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>& needs) {
                           Tensor da = needs[0] ? like(s[0]) : Tensor(), db = needs[1] ? like(s[1]) : Tensor();
                           ops::mul_backward(dy, s[0], s[1], needs[0] ? &da : nullptr, needs[1] ? &db : nullptr);
                           return std::vector<Tensor>{da, db};
                         });
}

Var operator*(const Var& a, float s) {
  Tensor out = a.tensor().clone();
  ops::scale(out, s);
  return a.tape().record(std::move(out), {a}, {}, [s](Context&, const Tensor& dy, const std::vector<Tensor>&,
                                                      const std::vector<bool>&) {
    Tensor dx = dy.clone();
    ops::scale(dx, s);
    return std::vector<Tensor>{dx};
  });
}

namespace {

/// An element-wise activation y = f(x), its backward dx = f'(x) dy; keeps x.
using Activation = void (*)(const Tensor& x, Tensor& y);
using ActivationBackward = void (*)(const Tensor& x, const Tensor& dy, Tensor& dx);

Var activation(const Var& x, Activation forward, ActivationBackward backward) {
  Tensor y = like(x.tensor());
  forward(x.tensor(), y);
  return x.tape().record(std::move(y), {x}, {x.tensor()},
                         [backward](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
                           Tensor dx = like(dy);
                           backward(s[0], dy, dx);
                           return std::vector<Tensor>{dx};
                         });
}

}  // namespace

Var gelu(const Var& x) { return activation(x, ops::gelu_forward, ops::gelu_backward); }
Var silu(const Var& x) { return activation(x, ops::silu_forward, ops::silu_backward); }

Var matmul(const Var& a, const Var& b, bool trans_b) {
  HT_CHECK(b.ndim() == 2, ErrorKind::kShapeMismatch, "matmul: b must be 2-d, got {}", shape_str(b.shape()));
  const Tensor a2 = a.tensor().flatten_rows();
  Shape out_shape = a.shape();
  out_shape.back() = trans_b ? b.size(0) : b.size(1);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device(), MemCategory::kActivations);
  Tensor out2 = out.flatten_rows();
  ops::matmul(a2, b.tensor(), out2, {.trans_b = trans_b});
  return a.tape().record(
      std::move(out), {a, b}, {a.tensor(), b.tensor()},
      [trans_b](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>& needs) {
        const Tensor dy2 = dy.flatten_rows(), a2 = s[0].flatten_rows();
        Tensor da, db;
        if (needs[0]) {  // dA = dY B^T, or dY B when B is stored transposed
          da = like(s[0]);
          Tensor da2 = da.flatten_rows();
          ops::matmul(dy2, s[1], da2, {.trans_b = !trans_b});
        }
        if (needs[1]) {  // dB = A^T dY, or dY^T A when B is stored transposed
          db = like(s[1]);
          if (trans_b)
            ops::matmul(dy2, a2, db, {.trans_a = true});
          else
            ops::matmul(a2, dy2, db, {.trans_a = true});
        }
        return std::vector<Tensor>{da, db};
      });
}

namespace {

Var reduce_along(const Var& x, int dim, ops::Reduction r) {
  const int d = dim < 0 ? dim + x.ndim() : dim;
  Shape out_shape = x.shape();
  HT_CHECK(d >= 0 && d < x.ndim(), ErrorKind::kInvalidArgument, "sum/mean: dimension {} of a {}-d value", dim,
           x.ndim());
  out_shape.erase(out_shape.begin() + d);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device(), MemCategory::kActivations);
  ops::reduce(x.tensor(), d, r, out);
  const std::int64_t size = x.size(d);
  const Shape in_shape = x.shape();
  const DType dtype = x.dtype();
  return x.tape().record(std::move(out), {x}, {},
                         [=](Context&, const Tensor& dy, const std::vector<Tensor>&, const std::vector<bool>&) {
                           Tensor dx = Tensor::empty(in_shape, dtype, dy.device(), MemCategory::kActivations);
                           ops::reduce_backward(dy, d, size, r, dx);
                           return std::vector<Tensor>{dx};
                         });
}

}  // namespace

Var sum(const Var& x, int dim) { return reduce_along(x, dim, ops::Reduction::kSum); }
Var mean(const Var& x, int dim) { return reduce_along(x, dim, ops::Reduction::kMean); }

Var masked_mean(const Var& x, const Var& mask) {
  HT_CHECK(x.ndim() == 3, ErrorKind::kShapeMismatch, "masked_mean: x must be (B, T, C), got {}", shape_str(x.shape()));
  Tensor out = Tensor::empty({x.size(0), x.size(2)}, x.dtype(), x.device(), MemCategory::kActivations);
  ops::masked_mean(x.tensor(), mask.tensor(), out);
  const Shape in_shape = x.shape();
  return x.tape().record(std::move(out), {x, mask}, {mask.tensor()},
                         [in_shape](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
                           Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.device(), MemCategory::kActivations);
                           ops::masked_mean_backward(dy, s[0], dx);
                           return std::vector<Tensor>{dx, Tensor()};
                         });
}

Var index_select(const Var& x, int dim, const Var& index) {
  const int d = dim < 0 ? dim + x.ndim() : dim;
  HT_CHECK(d >= 0 && d < x.ndim() && index.ndim() == 1, ErrorKind::kInvalidArgument,
           "index_select: dimension {} of a {}-d value, with a 1-d index (got {})", dim, x.ndim(),
           shape_str(index.shape()));
  Shape out_shape = x.shape();
  out_shape[std::size_t(d)] = index.size(0);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device(), MemCategory::kActivations);
  ops::index_select(x.tensor(), d, index.tensor(), out);
  const Shape in_shape = x.shape();
  return x.tape().record(
      std::move(out), {x, index}, {index.tensor()},
      [d, in_shape](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
        Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.device(), MemCategory::kActivations);
        ops::index_select_backward(dy, d, s[0], dx);
        return std::vector<Tensor>{dx, Tensor()};
      });
}

Var view(const Var& x, const Shape& shape) {
  const Shape in_shape = x.shape();
  return x.tape().record(x.tensor().view(shape), {x}, {},
                         [in_shape](Context&, const Tensor& dy, const std::vector<Tensor>&, const std::vector<bool>&) {
                           return std::vector<Tensor>{dy.view(in_shape)};
                         });
}

Var concat(const std::vector<Var>& xs, int dim) {
  HT_CHECK(!xs.empty(), ErrorKind::kInvalidArgument, "concat: nothing to concatenate");
  const int nd = xs.front().ndim();
  HT_CHECK(dim >= -nd && dim < nd, ErrorKind::kInvalidArgument, "concat: dim {} is outside a tensor of shape {}", dim,
           shape_str(xs.front().shape()));
  if (dim < 0) dim += nd;
  Shape shape = xs.front().shape();
  shape[std::size_t(dim)] = 0;
  for (const Var& x : xs) {
    HT_CHECK(x.ndim() == nd, ErrorKind::kShapeMismatch, "concat: shapes {} and {} differ in rank",
             shape_str(xs.front().shape()), shape_str(x.shape()));
    shape[std::size_t(dim)] += x.size(dim);
  }
  Tensor out = Tensor::empty(shape, xs.front().dtype(), xs.front().device(), MemCategory::kActivations);
  std::vector<std::int64_t> starts;
  std::int64_t at = 0;
  for (const Var& x : xs) {
    starts.push_back(at);
    ops::narrow_into(x.tensor(), dim, at, out);  // checks the other dimensions and the dtype
    at += x.size(dim);
  }
  std::vector<Shape> shapes;
  for (const Var& x : xs) shapes.push_back(x.shape());
  return xs.front().tape().record(
      std::move(out), xs, {},
      [dim, starts, shapes](Context&, const Tensor& dy, const std::vector<Tensor>&, const std::vector<bool>& needs) {
        std::vector<Tensor> grads(shapes.size());
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          if (!needs[i]) continue;
          grads[i] = Tensor::empty(shapes[i], dy.dtype(), dy.device(), MemCategory::kActivations);
          ops::narrow(dy, dim, starts[i], grads[i]);
        }
        return grads;
      });
}

Var narrow(const Var& x, int dim, std::int64_t start, std::int64_t length) {
  const int nd = x.ndim();
  HT_CHECK(dim >= -nd && dim < nd, ErrorKind::kInvalidArgument, "narrow: dim {} is outside a tensor of shape {}", dim,
           shape_str(x.shape()));
  if (dim < 0) dim += nd;
  HT_CHECK(length >= 0, ErrorKind::kInvalidArgument, "narrow: length {} must be >= 0", length);
  Shape shape = x.shape();
  shape[std::size_t(dim)] = length;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device(), MemCategory::kActivations);
  ops::narrow(x.tensor(), dim, start, out);  // checks the slice lies in x
  return x.tape().record(std::move(out), {x}, {},
                         [dim, start, full = x.shape()](Context&, const Tensor& dy, const std::vector<Tensor>&,
                                                        const std::vector<bool>&) {
                           Tensor dx = Tensor::zeros(full, dy.dtype(), dy.device(), MemCategory::kActivations);
                           ops::narrow_into(dy, dim, start, dx);
                           return std::vector<Tensor>{dx};
                         });
}

std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, int dim) {
  const int nd = x.ndim();
  HT_CHECK(dim >= -nd && dim < nd, ErrorKind::kInvalidArgument, "split: dim {} is outside a tensor of shape {}", dim,
           shape_str(x.shape()));
  if (dim < 0) dim += nd;
  std::int64_t total = 0;
  for (std::int64_t n : sizes) total += n;
  HT_CHECK(total == x.size(dim), ErrorKind::kShapeMismatch, "split: sizes {} add up to {}, but x {} has {} along dim {}",
           fmt::join(sizes, ", "), total, shape_str(x.shape()), x.size(dim), dim);
  std::vector<Var> parts;
  std::int64_t at = 0;
  for (std::int64_t n : sizes) {
    parts.push_back(narrow(x, dim, at, n));
    at += n;
  }
  return parts;
}

Var transpose(const Var& x, int d0, int d1) {
  Shape shape = x.shape();
  const int nd = x.ndim();
  HT_CHECK(d0 >= -nd && d0 < nd && d1 >= -nd && d1 < nd, ErrorKind::kInvalidArgument,
           "transpose: dims {} and {} must lie in a tensor of shape {}", d0, d1, shape_str(x.shape()));
  std::swap(shape[std::size_t(d0 < 0 ? d0 + nd : d0)], shape[std::size_t(d1 < 0 ? d1 + nd : d1)]);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device(), MemCategory::kActivations);
  ops::transpose(x.tensor(), d0, d1, out);
  return x.tape().record(std::move(out), {x}, {},
                         [d0, d1, full = x.shape()](Context&, const Tensor& dy, const std::vector<Tensor>&,
                                                    const std::vector<bool>&) {
                           Tensor dx = Tensor::empty(full, dy.dtype(), dy.device(), MemCategory::kActivations);
                           ops::transpose(dy, d0, d1, dx);
                           return std::vector<Tensor>{dx};
                         });
}

namespace {

/// Softmax or log-softmax: keeps the output, which the backward reads.
Var softmax_of(const Var& x, bool log) {
  Tensor y = like(x.tensor());
  ops::softmax_forward(x.tensor(), y, log);
  const Tensor kept = y;
  return x.tape().record(std::move(y), {x}, {kept},
                         [log](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
                           Tensor dx = like(dy);
                           ops::softmax_backward(s[0], dy, dx, log);
                           return std::vector<Tensor>{dx};
                         });
}

}  // namespace

Var softmax(const Var& x) { return softmax_of(x, false); }
Var log_softmax(const Var& x) { return softmax_of(x, true); }

Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options, const Var& key_mask,
              const Var& segment_ids) {
  HT_CHECK(q.ndim() == 3, ErrorKind::kShapeMismatch, "attention: q must be (B, T, H*D), got {}", shape_str(q.shape()));
  Tensor out = like(q.tensor());
  Tensor lse = Tensor::empty({q.size(0), options.n_head, q.size(1)}, DType::kF32, q.device(), MemCategory::kActivations);
  const Tensor mask = key_mask.defined() ? key_mask.tensor() : Tensor();
  const Tensor ids = segment_ids.defined() ? segment_ids.tensor() : Tensor();
  const auto or_null = [](const Tensor& t) { return t.defined() ? &t : nullptr; };
  ops::attention_forward(q.tensor(), k.tensor(), v.tensor(), options, or_null(mask), or_null(ids), out, lse);
  const Tensor kept_out = out;
  return q.tape().record(
      std::move(out), {q, k, v}, {q.tensor(), k.tensor(), v.tensor(), kept_out, lse, mask, ids},
      [options, or_null](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
        Tensor dq = like(s[0]), dk = like(s[1]), dv = like(s[2]);
        ops::attention_backward(dy, s[0], s[1], s[2], s[3], s[4], options, or_null(s[5]), or_null(s[6]), dq, dk, dv);
        return std::vector<Tensor>{dq, dk, dv};
      });
}

Var cross_entropy(const Var& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  HT_CHECK(logits.ndim() >= 1 && targets.numel() * logits.shape().back() == logits.tensor().numel(),
           ErrorKind::kShapeMismatch, "cross_entropy: targets {} must have logits {}' shape without its last dimension",
           shape_str(targets.shape()), shape_str(logits.shape()));
  HT_CHECK(options.reduction == ops::Reduction::kMean || options.reduction == ops::Reduction::kSum,
           ErrorKind::kInvalidArgument, "cross_entropy: the reduction must be a mean or a sum");
  const ops::CrossEntropyOptions o{.ignore_index = options.ignore_index, .label_smoothing = options.label_smoothing};
  const std::int64_t rows = targets.numel();
  const Tensor flat = logits.tensor().flatten_rows(), t = targets.view({rows});
  Tensor losses = Tensor::empty({rows}, DType::kF32, logits.device(), MemCategory::kActivations);
  Tensor lse = Tensor::empty({rows}, DType::kF32, logits.device(), MemCategory::kActivations);
  ops::cross_entropy_forward(flat, t, losses, lse, o);
  // A mean is over the rows counted (ignored rows' losses are 0), as PyTorch's.
  const bool mean = options.reduction == ops::Reduction::kMean;
  const std::int64_t counted = !mean ? 1 : options.ignore_index ? count_targets(t, options.ignore_index) : rows;
  const float divisor = float(std::max<std::int64_t>(counted, 1));
  Tensor loss = Tensor::empty({}, DType::kF32, logits.device(), MemCategory::kActivations);
  ops::reduce(losses, 0, mean && counted == rows ? ops::Reduction::kMean : ops::Reduction::kSum, loss);
  if (mean && counted != rows) ops::scale(loss, 1.f / divisor);
  return logits.tape().record(
      std::move(loss), {logits}, {flat, t, lse},
      [divisor, o, shape = logits.shape()](Context&, const Tensor& dy, const std::vector<Tensor>& s,
                                           const std::vector<bool>&) {
        Tensor dlogits = Tensor::empty(shape, s[0].dtype(), s[0].device(), MemCategory::kActivations);
        Tensor d2 = dlogits.flatten_rows();
        ops::cross_entropy_backward(s[0], s[1], s[2], dy.item(0) / divisor, d2, {}, o);
        return std::vector<Tensor>{dlogits};
      });
}

Loss token_cross_entropy(const Var& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  CrossEntropyOptions sum = options;
  sum.reduction = ops::Reduction::kSum;
  return Loss::sum(cross_entropy(logits, targets, sum), double(count_targets(targets, options.ignore_index)));
}

std::int64_t count_targets(const Tensor& targets, std::optional<std::int32_t> ignore_index) {
  targets.check_dtype(DType::kI32, "count_targets: targets");
  if (!ignore_index) return targets.numel();
  std::int64_t n = 0;
  for (std::int32_t t : targets.to(Device::cpu()).to_vector<std::int32_t>()) n += t != *ignore_index;
  return n;
}

Var mse(const Var& pred, const Tensor& target) {
  Tensor loss = Tensor::empty({}, DType::kF32, pred.device(), MemCategory::kActivations);
  ops::mse_forward(pred.tensor(), target, loss);
  return pred.tape().record(std::move(loss), {pred}, {pred.tensor(), target},
                            [](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
                              Tensor dpred = like(s[0]);
                              ops::mse_backward(s[0], s[1], dy.item(0), dpred);
                              return std::vector<Tensor>{dpred};
                            });
}

}  // namespace ht::nn
