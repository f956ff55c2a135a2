// Fuzz target: HT_FAULTS (ht::resilience::FaultPlan::parse), and the queries
// the training loop and htrun make of the plan it returns. The input is the
// variable's value, up to its first NUL as getenv would give it.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_input.h"
#include "ht/core/error.h"
#include "ht/resilience/faults.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = ht::fuzz::as_text(data, size);
  const std::string spec(bytes.substr(0, bytes.find('\0')));
  try {
    const ht::resilience::FaultPlan plan = ht::resilience::FaultPlan::parse(spec);
    for (const ht::resilience::Fault& f : plan.faults()) {
      (void)plan.find(f.kind, f.rank, f.step);
      (void)plan.find(f.kind, 0, -1);
      (void)plan.node_unhealthy(f.node);
      (void)ht::resilience::fault_kind_name(f.kind);
    }
  } catch (const ht::Error&) {
    // a refused plan: the message names the entry
  }
  return 0;
}
