// What the benchmark programs share: environment and build records for their
// `#` preambles and JSON "run" objects, JSON Lines output, timing helpers,
// random token data, a GPT trained by ht::train::Engine, and the main() of an
// MPI benchmark (its exit codes). Not a library API: bench/ only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/data/token_batches.h"
#include "ht/models/gpt.h"
#include "ht/models/llama.h"
#include "ht/train/engine.h"

namespace ht::bench {

// ---- environment and build -------------------------------------------------

/// The environment variable `name`, or `fallback` when it is unset.
std::string env_or(const char* name, const char* fallback);

/// {"version", "git_commit", "build_type", "build"}: the library's version,
/// commit and build type (ht/config.h) and ht::build_description(), the
/// fields every benchmark's "run" object starts from.
nlohmann::json build_json();

/// "a,b,c".
std::string join(const std::vector<std::string>& items);

/// Prints `j` as one line of JSON Lines on stdout (not flushed).
void print_json_line(const nlohmann::json& j);

// ---- timing ----------------------------------------------------------------

/// Milliseconds on the steady clock (an arbitrary origin: subtract two).
double now_ms();

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> v);

// ---- a GPT on random tokens ------------------------------------------------

/// `train_count` training and `val_count` validation tokens drawn uniformly
/// from [0, vocab) by ht::Rng(seed): throughput and memory do not depend on
/// the data, and no dataset is needed.
data::TokenSplits random_tokens(std::int64_t vocab, std::int64_t train_count, std::int64_t val_count,
                                std::uint64_t seed);

/// A language model (models::GPT, models::Llama) trained by a train::Engine
/// on next-token windows of `seq_len` tokens of `splits`
/// (data::TokenBatches), on `mesh` (null: this process alone; collective
/// over it otherwise). `splits` and `mesh` must outlive it. Throws kConfig
/// when seq_len does not lie in [1, context] or the data's vocabulary exceeds
/// the model's (the checks the Engine leaves to the program), then what the
/// Engine throws.
class LmEngine {
 public:
  LmEngine(const train::EngineOptions& options, const models::GPTConfig& model, const data::TokenSplits& splits,
           std::int64_t seq_len, comm::DeviceMesh* mesh = nullptr);
  LmEngine(const train::EngineOptions& options, const models::LlamaConfig& model, const data::TokenSplits& splits,
           std::int64_t seq_len, comm::DeviceMesh* mesh = nullptr);
  LmEngine(const LmEngine&) = delete;
  LmEngine& operator=(const LmEngine&) = delete;

  train::Engine& operator*() { return engine_; }
  train::Engine* operator->() { return &engine_; }

 private:
  data::TokenBatches batches_;  // declared first: the engine reads from it
  train::Engine engine_;
};

// ---- MPI benchmarks ----------------------------------------------------------

/// What an MPI benchmark does once MPI is up; returns the exit status.
using MpiBench = int (*)(int argc, char** argv, const comm::MpiRuntime& runtime);

/// How main() ends on an ht::Error of kind kConfig.
enum class OnConfigError {
  kExit2,  // every rank checks the same configuration and raises it: exit 2
  kAbort,  // may be one rank's alone: abort the job, as for any other error
};

/// The main() of an MPI benchmark: initialises MPI (exit 2 if it cannot),
/// runs `bench`, and on an exception prints "<program>: rank r: <what>" and
/// aborts the job (MPI_Abort, exit 1: peers may be waiting in a collective),
/// except a kConfig error under OnConfigError::kExit2.
int mpi_bench_main(int argc, char** argv, const char* program, MpiBench bench, OnConfigError on_config);

}  // namespace ht::bench
