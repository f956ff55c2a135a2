// ht-flight-recorder: merges the flight-recorder dumps of all ranks of a run
// (flight_recorder_rank<r>.json) and names, per group, the ranks that fell
// behind and the collective the others are stuck in.
//
//   ht-flight-recorder RUN_DIR              a report: table per group, then one verdict line per group
//   ht-flight-recorder --json a.json b.json the same analysis as JSON
//
// Exit status: 0 when the dumps could be analysed (whatever they show), 2 when
// the input is unreadable or malformed (the message says which file and why).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ht/comm/flight_analysis.h"
#include "ht/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Merge hypertrain flight-recorder dumps and name the ranks that fell behind", "ht-flight-recorder"};
  std::vector<std::string> inputs;
  bool json = false;
  int world_size = 0;
  app.add_option("inputs", inputs, "run directories holding flight_recorder_rank<r>.json, or dump files")
      ->required();
  app.add_flag("--json", json, "print the analysis as one JSON document");
  app.add_option("--world-size", world_size,
                 "ranks in the job (default: one more than the highest rank dumped); ranks without a dump are named")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    const std::vector<ht::comm::FlightDump> dumps = ht::comm::read_flight_dumps(inputs);
    const ht::comm::FlightAnalysis analysis = ht::comm::analyse_flight_dumps(dumps, world_size);
    const std::string out = json ? ht::comm::flight_analysis_json(analysis, dumps)
                                 : ht::comm::format_flight_analysis(analysis, dumps);
    std::fputs(out.c_str(), stdout);
    return 0;
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "ht-flight-recorder: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-flight-recorder: %s\n", e.what());
  }
  return 2;
}
