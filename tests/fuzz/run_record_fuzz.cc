// Fuzz target: the run protocol's readers (ht/resilience/run_protocol.h) on
// whatever a crash, a disk or a person leaves in a heartbeat, an exit record,
// a line of metrics.jsonl, a message to or from a node agent, or htrun's
// report. The input's first byte picks the reader, the rest is the text.
// Nothing may crash; a metrics line or a report may only be refused with
// ProtocolError; and what was read, written again, reads back to the same
// text (one writer and one reader for each record).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "fuzz_input.h"
#include "ht/resilience/run_protocol.h"
#include "ht/resilience/supervisor_report.h"

namespace {

using namespace ht::resilience;

// `first`, read from the input, written and read again: the same text.
template <class Record, class Parse, class Format>
void round_trip(const std::optional<Record>& first, Parse parse, Format format) {
  if (!first) return;
  const std::string written = format(*first);
  std::optional<Record> second;
  try {
    second = parse(written);
  } catch (const ProtocolError& e) {
    throw std::logic_error("a line the protocol wrote is refused (" + std::string(e.what()) + "): " + written);
  }
  if (!second) throw std::logic_error("a record the protocol wrote does not read back: " + written);
  if (format(*second) != written) throw std::logic_error("a record changed on its way back: " + written);
}

// A record whose reader may refuse it by name (ProtocolError): refused, or
// read and round-tripped.
template <class Parse, class Format>
void refused_or_round_trip(const std::string& text, Parse parse, Format format) {
  decltype(parse(text)) first;
  try {
    first = parse(text);
  } catch (const ProtocolError&) {
    return;
  }
  round_trip(first, parse, format);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(ht::fuzz::as_text(data + 1, size - 1));
  switch (data[0] % 5) {
    case 0: round_trip(parse_heartbeat(text), parse_heartbeat, format_heartbeat); break;
    case 1: round_trip(parse_exit_record(text), parse_exit_record, format_exit_record); break;
    case 3: round_trip(parse_agent_message(text), parse_agent_message, format_agent_message); break;
    case 4:
      refused_or_round_trip(
          text, [](const std::string& t) -> std::optional<SupervisorReport> { return parse_supervisor_report(t); },
          format_supervisor_report);
      break;
    default: refused_or_round_trip(text, parse_metrics_line, format_metrics_line);
  }
  return 0;
}
