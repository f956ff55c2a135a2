// ht-parallel-bench: what the parallel layer of ht::train::Engine claims,
// measured on a real mesh under mpirun — ZeRO's memory per rank, the share of
// DDP's gradient all-reduce hidden behind backward, and the pipeline bubble.
// This file holds main, the flags and the preamble; each mode is in its own
// file (parallel_memory.cc, parallel_overlap.cc, parallel_bubble.cc), which
// says what it measures.
//
//   mpirun -np 4 ht-parallel-bench --mode memory   [--zero 0,1,2,3] [--precision fp32,fp16,bf16]
//   mpirun -np 2 ht-parallel-bench --mode overlap  [--bucket-bytes 1048576] [--steps 8]
//   mpirun -np 4 ht-parallel-bench --mode bubble   [--pp 4] [--schedules gpipe,1f1b,interleaved,zb-h1]
//                                                  [--virtual-stages 2] [--micro-batches 4,8]
//
// Output (a contract; docs/benchmarks.md): rank 0 prints a `#` preamble
// (build, layout, threads, HT_* and OMP settings) and one table per mode;
// with --json, JSON Lines instead: a {"type": "run"} object, then per mode
// "memory", "overlap_step", "bubble" objects and one "<mode>_summary" (memory:
// one per precision). Step progress goes to stderr. Exit: 0; 1 when a check
// that does not depend on timing fails (ZeRO-3's ratio outside its band,
// 1F1B's peak not below GPipe's); 2 on a usage error. Timing targets are
// reported, never enforced: they depend on the machine and its load.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "parallel_common.h"
#include "ht/comm/comm_env.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/core/error.h"
#include "ht/core/version.h"
#include "ht/precision/policy.h"

