// Fault test: rank size-1 skips one all_reduce. Every other rank's wait()
// must throw CommTimeout within the timeout plus slack, naming the operation,
// group, sequence number, count and rank size-1 as not arrived, and leave a
// flight-recorder dump in the run directory (argv[1]). The skipper dumps its
// own recorder as it skips (it is alive, but mpirun ends it with the job), so
// that ht-flight-recorder can merge every rank's view (the ctest
// flight_recorder_tool_np<N> runs it on this directory). Each rank then prints
// its verdict and ends with a non-zero status (std::_Exit: MPI cannot
// finalise with a collective pending); ctest matches the verdict lines.
//
// Output contract (tests/CMakeLists.txt matches it):
//   "rank R: timeout check passed: <the CommTimeout message>"
//   "rank R: timeout check FAILED: <why>"
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "ht/comm/flight_recorder.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/comm/work.h"

using namespace std::chrono_literals;
using namespace ht;
using namespace ht::comm;

namespace {

constexpr auto kTimeout = 2s;
constexpr auto kSlack = 3s;  // diagnosis (answers come back in milliseconds), dump, scheduling on busy cores

[[noreturn]] void finish(int rank, bool passed, const std::string& text, std::chrono::seconds linger) {
  std::printf("rank %d: timeout check %s: %s\n", rank, passed ? "passed" : "FAILED", text.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  // Stay a moment so that every rank's verdict is printed before mpirun ends the job.
  std::this_thread::sleep_for(linger);
  std::_Exit(passed ? 1 : 2);
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  const std::string run_dir = argc > 1 ? argv[1] : ".";
  const int rank = mpi.world_rank(), size = mpi.world_size();
  if (size < 2) finish(rank, false, "needs at least two ranks", 0s);
  const int skipper = size - 1;
  const auto dump = std::filesystem::path(run_dir) / ("flight_recorder_rank" + std::to_string(rank) + ".json");
  std::filesystem::remove(dump);  // a dump from an earlier run proves nothing

  CommOptions options;
  options.timeout = kTimeout;
  options.run_dir = run_dir;
  auto world = make_mpi_world(options);

  Tensor x = Tensor::zeros({1000}, DType::kF32);
  for (int i = 0; i < 3; ++i) world->all_reduce(x, x, ReduceOp::kSum)->wait();  // #1..#3 on every rank

  if (rank == skipper) {
    FlightRecorder::global().dump(run_dir, rank, "rank " + std::to_string(rank) + " skips all_reduce #4 on purpose");
    std::printf("rank %d: skipping all_reduce #4 on purpose\n", rank);
    std::fflush(stdout);
    // The communication thread keeps answering the others' queries meanwhile.
    std::this_thread::sleep_for(kTimeout + kSlack + 5s);
    finish(rank, false, "the other ranks did not end the job after their timeout", 0s);
  }

  const auto t0 = std::chrono::steady_clock::now();
  WorkPtr w = world->all_reduce(x, x, ReduceOp::kSum);  // #4: rank size-1 never calls it
  try {
    w->wait();
    finish(rank, false, "all_reduce #4 completed without rank " + std::to_string(skipper), 1s);
  } catch (const CommTimeout& e) {
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    const std::string msg = e.message();
    const double elapsed_s = std::chrono::duration<double>(elapsed).count();
    std::string why;
    for (const std::string& needle :
         {std::string("all_reduce #4 on group 'world' (1000 x f32, sum) did not complete within 2 s"),
          "rank " + std::to_string(skipper) + " did not (it is at #3)"})
      if (msg.find(needle) == std::string::npos) why += "message lacks '" + needle + "'; ";
    if (e.missing() != std::vector<int>{skipper}) why += "missing() is not {" + std::to_string(skipper) + "}; ";
    if (int(e.arrived().size()) != size - 1) why += "arrived() does not hold the other ranks; ";
    if (elapsed < kTimeout || elapsed > kTimeout + kSlack)
      why += "CommTimeout came after " + std::to_string(elapsed_s) + " s; ";
    if (!std::filesystem::exists(dump)) why += "no flight-recorder dump at " + dump.string() + "; ";
    try {
      world->barrier();
      why += "the communicator still accepted work after the timeout; ";
    } catch (const CommError&) {
    }
    if (!why.empty()) finish(rank, false, why + "message: " + msg, 1s);
    finish(rank, true, msg, 1s);
  } catch (const std::exception& e) {
    finish(rank, false, std::string("wait() threw something other than CommTimeout: ") + e.what(), 1s);
  }
}
