// A node's health report as JSON (to_json, health_report_from_json) and as a
// table (format_health_report), and every rank's report gathered over a
// communicator (gather_health_reports).
#include "ht/resilience/health.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/config.h"
#include "ht/core/error.h"
#include "ht/core/tensor.h"

namespace ht::resilience {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson check_json(const CheckResult& c) {
  return OrderedJson{{"name", c.name},   {"ok", c.ok},       {"skipped", c.skipped},     {"reason", c.reason},
                     {"value", c.value}, {"unit", c.unit},   {"threshold", c.threshold}, {"ms", c.ms}};
}

OrderedJson report_json(const HealthReport& r) {
  OrderedJson checks = OrderedJson::array();
  for (const CheckResult& c : r.checks) checks.push_back(check_json(c));
  return OrderedJson{{"host", r.host},           {"node", r.node},
                     {"rank", r.rank},           {"ok", r.ok},
                     {"version", HT_VERSION},    {"git_commit", HT_GIT_COMMIT},
                     {"checks", std::move(checks)}};
}

}  // namespace

std::string to_json(const HealthReport& report) { return report_json(report).dump(2) + "\n"; }

std::string to_json(const std::vector<HealthReport>& reports) {
  OrderedJson all = OrderedJson::array();
  for (const HealthReport& r : reports) all.push_back(report_json(r));
  const bool ok = std::all_of(reports.begin(), reports.end(), [](const HealthReport& r) { return r.ok; });
  return OrderedJson{{"ok", ok}, {"world_size", reports.size()}, {"reports", std::move(all)}}.dump(2) + "\n";
}

HealthReport health_report_from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    HealthReport r;
    r.host = j.at("host").get<std::string>();
    r.node = j.at("node").get<int>();
    r.rank = j.at("rank").get<int>();
    r.ok = j.at("ok").get<bool>();
    for (const auto& c : j.at("checks")) {
      CheckResult x;
      x.name = c.at("name").get<std::string>();
      x.ok = c.at("ok").get<bool>();
      x.skipped = c.at("skipped").get<bool>();
      x.reason = c.at("reason").get<std::string>();
      x.value = c.at("value").get<double>();
      x.unit = c.at("unit").get<std::string>();
      x.threshold = c.at("threshold").get<double>();
      x.ms = c.at("ms").get<double>();
      r.checks.push_back(std::move(x));
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("malformed health report: {}", e.what()));
  }
}

std::string format_health_report(const HealthReport& r) {
  const auto failed = std::count_if(r.checks.begin(), r.checks.end(), [](const CheckResult& c) { return !c.ok; });
  const std::string node = r.node >= 0 ? fmt::format("node {} ", r.node) : "";
  std::string out = fmt::format("# ht-health: {}(host {}, rank {}): {}", node, r.host, r.rank,
                                r.ok ? "HEALTHY" : "UNHEALTHY");
  if (!r.ok) out += fmt::format(" ({} of {} checks failed)", failed, r.checks.size());
  out += fmt::format("\n{:<12} {:<6} {:>20} {:>20} {:>8}  {}\n", "check", "result", "value", "minimum", "ms", "reason");
  for (const CheckResult& c : r.checks) {
    const char* result = !c.ok ? "FAIL" : c.skipped ? "skip" : "ok";
    const std::string value = c.skipped ? "-" : fmt::format("{:.4g} {}", c.value, c.unit);
    const std::string minimum = c.threshold > 0 ? fmt::format("{:.4g} {}", c.threshold, c.unit) : "-";
    out += fmt::format("{:<12} {:<6} {:>20} {:>20} {:>8.1f}  {}\n", c.name, result, value, minimum, c.ms, c.reason);
  }
  return out;
}

std::vector<HealthReport> gather_health_reports(const HealthReport& local, comm::Communicator& comm) {
  // Strings travel as i32 words (the communicators carry numeric dtypes):
  // first every rank's length, then every rank's text padded to the longest.
  const int n = comm.size();
  const Device dev = comm.device();
  const auto on_dev = [&](const Tensor& t) { return dev.is_cpu() ? t : t.to(dev); };
  const std::string text = to_json(local);
  const Tensor len = on_dev(Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(text.size())}, {1}));
  Tensor lens = on_dev(Tensor::empty({n}, DType::kI32));
  comm.all_gather(len, lens)->wait();
  const std::vector<std::int32_t> sizes = lens.to_vector<std::int32_t>();
  const std::int64_t words = (*std::max_element(sizes.begin(), sizes.end()) + 3) / 4;
  std::vector<std::int32_t> mine(std::size_t(words), 0);
  std::memcpy(mine.data(), text.data(), text.size());
  const Tensor block = on_dev(Tensor::from_vector(mine, {words}));
  Tensor blocks = on_dev(Tensor::empty({n * words}, DType::kI32));
  comm.all_gather(block, blocks)->wait();
  const std::vector<std::int32_t> all = blocks.to_vector<std::int32_t>();
  std::vector<HealthReport> reports;
  for (int r = 0; r < n; ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data() + std::size_t(r) * std::size_t(words));
    reports.push_back(health_report_from_json(std::string(bytes, std::size_t(sizes[std::size_t(r)]))));
  }
  return reports;
}

}  // namespace ht::resilience
