// The checkpoint-directory health checks: disk (usable, free space) and
// disk_write (the rate of an fsynced write, read back).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "resilience/health/check_util.h"
#include "resilience/health/checks.h"

namespace ht::resilience::detail {
namespace {

namespace fs = std::filesystem;

// The probe file's name: unique per host and process, so that nodes sharing
// a checkpoint file system do not collide.
fs::path probe_path(const fs::path& dir) {
  return dir / fmt::format(".ht-health-probe.{}.{}", host_name(), ::getpid());
}

}  // namespace

// disk: the checkpoint directory exists or can be created, takes a new file,
// and has the free space. Returns whether the directory is usable.
CheckResult check_disk(const HealthOptions& o, bool& usable) {
  usable = false;
  return run_check("disk", [&](CheckResult& r) {
    r.unit = "GiB";
    r.threshold = o.min_free_disk_gib;
    const fs::path dir = o.ckpt_dir;
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
      r.ok = false;
      r.reason = fmt::format("checkpoint directory '{}' is not a directory", o.ckpt_dir);
      return;
    }
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) {
      r.ok = false;
      r.reason = fmt::format("checkpoint directory '{}' does not exist and cannot be created: {}", o.ckpt_dir,
                             ec ? ec.message() : "unknown error");
      return;
    }
    const fs::path probe = probe_path(dir);
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
      r.ok = false;
      r.reason = fmt::format("checkpoint directory '{}' is not writable: {}", o.ckpt_dir, std::strerror(errno));
      return;
    }
    ::close(fd);
    fs::remove(probe, ec);
    usable = true;
    const fs::space_info space = fs::space(dir, ec);
    if (ec) {
      r.ok = false;
      r.reason = fmt::format("cannot read the free space of '{}': {}", o.ckpt_dir, ec.message());
      return;
    }
    r.value = double(space.available) / double(1ULL << 30);
    r.reason = fmt::format("'{}' writable", o.ckpt_dir);
    require_min(r, fmt::format("free space in '{}':", o.ckpt_dir));
  });
}

// disk_write: writes disk_write_mib (non-constant bytes: no file system
// compresses them away) and fsyncs; the rate includes the fsync, as a
// checkpoint's commit does. The file is read back and removed.
CheckResult check_disk_write(const HealthOptions& o) {
  return run_check("disk_write", [&](CheckResult& r) {
    r.unit = "MB/s";
    r.threshold = o.min_disk_write_mbps;
    const fs::path probe = probe_path(o.ckpt_dir);
    const std::vector<float> chunk = pseudo_random((1 << 20) / sizeof(float), 5);
    const auto fail = [&](const char* what) {
      r.ok = false;
      r.reason = fmt::format("{} probe file '{}': {}", what, probe.string(), std::strerror(errno));
    };
    const auto t0 = Clock::now();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return fail("cannot create");
    bool ok = true;
    for (std::int64_t i = 0; i < o.disk_write_mib && ok; ++i)
      ok = ::write(fd, chunk.data(), 1 << 20) == (1 << 20);
    ok = ok && ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    const double s = seconds_since(t0);
    std::error_code ec;
    if (!ok) {
      fs::remove(probe, ec);
      errno = saved;
      return fail("cannot write");
    }
    // Read back (from the page cache, mostly: this catches a file system that
    // loses data on the way, not a failing platter).
    std::vector<char> back(1 << 20);
    const int rfd = ::open(probe.c_str(), O_RDONLY);
    std::int64_t mismatched = rfd < 0 ? o.disk_write_mib : 0;
    for (std::int64_t i = 0; rfd >= 0 && i < o.disk_write_mib; ++i)
      if (::read(rfd, back.data(), back.size()) != ssize_t(back.size()) ||
          std::memcmp(back.data(), chunk.data(), back.size()) != 0)
        ++mismatched;
    if (rfd >= 0) ::close(rfd);
    fs::remove(probe, ec);
    r.value = double(o.disk_write_mib) * double(1 << 20) / 1e6 / s;
    if (mismatched > 0) {
      r.ok = false;
      r.reason = fmt::format("{} of {} MiB read back wrong from '{}'", mismatched, o.disk_write_mib, probe.string());
      return;
    }
    r.reason = fmt::format("{} MiB written with fsync and read back", o.disk_write_mib);
    require_min(r, "write rate");
  });
}

}  // namespace ht::resilience::detail
