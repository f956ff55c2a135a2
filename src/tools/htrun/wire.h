// The wire protocol between htrun (the controller) and its node agents
// (ht-agent, one per host): the messages, their binary encoding, and the
// channel that seals and opens them with proof of the job's secret.
//
// A connection is a TCP stream that the agent opens to the controller (only
// the controller listens). It carries frames:
//
//   u32 length (big-endian, of what follows) | u8 version | u8 type |
//   u64 seq | payload | 32-byte HMAC-SHA256 of everything after the length
//
// The first two frames are the handshake, sealed with the job's secret
// (32 random bytes htrun makes and gives each agent on its standard input,
// never on a command line): the agent's Hello carries a fresh nonce, and
// the controller's Welcome carries one of its own and echoes the agent's,
// which proves to the agent that the controller knows the secret. Every
// later frame is sealed with a session key per direction derived from the
// secret and both nonces, and carries a sequence number one above the
// last. So a frame forged without the secret fails its MAC, a frame
// replayed from another connection fails it too (other nonces, other
// keys), and one replayed on its own connection fails the sequence check.
// A replayed Hello earns only a Welcome: the connection counts for nothing
// until the agent's first frame under the session key (Channel::established).
//
// Payloads are fixed little-endian fields and length-prefixed strings
// (Encoder/Decoder), decoded with bounds checks: a frame that does not
// decode is dropped and counted, never acted on. The decoder is fuzzed
// (tests/fuzz/agent_wire_fuzz.cc). docs/htrun.md, "Node agents", is the
// same contract in prose.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ht/resilience/run_protocol.h"

namespace htrun::wire {

inline constexpr std::uint8_t kVersion = 1;
/// The largest frame either side accepts (a health check's output tail is
/// the largest payload): a length above it is a stream out of step, and
/// the connection is closed.
inline constexpr std::uint32_t kMaxFrameBytes = 64 * 1024;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kSecretBytes = 32;

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Secret = std::array<std::uint8_t, kSecretBytes>;

/// A fresh random secret or nonce (getrandom(2)).
Secret make_secret();
Nonce make_nonce();
/// The secret as 64 hex digits, and back (nullopt unless exactly that).
std::string secret_hex(const Secret& secret);
std::optional<Secret> parse_secret_hex(std::string_view text);

// ------------------------------------------------------------ messages

/// A rank's place, as its latest heartbeat says (the fields of
/// ht::resilience::Heartbeat that the controller's rules read).
struct RankPlace {
  std::int32_t rank = -1;
  std::int64_t step = 0;
  ht::resilience::Phase phase = ht::resilience::Phase::kStart;
  std::int64_t progress_ms = 0;  // when its step or phase last changed
  std::int64_t time_ms = 0;      // when it beat
};

// Agent -> controller.

/// The first frame on a connection.
struct Hello {
  std::int32_t node = -1;  // the node id htrun gave the agent
  std::string host;        // its host label (ht::resilience::host_label)
  std::int32_t pid = 0;
  Nonce agent_nonce{};
};

/// A host's ranks of the current launch in a few numbers, sent every
/// summary interval: all the controller's rules need (decisions.h), so its
/// work per interval grows with hosts, not ranks.
struct Summary {
  std::int64_t time_ms = 0;  // when made, on the agent's clock
  std::int64_t epoch = 0;    // the launch it describes (0: none yet)
  std::int32_t ranks = 0;    // expected on this host in that launch
  std::int32_t beating = 0;  // that have beaten at least once
  std::int32_t live = 0;     // whose processes are alive (their channel open)
  std::int64_t newest_beat_ms = 0;      // the newest beat of any of them (0: none)
  std::int64_t newest_progress_ms = 0;  // the newest change of step or phase of any of them (0: none)
  std::int32_t beat_interval_ms = 0;  // the shortest gap seen between two beats of one rank (0: unknown)
  std::int64_t completed_step = 0;    // the furthest step any of them completed
  /// The rank that got least far among those past start-up (behind()).
  std::optional<RankPlace> slowest;
  /// The first rank not started: with no beat (phase kLaunch and time 0),
  /// else the first in kLaunch, then in kStart; rank -1 when all started.
  RankPlace laggard;
  /// The mean over its ranks that beat of their time blocked waiting for
  /// communication in this launch (Heartbeat::comm_wait_ms).
  std::int64_t comm_wait_ms = 0;
};

/// A rank's exit record (the run protocol's), sent as soon as it arrives.
struct RankExit {
  ht::resilience::ExitRecord record;
};

/// A rank whose process ended without an exit record (killed by a signal,
/// crashed): its channel closed. `status` is its wait status when the agent
/// could read it, else -1.
struct RankDied {
  std::int32_t rank = -1;
  std::int32_t pid = 0;
  std::int64_t epoch = 0;
  std::int64_t time_ms = 0;
  RankPlace last;  // where it was
  std::int32_t status = -1;
};

/// The end of a health check the controller asked for.
struct HealthResult {
  std::uint32_t request = 0;
  std::int32_t exit_code = -1;  // -1: it could not run, or took too long
  std::string output_tail;      // the last lines it printed
};

/// A command carried out (a Launch, an End, a Signal).
struct Ack {
  std::uint32_t request = 0;
  std::int64_t epoch = 0;
  std::int32_t ranks_left = 0;  // ranks of that epoch or older still alive here
};

// Controller -> agent.

/// The answer to Hello: the agent's nonce echoed (proof that the controller
/// knows the secret), the controller's own, and the agent's settings.
struct Welcome {
  Nonce agent_nonce{};
  Nonce controller_nonce{};
  std::int32_t summary_interval_ms = 500;
  /// How long the agent may be without the controller before it ends its
  /// ranks by itself (no orphan writes the run directory).
  std::int32_t controller_lost_ms = 10000;
  std::int64_t epoch = 0;  // the current launch: older ranks are ended
};

/// Launch `epoch` puts world ranks [first_rank, first_rank + ranks) on this
/// host: ranks of older launches are ended at once.
struct Launch {
  std::uint32_t request = 0;
  std::int64_t epoch = 0;
  std::int32_t first_rank = 0;
  std::int32_t ranks = 0;
};

/// End every rank of launch `epoch` and older (KILL); Ack when none is left.
struct End {
  std::uint32_t request = 0;
  std::int64_t epoch = 0;
};

/// Run `argv` on the host, for at most `timeout_ms`; answer HealthResult.
struct HealthCheck {
  std::uint32_t request = 0;
  std::vector<std::string> argv;
  std::int32_t timeout_ms = 120000;
};

/// Send `signal` to every rank of launch `epoch` (a preemption: SIGUSR1).
struct Signal {
  std::uint32_t request = 0;
  std::int64_t epoch = 0;
  std::int32_t signal = 0;
};

/// The run is over: end the ranks and exit.
struct Bye {};

/// Agent -> controller: part of the answer to a LinkTest, `payload` bytes
/// of filler; `last` on the final one.
struct LinkEcho {
  std::uint32_t request = 0;
  bool last = false;
  std::string payload;
};

/// Controller -> agent: send `bytes` back in LinkEchoes, at once: the time
/// they take to arrive measures the host's link (a gray failure: a link
/// much slower than the other hosts').
struct LinkTest {
  std::uint32_t request = 0;
  std::int32_t bytes = 0;
};
/// The payload of one LinkEcho at most.
inline constexpr std::int32_t kLinkEchoBytes = 32 * 1024;
/// The LinkEchoes that answer `test`.
std::vector<LinkEcho> link_echoes(const LinkTest& test);

using Message = std::variant<Hello, Summary, RankExit, RankDied, HealthResult, Ack, Welcome, Launch, End,
                             HealthCheck, Signal, Bye, LinkEcho, LinkTest>;

/// The message's name ("summary"), for logs and counters.
const char* message_name(const Message& message);
/// Whether an agent sends it (the rest are the controller's).
bool from_agent(const Message& message);

// -------------------------------------------------------------- frames

/// Splits a byte stream into frames. feed() the bytes read; next() gives
/// each complete frame (the length prefix removed), in order.
class FrameReader {
 public:
  void feed(const char* data, std::size_t size);
  /// The next complete frame, or nullopt when more bytes are needed.
  /// Throws nothing; a length above kMaxFrameBytes or below the smallest
  /// frame sets broken() (the stream cannot be resynchronised).
  std::optional<std::string> next();
  bool broken() const { return broken_; }
  std::size_t buffered() const { return buffer_.size() - start_; }

