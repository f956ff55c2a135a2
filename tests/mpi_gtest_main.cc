// The GoogleTest main of the multi-rank tests (ht_add_mpi_test): MPI through
// ht::comm::MpiRuntime, rank 0 prints the report, other ranks print only
// their failures (with the rank), all ranks agree on the outcome with one
// all-reduce at the end, and a hang guard ends the job before ctest's timeout.
//
// Environment: HT_TEST_HANG_S (seconds, default 120): the longest a single
// test (or the final agreement) may run before the guard prints
// "rank r stuck in <test>" and ends the process, which makes mpirun end the job.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ht/comm/mpi_runtime.h"

namespace {

// Ranks other than 0 run without gtest's printer; this prints what they
// would otherwise hide: each failed assertion, with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The test's name is remembered here: UnitTest::current_test_info() takes
  // a lock that gtest holds while it reports a part result.
  void OnTestStart(const ::testing::TestInfo& t) override {
    current_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: Failure\n%s\n", rank_, current_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, t.test_suite_name(), t.name());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
  std::string current_;
};

// Watches how long the current test has run; past the limit it names the
// test and ends the process (std::_Exit: a stuck MPI call cannot be unwound),
// and mpirun then ends the other ranks.
class HangGuard : public ::testing::EmptyTestEventListener {
 public:
  HangGuard(int rank, int limit_s) : rank_(rank), limit_s_(limit_s), thread_([this] { watch(); }) {}
  ~HangGuard() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    enter(std::string(t.test_suite_name()) + "." + t.name());
  }
  void OnTestEnd(const ::testing::TestInfo&) override { enter(""); }
  /// Starts the clock for `what` (empty: nothing to watch).
  void enter(const std::string& what) {
    std::lock_guard lock(mu_);
    current_ = what;
    since_ = std::chrono::steady_clock::now();
  }

 private:
  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (stop_ || current_.empty()) continue;
      const auto elapsed = std::chrono::steady_clock::now() - since_;
      if (elapsed < std::chrono::seconds(limit_s_)) continue;
      std::fprintf(stderr, "rank %d stuck in %s for %d s (HT_TEST_HANG_S=%d); ending the job\n", rank_,
                   current_.c_str(), limit_s_, limit_s_);
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(3);
    }
  }

  int rank_;
  int limit_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string current_;
  std::chrono::steady_clock::time_point since_;
  bool stop_ = false;
  std::thread thread_;
};

int hang_limit_s() {
  const char* v = std::getenv("HT_TEST_HANG_S");
  if (!v || !*v) return 120;
  const int s = std::atoi(v);
  return s > 0 ? s : 120;
}

std::string rank_list(const std::vector<int>& counts, int size) {
  std::string out;
  for (int r = 0; r < size; ++r)
    if (counts[std::size_t(r)] > 0) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  ht::comm::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = mpi.world_rank(), size = mpi.world_size();

  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  auto* guard = new HangGuard(rank, hang_limit_s());
  listeners.Append(guard);  // released and deleted after the agreement

  const int rc = RUN_ALL_TESTS();

  // One all-reduce: slot r says whether rank r failed, slot size + r how
  // many tests it skipped.
  guard->enter("the final agreement of results");
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  std::vector<int> mine(2 * std::size_t(size), 0), all(2 * std::size_t(size), 0);
  mine[std::size_t(rank)] = (rc != 0 || unit.failed_test_count() > 0) ? 1 : 0;
  mine[std::size_t(size + rank)] = unit.skipped_test_count();
  MPI_Allreduce(mine.data(), all.data(), 2 * size, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  delete listeners.Release(guard);

  std::vector<int> failed(all.begin(), all.begin() + size), skipped(all.begin() + size, all.end());
  const bool any_failed = !rank_list(failed, size).empty();
  if (rank == 0) {
    if (any_failed)
      std::printf("[ MPI      ] %d ranks: FAILED on rank(s) %s\n", size, rank_list(failed, size).c_str());
    else
      std::printf("[ MPI      ] %d ranks: all passed\n", size);
    if (!rank_list(skipped, size).empty())
      std::printf("[ MPI      ] tests skipped on rank(s) %s\n", rank_list(skipped, size).c_str());
    std::fflush(stdout);
  }
  return any_failed ? 1 : 0;
}
