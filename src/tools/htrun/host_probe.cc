// htrun's reachability watch.
#include "htrun/host_probe.h"

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace htrun {

HostProbe::HostProbe(const std::vector<std::string>& hosts, int port, double interval_s, double expire_s)
    : interval_s_(interval_s), expire_s_(expire_s) {
  for (const std::string& host : hosts) {
    Target t;
    t.host = host;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0 && found) {
      std::memcpy(&t.address, found->ai_addr, found->ai_addrlen);
      t.address_len = found->ai_addrlen;
      ::freeaddrinfo(found);
    }
    targets_.push_back(std::move(t));
  }
}

HostProbe::~HostProbe() {
  for (Target& t : targets_)
    if (t.fd >= 0) ::close(t.fd);
}

void HostProbe::answered(Target& t, double now_s, bool refused) {
  if (t.fd >= 0) ::close(t.fd);
  t.fd = -1;
  ProbeState& s = t.state;
  s.last_answer_s = now_s;
  s.silent_since_s = 0;
  s.missed = 0;
  if (!refused) {
    s.accepted = true;
    s.refused = 0;
    s.refused_since_s = 0;
  } else if (s.refused++ == 0) {
    s.refused_since_s = now_s;
  }
}

void HostProbe::missed(Target& t) {
  if (t.fd >= 0) ::close(t.fd);
  t.fd = -1;
  ++t.state.missed;
}

void HostProbe::send(Target& t, double now_s) {
  t.sent_at = now_s;
  if (t.state.silent_since_s == 0) t.state.silent_since_s = now_s;
  t.fd = ::socket(t.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (t.fd < 0) return missed(t);
  if (::connect(t.fd, reinterpret_cast<const sockaddr*>(&t.address), t.address_len) == 0)
    return answered(t, now_s, /*refused=*/false);
  if (errno == ECONNREFUSED) return answered(t, now_s, /*refused=*/true);
  // Anything but "in progress" (no route, network down) is no answer.
  if (errno != EINPROGRESS) missed(t);
}

void HostProbe::poll(double now_s) {
  std::vector<pollfd> out;
  std::vector<Target*> owners;
  for (Target& t : targets_)
    if (t.fd >= 0) {
      out.push_back({.fd = t.fd, .events = POLLOUT, .revents = 0});
      owners.push_back(&t);
    }
  if (!out.empty() && ::poll(out.data(), out.size(), 0) < 0) return;  // interrupted: look again next time
  for (std::size_t k = 0; k < out.size(); ++k) {
    Target& t = *owners[k];
    if (out[k].revents != 0) {
      // Accepted, or refused (a reset): the host answered. No route found
      // meanwhile (ARP or ICMP) is no answer.
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(t.fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == 0 || error == ECONNREFUSED) answered(t, now_s, /*refused=*/error != 0);
      else missed(t);
    } else if (now_s - t.sent_at >= expire_s_) {
      missed(t);
    }
  }
  for (Target& t : targets_)
    if (t.address_len > 0 && t.fd < 0 && (t.sent_at == 0 || now_s - t.sent_at >= interval_s_)) send(t, now_s);
}

std::vector<ProbeState> HostProbe::states() const {
  std::vector<ProbeState> s;
  for (const Target& t : targets_) s.push_back(t.state);
  return s;
}

std::vector<std::string> HostProbe::unresolved() const {
  std::vector<std::string> names;
  for (const Target& t : targets_)
    if (t.address_len == 0) names.push_back(t.host);
  return names;
}

}  // namespace htrun
