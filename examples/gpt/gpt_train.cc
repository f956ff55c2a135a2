// gpt_train: prepares a byte-level token dataset from text and trains a GPT
// on it, printing one progress line per step, writing metrics as JSON Lines
// to the run directory, and ending with a sample from the trained model.
//
// Under mpirun it trains on a pp x dp x tp mesh of all the ranks (--tp,
// --pp; dp is the rest) with data parallelism or ZeRO (--zero), gradient
// accumulation (--grad-accum) and a pipeline schedule (--schedule). Rank 0
// prepares the data, prints and writes the metrics.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <filesystem>
#include <string>
#include <vector>

#include "ht/comm/comm_env.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/core/error.h"
#include "ht/parallel/gather_parameters.h"
#include "ht/resilience/faults.h"
#include "ht/resilience/rank_guard.h"
#include "ht/train/metrics.h"
#include "ht/train/trainer.h"

namespace fs = std::filesystem;
using namespace ht;

namespace {

struct Args {
  train::TrainerOptions train;
  std::string device = "cpu";
  int tp = 1, pp = 1;
  std::string schedule = "1f1b";
  std::string precision = "fp32";
  std::string grad_reduce = "fp32";
  std::string resume;  // "" or "auto"
  std::string ckpt_dir;  // default <run-dir>/checkpoints
  int ckpt_commit_delay_ms = 0;
  double heartbeat_s = 2, watchdog_s = 300;
  std::string straggler_action = "report";  // or "exit"

