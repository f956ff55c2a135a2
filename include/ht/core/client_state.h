// ht::ClientState: the named values a training program keeps with its
// checkpoints (DeepSpeed's client_state): a data position, counters, a best
// validation loss, a note. Saved in a checkpoint's manifest as a JSON object
// and given back, unchanged, on resume.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace ht {

using ClientValue = std::variant<std::int64_t, double, std::string>;
using ClientState = std::map<std::string, ClientValue>;

}  // namespace ht