namespace ht::bench {
namespace {

/// Fills the mode's defaults into what the command line left at 0.
models::GPTConfig resolve(ParallelArgs& a, int world_size) {
  models::GPTConfig m;
  std::int64_t seq = 0, micro = 0, steps = 0, warmup = 0;
  if (a.mode == "memory") {
    // GPT-2 small's shapes at the padded vocabulary; a short context keeps one step quick.
    m = {.vocab_size = 50304, .context = 64, .n_layer = 12, .n_head = 12, .n_embd = 768};
    seq = 32, micro = 1, steps = 1, warmup = 0;
  } else if (a.mode == "overlap") {
    // gpt_train's default model: backward long enough to hide 41 MiB of gradients.
    m = {.vocab_size = 256, .context = 128, .n_layer = 6, .n_head = 6, .n_embd = 384};
    seq = 128, micro = 4, steps = 8, warmup = 2;
  } else {
    // Blocks dominate (small vocabulary): stages differ by the embedding and the head only.
    m = {.vocab_size = 256, .context = 128, .n_layer = 8, .n_head = 4, .n_embd = 256};
    seq = 128, micro = 4, steps = 3, warmup = 1;
  }
  if (a.layers > 0) m.n_layer = a.layers;
  if (a.heads > 0) m.n_head = a.heads;
  if (a.embd > 0) m.n_embd = a.embd;
  if (a.vocab > 0) m.vocab_size = a.vocab;
  if (a.context > 0) m.context = a.context;
  if (a.seq == 0) a.seq = seq;
  if (a.micro_batch == 0) a.micro_batch = micro;
  if (a.steps == 0) a.steps = steps;
  if (a.warmup < 0) a.warmup = warmup;
  if (a.pp == 0) a.pp = a.mode == "bubble" ? world_size / a.tp : 1;
  return m;
}

void add_flags(CLI::App& app, ParallelArgs& a) {
  app.option_defaults()->always_capture_default();
  app.add_option("--mode", a.mode, "memory (ZeRO 0-3 bytes per rank), overlap (DDP), bubble (pipeline)")
      ->required()
      ->check(CLI::IsMember({"memory", "overlap", "bubble"}));
  app.add_option("--layers", a.layers, "n_layer (0: the mode's model)");
  app.add_option("--heads", a.heads, "n_head (0: the mode's model)");
  app.add_option("--embd", a.embd, "n_embd (0: the mode's model)");
  app.add_option("--vocab", a.vocab, "vocab_size (0: the mode's model)");
  app.add_option("--context", a.context, "context (0: the mode's model)");
  app.add_option("--seq", a.seq, "tokens per sequence (0: the mode's)");
  app.add_option("--micro-batch", a.micro_batch, "sequences per micro-batch and dp rank (0: the mode's)");
  app.add_option("--tp", a.tp, "tensor-parallel size")->check(CLI::PositiveNumber);
  app.add_option("--pp", a.pp, "pipeline stages (0: the world size for bubble, 1 otherwise)");
  app.add_option("--steps", a.steps, "timed steps (0: memory 1, overlap 8, bubble 3)");
  app.add_option("--warmup", a.warmup, "untimed steps first (-1: memory 0, overlap 2, bubble 1)");
  app.add_option("--zero", a.zero_stages, "memory: ZeRO stages, in order")->delimiter(',');
  app.add_option("--precision", a.precisions, "memory: precisions (fp32, fp16, bf16), in order; each runs every stage")
      ->delimiter(',');
  app.add_option("--bucket-bytes", a.bucket_bytes, "overlap: DDP bucket size in bytes")->check(CLI::PositiveNumber);
  app.add_flag("!--no-one-bucket", a.one_bucket, "overlap: skip the one-bucket comparison trainer");
  app.add_option("--schedules", a.schedules, "bubble: schedules (gpipe, 1f1b, interleaved, zb-h1)")->delimiter(',');
  app.add_option("--virtual-stages", a.virtual_stages, "bubble: model chunks per rank of the interleaved schedule")
      ->check(CLI::Range(2, 64));
  app.add_option("--micro-batches", a.micro_batches, "bubble: micro-batch counts m")->delimiter(',');
  app.add_option("-T,--timeout", a.timeout_s, "deadline of each collective in seconds (0: HT_COMM_TIMEOUT or 300)");
  app.add_flag("--json", a.json, "JSON Lines instead of the tables");
}

/// Throws kConfig (exit 2 on every rank) for flags that do not fit together.
void validate(const ParallelArgs& a, int world_size) {
  for (int z : a.zero_stages)
    HT_CHECK(z >= 0 && z <= 3, ErrorKind::kConfig, "--zero {} is not a ZeRO stage: choose from 0,1,2,3", z);
  for (int m : a.micro_batches)
    HT_CHECK(m > 0, ErrorKind::kConfig, "--micro-batches {}: every count must be positive", m);
  for (const std::string& s : a.schedules) (void)parallel::parse_schedule(s);
  for (const std::string& p : a.precisions) (void)precision::parse_policy(p);
  HT_CHECK(a.mode == "memory" || a.precisions == std::vector<std::string>{"fp32"}, ErrorKind::kConfig,
           "--precision applies to --mode memory only (got --mode {})", a.mode);
  HT_CHECK(a.steps > 0 && a.warmup >= 0, ErrorKind::kConfig, "--steps ({}) must be positive, --warmup ({}) >= 0",
           a.steps, a.warmup);
  HT_CHECK(!a.zero_stages.empty() && !a.micro_batches.empty() && !a.schedules.empty() && !a.precisions.empty(),
           ErrorKind::kConfig, "--zero, --precision, --schedules and --micro-batches need at least one value each");
  HT_CHECK(a.mode != "overlap" || (a.tp == 1 && a.pp == 1 && world_size > 1), ErrorKind::kConfig,
           "--mode overlap measures DDP: run with --tp 1 --pp 1 on at least 2 ranks (got tp {}, pp {}, {} ranks)",
           a.tp, a.pp, world_size);
  HT_CHECK(a.mode != "bubble" || a.pp > 1, ErrorKind::kConfig,
           "--mode bubble needs a pipeline: --pp 2 or more (got --pp {} on {} ranks)", a.pp, world_size);
}

void print_run_json(const ParallelArgs& a, const comm::MpiRuntime& runtime, const comm::MeshShape& layout,
                    const models::GPTConfig& model, const comm::CommOptions& copts) {
  nlohmann::json run = build_json();
  run.update({{"type", "run"},
              {"mode", a.mode},
              {"world_size", runtime.world_size()},
              {"tp", layout.tp_size()},
              {"pp", layout.pp_size()},
              {"dp", layout.dp_size()},
              {"precisions", a.precisions},
              {"model", model.str()},
              {"micro_batch", a.micro_batch},
              {"seq_len", a.seq},
              {"steps", a.steps},
              {"warmup_steps", a.warmup},
              {"host", runtime.host()},
              {"timeout_s", std::chrono::duration<double>(copts.timeout).count()},
              {"comm_debug", copts.debug},
              {"omp_num_threads_env", env_or("OMP_NUM_THREADS", "")},
              {"omp_wait_policy_env", env_or("OMP_WAIT_POLICY", "")},
              {"openblas_coretype_env", env_or("OPENBLAS_CORETYPE", "")}});
  print_json_line(run);
}

void print_preamble(const ParallelArgs& a, const comm::MpiRuntime& runtime, const comm::MeshShape& layout,
                    const models::GPTConfig& model, const comm::CommOptions& copts) {
  std::printf("# ht-parallel-bench %s: %s\n", a.mode.c_str(), ht::build_description().c_str());
  std::printf("# world %d = pp %d x dp %d x tp %d, host %s; model %s, micro-batch %lld x %lld\n",
              runtime.world_size(), layout.pp_size(), layout.dp_size(), layout.tp_size(), runtime.host().c_str(),
              model.str().c_str(), (long long)a.micro_batch, (long long)a.seq);
  if (a.mode == "memory")
    std::printf("# precision %s (working copies, activations and gradients; f32 masters and reduction)\n",
                join(a.precisions).c_str());
  std::printf("# HT_COMM_TIMEOUT %g s  HT_COMM_DEBUG %d  OMP_NUM_THREADS %s  OMP_WAIT_POLICY %s  "
              "OPENBLAS_CORETYPE %s\n",
              std::chrono::duration<double>(copts.timeout).count(), int(copts.debug),
              env_or("OMP_NUM_THREADS", "(unset)").c_str(), env_or("OMP_WAIT_POLICY", "(unset)").c_str(),
              env_or("OPENBLAS_CORETYPE", "(unset)").c_str());
}

int parallel_bench(int argc, char** argv, const comm::MpiRuntime& runtime) {
  const bool print = runtime.world_rank() == 0;
  ParallelArgs a;
  CLI::App app{"ht-parallel-bench: ZeRO memory per rank, DDP all-reduce overlap and pipeline bubbles of "
               "ht::train::Engine under mpirun"};
  add_flags(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    if (!print) return err.get_exit_code() == 0 ? 0 : 2;
    return app.exit(err) == 0 ? 0 : 2;
  }
  const models::GPTConfig model = resolve(a, runtime.world_size());
  validate(a, runtime.world_size());

  comm::CommOptions copts = comm::comm_options_from_env();
  if (a.timeout_s > 0) copts.timeout = std::chrono::milliseconds(std::int64_t(a.timeout_s * 1000));
  comm::DeviceMesh mesh(comm::make_mpi_world(copts), a.tp, a.pp);
  if (print) {
    if (a.json)
      print_run_json(a, runtime, mesh.shape(), model, copts);
    else
      print_preamble(a, runtime, mesh.shape(), model, copts);
    std::fflush(stdout);
  }
  int rc = 0;
  if (a.mode == "memory")
    rc = run_memory(a, mesh, model);
  else if (a.mode == "overlap")
    rc = run_overlap(a, mesh, model);
  else
    rc = run_bubble(a, mesh, model);
  std::fflush(stdout);
  mesh.finalize(copts.timeout);
  return rc;
}

}  // namespace
}  // namespace ht::bench

int main(int argc, char** argv) {
  // Every rank checks the same configuration, so a kConfig error is raised
  // everywhere (exit 2); anything else may leave peers waiting in a collective.
  return ht::bench::mpi_bench_main(argc, argv, "ht-parallel-bench", ht::bench::parallel_bench,
                                   ht::bench::OnConfigError::kExit2);
}
