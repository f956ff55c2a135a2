// ht::ckpt::detail::WriterLock: the flock and the holder's record.
#include "ckpt/writer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/files.h"
#include "ht/core/error.h"

namespace ht::ckpt::detail {

namespace {

std::string lock_path(const std::string& dir) { return (std::filesystem::path(dir) / kWriterLockName).string(); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

WriterLockHolder read_writer_lock(const std::string& dir) {
  WriterLockHolder h;
  std::ifstream in(lock_path(dir));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return h;
  auto field = [&](const char* key, auto& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if constexpr (std::is_same_v<std::decay_t<decltype(out)>, std::string>) {
      if (it->is_string()) out = it->template get<std::string>();
    } else {
      if (it->is_number_integer()) out = it->template get<long>();
    }
  };
  field("host", h.host);
  field("pid", h.pid);
  field("run_dir", h.run_dir);
  field("since", h.since);
  return h;
}

std::string writer_lock_message(const std::string& dir, const WriterLockHolder& h) {
  std::string who;
  if (h.pid > 0) {
    who = fmt::format("pid {} on host {}", h.pid, h.host.empty() ? "?" : h.host);
    if (!h.run_dir.empty()) who += fmt::format(" (run dir {})", h.run_dir);
    if (!h.since.empty()) who += fmt::format(" since {}", h.since);
  } else {
    who = fmt::format("another process (its lock file {} does not name it yet)", lock_path(dir));
  }
  return fmt::format("checkpoint directory '{}' is being written by {}: stop that run or give another --ckpt-dir",
                     dir, who);
}

std::optional<WriterLock> WriterLock::try_acquire(const std::string& dir, const std::string& run_dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, ht::detail::kFileMode);
  HT_CHECK(fd >= 0, ErrorKind::kIo, "cannot create the writer lock '{}': {}", path,
           std::strerror(errno));
  WriterLock lock(fd);
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    HT_CHECK(errno == EWOULDBLOCK, ErrorKind::kIo, "cannot lock '{}': {}: choose a --ckpt-dir on a file system "
             "with flock(2)", path, std::strerror(errno));
    return std::nullopt;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string text = nlohmann::json{{"host", std::string(host)},
                                          {"pid", long(::getpid())},
                                          {"run_dir", run_dir},
                                          {"since", utc_now()}}
                               .dump() +
                           "\n";
  // The record is for people and error messages; the flock is the lock, so a
  // failure to write it is not fatal.
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, text.data(), text.size(), 0);
  }
  return lock;
}

WriterLock& WriterLock::operator=(WriterLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

WriterLock::~WriterLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace ht::ckpt::detail
