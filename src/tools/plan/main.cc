// ht-plan: the fastest layouts of a model on a world of ranks that fit in
// memory, from the memory and time models (ht/plan), as a table and JSON,
// with the reasons the best one wins.
//
//   ht-plan --preset gpt2-124m --world 4 --global-batch 16              probes this machine
//   mpirun -np 4 ht-plan --preset gpt2-124m --global-batch 16           probes the 4 ranks together
//   ht-plan --preset llama2-70b --world 1024 --global-batch 1024 --profile h100.json --precision bf16
//   ht-plan --preset mixtral-8x7b --world 64 --global-batch 256 --profile h100.json --precision bf16
//                                            a mixture of experts: ep chosen too
//   ht-plan ... --save-profile mine.json     keeps the probe's figures for later plans
//   ht-plan --reliability --hosts 2048 --gpus-per-host 8      goodput at that size, snapshot and checkpoint intervals
//   ht-plan --reliability --from-report RUN/htrun_report.json --fault-free FREE/htrun_report.json
//                                            a run's own goodput projected from what it measured
//
// Exit codes: 0 a plan printed, 2 bad input (or nothing fits), 1 anything else.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ht/comm/comm_env.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/core/error.h"
#include "ht/core/launcher_env.h"
#include "ht/models/model_flags.h"
#include "ht/plan/search.h"
#include "reliability_args.h"

namespace {

constexpr int kUsage = 2;

std::vector<ht::nn::Recompute> parse_recompute_list(const std::vector<std::string>& names) {
  std::vector<ht::nn::Recompute> v;
  for (const std::string& n : names) v.push_back(ht::nn::parse_recompute(n));
  return v;
}

// The command line.
struct PlanArgs {
  ht::models::ModelFlags model = ht::models::ModelFlags::either("gpt2-124m", "llama-124m");
  std::int64_t seq = 0, global_batch = 16, max_micro_batch = 0;
  int world = 0, top = 10, ranks_per_node = 0, virtual_stages = 2;
  double margin = 0.10, memory_gib = 0;
  std::string precision = "fp32", profile_path, save_profile, json_path;
  std::vector<int> tps, pps, cps, eps, zeros;
  std::vector<std::string> recomputes, schedules;
  bool list_presets = false;

  void add_to(CLI::App& app) {
    model.add_to(app);
    app.add_flag("--list-presets", list_presets,
                 "print the model presets (name, architecture, sizes, parameters) and exit");
    app.add_option("--seq", seq, "tokens per row (0: the context)");
    app.add_option("--world", world, "ranks (0: the launcher's world, or 1)");
    app.add_option("--global-batch", global_batch, "rows per optimizer step")->check(CLI::PositiveNumber);
    app.add_option("--precision", precision, "fp32, bf16 or fp16");
    app.add_option("--profile", profile_path,
                   "a machine profile (JSON, see include/ht/plan/profile.h); none: probe this machine");
    app.add_option("--ranks-per-node", ranks_per_node, "with a probe: ranks sharing this machine (0: the ranks probing)");
    app.add_option("--memory-gib", memory_gib, "with a probe: memory per rank (0: physical memory / ranks per node)");
    app.add_option("--save-profile", save_profile, "write the profile used to this file");
    app.add_option("--margin", margin, "share of each rank's memory kept free");
    app.add_option("--tp", tps, "only these tensor-parallel sizes")->delimiter(',');
    app.add_option("--pp", pps, "only these pipeline sizes")->delimiter(',');
    app.add_option("--cp", cps,
                   "only these context-parallel sizes (default: every size cutting --seq into 2 cp chunks of at least "
                   "64 positions)")
        ->delimiter(',');
    app.add_option("--ep", eps,
                   "only these expert-parallel sizes (default: every size dividing dp and the experts; 1 for a "
                   "dense model)")
        ->delimiter(',');
    app.add_option("--zero", zeros, "only these ZeRO stages")->delimiter(',');
    app.add_option("--recompute", recomputes, "only these recomputation modes (none, selective, full)")->delimiter(',');
    app.add_option("--schedule", schedules,
                   "pipeline schedules to consider (1f1b, gpipe, interleaved, zb-h1; default 1f1b,gpipe)")
        ->delimiter(',');
    app.add_option("--virtual-stages", virtual_stages, "chunks per rank of the interleaved schedule");
    app.add_option("--max-micro-batch", max_micro_batch, "largest micro-batch (0: any)");
    app.add_option("--top", top, "plans printed")->check(CLI::PositiveNumber);
    app.add_option("--json", json_path,
                   "also write the plans (or the reliability projection) as JSON to this file ('-' or no file: "
                   "standard output only)")
        ->expected(0, 1);
  }

