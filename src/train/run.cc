// ht::train::fit: the run loop and its policy.
#include "ht/train/run.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "ht/config.h"
#include "ht/train/metrics.h"
#include "ht/resilience/run_protocol.h"
#include "ht/train/mfu.h"

namespace ht::train {

namespace fs = std::filesystem;

void FitOptions::validate() const {
  HT_CHECK(straggler_action == "report" || straggler_action == "exit", ErrorKind::kConfig,
           "--straggler-action '{}': use report (print it and go on) or exit (checkpoint, then exit so that htrun "
           "replaces the straggler's node)",
           straggler_action);
}

std::string human_count(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

namespace {

void print_preamble(Engine& engine, const FitOptions& fit) {
  const EngineOptions& o = engine.options();
  const comm::MeshShape& shape = engine.mesh().shape();
  const parallel::Layout& l = o.layout;
  for (const std::string& line : fit.preamble) std::printf("%s\n", line.c_str());
  std::printf("# model %s, %s parameters, device %s, precision %s%s\n", engine.model_description().c_str(),
              human_count(double(engine.num_parameters())).c_str(), o.device.str().c_str(),
              precision::policy_name(o.precision).c_str(),
              engine.loss_scaler().enabled()
                  ? fmt::format(" (dynamic loss scale from {:g})", engine.loss_scaler().scale()).c_str()
                  : "");
  std::printf("# mesh %s%s, zero %d%s, schedule %s%s; global batch %lld rows (micro-batch %lld x %d accumulation x dp %d)\n",
              shape.str().c_str(), l.ep > 1 ? fmt::format(" (experts over ep {})", l.ep).c_str() : "", l.zero,
              l.shard_group > 0 ? fmt::format(" (shard group {})", l.shard_group).c_str() : "",
              parallel::schedule_name(l.schedule).c_str(),
              o.recompute != nn::Recompute::kNone ? fmt::format(", recompute {}", nn::recompute_name(o.recompute)).c_str()
                                                  : "",
              (long long)engine.global_batch(), (long long)l.micro_batch, l.grad_accum, l.dp);
  if (shape.pp_size() > 1 && !engine.stage_split().empty())
    std::printf("# stages %s layers (%s)\n", fmt::format("{}", fmt::join(engine.stage_split(), "+")).c_str(),
                l.stage_layers.empty() ? "by count" : "--stage-layers");
  if (engine.resumed_from() > 0) {
    const ckpt::LoadStats& load = engine.checkpointer()->last_load();
    std::printf("# resumed from step %lld (%s, in %.0f ms%s)\n", (long long)engine.resumed_from(),
                load.tier == "disk" ? o.ckpt_dir.c_str() : "memory", load.ms,
                load.pulled > 0 ? fmt::format("; {} rank(s) pulled their copy from a peer", load.pulled).c_str() : "");
  }
  if (engine.checkpointer() && engine.checkpointer()->has_memory_tier())
    std::printf("# memory snapshots %s in %s\n",
                o.mem_ckpt_every > 0 ? fmt::format("every {} steps", o.mem_ckpt_every).c_str()
                                     : "as often as 2% of a step allows",
                o.mem_ckpt_dir.empty() ? ckpt::default_memory_dir(o.ckpt_dir).c_str() : o.mem_ckpt_dir.c_str());
  if (engine.checkpointer())
    std::printf("# checkpoints every %s in %s (keeping %d)\n",
                o.ckpt_every_s > 0 ? fmt::format("{:g} s", o.ckpt_every_s).c_str()
                                   : fmt::format("{} steps", o.ckpt_every).c_str(),
                o.ckpt_dir.c_str(), o.ckpt_keep);
}

/// One rank's peak TFLOP/s and where it comes from: given, or measured on
/// this rank's device (ht/train/mfu.h). On the CPU a 1024^3 GEMM: its rate
/// is within a few percent of a larger one's and it costs ~50 ms.
struct Peak {
  double tflops = 0;
  std::string source;
};

Peak run_peak(const Engine& engine, const FitOptions& options) {
  if (options.peak_tflops > 0) return {options.peak_tflops, "given with --peak-tflops"};
  if (const char* given = std::getenv(resilience::kEnvMfuPeak); given && *given) {
    char* end = nullptr;
    const double tflops = std::strtod(given, &end);
    HT_CHECK(*end == '\0' && std::isfinite(tflops) && tflops > 0, ErrorKind::kConfig,
             "{}='{}' is not a rate in TFLOP/s above 0 (htrun sets it for a relaunch); unset it outside htrun",
             resilience::kEnvMfuPeak, given);
    const char* source = std::getenv(resilience::kEnvMfuPeakSource);
    return {tflops, fmt::format("{}, at an earlier launch of the job", source && *source ? source : "measured")};
  }
  const EngineOptions& o = engine.options();
  const DType dtype = peak_dtype(o.device, o.precision.compute);
  // A GPU reaches its rate only on a large GEMM; the emulated device runs it
  // on the host, where 1024 is plenty (and 4096 would cost seconds).
  const std::int64_t n = o.device.is_cuda() && !HT_CUDA_EMULATED ? 4096 : 1024;
  return {measure_gemm_peak_gflops(o.device, dtype, n, 3) / 1000.0,
          fmt::format("{} GEMM {}^3 measured on {}, best of 3", dtype_name(dtype), n, o.device.str())};
}

std::string progress_line(Engine& engine, const StepStats& s, double mfu) {
  std::string scale;
  if (engine.loss_scaler().enabled())
    scale = fmt::format(" | scale {:g}{}", s.loss_scale,
                        s.skipped ? fmt::format(" | SKIPPED (overflow; {} so far)", s.skipped_steps) : "");
  // The least balanced mixture-of-experts layer.
  double worst = 0;
  for (const ExpertLoad& l : s.experts) worst = std::max(worst, l.max_over_mean());
  return fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f}{} | {:.0f} ms | {} tok/s{}{}{}", s.step,
                     engine.options().steps, s.loss, s.lr, s.grad_norm, scale, s.ms, human_count(s.tokens_per_s()),
                     mfu > 0 ? fmt::format(" | MFU {:.1f}%", mfu) : "",
                     s.experts.empty() ? "" : fmt::format(" | experts max/mean {:.2f}", worst),
                     s.checkpointed ? fmt::format(" | checkpoint ({:.0f} ms stall)",
                                                  engine.checkpointer()->last_save().stall_ms)
                                    : "");
}

/// The run line of metrics.jsonl: the engine's settings, the program's own
/// fields, the MFU peak, and where the run resumed from (htrun's report
/// reads the step, the tier and how long the load took).
void write_run_record(MetricsWriter& metrics, Engine& engine, const FitOptions& options, const Peak& peak) {
  ClientState fields = options.run_fields;
  fields["peak_tflops"] = peak.tflops;
  fields["peak_source"] = peak.source;
  if (engine.checkpointer() && engine.checkpointer()->last_load().step >= 0) {
    const ckpt::LoadStats& load = engine.checkpointer()->last_load();
    fields["resumed_from"] = load.step;
    fields["resume_tier"] = load.tier;
    fields["resume_ms"] = load.ms;
  }
  metrics.write_run(engine.options(), engine.model_description(), engine.num_parameters(),
                    engine.mesh().shape().str(), fields);
}

/// Rank 0's progress line and step record, MFU included.
void report_step(MetricsWriter& metrics, Engine& engine, const FitOptions& options, const StepStats& s,
                 const Peak& peak) {
  const double mfu = mfu_percent(s.flops_per_token, s.tokens_per_s(), engine.mesh().world().size(), peak.tflops);
  std::printf("%s\n", progress_line(engine, s, mfu).c_str());
  std::fflush(stdout);
  ClientState fields = options.step_fields ? options.step_fields(engine, s) : ClientState{};
  if (s.flops_per_token > 0) {
    fields["flops_per_token"] = s.flops_per_token;
    fields["mfu"] = mfu;
  }
  // Each mixture-of-experts layer: its experts' tokens ("12 9 ..."), their
  // max over mean; the auxiliary losses and the dropped choices summed over
  // the layers.
  double aux = 0, z = 0;
  std::int64_t dropped = 0;
  for (const ExpertLoad& l : s.experts) {
    dropped += l.dropped;
    fields["experts." + l.layer] = fmt::format("{}", fmt::join(l.tokens, " "));
    fields["experts." + l.layer + ".max_over_mean"] = l.max_over_mean();
    aux += l.aux_loss;
    z += l.z_loss;
  }
  if (!s.experts.empty()) {
    fields["moe_aux_loss"] = aux;
    fields["moe_z_loss"] = z;
    fields["moe_dropped"] = dropped;
  }
  metrics.write_step(s, fields);
}

/// Whether the run stops after step `s` because a rank was asked to stop
/// (preemption) or, with --straggler-action exit, a straggler was found: a
/// checkpoint of this very step first, then the exit record, and the job
/// told how to end (Job::end_with).
bool stop_if_asked(Job& job, Engine& engine, const FitOptions& options, const StepStats& s) {
  const bool rank0 = job.rank0();
  resilience::RankGuard& guard = job.guard();
  // A preemption in the same step wins: the job stops, nothing is replaced.
  const bool straggler_exit = options.straggler_action == "exit" && !s.straggler_ranks.empty() && !s.stop_requested;
  if (!s.stop_requested && !straggler_exit) return false;
  // Preemption (SIGTERM/SIGUSR1 on any rank), or a straggler the run
  // must not keep: finish here with a checkpoint.
  if (straggler_exit && rank0)
    for (int r : s.straggler_ranks)  // a rehearsed slowness belongs to the node htrun now replaces
      if (const auto slow = job.faults().find(resilience::FaultKind::kSlow, r, -1))
        resilience::record_fired(job.options().run_dir, *slow);
  const int code = straggler_exit ? resilience::kExitStraggler : resilience::kExitPreempted;
  const std::string why = straggler_exit ? fmt::format("straggler at step {}: {}", s.step, s.stragglers)
                                         : fmt::format("preempted at step {}", s.step);
  const std::vector<int> blamed = straggler_exit ? s.straggler_ranks : std::vector<int>{};
  std::string error = "no checkpoint directory, nothing saved";
  if (engine.checkpointer()) error = engine.checkpoint_now();
  if (rank0)
    std::printf("# %s at step %lld: %s\n", straggler_exit ? "straggler" : "preempted", (long long)s.step,
                error.empty() ? "checkpoint committed" : error.c_str());
  std::fflush(stdout);
  // Said and recorded before the last collectives: once one rank exits
  // the launcher may end the others at once (htrun's mpirun does), and
  // rank 0 commits the checkpoint before it enters them.
  guard.record_exit(code, why, blamed);
  // The disk holds this very step: no snapshot is newer, and the job
  // may come back on other nodes.
  if (engine.checkpointer()) engine.checkpointer()->discard_memory(error.empty());
  engine.mesh().world().barrier()->wait();
  job.end_with({.code = code, .reason = why, .blamed = blamed});
  return true;
}

}  // namespace

