// Helpers shared by the multi-rank training tests: a small deterministic
// text corpus, the process's place in MPI_COMM_WORLD and a temporary
// directory the ranks share.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/data/token_dataset.h"

namespace ht::test {

/// Two pangrams repeated (200 times for training, 10 for validation), as
/// token ids modulo `vocab`: structured enough that a small GPT learns it.
inline data::TokenSplits pangram_text(std::int64_t vocab) {
  data::TokenSplits s;
  s.vocab_size = vocab;
  const std::string phrase = "pack my box with five dozen liquor jugs; sphinx of black quartz, judge my vow. ";
  for (int i = 0; i < 200; ++i)
    for (char c : phrase) s.train.push_back(std::int32_t(c) % std::int32_t(vocab));
  for (int i = 0; i < 10; ++i)
    for (char c : phrase) s.val.push_back(std::int32_t(c) % std::int32_t(vocab));
  return s;
}

/// <temp>/<name>_np<ranks>_<rank 0's pid>, shared by the ranks of `world`
/// (a file system they all see), so that the same test run at several world
/// sizes at once (ctest -j) never shares one: rank 0 empties it and the ranks
/// meet; rank 0 removes it when the owner goes out of scope, pass or fail, so
/// declare it before the engines that write there.
class SharedTempDir {
 public:
  SharedTempDir(comm::Communicator& world, const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               (name + "_np" + std::to_string(world.size()) + "_" + std::to_string(rank0_pid(world))))
                  .string()),
        owner_(world.rank() == 0) {
    if (owner_) std::filesystem::remove_all(path_);
    world.barrier()->wait();
  }
  ~SharedTempDir() {
    std::error_code ignored;
    if (owner_) std::filesystem::remove_all(path_, ignored);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  /// Rank 0's process id on every rank (exact in a float: pids stay below 2^22).
  static long rank0_pid(comm::Communicator& world) {
    Tensor in = Tensor::from_vector(std::vector<float>{world.rank() == 0 ? float(getpid()) : 0.f}, {1});
    Tensor out = Tensor::empty({1}, DType::kF32, Device::cpu());
    world.all_reduce(in, out, comm::ReduceOp::kMax)->wait();
    return long(out.to_vector<float>()[0]);
  }

  std::string path_;
  bool owner_;
};

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace ht::test
