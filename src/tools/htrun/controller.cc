// htrun's end of its node agents (controller.h).
#include "htrun/controller.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace htrun {

struct Controller::Connection {
  int fd = -1;
  double accepted_s = 0;
  int node = -1;  // as its Hello said; its agent's only once established
  bool established = false;
  bool want_write = false;
  wire::Channel channel;
  wire::FrameReader reader;
  std::string out;

  Connection(int fd_, double now_s, const wire::Secret& secret)
      : fd(fd_), accepted_s(now_s), channel(wire::Channel::Role::kController, secret) {}
};

std::uint64_t ControllerCounts::dropped_total() const {
  std::uint64_t total = 0;
  for (std::uint64_t d : dropped) total += d;
  return total;
}

Controller::Controller(ControllerOptions options, std::function<double()> clock)
    : options_(std::move(options)), clock_(std::move(clock)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(fmt::format("htrun: socket: {}", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(std::uint16_t(options_.port));
  if (::inet_pton(AF_INET, options_.bind_address.c_str(), &address.sin_addr) != 1)
    throw std::runtime_error(fmt::format("htrun: the controller's address '{}' is not an IPv4 address",
                                         options_.bind_address));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listen_fd_, 4096) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error(fmt::format("htrun: cannot listen for node agents on {}:{}: {}", options_.bind_address,
                                         options_.port, why));
  }
  socklen_t len = sizeof(address);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &len);
  port_ = ntohs(address.sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
}

Controller::~Controller() {
  for (auto& [fd, c] : connections_) ::close(fd);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Controller::poll(double timeout_s) {
  epoll_event events[256];
  int timeout_ms = int(std::max(0.0, timeout_s) * 1000);
  // One wait, then what else is ready at once: a burst of summaries from
  // thousands of agents is read in batches of 256 without waiting again.
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_, events, 256, timeout_ms);
    if (n < 0 && errno == EINTR) break;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_all();
        continue;
      }
      const auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      if (events[i].events & EPOLLOUT) write(c);
      if (connections_.count(fd) && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read(c);
    }
    if (n < 256) break;
    timeout_ms = 0;
  }
  expire_handshakes();
}

void Controller::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ++counts_.accepted;
    connections_[fd] = std::make_unique<Connection>(fd, clock_(), options_.secret);
    unproven_.insert(fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void Controller::read(Connection& c) {
  const int fd = c.fd;
  char buffer[65536];
  bool ended = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      counts_.bytes_read += std::uint64_t(n);
      c.reader.feed(buffer, std::size_t(n));
      if (std::size_t(n) < sizeof(buffer)) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    ended = true;  // the end of the stream, or an error: take what came first
    break;
  }
  while (auto frame = c.reader.next()) {
    wire::Channel::Opened opened = c.channel.open(*frame);
    if (!opened.message) {
      ++counts_.dropped[std::size_t(opened.drop)];
      // Before it proved itself a connection has nothing to lose: one bad
      // frame ends it. After, the frame alone is dropped.
      if (!c.established) {
        close(fd);
        return;
      }
      continue;
    }
    ++counts_.frames;
    handle(c, std::move(*opened.message));
    if (!connections_.count(fd)) return;
  }
  if (c.reader.broken()) {
    ++counts_.broken_streams;
    ended = true;
  }
  if (ended) close(fd);
}

void Controller::handle(Connection& c, wire::Message message) {
  const double now = clock_();
  if (const auto* hello = std::get_if<wire::Hello>(&message)) {
    c.node = hello->node;
    AgentState& a = agents_[c.node];
    if (!a.connected) {
      a.host = hello->host;
      a.pid = hello->pid;
    }
    c.out += c.channel.seal(wire::Welcome{.agent_nonce = hello->agent_nonce,
                                          .controller_nonce = {},
                                          .summary_interval_ms = options_.summary_interval_ms,
                                          .controller_lost_ms = options_.controller_lost_ms,
                                          .epoch = epoch_});
    write(c);
    return;
  }
  if (!c.established) {
    // The first frame under the session key: the agent holds the secret.
    // It replaces an older connection of the same node: a reconnect (the
    // old one is dead), or another agent started there while the first
    // was cut off, which is told to leave so that the two do not take
    // each other's place over and over.
    c.established = true;
    unproven_.erase(c.fd);
    ++counts_.established;
    if (const auto old = node_fd_.find(c.node); old != node_fd_.end() && old->second != c.fd) {
      const int old_fd = old->second;
      Connection& o = *connections_.at(old_fd);
      o.out += o.channel.seal(wire::Bye{});
      write(o);  // may close it
      close(old_fd);
    }
    node_fd_[c.node] = c.fd;
    AgentState& a = agents_[c.node];
    a.connected = true;
    a.connected_s = now;
    a.lost_s = 0;
  }
  AgentState& a = agents_[c.node];
  a.heard_s = now;
  if (auto* summary = std::get_if<wire::Summary>(&message)) {
    ++counts_.summaries;
    a.summary = std::move(*summary);
    return;
  }
  events_.push_back({.node = c.node, .at_s = now, .message = std::move(message)});
}

void Controller::write(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, std::size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close(c.fd);
    return;
  }
  const bool want = !c.out.empty();
  if (want != c.want_write) {
    c.want_write = want;
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
    ev.data.fd = c.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  }
}

void Controller::close(int fd) {
  const auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const Connection& c = *it->second;
  if (c.established) {
    if (const auto n = node_fd_.find(c.node); n != node_fd_.end() && n->second == fd) {
      node_fd_.erase(n);
      AgentState& a = agents_[c.node];
      a.connected = false;
      a.lost_s = clock_();
    }
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  unproven_.erase(fd);
  connections_.erase(it);
}

void Controller::expire_handshakes() {
  // The connections still to prove themselves, a few times a second: the
  // loop turns per burst of frames, and must not walk them each time.
  const double now = clock_();
  if (unproven_.empty() || now < next_expiry_s_) return;
  next_expiry_s_ = now + 0.1;
  std::vector<int> expired;
  for (int fd : unproven_)
    if (now - connections_.at(fd)->accepted_s > options_.handshake_timeout_s) expired.push_back(fd);
  for (int fd : expired) {
    ++counts_.handshake_timeouts;
    close(fd);
  }
}

std::vector<AgentEvent> Controller::take_events() { return std::exchange(events_, {}); }

const AgentState* Controller::agent(int node) const {
  const auto it = agents_.find(node);
  return it == agents_.end() ? nullptr : &it->second;
}

bool Controller::send(int node, const wire::Message& message) {
  const auto it = node_fd_.find(node);
  if (it == node_fd_.end()) return false;
  const int fd = it->second;
  Connection& c = *connections_.at(fd);
  c.out += c.channel.seal(message);
  write(c);  // may close it
  return connections_.count(fd) > 0;
}

void Controller::disconnect(int node) {
  if (const auto it = node_fd_.find(node); it != node_fd_.end()) close(it->second);
}

}  // namespace htrun
