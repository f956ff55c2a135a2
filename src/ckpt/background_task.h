// Private: one task at a time on a thread of its own — the writer behind
// each checkpoint tier (the disk save, the memory snapshot). Training hands
// a task over and goes on; the next hand-over, or wait(), collects what the
// task reported.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ht::ckpt::detail {

class BackgroundTask {
 public:
  BackgroundTask() : thread_([this] { run(); }) {}
  /// Waits for the task in flight, then ends the thread.
  ~BackgroundTask() {
    wait();
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  /// Runs `task` on the thread; it returns "" or what went wrong. Call
  /// wait() first: one task at a time.
  void start(std::function<std::string()> task) {
    {
      std::lock_guard lock(mu_);
      task_ = std::move(task);
      busy_ = true;
    }
    cv_.notify_all();
  }
  /// Waits until no task is in flight; returns the last task's report (and forgets it).
  std::string wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    return std::exchange(error_, std::string());
  }
  bool busy() const {
    std::lock_guard lock(mu_);
    return busy_;
  }

 private:
  void run() {
    for (;;) {
      std::function<std::string()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return task_ != nullptr || stop_; });
        if (!task_) return;
        task = std::exchange(task_, nullptr);
      }
      std::string error;
      try {
        error = task();
      } catch (const std::exception& e) {
        error = e.what();
      }
      {
        std::lock_guard lock(mu_);
        error_ = std::move(error);
        busy_ = false;
      }
      cv_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<std::string()> task_;
  bool busy_ = false, stop_ = false;
  std::string error_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace ht::ckpt::detail
