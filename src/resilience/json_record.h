// Private: reading and writing the run protocol's JSON records
// (run_protocol.cc, supervisor_report.cc): one line of JSON that never
// throws, an object parsed without exceptions, and FieldReader, which reads
// an object's fields into a record and remembers the first of a wrong type.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ht/resilience/run_protocol.h"

namespace ht::resilience::detail {

using nlohmann::json;

// One line of JSON. Text that is not UTF-8 (a message quoting a file name in
// another encoding) is written with U+FFFD in its place: a writer never throws.
inline std::string json_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

inline std::optional<json> parse_object(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// The integer `j` holds, if it holds one within T's range (T signed). A
// number with a fraction is cut to an integer: records written by hand.
template <class T>
std::optional<T> integer_of(const json& j) {
  static_assert(std::is_signed_v<T>);
  constexpr double lowest = double(std::numeric_limits<T>::min());  // -2^k, exact; 2^k bounds the top
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    if (u <= std::uint64_t(std::numeric_limits<T>::max())) return T(u);
  } else if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if (v >= std::int64_t(std::numeric_limits<T>::min()) && v <= std::int64_t(std::numeric_limits<T>::max()))
      return T(v);
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    if (d >= lowest && d < -lowest) return T(d);
  }
  return std::nullopt;
}

// Reads the fields of one JSON object into a record. A missing field leaves
// the member as it is (its default); a field of another type leaves it too
// and is remembered, so the caller refuses the record with bad() as the reason.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : object_(object) {}

  bool has(const char* key) const { return object_.contains(key); }
  const std::string& bad() const { return bad_; }

  template <class T>
  void integer(const char* key, T& out) {
    if (const json* j = find(key)) {
      if (const auto v = integer_of<T>(*j)) out = *v;
      else refuse(key, *j, "an integer in range");
    }
  }
  // A number; null is a non-finite one (JSON has no NaN: nlohmann writes null).
  void number(const char* key, double& out) {
    if (const json* j = find(key)) {
      if (j->is_number()) out = j->get<double>();
      else if (j->is_null()) out = std::numeric_limits<double>::quiet_NaN();
      else refuse(key, *j, "a number");
    }
  }
  void text(const char* key, std::string& out) {
    if (const json* j = find(key)) {
      if (j->is_string()) out = j->get<std::string>();
      else refuse(key, *j, "a string");
    }
  }
  void flag(const char* key, bool& out) {
    if (const json* j = find(key)) {
      if (j->is_boolean()) out = j->get<bool>();
      else refuse(key, *j, "true or false");
    }
  }
  // Any name: one the protocol does not know is another program's phase.
  void phase(const char* key, Phase& out) {
    std::string name;
    const bool present = has(key);
    text(key, name);
    if (present && bad_.empty()) out = parse_phase(name).value_or(Phase::kOther);
  }
  // A list of integers (ranks, node ids).
  void integers(const char* key, std::vector<int>& out) {
    const json* j = find(key);
    if (!j) return;
    if (!j->is_array()) return refuse(key, *j, "a list of integers");
    std::vector<int> values;
    for (const json& e : *j) {
      const auto v = integer_of<int>(e);
      if (!v) return refuse(key, *j, "a list of integers");
      values.push_back(*v);
    }
    out = std::move(values);
  }
  // A list of objects, each given to `read` with its own reader; the first
  // object with a bad field refuses the list, naming the field within it.
  template <class Read>
  void objects(const char* key, Read read) {
    const json* j = find(key);
    if (!j) return;
    if (!j->is_array()) return refuse(key, *j, "a list of objects");
    for (std::size_t n = 0; n < j->size(); ++n) {
      const json& e = (*j)[n];
      if (!e.is_object()) return refuse(key, e, "a list of objects");
      FieldReader inner(e);
      read(inner);
      if (!inner.bad().empty()) {
        if (bad_.empty()) bad_ = fmt::format("'{}' item {}: {}", key, n, inner.bad());
        return;
      }
    }
  }
  // Remembers `reason` as why the record is refused (a check of the caller's).
  void refuse_because(std::string reason) {
    if (bad_.empty()) bad_ = std::move(reason);
  }

 private:
  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  void refuse(const char* key, const json& j, const char* wanted) {
    if (bad_.empty()) bad_ = fmt::format("field '{}' holds {} ({:.40}), not {}", key, j.type_name(), json_line(j), wanted);
  }

  const json& object_;
  std::string bad_;
};

}  // namespace ht::resilience::detail
