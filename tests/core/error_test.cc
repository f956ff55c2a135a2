// ht::Error and its subclasses, HT_CHECK, and the parse errors of dtypes and
// devices, which must say what to use instead.
#include "ht/core/error.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ht/core/device.h"
#include "ht/core/dtype.h"
#include "test_util.h"

namespace ht {
namespace {

using test::throws_error;

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

TEST(Error, CarriesKindMessageNativeAndLocation) {
  const int line = __LINE__ + 1;
  const Error e(ErrorKind::kOutOfRange, "index 7 is past 5 rows", std::source_location::current(),
                "cudaErrorInvalidValue (1)");
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(e.message(), "index 7 is past 5 rows");
  EXPECT_EQ(e.native(), "cudaErrorInvalidValue (1)");
  EXPECT_EQ(e.where().line(), std::uint_least32_t(line));
  const std::string what = e.what();
  EXPECT_TRUE(contains(what, "out of range: index 7 is past 5 rows")) << what;
  EXPECT_TRUE(contains(what, "[cudaErrorInvalidValue (1)]")) << what;
  EXPECT_TRUE(contains(what, "error_test.cc:" + std::to_string(line))) << what;
}

TEST(Error, DefaultLocationIsTheThrowSite) {
  int line = 0;
  try {
    line = __LINE__ + 1;
    throw Error(ErrorKind::kConfig, "tp=3 does not divide n_head=8: choose tp in {1,2,4,8}");
  } catch (const std::runtime_error& e) {  // catchable as a standard exception
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "configuration error: tp=3 does not divide n_head=8")) << what;
    EXPECT_TRUE(contains(what, "error_test.cc:" + std::to_string(line))) << what;
    EXPECT_FALSE(contains(what, "[")) << "no native code was given: " << what;
  }
}

TEST(Error, NamesRankAndHostOnceKnown) {
  set_error_identity(3, "node-17");
  const std::string what = Error(ErrorKind::kInternal, "boom").what();
  set_error_identity(-1, "");  // back to "rank unknown, this host"
  EXPECT_TRUE(contains(what, "rank 3 on node-17")) << what;
  const std::string later = Error(ErrorKind::kInternal, "boom").what();
  EXPECT_FALSE(contains(later, "rank ")) << later;
}

TEST(Error, KindNamesAreDistinct) {
  std::set<std::string_view> names;
  for (ErrorKind k : {ErrorKind::kInvalidArgument, ErrorKind::kShapeMismatch, ErrorKind::kDTypeMismatch,
                      ErrorKind::kDeviceMismatch, ErrorKind::kOutOfRange, ErrorKind::kOutOfMemory,
                      ErrorKind::kNotSupported, ErrorKind::kConfig, ErrorKind::kIo, ErrorKind::kComm,
                      ErrorKind::kCuda, ErrorKind::kInternal})
    names.insert(error_kind_name(k));
  EXPECT_EQ(names.size(), 12u);
}

TEST(Error, HtCheckThrowsFormattedMessage) {
  const int n_head = 8, tp = 3;
  int line = 0;
  try {
    line = __LINE__ + 1;
    HT_CHECK(n_head % tp == 0, ErrorKind::kConfig, "tp={} does not divide n_head={}", tp, n_head);
    FAIL() << "HT_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.message(), "tp=3 does not divide n_head=8");
    EXPECT_EQ(e.where().line(), std::uint_least32_t(line));
    EXPECT_TRUE(contains(e.what(), "error_test.cc:" + std::to_string(line))) << e.what();
  }
  EXPECT_NO_THROW(HT_CHECK(n_head % 2 == 0, ErrorKind::kConfig, "never {}", 1));
  // The condition is evaluated once, the message only on failure.
  int evaluated = 0, formatted = 0;
  auto fmt_arg = [&] { return ++formatted; };
  EXPECT_NO_THROW(HT_CHECK(++evaluated > 0, ErrorKind::kInternal, "{}", fmt_arg()));
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(formatted, 0);
  EXPECT_TRUE(throws_error([] { HT_CHECK_ARG(1 + 1 == 3, "lr must be positive, got {}", -0.5); },
                           ErrorKind::kInvalidArgument, {"lr must be positive, got -0.5"}));
}

TEST(Error, SubclassesAreErrors) {
  try {
    throw CommError(ErrorKind::kComm, "all_reduce seq 12 on group dp timed out; ranks 2, 5 did not arrive");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kComm);
    EXPECT_NE(dynamic_cast<const CommError*>(&e), nullptr);
    EXPECT_EQ(dynamic_cast<const IoError*>(&e), nullptr);
    EXPECT_TRUE(contains(e.what(), "ranks 2, 5")) << e.what();
  }
  try {
    throw IoError(ErrorKind::kIo, "cannot open /ckpt/step_00000100/rank0.h5", std::source_location::current(),
                  "H5Fopen (-1)");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(dynamic_cast<const IoError*>(&e), nullptr);
    EXPECT_EQ(e.native(), "H5Fopen (-1)");
  }
  // A CommError is not caught by a handler for IoError.
  bool caught_as_comm = false;
  try {
    try {
      throw CommError(ErrorKind::kComm, "peer died");
    } catch (const IoError&) {
      FAIL() << "CommError caught as IoError";
    }
  } catch (const CommError&) {
    caught_as_comm = true;
  }
  EXPECT_TRUE(caught_as_comm);
}

TEST(Parse, DTypeNamesAndErrors) {
  EXPECT_EQ(parse_dtype("f32"), DType::kF32);
  EXPECT_EQ(parse_dtype("fp32"), DType::kF32);
  EXPECT_EQ(parse_dtype("float32"), DType::kF32);
  EXPECT_EQ(parse_dtype("f16"), DType::kF16);
  EXPECT_EQ(parse_dtype("fp16"), DType::kF16);
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("i32"), DType::kI32);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  for (const char* bad : {"", "fp8", "F32", "float", "bf 16", "f32 "})
    EXPECT_TRUE(throws_error([&] { parse_dtype(bad); }, ErrorKind::kInvalidArgument,
                             {"unknown dtype '" + std::string(bad) + "'", "use fp32, fp16, bf16 or i32"}))
        << bad;
}

TEST(Parse, DeviceNamesAndErrors) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:7"), Device::cuda(7));
  EXPECT_EQ(parse_device("cuda:12").index, 12);
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(parse_device(Device::cuda(5).str()), Device::cuda(5));
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:x", "cuda1", "cpu:0",
                          "cuda:99999999999999999999"})
    EXPECT_TRUE(throws_error([&] { parse_device(bad); }, ErrorKind::kInvalidArgument,
                             {"unknown device '" + std::string(bad) + "'", "use cpu, cuda or cuda:N"}))
        << bad;
}

TEST(Parse, ErrorsFromTheLibraryNameTheirSourceFile) {
  try {
    parse_dtype("fp64");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "src/core/dtype.cc:")) << e.what();
  }
}

}  // namespace
}  // namespace ht
