// A node agent's connection to the controller (wire.h): it connects out
// (never blocking: a host cut off must not stall the agent), says Hello,
// checks the Welcome, then sends summaries and events and takes commands.
// It reconnects by itself after the connection ends. The caller owns the
// event loop: it waits on fd() for want_write() / readability and calls
// tick() every few tenths of a second. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "htrun/wire.h"

namespace htrun {

class ControllerLink {
 public:
  /// Seconds a connection may wait for the controller's Welcome.
  static constexpr double kWelcomeTimeoutS = 5;

  ControllerLink(std::string host, int port, const wire::Secret& secret, int node, std::string label);
  ~ControllerLink();
  ControllerLink(const ControllerLink&) = delete;
  ControllerLink& operator=(const ControllerLink&) = delete;

  /// The connection's socket, -1 while there is none.
  int fd() const { return fd_; }
  /// Connects when there is no connection and a retry is due (every
  /// `retry_s`); gives up a connect that has not completed in `retry_s`.
  void tick(double now_s, double retry_s = 0.5);
  /// Reads what arrived: the controller's commands, in order (the Welcome
  /// is taken here). A frame that fails its check is dropped and counted.
  std::vector<wire::Message> on_readable(double now_s);
  /// Sends what is queued (call when fd() is writable and want_write()).
  void on_writable(double now_s);
  bool want_write() const { return connecting_ || !out_.empty(); }
  /// Queues `message` and sends what it can; false (nothing queued) before
  /// the Welcome, or when the connection broke.
  bool send(const wire::Message& message);
  /// Closes the connection. The next tick connects again: at once after a
  /// connection that was welcomed, else when the retry begun with the
  /// failed attempt is due.
  void close(double now_s);

  bool welcomed() const { return welcomed_; }
  const wire::Welcome& welcome() const { return welcome_; }
  /// When the connection was last lost (0: never connected or connected now).
  double lost_since_s() const { return lost_since_s_; }
  /// Since when every try to connect was refused (0: the last try was not):
  /// nothing listens at the controller's port, so htrun has ended there.
  /// A cut link times out instead of being refused.
  double refused_since_s() const { return refused_since_s_; }
  /// Frames from the controller dropped by their check, of every kind.
  std::uint64_t dropped() const { return dropped_; }

 private:
  // A try to connect failed with `error`: refused ones in a row are counted from the first.
  void note_failed_try(double now_s, int error);
  void start_connect(double now_s);
  void connected(double now_s);
  void flush(double now_s);

  std::string host_;
  int port_;
  wire::Secret secret_;
  int node_;
  std::string label_;
  int fd_ = -1;
  bool connecting_ = false, welcomed_ = false;
  double connect_started_s_ = 0, next_try_s_ = 0, lost_since_s_ = 0, refused_since_s_ = 0;
  double now_s_ = 0;  // the newest time a caller gave
  wire::Channel channel_;
  wire::FrameReader reader_;
  wire::Welcome welcome_;
  std::string out_;
  std::uint64_t dropped_ = 0;
};

}  // namespace htrun
