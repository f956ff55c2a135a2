// A node agent's connection to the controller (controller_link.h).
#include "htrun/controller_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace htrun {

ControllerLink::ControllerLink(std::string host, int port, const wire::Secret& secret, int node, std::string label)
    : host_(std::move(host)),
      port_(port),
      secret_(secret),
      node_(node),
      label_(std::move(label)),
      channel_(wire::Channel::Role::kAgent, secret) {}

ControllerLink::~ControllerLink() {
  if (fd_ >= 0) ::close(fd_);
}

void ControllerLink::close(double now_s) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  // A connection that worked is tried again at once (a blip); an attempt
  // that failed waits for the next try tick() set when it began: with no
  // controller listening (htrun gone), a refused connect must not be
  // retried in a loop.
  if (welcomed_) next_try_s_ = now_s;
  connecting_ = welcomed_ = false;
  out_.clear();
  reader_ = wire::FrameReader{};
  if (lost_since_s_ <= 0) lost_since_s_ = now_s;
}

void ControllerLink::start_connect(double now_s) {
  connect_started_s_ = now_s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0 || !found) return;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (rc != 0 && errno != EINPROGRESS) {
    note_failed_try(now_s, errno);
    ::close(fd);
    return;
  }
  fd_ = fd;
  connecting_ = true;
  if (rc == 0) connected(now_s);
}

void ControllerLink::note_failed_try(double now_s, int error) {
  if (error != ECONNREFUSED) refused_since_s_ = 0;
  else if (refused_since_s_ <= 0) refused_since_s_ = now_s;
}

void ControllerLink::connected(double now_s) {
  connecting_ = false;
  refused_since_s_ = 0;
  // A fresh channel per connection: new nonces, new session keys.
  channel_ = wire::Channel(wire::Channel::Role::kAgent, secret_);
  out_ = channel_.seal(wire::Hello{.node = node_, .host = label_, .pid = int(::getpid()), .agent_nonce = {}});
  flush(now_s);
}

void ControllerLink::tick(double now_s, double retry_s) {
  now_s_ = now_s;
  // A connect that does not complete, or a Welcome that does not come (a
  // controller whose queue of new connections overflowed drops some
  // without a word): start again.
  if (connecting_ && now_s - connect_started_s_ > retry_s) {
    note_failed_try(now_s, ETIMEDOUT);
    close(now_s);
  }
  if (fd_ >= 0 && !welcomed_ && now_s - connect_started_s_ > kWelcomeTimeoutS) close(now_s);
  if (fd_ < 0 && now_s >= next_try_s_) {
    // Spread out, so that thousands of agents that lost the controller
    // together do not all knock at the same instant again.
    const double jitter = double((std::uint32_t(node_) * 2654435761u) % 1000) / 1000.0;
    next_try_s_ = now_s + retry_s * (0.5 + jitter);
    start_connect(now_s);
  }
}

void ControllerLink::flush(double now_s) {
  while (!out_.empty()) {
    const ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, std::size_t(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    close(now_s);
    return;
  }
}

void ControllerLink::on_writable(double now_s) {
  now_s_ = now_s;
  if (fd_ < 0) return;
  if (connecting_) {
    int error = 0;
    socklen_t len = sizeof(error);
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      note_failed_try(now_s, error);
      close(now_s);
      return;
    }
    connected(now_s);
    return;
  }
  flush(now_s);
}

std::vector<wire::Message> ControllerLink::on_readable(double now_s) {
  now_s_ = now_s;
  std::vector<wire::Message> commands;
  if (fd_ < 0 || connecting_) return commands;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) {
      reader_.feed(buffer, std::size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close(now_s);  // the end of the stream, or an error
    break;
  }
  while (auto frame = reader_.next()) {
    wire::Channel::Opened opened = channel_.open(*frame);
    if (!opened.message) {
      ++dropped_;
      if (!welcomed_) {  // nothing to resynchronise with: start again
        close(now_s);
        return commands;
      }
      continue;
    }
    if (const auto* w = std::get_if<wire::Welcome>(&*opened.message)) {
      welcome_ = *w;
      welcomed_ = true;
      lost_since_s_ = 0;
      // A link cut leaves data unacknowledged: the connection ends when it
      // stays so for half the time the agent may be without the controller.
      const unsigned timeout_ms = unsigned(std::max(500, w->controller_lost_ms / 2));
      ::setsockopt(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof(timeout_ms));
    }
    commands.push_back(std::move(*opened.message));
  }
  if (reader_.broken()) close(now_s);
  return commands;
}

bool ControllerLink::send(const wire::Message& message) {
  if (fd_ < 0 || !welcomed_) return false;
  out_ += channel_.seal(message);
  flush(now_s_);
  if (fd_ < 0) return false;
  return true;
}

}  // namespace htrun
