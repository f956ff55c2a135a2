// Private: integers read from JSON that a crash, a disk or a person may have
// damaged. nlohmann's get<int>() converts whatever number is there: 1e300 or
// 2.5 where an int goes is undefined behaviour, 2^40 silently wraps.
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <limits>
#include <stdexcept>
#include <string_view>

namespace ht::detail {

/// `v` as a T: an integer within T's range. Throws std::invalid_argument
/// naming `what` and the value otherwise (a fraction, a string, out of range).
template <std::integral T, typename Json>
T json_integer(const Json& v, std::string_view what) {
  if (v.is_number_unsigned()) {
    const auto u = v.template get<std::uint64_t>();
    if (u <= std::uint64_t(std::numeric_limits<T>::max())) return T(u);
  } else if (v.is_number_integer()) {
    const auto i = v.template get<std::int64_t>();
    if (std::is_signed_v<T> ? i >= std::int64_t(std::numeric_limits<T>::min()) &&
                                  i <= std::int64_t(std::numeric_limits<T>::max())
                            : i >= 0 && std::uint64_t(i) <= std::uint64_t(std::numeric_limits<T>::max()))
      return T(i);
  }
  throw std::invalid_argument(fmt::format("'{}' is {}, not an integer in [{}, {}]", what, v.dump(),
                                          std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

}  // namespace ht::detail