  double bucket_mb = 25;
  std::string run_dir = "runs/gpt";
  std::string data;                 // token file; default <run_dir>/tokens.h5
  std::vector<std::string> text;    // text inputs to tokenise; default: the fortunes corpus
  double val_fraction = 0.05;
  bool prepare_only = false;
  int sample_tokens = 200;
  float temperature = 0.8f;
  std::string prompt = "The ";
};

std::string human(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

data::TokenSplits load_or_prepare(const Args& a, const std::string& path) {
  // An explicitly named token file is only read, never invented: a typo in
  // --data must not silently train on the default corpus.
  HT_CHECK(a.data.empty() || !a.text.empty() || fs::exists(path), ErrorKind::kIo,
           "token file '{}' (--data) does not exist; pass --text FILES to create it, or omit --data to use "
           "<run-dir>/tokens.h5 prepared from {}",
           path, data::kDefaultCorpusDir);
  if (!a.text.empty() || !fs::exists(path)) {
    const std::vector<std::string> inputs = a.text.empty() ? std::vector<std::string>{data::kDefaultCorpusDir} : a.text;
    std::printf("# preparing %s from %zu text input(s): %s%s\n", path.c_str(), inputs.size(), inputs.front().c_str(),
                inputs.size() > 1 ? ", ..." : "");
    data::write_token_file(path, data::tokenize_bytes(inputs, a.val_fraction));
  }
  return data::read_token_file(path);
}

// Whether this process was started by mpirun (or srun with PMIx): then the
// run spans every rank of MPI_COMM_WORLD.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

// Rank 0 prepares (or reads) the token file while the others wait for its
// verdict, so a bad --data or --text fails every rank with rank 0's message
// instead of leaving them waiting for a file that will never appear.
data::TokenSplits load_on_rank0_first(const Args& a, const std::string& path, comm::Communicator* world) {
  if (!world) return load_or_prepare(a, path);
  Tensor ok = Tensor::from_vector(std::vector<std::int32_t>{0}, {1});
  data::TokenSplits splits;
  std::exception_ptr failure;
  if (world->rank() == 0) {
    try {
      splits = load_or_prepare(a, path);
      ok.data<std::int32_t>()[0] = 1;
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  world->broadcast(ok, 0)->wait();
  if (failure) std::rethrow_exception(failure);
  HT_CHECK(ok.data<std::int32_t>()[0] == 1, ErrorKind::kIo, "rank 0 could not prepare the token file '{}' (see its message)",
           path);
  return world->rank() == 0 ? splits : data::read_token_file(path);
}

// The process's MPI, mesh and guard live outside run(): when run() throws,
// main() reports and exits before they are torn down, so one rank's failure
// ends the job at once (MPI_Finalize would wait for ranks still in a
// collective) and leaves its exit record for the supervisor.
std::unique_ptr<comm::MpiRuntime> mpi;
std::unique_ptr<comm::DeviceMesh> mesh;
std::unique_ptr<resilience::RankGuard> guard;

/// Saves the last step unless a save of it is already under way or it was
/// resumed from, and waits for every save. Returns "" or what went wrong.
std::string checkpoint_now(train::Trainer& trainer) {
  std::string error;
  const std::int64_t step = trainer.steps_done();
  if (step > trainer.checkpointer()->last_save().step && step > trainer.resumed_from()) error = trainer.save_checkpoint();
  return error.empty() ? trainer.wait_for_checkpoint() : error;
}

int run(Args& a) {
  a.train.device = parse_device(a.device);
  a.train.schedule = parallel::parse_schedule(a.schedule);
  a.train.data_parallel.precision = precision::parse_policy(a.precision);
  a.train.data_parallel.precision.reduce = precision::parse_policy(a.grad_reduce).compute;
  a.train.data_parallel.bucket_bytes = std::int64_t(a.bucket_mb * double(1 << 20));
  HT_CHECK(a.resume.empty() || a.resume == "auto", ErrorKind::kConfig,
           "--resume '{}' is not supported: use --resume auto (the newest good checkpoint in the checkpoint directory)",
           a.resume);
  a.train.resume = a.resume == "auto";
  a.train.ckpt_commit_delay = std::chrono::milliseconds(a.ckpt_commit_delay_ms);
  HT_CHECK(a.straggler_action == "report" || a.straggler_action == "exit", ErrorKind::kConfig,
           "--straggler-action '{}': use report (print it and go on) or exit (checkpoint, then exit so that htrun "
           "replaces the straggler's node)",
           a.straggler_action);
  if (a.train.ckpt_every > 0 || a.train.ckpt_every_s > 0 || a.train.resume || !a.ckpt_dir.empty())
    a.train.ckpt_dir = a.ckpt_dir.empty() ? (fs::path(a.run_dir) / "checkpoints").string() : a.ckpt_dir;
  a.train.validate();
  // Resilience inside the rank: heartbeats and a watchdog under the run
  // directory, preemption signals, and the failures HT_FAULTS rehearses.
  // The guard starts before MPI when an MPI launcher names the rank.
  auto start_guard = [&](int rank) {
    guard = std::make_unique<resilience::RankGuard>(
        resilience::GuardOptions{.run_dir = a.run_dir,
                                 .heartbeat = std::chrono::milliseconds(std::int64_t(a.heartbeat_s * 1000)),
                                 .watchdog = std::chrono::milliseconds(std::int64_t(a.watchdog_s * 1000))},
        rank);
  };
  if (const int rank = resilience::launcher_rank(); rank >= 0 && launched_by_mpi()) {
    start_guard(rank);
    guard->progress(0, "launch");
  }
  if (launched_by_mpi() || a.tp * a.pp > 1) {
    mpi = std::make_unique<comm::MpiRuntime>();
    comm::CommOptions comm_options;
    comm_options.run_dir = a.run_dir;
    mesh = std::make_unique<comm::DeviceMesh>(comm::make_mpi_world(comm::comm_options_from_env(comm_options)), a.tp,
                                              a.pp);
  }
  const bool rank0 = !mesh || mesh->rank() == 0;
  std::error_code ec;
  if (rank0) fs::create_directories(a.run_dir, ec);
  HT_CHECK(!ec && (!rank0 || fs::is_directory(a.run_dir)), ErrorKind::kIo, "cannot create run directory '{}': {}",
           a.run_dir, ec.message());
  const std::string data_path = a.data.empty() ? (fs::path(a.run_dir) / "tokens.h5").string() : a.data;
  const data::TokenSplits splits = load_on_rank0_first(a, data_path, mesh ? &mesh->world() : nullptr);
  if (rank0)
    std::printf("# %s\n# data %s: %zu train / %zu val tokens, vocab %lld, unigram entropy %.4f nats\n",
                train::build_description().c_str(), data_path.c_str(), splits.train.size(), splits.val.size(),
                (long long)splits.vocab_size, train::unigram_entropy(splits.val, splits.vocab_size));
  if (a.prepare_only) return 0;

  const int world_rank = mesh ? mesh->rank() : 0;
  if (!guard) start_guard(world_rank);
  HT_CHECK(guard->rank() == world_rank, ErrorKind::kInternal,
           "the launcher named this process rank {}, MPI says {}: heartbeats would be misattributed", guard->rank(),
           world_rank);
  guard->progress(0, "start");
  a.train.guard = guard.get();
  if (const char* spec = std::getenv("HT_FAULTS")) {
    a.train.faults = resilience::FaultPlan::parse(spec);
    a.train.faults.drop_fired(a.run_dir);
  }
  train::Trainer trainer(a.train, splits, mesh.get());
  const auto& o = trainer.options();
  std::unique_ptr<train::MetricsWriter> metrics;
  if (rank0) {
    const auto& layout = trainer.mesh().layout();
    std::printf("# model %s, %s parameters, device %s, precision %s%s\n# mesh %s, zero %d%s, schedule %s; global batch %lld sequences "
                "(micro-batch %lld x %d accumulation x dp %d) x %lld tokens\n",
                o.model.str().c_str(), human(double(o.model.num_parameters())).c_str(), o.device.str().c_str(),
                precision::policy_name(o.data_parallel.precision).c_str(),
                trainer.loss_scaler().enabled()
                    ? fmt::format(" (dynamic loss scale from {:g})", trainer.loss_scaler().scale()).c_str()
                    : "",
                layout.str().c_str(), o.data_parallel.zero_stage,
                o.data_parallel.shard_group > 0 ? fmt::format(" (shard group {})", o.data_parallel.shard_group).c_str()
                                                : "",
                parallel::schedule_name(o.schedule).c_str(), (long long)trainer.global_batch(),
                (long long)o.micro_batch, o.grad_accum, layout.dp(), (long long)o.seq_len);
    metrics = std::make_unique<train::MetricsWriter>((fs::path(a.run_dir) / "metrics.jsonl").string());
    metrics->write_run(o, o.model.num_parameters(), layout.str());
  }

  if (rank0 && trainer.resumed_from() > 0)
    std::printf("# resumed from step %lld (%s)\n", (long long)trainer.resumed_from(), o.ckpt_dir.c_str());
  if (rank0 && trainer.checkpointer())
    std::printf("# checkpoints every %s in %s (keeping %d)\n",
                o.ckpt_every_s > 0 ? fmt::format("{:g} s", o.ckpt_every_s).c_str()
                                   : fmt::format("{} steps", o.ckpt_every).c_str(),
                o.ckpt_dir.c_str(), o.ckpt_keep);
  const std::int64_t first = trainer.steps_done();
  const float val0 = trainer.evaluate();
  if (rank0) {
    std::printf("step %lld/%lld | val loss %.4f\n", (long long)first, (long long)o.steps, val0);
    metrics->write_eval(first, val0);
  }
  for (std::int64_t i = first; i < o.steps; ++i) {
    const train::StepStats s = trainer.step();
    if (rank0) {
      std::string scale;
      if (trainer.loss_scaler().enabled())
        scale = fmt::format(" | scale {:g}{}", s.loss_scale,
                            s.skipped ? fmt::format(" | SKIPPED (overflow; {} so far)", s.skipped_steps) : "");
      std::printf("step %lld/%lld | loss %.4f | lr %.2e | norm %.3f%s | %.0f ms | %s tok/s%s\n", (long long)s.step,
                  (long long)o.steps, s.loss, s.lr, s.grad_norm, scale.c_str(), s.ms, human(s.tokens_per_s()).c_str(),
                  s.checkpointed ? fmt::format(" | checkpoint ({:.0f} ms stall)",
                                               trainer.checkpointer()->last_save().stall_ms).c_str()
                                 : "");
      std::fflush(stdout);
      metrics->write_step(s);
    }
    if (!s.checkpoint_error.empty()) std::fprintf(stderr, "warning: %s; training goes on\n", s.checkpoint_error.c_str());
    if (rank0 && !s.stragglers.empty()) std::fprintf(stderr, "straggler at step %lld: %s\n", (long long)s.step, s.stragglers.c_str());
    // A preemption in the same step wins: the job stops, nothing is replaced.
    const bool straggler_exit = a.straggler_action == "exit" && !s.straggler_ranks.empty() && !s.stop_requested;
    if (s.stop_requested || straggler_exit) {
      // Preemption (SIGTERM/SIGUSR1 on any rank), or a straggler the run
      // must not keep: finish here with a checkpoint.
      if (straggler_exit && rank0)
        for (int r : s.straggler_ranks)  // a rehearsed slowness belongs to the node htrun now replaces
          if (const auto slow = o.faults.find(resilience::FaultKind::kSlow, r, -1))
            resilience::record_fired(a.run_dir, *slow);
      std::string saved = "no checkpoint directory, nothing saved";
      if (trainer.checkpointer()) {
        const std::string error = checkpoint_now(trainer);
        saved = error.empty() ? "checkpoint committed" : error;
      }
      if (rank0) std::printf("# %s at step %lld: %s\n", straggler_exit ? "straggler" : "preempted", (long long)s.step,
                             saved.c_str());
      std::fflush(stdout);
      if (!straggler_exit) guard->exit(resilience::kExitPreempted, fmt::format("preempted at step {}", s.step));
      guard->exit(resilience::kExitStraggler, fmt::format("straggler at step {}: {}", s.step, s.stragglers),
                  s.straggler_ranks);
    }
    if ((o.eval_every > 0 && s.step % o.eval_every == 0) || s.step == o.steps) {
      guard->progress(s.step, "evaluate");
      const float val = trainer.evaluate();
      if (rank0) {
        std::printf("step %lld/%lld | val loss %.4f\n", (long long)s.step, (long long)o.steps, val);
        metrics->write_eval(s.step, val);
      }
    }
  }

  // At exit the last step is saved too, and every save is waited for.
  guard->progress(trainer.steps_done(), "finish");
  if (trainer.checkpointer()) {
    const std::string error = checkpoint_now(trainer);
    if (!error.empty()) std::fprintf(stderr, "warning: %s\n", error.c_str());
    else if (rank0) std::printf("# checkpoint of step %lld committed\n", (long long)trainer.steps_done());
  }

  if (a.sample_tokens > 0) {
    // Sampling runs on rank 0 from the whole model, gathered from every rank.
    const auto full = trainer.full_parameters();
    if (rank0) {
      nn::GPT whole(o.model, Device::cpu());
      parallel::load_full_parameters(whole, full);
      Rng rng(a.train.seed);
      std::vector<std::int32_t> prompt(a.prompt.begin(), a.prompt.end());
      for (auto& t : prompt) t = std::int32_t(static_cast<unsigned char>(t));
      const auto out = whole.generate(prompt, a.sample_tokens, a.temperature, rng);
      std::string text = a.prompt;
      for (std::int32_t t : out) text.push_back(char(t));
      std::printf("# sample (temperature %.2f):\n%s\n", a.temperature, text.c_str());
    }
  }
  if (mesh) mesh->finalize(std::chrono::seconds(60));
  mesh.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  auto& t = a.train;
  CLI::App app{"Train a GPT on a byte-level text corpus (by default the fortunes package's)."};
  app.option_defaults()->always_capture_default();
  app.add_option("--steps", t.steps, "optimizer steps")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", t.seed, "seed for weights, data order and sampling");
  app.add_option("--run-dir", a.run_dir, "where metrics.jsonl (and the token file by default) go");
  app.add_option("--data", a.data, "HDF5 token file (default <run-dir>/tokens.h5; created if missing)");
  app.add_option("--text", a.text, "text files or directories to tokenise into --data (default: " +
                                       std::string(data::kDefaultCorpusDir) + ")");
  app.add_option("--val-fraction", a.val_fraction, "fraction of the text kept for validation")->check(CLI::Range(0.001, 0.5));
  app.add_flag("--prepare-only", a.prepare_only, "write the token file and stop");
  app.add_option("--device", a.device, "cpu, cuda or cuda:N");
  app.add_option("--layers", t.model.n_layer, "transformer blocks");
  app.add_option("--heads", t.model.n_head, "attention heads");
  app.add_option("--embd", t.model.n_embd, "model width");
  app.add_option("--context", t.model.context, "maximum sequence length (positions)");
  app.add_option("--vocab", t.model.vocab_size, "vocabulary size (256 for bytes)");
  app.add_option("--micro-batch", t.micro_batch, "sequences per micro-batch and data-parallel rank");
  app.add_option("--seq-len", t.seq_len, "tokens per sequence");
  app.add_option("--grad-accum", t.grad_accum, "micro-batches per optimizer step (the pipeline's micro-batches)");
  app.add_option("--tp", a.tp, "tensor-parallel ranks (heads, MLP and vocabulary split)")->check(CLI::PositiveNumber);
  app.add_option("--pp", a.pp, "pipeline stages (contiguous blocks each)")->check(CLI::PositiveNumber);
  app.add_option("--zero", t.data_parallel.zero_stage, "0: data parallel (DDP); 1, 2, 3: ZeRO stage")
      ->check(CLI::Range(0, 3));
  app.add_option("--zero-shard-group", t.data_parallel.shard_group,
                 "ranks per ZeRO shard group (hybrid sharding; 0: all data-parallel ranks)");
  app.add_option("--bucket-mb", a.bucket_mb, "gradient bucket size in MiB (data parallelism)")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedule", a.schedule, "pipeline schedule: gpipe or 1f1b");
  app.add_option("--ckpt-every", t.ckpt_every, "save a checkpoint every N steps (0: only at the end, if --ckpt-dir)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-every-s", t.ckpt_every_s, "save a checkpoint every S seconds (0: by steps only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-dir", a.ckpt_dir, "checkpoint directory (default <run-dir>/checkpoints)");
  app.add_option("--ckpt-keep", t.ckpt_keep, "committed checkpoints kept")->check(CLI::PositiveNumber);
  app.add_option("--ckpt-commit-delay-ms", a.ckpt_commit_delay_ms,
                 "rehearsal: hold each save this long before its commit (to test a crash during a save)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--resume", a.resume, "auto: continue from the newest good checkpoint (a fresh start if none)");
  app.add_option("--heartbeat", a.heartbeat_s, "seconds between heartbeats (<run-dir>/heartbeat)");
  app.add_option("--watchdog", a.watchdog_s, "seconds without progress before the rank exits as hung (0: off)");
  app.add_option("--divergence-steps", t.divergence_steps, "consecutive non-finite losses that end the run");
  app.add_option("--straggler-window", t.straggler_window, "steps per straggler window (0: no detection)");
  app.add_option("--straggler-threshold", t.straggler_threshold, "a straggler's work per step over the median");
  app.add_option("--straggler-windows", t.straggler_windows, "slow windows in a row before a straggler is reported");
  app.add_option("--straggler-action", a.straggler_action,
                 "report: print a straggler and go on; exit: checkpoint and exit so htrun replaces its node");
  app.add_option("--sdc-every", t.sdc_every, "steps between replica parameter checksum comparisons (0: never)");
  app.add_option("--precision", a.precision, "compute precision: fp32, fp16 (dynamic loss scaling) or bf16");
  app.add_option("--grad-reduce-dtype", a.grad_reduce, "dtype of the gradient reduction: fp32, fp16 or bf16");
  app.add_option("--loss-scale", t.loss_scaler.initial_scale, "initial dynamic loss scale (fp16)");
  app.add_option("--loss-scale-window", t.loss_scaler.growth_interval, "finite steps before the loss scale doubles");
  app.add_option("--loss-scale-hysteresis", t.loss_scaler.hysteresis, "overflows tolerated before the scale halves");
  app.add_option("--min-loss-scale", t.loss_scaler.min_scale, "the loss scale never drops below this");
  app.add_option("--lr", t.lr, "peak learning rate");
  app.add_option("--min-lr", t.min_lr, "final learning rate of the cosine schedule");
  app.add_option("--warmup", t.warmup_steps, "linear warm-up steps");
  app.add_option("--clip", t.grad_clip, "max global gradient norm (0: off)");
  app.add_option("--weight-decay", t.adamw.weight_decay, "AdamW decoupled weight decay");
  app.add_option("--eval-every", t.eval_every, "steps between validation passes (0: only at the end)");
  app.add_option("--eval-batches", t.eval_batches, "validation micro-batches per pass");
  app.add_option("--sample-tokens", a.sample_tokens, "bytes to sample at the end (0: none)");
  app.add_option("--temperature", a.temperature, "sampling temperature (0: greedy)");
  app.add_option("--prompt", a.prompt, "text the sample starts from");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    // A distinctive exit code per failure kind, for the supervisor (htrun).
    const int code = resilience::exit_code_for(e);
    if (guard) guard->exit(code, e.what());
    std::fprintf(stderr, "gpt_train: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(code);
  }
}
