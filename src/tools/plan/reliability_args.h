// ht-plan --reliability: the command line of the reliability projection
// (ht/plan/reliability.h), and of the projection of a run's own goodput from
// its htrun reports (ht/plan/run_measurements.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "ht/plan/reliability.h"

namespace ht::plan::tool {

struct ReliabilityArgs {
  bool enabled = false;
  ReliabilityOptions options;
  std::string snapshot_every = "10";  // a number of steps, or auto
  double failures_per_hour = -1;      // < 0: not given (--mttf-hours decides)
  std::string from_report, fault_free;

  void add_to(CLI::App& app);
  /// Prints the projection (a table, or JSON alone with json_path "-"; a
  /// table and a JSON file otherwise). Throws ht::Error on bad input.
  void run(CLI::App& app, const std::string& json_path);
};

}  // namespace ht::plan::tool
