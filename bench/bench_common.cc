// What the benchmark programs share (bench_common.h).
#include "bench_common.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>

#include "ht/config.h"
#include "ht/core/error.h"
#include "ht/core/rng.h"
#include "ht/core/version.h"

namespace ht::bench {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

nlohmann::json build_json() {
  return {{"version", HT_VERSION},
          {"git_commit", HT_GIT_COMMIT},
          {"build_type", HT_BUILD_TYPE},
          {"build", ht::build_description()}};
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& x : items) s += (s.empty() ? "" : ",") + x;
  return s;
}

void print_json_line(const nlohmann::json& j) { std::printf("%s\n", j.dump().c_str()); }

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

data::TokenSplits random_tokens(std::int64_t vocab, std::int64_t train_count, std::int64_t val_count,
                                std::uint64_t seed) {
  data::TokenSplits s;
  s.vocab_size = vocab;
  Rng rng(seed);
  for (std::int64_t i = 0; i < train_count; ++i) s.train.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
  for (std::int64_t i = 0; i < val_count; ++i) s.val.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
  return s;
}

namespace {

/// What train::Trainer checked and train::Engine leaves to the program.
const data::TokenSplits& checked(std::int64_t vocab, std::int64_t context, const data::TokenSplits& splits,
                                 std::int64_t seq_len) {
  HT_CHECK(seq_len > 0 && seq_len <= context, ErrorKind::kConfig,
           "sequence length {} must lie in [1, context={}]; raise --context or shorten --seq", seq_len, context);
  HT_CHECK(splits.vocab_size <= vocab, ErrorKind::kConfig,
           "the data's vocabulary ({}) is larger than the model's vocab_size ({})", splits.vocab_size, vocab);
  return splits;
}

}  // namespace

LmEngine::LmEngine(const train::EngineOptions& options, const models::GPTConfig& model,
                   const data::TokenSplits& splits, std::int64_t seq_len, comm::DeviceMesh* mesh)
    : batches_(checked(model.vocab_size, model.context, splits, seq_len), seq_len),
      engine_(
          options, [model](const nn::Placement& at) { return std::make_unique<models::GPT>(model, at); }, batches_,
          mesh) {}

LmEngine::LmEngine(const train::EngineOptions& options, const models::LlamaConfig& model,
                   const data::TokenSplits& splits, std::int64_t seq_len, comm::DeviceMesh* mesh)
    : batches_(checked(model.vocab_size, model.context, splits, seq_len), seq_len),
      engine_(
          options, [model](const nn::Placement& at) { return std::make_unique<models::Llama>(model, at); }, batches_,
          mesh) {}

int mpi_bench_main(int argc, char** argv, const char* program, MpiBench bench, OnConfigError on_config) {
  std::optional<comm::MpiRuntime> runtime;
  try {
    runtime.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
  try {
    return bench(argc, argv, *runtime);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", program, runtime->world_rank(), e.what());
    std::fflush(stderr);
    const auto* error = dynamic_cast<const Error*>(&e);
    if (on_config == OnConfigError::kExit2 && error && error->kind() == ErrorKind::kConfig) return 2;
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

}  // namespace ht::bench
