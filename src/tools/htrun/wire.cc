// The agent protocol's encoding, frames and channel (wire.h).
#include "htrun/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace htrun::wire {
namespace {

using ht::resilience::ExitKind;
using ht::resilience::Phase;

// Frame layout after the length prefix: version, type, seq, payload, MAC.
constexpr std::size_t kHeaderBytes = 1 + 1 + 8;
constexpr std::size_t kSmallestFrame = kHeaderBytes + kMacBytes;
// Strings and lists in a payload: bounded, so a length field cannot make
// the decoder reserve more than the frame holds.
constexpr std::size_t kMaxArgs = 256;

void random_bytes(std::uint8_t* out, std::size_t size) {
  while (size > 0) {
    const ssize_t got = ::getrandom(out, size, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("htrun: getrandom failed: cannot make the job's secret");
    }
    out += got;
    size -= std::size_t(got);
  }
}

// ------------------------------------------------------------- encoding

class Encoder {
 public:
  void u8(std::uint8_t v) { out_.push_back(char(v)); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void i32(std::int32_t v) { u32(std::uint32_t(v)); }
  void i64(std::int64_t v) { u64(std::uint64_t(v)); }
  void str(std::string_view s) {
    u32(std::uint32_t(s.size()));
    out_.append(s);
  }
  void bytes(const std::uint8_t* p, std::size_t n) { out_.append(reinterpret_cast<const char*>(p), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Reads what Encoder wrote; any read past the end, or a value out of its
// range, makes ok() false and every later read return zero.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && at_ == in_.size(); }
  std::uint8_t u8() { return std::uint8_t(take(1) ? in_[at_ - 1] : 0); }
  std::uint32_t u32() {
    if (!take(4)) return 0;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t(std::uint8_t(in_[at_ - 4 + std::size_t(i)])) << (8 * i);
    return v;
  }
  std::uint64_t u64() {
    if (!take(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::uint8_t(in_[at_ - 8 + std::size_t(i)])) << (8 * i);
    return v;
  }
  std::int32_t i32() { return std::int32_t(u32()); }
  std::int64_t i64() { return std::int64_t(u64()); }
  std::string str() {
    const std::uint32_t n = u32();
    if (!take(n)) return {};
    return std::string(in_.substr(at_ - n, n));
  }
  void bytes(std::uint8_t* out, std::size_t n) {
    if (take(n)) std::memcpy(out, in_.data() + at_ - n, n);
  }
  Phase phase() {
    const std::uint8_t p = u8();
    if (p >= ht::resilience::kPhaseCount) ok_ = false;
    return ok_ ? Phase(p) : Phase::kOther;
  }
  void fail() { ok_ = false; }

 private:
  bool take(std::size_t n) {
    if (!ok_ || n > in_.size() - at_) {
      ok_ = false;
      return false;
    }
    at_ += n;
    return true;
  }
  std::string_view in_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

void put(Encoder& e, const RankPlace& p) {
  e.i32(p.rank);
  e.i64(p.step);
  e.u8(std::uint8_t(p.phase));
  e.i64(p.progress_ms);
  e.i64(p.time_ms);
}
RankPlace get_place(Decoder& d) {
  RankPlace p;
  p.rank = d.i32();
  p.step = d.i64();
  p.phase = d.phase();
  p.progress_ms = d.i64();
  p.time_ms = d.i64();
  return p;
}

// The types on the wire: the variant's index plus one (0 is never sent).
std::uint8_t type_of(const Message& m) { return std::uint8_t(m.index() + 1); }

void encode(Encoder& e, const Hello& m) {
  e.i32(m.node);
  e.str(m.host);
  e.i32(m.pid);
  e.bytes(m.agent_nonce.data(), m.agent_nonce.size());
}
void encode(Encoder& e, const Summary& m) {
  e.i64(m.time_ms);
  e.i64(m.epoch);
  e.i32(m.ranks);
  e.i32(m.beating);
  e.i32(m.live);
  e.i64(m.newest_beat_ms);
  e.i64(m.newest_progress_ms);
  e.i32(m.beat_interval_ms);
  e.i64(m.completed_step);
  e.u8(m.slowest ? 1 : 0);
  if (m.slowest) put(e, *m.slowest);
  put(e, m.laggard);
  e.i64(m.comm_wait_ms);
}
void encode(Encoder& e, const RankExit& m) {
  const auto& r = m.record;
  e.i32(r.rank);
  e.i32(r.code);
  e.u8(std::uint8_t(r.kind));
  e.i64(r.step);
  e.u8(std::uint8_t(r.phase));
  e.i64(r.time_ms);
  e.str(r.message);
  e.u32(std::uint32_t(r.blamed_ranks.size()));
  for (int b : r.blamed_ranks) e.i32(b);
  e.i64(r.epoch);
}
void encode(Encoder& e, const RankDied& m) {
  e.i32(m.rank);
  e.i32(m.pid);
  e.i64(m.epoch);
  e.i64(m.time_ms);
  put(e, m.last);
  e.i32(m.status);
}
void encode(Encoder& e, const HealthResult& m) {
  e.u32(m.request);
  e.i32(m.exit_code);
  e.str(m.output_tail);
}
void encode(Encoder& e, const Ack& m) {
  e.u32(m.request);
  e.i64(m.epoch);
  e.i32(m.ranks_left);
}
void encode(Encoder& e, const Welcome& m) {
  e.bytes(m.agent_nonce.data(), m.agent_nonce.size());
  e.bytes(m.controller_nonce.data(), m.controller_nonce.size());
  e.i32(m.summary_interval_ms);
  e.i32(m.controller_lost_ms);
  e.i64(m.epoch);
}
void encode(Encoder& e, const Launch& m) {
  e.u32(m.request);
  e.i64(m.epoch);
  e.i32(m.first_rank);
  e.i32(m.ranks);
}
void encode(Encoder& e, const End& m) {
  e.u32(m.request);
  e.i64(m.epoch);
}
void encode(Encoder& e, const HealthCheck& m) {
  e.u32(m.request);
  e.u32(std::uint32_t(m.argv.size()));
  for (const std::string& a : m.argv) e.str(a);
  e.i32(m.timeout_ms);
}
void encode(Encoder& e, const Signal& m) {
  e.u32(m.request);
  e.i64(m.epoch);
  e.i32(m.signal);
}
void encode(Encoder&, const Bye&) {}
void encode(Encoder& e, const LinkEcho& m) {
  e.u32(m.request);
  e.u8(m.last ? 1 : 0);
  e.str(m.payload);
}
void encode(Encoder& e, const LinkTest& m) {
  e.u32(m.request);
  e.i32(m.bytes);
}

std::optional<Message> decode(std::uint8_t type, Decoder& d) {
  Message m;
  switch (type) {
    case 1: {
      Hello h;
      h.node = d.i32();
      h.host = d.str();
      h.pid = d.i32();
      d.bytes(h.agent_nonce.data(), h.agent_nonce.size());
      m = std::move(h);
      break;
    }
    case 2: {
      Summary s;
      s.time_ms = d.i64();
      s.epoch = d.i64();
      s.ranks = d.i32();
      s.beating = d.i32();
      s.live = d.i32();
      s.newest_beat_ms = d.i64();
      s.newest_progress_ms = d.i64();
      s.beat_interval_ms = d.i32();
      s.completed_step = d.i64();
      const std::uint8_t has_slowest = d.u8();
      if (has_slowest > 1) d.fail();
      if (has_slowest == 1) s.slowest = get_place(d);
      s.laggard = get_place(d);
      s.comm_wait_ms = d.i64();
      if (s.ranks < 0 || s.beating < 0 || s.live < 0 || s.beating > s.ranks || s.comm_wait_ms < 0) d.fail();
      m = std::move(s);
      break;
    }
    case 3: {
      RankExit x;
      auto& r = x.record;
      r.rank = d.i32();
      r.code = d.i32();
      const std::uint8_t kind = d.u8();
      if (kind > std::uint8_t(ExitKind::kCrash)) d.fail();
      r.kind = ExitKind(kind);
      r.step = d.i64();
      r.phase = d.phase();
      r.time_ms = d.i64();
      r.message = d.str();
      const std::uint32_t blamed = d.u32();
      if (blamed > kMaxFrameBytes / 4) d.fail();
      for (std::uint32_t i = 0; i < blamed && d.ok(); ++i) r.blamed_ranks.push_back(d.i32());
      r.epoch = d.i64();
      m = std::move(x);
      break;
    }
    case 4: {
      RankDied x;
      x.rank = d.i32();
      x.pid = d.i32();
      x.epoch = d.i64();
      x.time_ms = d.i64();
      x.last = get_place(d);
      x.status = d.i32();
      m = std::move(x);
      break;
    }
    case 5: {
      HealthResult x;
      x.request = d.u32();
      x.exit_code = d.i32();
      x.output_tail = d.str();
      m = std::move(x);
      break;
    }
    case 6: {
      Ack x;
      x.request = d.u32();
      x.epoch = d.i64();
      x.ranks_left = d.i32();
      m = std::move(x);
      break;
    }
    case 7: {
      Welcome x;
      d.bytes(x.agent_nonce.data(), x.agent_nonce.size());
      d.bytes(x.controller_nonce.data(), x.controller_nonce.size());
      x.summary_interval_ms = d.i32();
      x.controller_lost_ms = d.i32();
      x.epoch = d.i64();
      if (x.summary_interval_ms <= 0 || x.controller_lost_ms <= 0) d.fail();
      m = std::move(x);
      break;
    }
    case 8: {
      Launch x;
      x.request = d.u32();
      x.epoch = d.i64();
      x.first_rank = d.i32();
      x.ranks = d.i32();
      if (x.first_rank < 0 || x.ranks < 0) d.fail();
      m = std::move(x);
      break;
    }
    case 9: {
      End x;
      x.request = d.u32();
      x.epoch = d.i64();
      m = std::move(x);
      break;
    }
    case 10: {
      HealthCheck x;
      x.request = d.u32();
      const std::uint32_t n = d.u32();
      if (n == 0 || n > kMaxArgs) d.fail();
      for (std::uint32_t i = 0; i < n && d.ok(); ++i) x.argv.push_back(d.str());
      x.timeout_ms = d.i32();
      if (x.timeout_ms <= 0) d.fail();
      m = std::move(x);
      break;
    }
    case 11: {
      Signal x;
      x.request = d.u32();
      x.epoch = d.i64();
      x.signal = d.i32();
      if (x.signal <= 0 || x.signal > 64) d.fail();
      m = std::move(x);
      break;
    }
    case 12: m = Bye{}; break;
    case 13: {
      LinkEcho x;
      x.request = d.u32();
      const std::uint8_t last = d.u8();
      if (last > 1) d.fail();
      x.last = last == 1;
      x.payload = d.str();
      if (x.payload.size() > std::size_t(kLinkEchoBytes)) d.fail();
      m = std::move(x);
      break;
    }
    case 14: {
      LinkTest x;
      x.request = d.u32();
      x.bytes = d.i32();
      if (x.bytes < 0 || x.bytes > 64 * kLinkEchoBytes) d.fail();
      m = std::move(x);
      break;
    }
    default: return std::nullopt;
  }
  if (!d.done()) return std::nullopt;
  return m;
}

using Key = std::array<std::uint8_t, 32>;

Key hmac(const std::uint8_t* key, std::size_t key_size, std::string_view data) {
  Key out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key, int(key_size), reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(),
       &len);
  return out;
}

}  // namespace

Secret make_secret() {
  Secret s;
  random_bytes(s.data(), s.size());
  return s;
}

Nonce make_nonce() {
  Nonce n;
  random_bytes(n.data(), n.size());
  return n;
}

std::string secret_hex(const Secret& secret) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::uint8_t b : secret) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

std::optional<Secret> parse_secret_hex(std::string_view text) {
  if (text.size() != 2 * kSecretBytes) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Secret s;
  for (std::size_t i = 0; i < kSecretBytes; ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    s[i] = std::uint8_t(hi * 16 + lo);
  }
  return s;
}

const char* message_name(const Message& message) {
  static constexpr const char* kNames[] = {"hello",   "summary", "rank-exit",    "rank-died", "health-result",
                                           "ack",     "welcome", "launch",       "end",       "health-check",
                                           "signal",  "bye",     "link-echo",    "link-test"};
  return kNames[message.index()];
}

bool from_agent(const Message& message) {
  return std::holds_alternative<Hello>(message) || std::holds_alternative<Summary>(message) ||
         std::holds_alternative<RankExit>(message) || std::holds_alternative<RankDied>(message) ||
         std::holds_alternative<HealthResult>(message) || std::holds_alternative<Ack>(message) ||
         std::holds_alternative<LinkEcho>(message);
}

std::vector<LinkEcho> link_echoes(const LinkTest& test) {
  std::vector<LinkEcho> out;
  std::int32_t left = test.bytes;
  do {
    const std::int32_t n = std::min(left, kLinkEchoBytes);
    left -= n;
    out.push_back({.request = test.request, .last = left == 0, .payload = std::string(std::size_t(n), 'x')});
  } while (left > 0);
  return out;
}

const char* drop_name(Drop drop) {
  switch (drop) {
    case Drop::kNone: return "none";
    case Drop::kMalformed: return "malformed";
    case Drop::kBadMac: return "bad-mac";
    case Drop::kReplayed: return "replayed";
    case Drop::kUnexpected: return "unexpected";
  }
  return "?";
}

void FrameReader::feed(const char* data, std::size_t size) {
  if (broken_) return;
  if (start_ > 0 && start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  }
  buffer_.append(data, size);
}

std::optional<std::string> FrameReader::next() {
  if (broken_ || buffer_.size() - start_ < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const std::uint8_t*>(buffer_.data() + start_);
  const std::uint32_t len = std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3];
  if (len > kMaxFrameBytes || len < kSmallestFrame) {
    broken_ = true;
    return std::nullopt;
  }
  if (buffer_.size() - start_ - 4 < len) return std::nullopt;
  std::string frame = buffer_.substr(start_ + 4, len);
  start_ += 4 + len;
  // Keep the buffer from growing without bound: drop what was consumed
  // once it is most of it.
  if (start_ > 4096 && start_ * 2 > buffer_.size()) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  return frame;
}

Channel::Channel(Role role, const Secret& secret) : role_(role), secret_(secret), own_nonce_(make_nonce()) {}

void Channel::derive_session(const Nonce& agent, const Nonce& controller) {
  std::string material = "hypertrain-agent-session";
  material.append(reinterpret_cast<const char*>(agent.data()), agent.size());
  material.append(reinterpret_cast<const char*>(controller.data()), controller.size());
  const Key session = hmac(secret_.data(), secret_.size(), material);
  const Key a2c = hmac(session.data(), session.size(), "agent-to-controller");
  const Key c2a = hmac(session.data(), session.size(), "controller-to-agent");
  send_key_ = role_ == Role::kAgent ? a2c : c2a;
  receive_key_ = role_ == Role::kAgent ? c2a : a2c;
  session_ = true;
}

std::string Channel::seal(const Message& message) {
  Encoder e;
  e.u32(0);  // the length, filled in below
  e.u8(kVersion);
  e.u8(type_of(message));
  const bool handshake = std::holds_alternative<Hello>(message) || std::holds_alternative<Welcome>(message);
  if (handshake && std::holds_alternative<Hello>(message)) {
    // The agent's Hello carries this channel's nonce, whatever it was given.
    Hello hello = std::get<Hello>(message);
    hello.agent_nonce = own_nonce_;
    e.u64(0);
    encode(e, hello);
  } else if (handshake) {
    Welcome welcome = std::get<Welcome>(message);
    welcome.controller_nonce = own_nonce_;
    e.u64(0);
    encode(e, welcome);
    derive_session(welcome.agent_nonce, own_nonce_);
  } else {
    if (!session_) throw std::logic_error("htrun: a message sealed before the handshake");
    e.u64(++send_seq_);
    std::visit([&](const auto& m) { encode(e, m); }, message);
  }
  std::string& out = e.out();
  const std::string_view body(out.data() + 4, out.size() - 4);
  const Key mac = handshake ? hmac(secret_.data(), secret_.size(), body) : hmac(send_key_.data(), 32, body);
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  const std::uint32_t len = std::uint32_t(out.size() - 4);
  out[0] = char(len >> 24);
  out[1] = char((len >> 16) & 0xff);
  out[2] = char((len >> 8) & 0xff);
  out[3] = char(len & 0xff);
  return out;
}

std::optional<Message> decode_unchecked(std::string_view frame) {
  if (frame.size() < kSmallestFrame) return std::nullopt;
  Decoder d(frame.substr(0, frame.size() - kMacBytes));
  if (d.u8() != kVersion) return std::nullopt;
  const std::uint8_t type = d.u8();
  (void)d.u64();
  return decode(type, d);
}

Channel::Opened Channel::open(std::string_view frame) {
  if (frame.size() < kSmallestFrame) return {std::nullopt, Drop::kMalformed};
  const std::string_view body = frame.substr(0, frame.size() - kMacBytes);
  const auto* mac = reinterpret_cast<const std::uint8_t*>(frame.data() + body.size());
  Decoder d(body);
  const std::uint8_t version = d.u8(), type = d.u8();
  const std::uint64_t seq = d.u64();
  if (!d.ok() || version != kVersion) return {std::nullopt, Drop::kMalformed};
  const bool hello = type == 1, welcome = type == 7;
  const bool handshake = role_ == Role::kController ? hello : welcome;
  if (hello || welcome) {
    // The handshake's frame, once, from the side that sends it.
    if (!handshake || session_) return {std::nullopt, Drop::kUnexpected};
    const Key expected = hmac(secret_.data(), secret_.size(), body);
    if (CRYPTO_memcmp(expected.data(), mac, kMacBytes) != 0) return {std::nullopt, Drop::kBadMac};
  } else {
    if (!session_) return {std::nullopt, Drop::kUnexpected};
    const Key expected = hmac(receive_key_.data(), 32, body);
    if (CRYPTO_memcmp(expected.data(), mac, kMacBytes) != 0) return {std::nullopt, Drop::kBadMac};
    if (seq <= receive_seq_) return {std::nullopt, Drop::kReplayed};
  }
  std::optional<Message> m = decode(type, d);
  if (!m) return {std::nullopt, Drop::kMalformed};
  // Each side takes only the other's messages.
  if (from_agent(*m) != (role_ == Role::kController)) return {std::nullopt, Drop::kUnexpected};
  if (const auto* h = std::get_if<Hello>(&*m)) {
    (void)h;  // the session is set up when the Welcome is sealed
  } else if (const auto* w = std::get_if<Welcome>(&*m)) {
    if (w->agent_nonce != own_nonce_) return {std::nullopt, Drop::kBadMac};  // a Welcome for another connection
    derive_session(own_nonce_, w->controller_nonce);
    established_ = true;
  } else {
    receive_seq_ = seq;
    established_ = true;
  }
  return {std::move(m), Drop::kNone};
}

}  // namespace htrun::wire
