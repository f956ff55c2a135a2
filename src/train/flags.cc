// ht::train::TrainFlags: the shared command line.
#include "ht/train/flags.h"

#include <filesystem>

#include "ht/precision/policy.h"
#include "ht/resilience/run_protocol.h"

namespace ht::train {

namespace {

// "3-5" or "4" into engine.trace_first and trace_last; throws kConfig.
void parse_trace_steps(const std::string& spec, EngineOptions& engine) {
  const std::size_t dash = spec.find('-');
  const std::string first = spec.substr(0, dash), last = dash == std::string::npos ? first : spec.substr(dash + 1);
  auto number = [&](const std::string& s) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HT_CHECK(used == s.size() && used > 0 && v >= 1, ErrorKind::kConfig,
             "--trace-steps '{}': give FIRST-LAST (e.g. 3-5) or one step, counted from 1", spec);
    return std::int64_t(v);
  };
  engine.trace_first = number(first);
  engine.trace_last = number(last);
}

}  // namespace

// Steps, seed, device, run directory, validation, the timeline and MFU.
void TrainFlags::add_run_flags(CLI::App& app) {
  EngineOptions& t = engine;
  app.add_option("--steps", t.steps, "optimizer steps")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", t.seed, "seed for weights, data order and sampling");
  app.add_option("--run-dir", job.run_dir, "where metrics.jsonl, heartbeats and exit records go");
  app.add_option("--device", device,
                 "cpu, cuda or cuda:N (N counts from each rank's first GPU: cuda gives every rank of a node its own)");
  app.add_option("--peak-tflops", fit.peak_tflops,
                 "one rank's dense peak TFLOP/s for the step's GEMMs, for MFU (0: measured before the first step)");
  app.add_option("--trace", t.trace_path,
                 "write a timeline of --trace-steps: FILE.rank<R>.json per rank (Chrome trace events; merge them with "
                 "ht-trace, open in Perfetto or chrome://tracing)");
  app.add_option("--trace-steps", trace_steps, "the steps --trace records: FIRST-LAST or one step");
  app.add_option("--eval-every", t.eval_every, "steps between validation passes (0: only at the end)");
  app.add_option("--eval-samples", t.eval_samples,
                 "validation samples per pass, the same under every layout (0: no validation)");
}

// The layout (parallel::Layout), recomputation and the gradient buckets.
void TrainFlags::add_layout_flags(CLI::App& app) {
  parallel::Layout& l = engine.layout;
  app.add_option("--micro-batch", l.micro_batch, "rows per micro-batch and data-parallel rank");
  app.add_option("--grad-accum", l.grad_accum, "micro-batches per optimizer step (the pipeline's micro-batches)");
  app.add_option("--tp", l.tp, "tensor-parallel ranks")->check(CLI::PositiveNumber);
  app.add_option("--pp", l.pp, "pipeline stages (contiguous layers each)")->check(CLI::PositiveNumber);
  app.add_option("--cp", l.cp,
                 "context-parallel ranks: each sequence split over them (two chunks each, balanced for causal "
                 "attention); the sequence length must be a multiple of 2 x cp")
      ->check(CLI::PositiveNumber);
  app.add_option("--ep", l.ep,
                 "expert-parallel ranks: each mixture-of-experts layer's routed experts split over runs of ep "
                 "data-parallel ranks (ep divides dp and the expert count); tokens reach their experts by all-to-all")
      ->check(CLI::PositiveNumber);
  app.add_option("--stage-layers", l.stage_layers,
                 "layers on each pipeline stage, one count per stage, e.g. 3,5,5,3 (default: by count)")
      ->delimiter(',');
  app.add_option("--zero", l.zero, "0: data parallel (DDP); 1, 2, 3: ZeRO stage")
      ->check(CLI::Range(0, 3));
  app.add_option("--zero-shard-group", l.shard_group,
                 "ranks per ZeRO shard group (hybrid sharding; 0: all data-parallel ranks)");
  app.add_option("--bucket-mb", bucket_mb, "gradient bucket size in MiB (data parallelism)")->check(CLI::PositiveNumber);
  app.add_option("--schedule", schedule,
                 "pipeline schedule: gpipe, 1f1b, interleaved (1F1B over --virtual-stages chunks per rank) or zb-h1 "
                 "(zero bubble: weight gradients deferred into the idle time)");
  app.add_option("--virtual-stages", virtual_stages,
                 "model chunks per pipeline rank under --schedule interleaved (default 2)")
      ->check(CLI::PositiveNumber);
  app.add_option("--recompute", recompute,
                 "activation recomputation: none, selective (the attention core) or full (whole blocks)");
}

