// ht::nn::Loss: a micro-batch's loss as a model gives it to the engine.
//
// A loss is either a mean over its micro-batch (what cross_entropy and mse
// give by default; the engine averages the step's micro-batch means, each
// weighing 1/(k dp) for k accumulated micro-batches on dp data-parallel
// ranks), or a sum over a count of things (the tokens of variable-length
// targets that are not padding). A summed loss is token-normalised: the
// engine adds the sums and the counts over the step's micro-batches and
// data-parallel ranks and divides once, so the loss and the gradient are
// the whole batch's per-token mean under every layout. (A mean of micro-
// batch means weighs a token of a short micro-batch more than one of a long
// one, and how the batch is cut into micro-batches depends on the layout.)
#pragma once

#include "ht/nn/tape.h"

namespace ht::nn {

struct Loss {
  /// A mean over the micro-batch.
  Loss(Var mean) : value(std::move(mean)) {}  // NOLINT(google-explicit-constructor): a Var is a mean loss
  /// A sum over `count` things (count >= 0; tokens, say): token-normalised.
  static Loss sum(Var sum, double count) {
    Loss l(std::move(sum));
    l.summed = true;
    l.count = count;
    return l;
  }
  Var value;  // an f32 scalar
  bool summed = false;
  double count = 1;  // what a summed loss is over; 1 for a mean
};

/// The numbers of a micro-batch's loss, as Model::forward_loss reports them.
struct LossValue {
  double value = 0;  // the mean, or the sum
  bool summed = false;
  double count = 1;  // what a sum is over; 1 for a mean
  /// The micro-batch's own mean (0 for a sum over nothing).
  double mean() const { return !summed ? value : count > 0 ? value / count : 0.0; }
};

}  // namespace ht::nn