  // The search the flags ask for, on `comm`'s world (null: one process);
  // the machine profile from --profile or a probe.
  ht::plan::PlanRequest request(ht::comm::Communicator* comm) const {
    ht::plan::PlanRequest rq;
    const ht::models::ModelConfig config = model.resolve();
    rq.model = ht::models::spec(config, seq > 0 ? seq : ht::models::context(config));
    rq.world = world > 0 ? world : (comm ? comm->size() : 1);
    rq.global_batch = global_batch;
    rq.precision = ht::precision::parse_policy(precision);
    rq.memory_margin = margin;
    rq.tp = tps, rq.pp = pps, rq.cp = cps, rq.ep = eps, rq.zero = zeros, rq.max_micro_batch = max_micro_batch;
    rq.recompute = parse_recompute_list(recomputes);
    for (const std::string& name : schedules) rq.schedules.push_back(ht::parallel::parse_schedule(name));
    rq.virtual_stages = virtual_stages;
    if (!profile_path.empty()) {
      rq.profile = ht::plan::load_profile(profile_path);
    } else {
      ht::plan::ProbeOptions po;
      po.memory_gib = memory_gib;
      rq.profile = ht::plan::probe_profile(po, comm, ranks_per_node > 0 ? ranks_per_node : (comm ? comm->size() : 1));
    }
    return rq;
  }
};

void print_presets() {
  for (const ht::models::ModelPreset& p : ht::models::model_presets())
    std::printf("%-16s %-5s %-52s %14lld parameters  %s\n", p.name.c_str(),
                std::string(ht::models::architecture(p.config)).c_str(), ht::models::describe(p.config).c_str(),
                static_cast<long long>(ht::models::num_parameters(p.config)), p.about.c_str());
}

// Rank 0's output: the plans as a table (and JSON to a file), or as JSON alone (--json -).
void write_plans(const ht::plan::PlanResult& result, const ht::plan::PlanRequest& rq, const std::string& json_path) {
  const std::string json = ht::plan::plans_to_json(result, rq);
  if (json_path == "-") {
    std::printf("%s\n", json.c_str());
    return;
  }
  std::fputs(ht::plan::format_plans(result, rq).c_str(), stdout);
  if (json_path.empty()) return;
  std::ofstream out(json_path);
  out << json << "\n";
  HT_CHECK(out.good(), ht::ErrorKind::kIo, "cannot write the plans to '{}'", json_path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Plan a training layout: the fastest tp x pp x dp, ZeRO stage, micro-batch, schedule and "
               "recomputation that fit in memory, from a memory and a time model"};
  app.option_defaults()->always_capture_default();
  PlanArgs args;
  args.add_to(app);
  ht::plan::tool::ReliabilityArgs reliability;
  reliability.add_to(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUsage;
  }
  if (app.count("--json") > 0 && args.json_path.empty()) args.json_path = "-";  // --json alone
  if (args.list_presets) {
    print_presets();
    return 0;
  }
  std::unique_ptr<ht::comm::MpiRuntime> runtime;
  std::unique_ptr<ht::comm::Communicator> comm;
  try {
    if (reliability.enabled) {
      reliability.run(app, args.json_path);
      return 0;
    }
    if (ht::launched_by_mpi()) {
      runtime = std::make_unique<ht::comm::MpiRuntime>(&argc, &argv);
      comm = ht::comm::make_mpi_world(ht::comm::comm_options_from_env());
    }
    const bool rank0 = !comm || comm->rank() == 0;
    const ht::plan::PlanRequest rq = args.request(comm.get());
    if (!args.save_profile.empty() && rank0) {
      std::ofstream out(args.save_profile);
      out << ht::plan::to_json(rq.profile) << "\n";
      HT_CHECK(out.good(), ht::ErrorKind::kIo, "cannot write the profile to '{}'", args.save_profile);
    }
    const ht::plan::PlanResult result = ht::plan::search_plans(rq, args.top);
    if (rank0) write_plans(result, rq, args.json_path);
    if (comm) comm->finalize(std::chrono::seconds(60));
    return 0;
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "ht-plan: %s\n", e.message().c_str());
    const bool usage = e.kind() == ht::ErrorKind::kConfig || e.kind() == ht::ErrorKind::kInvalidArgument ||
                       e.kind() == ht::ErrorKind::kIo;
    if (comm) comm->abort();
    return usage ? kUsage : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-plan: %s\n", e.what());
    if (comm) comm->abort();
    return 1;
  }
}