// Precision and loss scaling, the optimizer and its schedule.
void TrainFlags::add_optimizer_flags(CLI::App& app) {
  EngineOptions& t = engine;
  app.add_option("--precision", precision, "compute precision: fp32, fp16 (dynamic loss scaling) or bf16");
  app.add_option("--grad-reduce-dtype", grad_reduce, "dtype of the gradient reduction: fp32, fp16 or bf16");
  app.add_option("--loss-scale", t.loss_scaler.initial_scale, "initial dynamic loss scale (fp16)");
  app.add_option("--loss-scale-window", t.loss_scaler.growth_interval, "finite steps before the loss scale doubles");
  app.add_option("--loss-scale-hysteresis", t.loss_scaler.hysteresis, "overflows tolerated before the scale halves");
  app.add_option("--min-loss-scale", t.loss_scaler.min_scale, "the loss scale never drops below this");
  app.add_option("--lr", t.lr, "peak learning rate");
  app.add_option("--min-lr", t.min_lr, "final learning rate of the schedule");
  app.add_option("--lr-decay", lr_decay, "after warm-up, from --lr to --min-lr at the last step: cosine, linear or constant");
  app.add_option("--warmup", t.warmup_steps, "linear warm-up steps");
  app.add_option("--clip", t.grad_clip, "max global gradient norm (0: off)");
  app.add_option("--optimizer", t.optimizer, "adamw or sgd (with momentum; a checkpoint resumes only with its own)");
  app.add_option("--weight-decay", t.adamw.weight_decay, "AdamW decoupled weight decay");
  app.add_option("--momentum", t.sgd.momentum, "SGD momentum (0: none)");
}

// Checkpoints on disk and in memory, and resume.
void TrainFlags::add_checkpoint_flags(CLI::App& app) {
  EngineOptions& t = engine;
  app.add_option("--ckpt-every", t.ckpt_every, "save a checkpoint every N steps (0: only at the end, if --ckpt-dir)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-every-s", t.ckpt_every_s, "save a checkpoint every S seconds (0: by steps only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-dir", ckpt_dir, "checkpoint directory (default <run-dir>/checkpoints)");
  app.add_option("--ckpt-keep", t.ckpt_keep, "committed checkpoints kept")->check(CLI::PositiveNumber);
  app.add_option("--ckpt-commit-delay-ms", ckpt_commit_delay_ms,
                 "rehearsal: hold each save this long before its commit (to test a crash during a save)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--mem-ckpt-every", mem_ckpt_every,
                 "memory snapshot every N steps, in the node's memory and replicated to another node (0: none; "
                 "auto: as often as a cost of 2% of a step allows, measured from the step times); with a checkpoint "
                 "directory");
  app.add_option("--mem-ckpt-dir", t.mem_ckpt_dir,
                 "where memory snapshots go (default /dev/shm/hypertrain-<hash of the checkpoint directory>)");
  app.add_option("--resume", resume, "auto: continue from the newest good checkpoint (a fresh start if none)");
}

// What htrun relies on: heartbeats, the watchdog, divergence, stragglers, replica checks.
void TrainFlags::add_resilience_flags(CLI::App& app) {
  EngineOptions& t = engine;
  app.add_option("--heartbeat", job.heartbeat_s, "seconds between heartbeats (<run-dir>/heartbeat)");
  app.add_option("--watchdog", job.watchdog_s, "seconds without progress before the rank exits as hung (0: off)");
  app.add_option("--divergence-steps", t.divergence_steps, "consecutive non-finite losses that end the run");
  app.add_option("--straggler-window", t.straggler_window, "steps per straggler window (0: no detection)");
  app.add_option("--straggler-threshold", t.straggler_threshold, "a straggler's work per step over the median");
  app.add_option("--straggler-windows", t.straggler_windows, "slow windows in a row before a straggler is reported");
  app.add_option("--straggler-action", fit.straggler_action,
                 "report: print a straggler and go on; exit: checkpoint and exit so htrun replaces its node");
  app.add_option("--sdc-every", t.sdc_every, "steps between replica parameter checksum comparisons (0: never)");
}