 private:
  std::string buffer_;
  std::size_t start_ = 0;
  bool broken_ = false;
};

/// Why a frame was not taken. Each is counted by whoever read it.
enum class Drop {
  kNone,
  kMalformed,  // does not decode (a field cut short, a value out of range, another version)
  kBadMac,     // not sealed by someone holding the secret (or for another connection)
  kReplayed,   // a sequence number not above the last
  kUnexpected, // a message out of place (a second Hello, a controller's message from an agent)
};
const char* drop_name(Drop drop);

/// One end of a connection: seals outgoing messages and opens incoming
/// frames, holding the keys and sequence numbers. Not thread-safe.
class Channel {
 public:
  enum class Role { kAgent, kController };
  Channel(Role role, const Secret& secret);

  /// The frame for `message`, length prefix included. An agent's first
  /// frame must be its Hello and a controller's its Welcome (sealed with
  /// the secret); later ones go under the session key.
  std::string seal(const Message& message);
  struct Opened {
    std::optional<Message> message;
    Drop drop = Drop::kNone;
  };
  /// Checks and decodes one frame from next(): the message, or why it was
  /// dropped. A Hello (controller) or Welcome (agent) sets up the session.
  Opened open(std::string_view frame);
  /// Whether the peer has proven itself under the session key (an agent's
  /// first frame after Welcome; for an agent, the Welcome itself).
  bool established() const { return established_; }

 private:
  void derive_session(const Nonce& agent, const Nonce& controller);

  Role role_;
  Secret secret_;
  Nonce own_nonce_{};
  bool session_ = false, established_ = false;
  std::array<std::uint8_t, 32> send_key_{}, receive_key_{};
  std::uint64_t send_seq_ = 0, receive_seq_ = 0;
};

/// Decodes a frame's message without checking its MAC (the fuzz target and
/// tests use it): nullopt when it does not decode.
std::optional<Message> decode_unchecked(std::string_view frame);

}  // namespace htrun::wire
