// Helpers shared by the unit tests: seeded random data, a closeness check with
// a tolerance scaled to the values, central finite differences, and a check
// that a call raises ht::Error of a given kind with a given message.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "ht/core/error.h"
#include "ht/core/tensor.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace ht::test {

/// A fresh, empty directory <temp>/<name>_<pid>, removed with everything in
/// it when the owner goes out of scope: a test leaves nothing behind whether
/// it passes or fails (an ASSERT returns through the destructor).
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  /// `path() / child` as a string.
  std::string operator/(const std::string& child) const { return (path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

/// The bit patterns of f32 values: for tests that ask for the same bits,
/// not values merely close.
inline std::vector<std::uint32_t> bits(const std::vector<float>& values) {
  std::vector<std::uint32_t> out;
  out.reserve(values.size());
  for (float v : values) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}
inline std::vector<std::uint32_t> bits(const Tensor& t) { return bits(t.to_vector<float>()); }

/// n floats uniform in [lo, hi) from `rng` (seed it in the test: results are reproducible).
inline std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// A host f32 tensor of `shape` with random_floats contents.
inline Tensor random_tensor(const Shape& shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  return Tensor::from_vector(random_floats(std::size_t(shape_numel(shape)), rng, lo, hi), shape);
}

/// A host f32 tensor of `shape` filled with NaN: an output that must be overwritten.
inline Tensor nan_tensor(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  t.fill_(NAN);
  return t;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// |a - b| / |b| (b's magnitude floored at 1e-30).
inline double relative_difference(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

/// ||got - want|| / ||want|| over every tensor of `want` (by name, f32),
/// as one vector: how far a whole model's weights are from another's.
inline double weights_difference(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  double diff2 = 0, norm2 = 0;
  for (const auto& [name, w] : want) {
    const std::vector<float> a = got.at(name).to_vector<float>(), b = w.to_vector<float>();
    for (std::size_t i = 0; i < b.size(); ++i) {
      diff2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm2 += double(b[i]) * b[i];
    }
  }
  return std::sqrt(diff2 / std::max(norm2, 1e-300));
}
inline std::vector<double> to_double(const Tensor& t) { return to_double(t.to_vector<float>()); }

/// Passes when |got_i - want_i| <= rtol * (|want_i| + max_j |want_j|) + atol for every i:
/// an error relative to the element and to the scale of the whole output, so that
/// near-zero entries of a large result do not demand impossible relative accuracy.
/// On failure names the worst index and both values.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want,
                                            double rtol, double atol = 0.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  std::size_t worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * (std::abs(want[i]) + scale) + atol;
    const double err = std::abs(double(got[i]) - want[i]);
    const double ratio = std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY
                         : err == 0                                 ? 0.0
                         : tol > 0                                  ? err / tol
                                                                    : INFINITY;
    if (ratio > worst_ratio || std::isnan(ratio)) worst_ratio = ratio, worst = i;
  }
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst << " of " << got.size() << ": got " << got[worst]
                                       << ", want " << want[worst] << " (error " << worst_ratio
                                       << "x the tolerance, rtol " << rtol << ", scale " << scale << ")";
}

/// Gradient of a scalar f at x by central differences (f(x + h e_i) - f(x - h e_i)) / 2h.
/// Meant for double-precision reference forwards, where h = 1e-6 leaves an
/// error near 1e-10 relative to f: far below any f32 tolerance.
inline std::vector<double> finite_diff_grad(const std::function<double(const std::vector<double>&)>& f,
                                            std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

/// Passes when fn() throws ht::Error of `kind` whose message contains every one of `needles`.
template <typename Fn>
::testing::AssertionResult throws_error(Fn&& fn, ErrorKind kind, std::initializer_list<std::string_view> needles) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.kind() != kind)
      return ::testing::AssertionFailure() << "kind is '" << error_kind_name(e.kind()) << "', want '"
                                           << error_kind_name(kind) << "': " << e.what();
    for (std::string_view n : needles)
      if (e.message().find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks '" << n << "': " << e.message();
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-ht exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

#if defined(_OPENMP)
/// Runs fn() with `threads` OpenMP threads, then restores the previous count
/// (for determinism tests: the same bits whatever the thread count).
template <typename Fn>
void with_omp_threads(int threads, Fn&& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  try {
    fn();
  } catch (...) {
    omp_set_num_threads(saved);
    throw;
  }
  omp_set_num_threads(saved);
}
#endif

}  // namespace ht::test
