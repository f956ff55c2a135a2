// DType parsing.
#include "ht/core/dtype.h"

#include <string>

#include "ht/core/error.h"

namespace ht {

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("unknown dtype '{}': use fp32, fp16, bf16 or i32", name));
}

}  // namespace ht
