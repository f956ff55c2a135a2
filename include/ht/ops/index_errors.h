// Index errors that CUDA ops defer to the host's next read.
//
// On the CPU an op that reads indices throws at once when one is out of
// range. On a CUDA device the embedding and cross-entropy do not make the
// host wait to check their token ids and targets (a training step would
// otherwise wait on the device several times per micro-batch): an id outside
// the vocabulary is skipped on the device (an embedding row holds the
// position term alone and scatters no gradient; a cross-entropy row's loss is
// 0 and its target gets no -1 in the gradient) and the lowest position is
// recorded there. raise_index_errors reads the record
// and throws; the engine calls it once per step, where it reads the loss
// anyway, so a bad token still stops training before the optimizer step that
// would use its gradients. (The engine also checks every batch on the host
// when it is drawn: nn::Model::check_batch.)
#pragma once

#include "ht/core/device.h"

namespace ht::ops {

/// Throws ht::Error(kOutOfRange) naming the op, the index, its position and
/// the valid range if a CUDA op on `device` recorded an index error since the
/// last call (the embedding's first when both ops did; each op keeps its own
/// record), and clears every record. A host wait on the
/// current stream for a CUDA device; returns at once for the CPU.
void raise_index_errors(Device device);

}  // namespace ht::ops
