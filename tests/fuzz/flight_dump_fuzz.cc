// Fuzz target: flight-recorder dumps as ht-flight-recorder reads them
// (ht::comm::read_flight_dumps on a run directory, the analysis, the text
// and JSON reports). The input holds one dump per rank, separated by NUL
// bytes (which JSON text never contains): piece r is flight_recorder_rank<r>.json.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "ht/comm/flight_analysis.h"
#include "ht/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = ht::fuzz::scratch_dir();
  for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
  std::string_view rest = ht::fuzz::as_text(data, size);
  for (int rank = 0; rank < 64; ++rank) {
    const std::size_t nul = rest.find('\0');
    ht::fuzz::write_scratch_file("flight_recorder_rank" + std::to_string(rank) + ".json", rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  try {
    const std::vector<ht::comm::FlightDump> dumps = ht::comm::read_flight_dumps({dir.string()});
    const ht::comm::FlightAnalysis analysis = ht::comm::analyse_flight_dumps(dumps, 0);
    (void)ht::comm::format_flight_analysis(analysis, dumps);
    (void)ht::comm::flight_analysis_json(analysis, dumps);
  } catch (const ht::Error&) {
    // refused dumps: the message names the file and what is wrong
  }
  return 0;
}
