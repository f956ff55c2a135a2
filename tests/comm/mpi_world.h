// The world communicator of a GoogleTest binary run under mpirun, shared by
// the communicator tests: made before the first test (60 s deadlines;
// flight-recorder dumps of the failure cases into a temporary directory of
// this process, removed at the end) and finalised after the last.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "ht/comm/mpi_communicator.h"

namespace ht::test {

class MpiWorldEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    comm::CommOptions options;
    options.timeout = std::chrono::seconds(60);
    options.run_dir = run_dir.string();
    world = comm::make_mpi_world(options);
  }
  void TearDown() override {
    world->finalize(std::chrono::seconds(30));
    world.reset();
    std::filesystem::remove_all(run_dir);
  }
  std::unique_ptr<comm::Communicator> world;
  const std::filesystem::path run_dir =
      std::filesystem::temp_directory_path() / ("ht_comm_test." + std::to_string(::getpid()));
};

inline MpiWorldEnvironment* const g_mpi_world =
    static_cast<MpiWorldEnvironment*>(::testing::AddGlobalTestEnvironment(new MpiWorldEnvironment));

/// The binary's world communicator (inside tests).
inline comm::Communicator& mpi_world() { return *g_mpi_world->world; }

}  // namespace ht::test
