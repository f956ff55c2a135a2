// cuBLAS is opened on first use, not linked (core/cublas_api.h): the library
// opens and every function the library calls resolves. No device is needed
// for either, so this runs on CPU-only machines too.
#include <gtest/gtest.h>

#include <string>

#include "core/cublas_api.h"

namespace ht::detail {
namespace {

TEST(CublasApi, OpensOnFirstUseAndResolvesEveryFunction) {
  const CublasApi& api = cublas();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.destroy, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.set_math_mode, nullptr);
  EXPECT_NE(api.gemm_strided_batched_ex_64, nullptr);
  ASSERT_NE(api.status_name, nullptr);
  ASSERT_NE(api.status_string, nullptr);
  // The status functions run without a device: cuBLAS itself answers.
  EXPECT_EQ(std::string(api.status_name(CUBLAS_STATUS_NOT_INITIALIZED)), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_FALSE(std::string(api.status_string(CUBLAS_STATUS_SUCCESS)).empty());
  EXPECT_EQ(&cublas(), &api) << "opened once";
}

}  // namespace
}  // namespace ht::detail