// --auto and --dry-run.
void TrainFlags::add_planning_flags(CLI::App& app) {
  app.add_flag("--auto", auto_plan,
               "plan the layout (tp, pp, ZeRO, micro-batch, accumulation, schedule, recomputation, stages) for the "
               "world found, print it and train with it (ht-plan shows the alternatives)");
  app.add_flag("--dry-run", dry_run, "print the memory estimate of every pipeline stage and exit without training");
  app.add_option("--global-batch", global_batch,
                 "rows per optimizer step that --auto keeps (0: --micro-batch x --grad-accum x data-parallel ranks)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--plan-profile", plan_profile,
                 "machine profile for --auto (JSON, see examples/plan/); default: probe this machine");
  app.add_option("--plan-memory-gib", plan_memory_gib,
                 "memory per rank for --auto and --dry-run (default: physical memory / ranks on the node)")
      ->check(CLI::NonNegativeNumber);
}

void TrainFlags::add_to(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  add_run_flags(app);
  add_layout_flags(app);
  add_optimizer_flags(app);
  add_checkpoint_flags(app);
  add_resilience_flags(app);
  add_planning_flags(app);
}

void TrainFlags::resolve() {
  engine.device = job.device = parse_device(device);
  parallel::Layout& l = engine.layout;
  l.schedule = parallel::parse_schedule(schedule);
  const bool interleaved = l.schedule == parallel::Schedule::kInterleaved;
  HT_CHECK(interleaved || virtual_stages <= 1, ErrorKind::kConfig,
           "--virtual-stages {} asks for model chunks, which only --schedule interleaved has (--schedule {})",
           virtual_stages, schedule);
  l.virtual_stages = interleaved ? (virtual_stages > 0 ? virtual_stages : 2) : 1;
  try {
    engine.recompute = nn::parse_recompute(recompute);
  } catch (const Error& e) {
    throw Error(ErrorKind::kConfig, fmt::format("--recompute: {}", e.message()));
  }
  engine.lr_decay = optim::parse_decay(lr_decay);
  engine.precision = precision::parse_policy(precision);
  engine.precision.reduce = precision::parse_policy(grad_reduce).compute;
  engine.bucket_bytes = std::int64_t(bucket_mb * double(1 << 20));
  HT_CHECK(resume.empty() || resume == "auto", ErrorKind::kConfig,
           "--resume '{}' is not supported: use --resume auto (the newest good checkpoint in the checkpoint directory)",
           resume);
  engine.resume = resume == "auto";
  engine.ckpt_commit_delay = std::chrono::milliseconds(ckpt_commit_delay_ms);
  parse_trace_steps(trace_steps, engine);
  if (mem_ckpt_every == "auto") {
    engine.mem_ckpt_every = -1;
  } else {
    std::size_t used = 0;
    try {
      engine.mem_ckpt_every = std::stoll(mem_ckpt_every, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HT_CHECK(used == mem_ckpt_every.size() && used > 0 && engine.mem_ckpt_every >= 0, ErrorKind::kConfig,
             "--mem-ckpt-every '{}': give a number of steps (0: no memory snapshots) or auto", mem_ckpt_every);
  }
  if (engine.ckpt_every > 0 || engine.ckpt_every_s > 0 || engine.resume || !ckpt_dir.empty())
    engine.ckpt_dir = ckpt_dir.empty() ? resilience::checkpoint_dir(job.run_dir) : ckpt_dir;
  job.layout = l;  // the job splits its mesh from the layout
  job.validate();
  engine.validate();  // the layout too, before any process starts
  fit.validate();
  HT_CHECK(!(auto_plan || dry_run) || model_spec, ErrorKind::kConfig,
           "--auto and --dry-run need the program to describe its model (TrainFlags::model_spec); this one does not");
  // Before any device is touched: the answer does not depend on one being there.
  HT_CHECK(!auto_plan || !plan_profile.empty() || !engine.device.is_cuda(), ErrorKind::kConfig,
           "--auto on {}: the probe measures the host only; give the GPUs' figures with --plan-profile FILE (see "
           "include/ht/plan/profile.h and examples/plan/)",
           device);
  if (auto_plan) job.choose_layout = [this](comm::Communicator& world, JobOptions& o) { apply_auto_plan(world, o); };
}

int run_job(const char* program, TrainFlags& flags, const std::function<void(Job&)>& body) {
  return run_job(
      program,
      [&] {
        flags.resolve();
        return flags.job;
      },
      [&](Job& job) {
        flags.engine.device = job.device();  // this rank's own GPU
        if (flags.dry_run) {
          const std::string report = flags.dry_run_report(job.mesh().world().size());
          if (job.rank0()) std::fputs(report.c_str(), stdout);
          return;
        }
        body(job);
      });
}

}  // namespace ht::train
