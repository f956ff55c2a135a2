// A rank's end of its node agent's socket.
#include "resilience/agent_channel.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace ht::resilience::detail {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<AgentChannel> AgentChannel::connect(const std::string& socket_path, double wait_s, std::string* error) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) {
    *error = fmt::format("the agent's socket path '{}' is longer than a Unix socket allows ({} bytes)", socket_path,
                         sizeof(address.sun_path) - 1);
    return std::nullopt;
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const double deadline = now_s() + wait_s;
  for (;;) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = fmt::format("socket: {}", std::strerror(errno));
      return std::nullopt;
    }
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return AgentChannel(fd);
    const int err = errno;
    ::close(fd);
    if (now_s() >= deadline) {
      *error = fmt::format("no node agent answers at {}: {}", socket_path, std::strerror(err));
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

AgentChannel::AgentChannel(AgentChannel&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

AgentChannel& AgentChannel::operator=(AgentChannel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AgentChannel::~AgentChannel() {
  if (fd_ >= 0) ::close(fd_);
}

bool AgentChannel::send(const AgentMessage& message) {
  if (fd_ < 0) return false;
  const std::string text = format_agent_message(message);
  const double deadline = now_s() + 0.5;
  for (;;) {
    if (::send(fd_, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(text.size())) return true;
    if ((errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || now_s() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::optional<std::int64_t> AgentChannel::fenced(bool* gone) {
  *gone = false;
  if (fd_ < 0) {
    *gone = true;
    return std::nullopt;
  }
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (got == 0) {
      *gone = true;
      return std::nullopt;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) *gone = true;
      return std::nullopt;
    }
    if (const auto m = parse_agent_message(std::string_view(buffer, std::size_t(got))))
      if (const auto* f = std::get_if<Fence>(&*m)) return f->epoch;
  }
}

}  // namespace ht::resilience::detail