void fit(Job& job, Engine& engine, const FitOptions& options) {
  options.validate();
  const EngineOptions& o = engine.options();
  const bool rank0 = job.rank0();
  resilience::RankGuard& guard = job.guard();
  const bool validation = o.eval_samples > 0 && engine.data().has_validation();
  std::unique_ptr<MetricsWriter> metrics;
  Peak peak;
  if (rank0) {
    peak = run_peak(engine, options);
    print_preamble(engine, options);
    std::printf("# MFU against %.3g TFLOP/s a rank (%s)\n", peak.tflops, peak.source.c_str());
    metrics = std::make_unique<MetricsWriter>(resilience::metrics_path(job.options().run_dir),
                                              guard.epoch());
    write_run_record(*metrics, engine, options, peak);
  }
  // An evaluation is labelled with the step it follows (0: before the first).
  auto evaluate = [&](std::int64_t step) {
    if (!validation) return;
    guard.progress(step, resilience::Phase::kEvaluate);
    const EvalStats val = engine.evaluate();
    if (!rank0) return;
    std::string line = fmt::format("step {}/{} | val loss {:.4f}", step, o.steps, val.loss);
    for (const auto& [name, value] : val.metrics) line += fmt::format(" | {} {:.4f}", name, value);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    metrics->write_eval(step, val);
  };
  // Resumed at the last step (a relaunch after the final save): nothing to
  // train, evaluate or save; the program's own end still runs.
  if (engine.steps_done() >= o.steps) {
    guard.progress(engine.steps_done(), resilience::Phase::kFinish);
    if (rank0) std::printf("# nothing left to train: resumed at step %lld of %lld\n", (long long)engine.steps_done(),
                           (long long)o.steps);
    std::fflush(stdout);
    if (engine.checkpointer()) engine.checkpointer()->discard_memory(true);
    if (options.at_end) options.at_end(engine);
    return;
  }
  // The starting validation loss of a fresh run; a resumed launch skips it
  // (a relaunch's time is recovery time, and that point of the curve was
  // measured, or passed, by the launch that reached it).
  if (engine.steps_done() == 0) evaluate(0);
  for (std::int64_t i = engine.steps_done(); i < o.steps; ++i) {
    const StepStats s = engine.step();
    if (rank0) report_step(*metrics, engine, options, s, peak);
    for (const std::string* error : {&s.checkpoint_error, &s.snapshot_error})
      if (!error->empty()) std::fprintf(stderr, "warning: %s; training goes on\n", error->c_str());
    if (rank0 && !s.stragglers.empty())
      std::fprintf(stderr, "straggler at step %lld: %s\n", (long long)s.step, s.stragglers.c_str());
    if (stop_if_asked(job, engine, options, s)) return;
    if ((o.eval_every > 0 && s.step % o.eval_every == 0) || s.step == o.steps) evaluate(s.step);
    if (options.after_step) options.after_step(engine, s);
  }
  // At the end the last step is saved too, and every save is waited for.
  guard.progress(engine.steps_done(), resilience::Phase::kFinish);
  if (engine.checkpointer()) {
    const std::string error = engine.checkpoint_now();
    if (!error.empty())
      std::fprintf(stderr, "warning: %s\n", error.c_str());
    else if (rank0)
      std::printf("# checkpoint of step %lld committed\n", (long long)engine.steps_done());
    // The run is done and on disk: its memory snapshots would only hold the node's memory.
    engine.checkpointer()->discard_memory(error.empty());
  }
  if (options.at_end) options.at_end(engine);
}

std::optional<ProgressLine> parse_progress_line(std::string_view line) {
  // "step <n>/<steps> | loss <x> |", as progress_line writes it.
  ProgressLine p;
  auto take = [&line](std::string_view prefix) {
    if (!line.starts_with(prefix)) return false;
    line.remove_prefix(prefix.size());
    return true;
  };
  auto integer = [&line](std::int64_t& out) {
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), out);
    if (ec != std::errc() || end == line.data()) return false;
    line.remove_prefix(std::size_t(end - line.data()));
    return true;
  };
  if (!take("step ") || !integer(p.step) || !take("/") || !integer(p.steps) || !take(" | loss ")) return std::nullopt;
  const std::size_t end = line.find(" |");
  if (end == std::string_view::npos || end == 0) return std::nullopt;
  const std::string loss(line.substr(0, end));
  char* parsed = nullptr;
  p.loss = std::strtod(loss.c_str(), &parsed);
  if (parsed != loss.c_str() + loss.size()) return std::nullopt;
  return p;
}

}  // namespace ht::train
