// ht::precision::Policy.
#include "ht/precision/policy.h"

#include "ht/core/error.h"

namespace ht::precision {

Policy parse_policy(const std::string& precision) {
  if (precision == "fp32" || precision == "f32") return {DType::kF32, DType::kF32};
  if (precision == "fp16" || precision == "f16") return {DType::kF16, DType::kF32};
  if (precision == "bf16") return {DType::kBF16, DType::kF32};
  HT_CHECK(false, ErrorKind::kConfig, "--precision '{}' is not a precision: choose fp32, fp16 or bf16", precision);
  return {};
}

std::string policy_name(const Policy& p) {
  switch (p.compute) {
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    default: return "fp32";
  }
}

}  // namespace ht::precision
