// Fuzz target: the node agents' wire protocol (src/tools/htrun/wire.h) on
// whatever arrives on a connection. The bytes are a stream, split into
// frames (FrameReader); each frame is decoded without its check (the
// decoder's bounds), then opened by both ends of a connection whose
// handshake is done (what the fuzzer did not seal with the session keys is
// dropped). Nothing may crash, and a message that decodes, encoded again,
// gives the same payload (one encoder and one decoder per message).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_input.h"
#include "htrun/wire.h"

namespace {

using namespace htrun::wire;

// A connection's two ends after the handshake, on a fixed secret.
struct Connection {
  Channel agent{Channel::Role::kAgent, Secret{}};
  Channel controller{Channel::Role::kController, Secret{}};
  Connection() {
    const std::string hello = agent.seal(Hello{.node = 1, .host = "h1", .pid = 1, .agent_nonce = {}});
    const auto h = controller.open(std::string_view(hello).substr(4));
    const auto welcome = controller.seal(Welcome{.agent_nonce = std::get<Hello>(*h.message).agent_nonce,
                                                 .controller_nonce = {},
                                                 .summary_interval_ms = 100,
                                                 .controller_lost_ms = 1000,
                                                 .epoch = 1});
    (void)agent.open(std::string_view(welcome).substr(4));
  }
};

// The payload of a frame (after version, type and sequence number, before the MAC).
std::string_view payload(std::string_view frame) { return frame.substr(10, frame.size() - 10 - kMacBytes); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Connection c;
  FrameReader reader;
  reader.feed(reinterpret_cast<const char*>(data), size);
  while (const auto frame = reader.next()) {
    if (const auto m = decode_unchecked(*frame)) {
      if (!std::holds_alternative<Hello>(*m) && !std::holds_alternative<Welcome>(*m)) {
        const std::string again = (from_agent(*m) ? c.agent : c.controller).seal(*m);
        if (payload(std::string_view(again).substr(4)) != payload(*frame))
          throw std::logic_error(std::string("a ") + message_name(*m) + " changed on its way back");
      }
    }
    (void)c.controller.open(*frame);
    (void)c.agent.open(*frame);
  }
  return 0;
}
