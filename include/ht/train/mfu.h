// ht::train MFU: model FLOPs utilisation, the model's own FLOPs per token
// (nn::Model::flops_per_token) times tokens a second over the ranks' peak.
// The peak is measured the way train_throughput measures it: the best of a
// few square GEMMs through ht::ops::matmul on the rank's device, in the
// dtype the step's GEMMs run in (on the CPU always f32: 16-bit operands are
// widened there), unless the run is given one (--peak-tflops).
#pragma once

#include <cstdint>

#include "ht/core/device.h"
#include "ht/core/dtype.h"

namespace ht::train {

/// Best GFLOP/s of `runs` square GEMMs of side n in `dtype` (f32
/// accumulation) through ht::ops::matmul on `device`, after one warm-up.
double measure_gemm_peak_gflops(Device device, DType dtype, std::int64_t n, int runs);

/// The dtype whose GEMM rate bounds a step computing in `compute` on `device`.
DType peak_dtype(Device device, DType compute);

/// MFU in percent: `flops_per_token` x `tokens_per_s` over `ranks` x
/// `peak_tflops`; 0 when either is unknown (0).
double mfu_percent(double flops_per_token, double tokens_per_s, int ranks, double peak_tflops);

}  // namespace ht::train
