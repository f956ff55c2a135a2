// ht-plan: the fastest layouts of a model on a world of ranks that fit in
// memory, from the memory and time models (ht/plan), as a table and JSON,
// with the reasons the best one wins.
//
//   ht-plan --preset gpt2-124m --world 4 --global-batch 16              probes this machine
//   mpirun -np 4 ht-plan --preset gpt2-124m --global-batch 16           probes the 4 ranks together
//   ht-plan --preset llama2-70b --world 1024 --global-batch 1024 --profile h100.json --precision bf16
//   ht-plan ... --save-profile mine.json     keeps the probe's figures for later plans
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
#include "ht/models/gpt.h"
#include "ht/models/llama.h"
#include "ht/plan/search.h"

namespace {

constexpr int kUsage = 2;

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

struct ModelFlags {
  std::string model = "gpt", preset;
  int n_layer = 12, n_head = 12, n_kv_head = 4;
  std::int64_t n_embd = 768, vocab = 50257, vocab_multiple = 128, context = 1024, ffn_hidden = 0;
};

/// The presets' sizes, over the flags' defaults.
void apply_preset(ModelFlags& m) {
  if (m.preset.empty()) return;
  if (m.preset == "gpt2-124m") {
    m = {.model = "gpt", .preset = m.preset, .n_layer = 12, .n_head = 12, .n_embd = 768, .vocab = 50257,
         .vocab_multiple = 128, .context = 1024};
  } else if (m.preset == "gpt2-1.5b") {
    m = {.model = "gpt", .preset = m.preset, .n_layer = 48, .n_head = 25, .n_embd = 1600, .vocab = 50257,
         .vocab_multiple = 128, .context = 1024};
  } else if (m.preset == "llama2-7b") {
    m = {.model = "llama", .preset = m.preset, .n_layer = 32, .n_head = 32, .n_kv_head = 32, .n_embd = 4096,
         .vocab = 32000, .vocab_multiple = 128, .context = 4096, .ffn_hidden = 11008};
  } else if (m.preset == "llama2-70b") {
    m = {.model = "llama", .preset = m.preset, .n_layer = 80, .n_head = 64, .n_kv_head = 8, .n_embd = 8192,
         .vocab = 32000, .vocab_multiple = 128, .context = 4096, .ffn_hidden = 28672};
  } else {
    throw ht::Error(ht::ErrorKind::kConfig,
                    fmt::format("--preset '{}' is not known: choose gpt2-124m, gpt2-1.5b, llama2-7b or llama2-70b",
                                m.preset));
  }
}

ht::nn::ModelSpec model_spec(ModelFlags m, std::int64_t seq) {
  apply_preset(m);
  if (seq <= 0) seq = m.context;
  if (m.model == "gpt") {
    ht::models::GPTConfig c{.vocab_size = m.vocab, .context = m.context, .n_layer = m.n_layer, .n_head = m.n_head,
                            .n_embd = m.n_embd, .vocab_multiple = m.vocab_multiple};
    return c.spec(seq);
  }
  if (m.model == "llama") {
    ht::models::LlamaConfig c{.vocab_size = m.vocab, .context = m.context, .n_layer = m.n_layer,
                              .n_head = m.n_head, .n_kv_head = m.n_kv_head, .n_embd = m.n_embd,
                              .ffn_hidden = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.n_embd,
                              .vocab_multiple = m.vocab_multiple};
    return c.spec(seq);
  }
  throw ht::Error(ht::ErrorKind::kConfig, fmt::format("--model '{}' is not known: choose gpt or llama", m.model));
}

std::vector<ht::nn::Recompute> parse_recompute_list(const std::vector<std::string>& names) {
  std::vector<ht::nn::Recompute> v;
  for (const std::string& n : names) v.push_back(ht::nn::parse_recompute(n));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Plan a training layout: the fastest tp x pp x dp, ZeRO stage, micro-batch, schedule and "
               "recomputation that fit in memory, from a memory and a time model"};
  app.option_defaults()->always_capture_default();
  ModelFlags m;
  std::int64_t seq = 0, global_batch = 16, max_micro_batch = 0;
  int world = 0, top = 10, ranks_per_node = 0, virtual_stages = 2;
  double margin = 0.10, memory_gib = 0;
  std::string precision = "fp32", profile_path, save_profile, json_path;
  std::vector<int> tps, pps, zeros;
  std::vector<std::string> recomputes, schedules;
  app.add_option("--preset", m.preset, "a model: gpt2-124m, gpt2-1.5b, llama2-7b, llama2-70b (overrides the sizes)");
  app.add_option("--model", m.model, "gpt or llama (with the sizes below)");
  app.add_option("--n-layer", m.n_layer, "blocks");
  app.add_option("--n-head", m.n_head, "attention heads");
  app.add_option("--kv-heads", m.n_kv_head, "key/value heads (llama)");
  app.add_option("--n-embd", m.n_embd, "width");
  app.add_option("--ffn-hidden", m.ffn_hidden, "the MLP's hidden size (llama; 0: 4 x width)");
  app.add_option("--vocab-size", m.vocab, "vocabulary");
  app.add_option("--vocab-multiple", m.vocab_multiple, "pad the vocabulary rows to a multiple of this");
  app.add_option("--context", m.context, "the model's context");
  app.add_option("--seq", seq, "tokens per row (0: the context)");
  app.add_option("--world", world, "ranks (0: the launcher's world, or 1)");
  app.add_option("--global-batch", global_batch, "rows per optimizer step")->check(CLI::PositiveNumber);
  app.add_option("--precision", precision, "fp32, bf16 or fp16");
  app.add_option("--profile", profile_path, "a machine profile (JSON, see include/ht/plan/profile.h); none: probe this machine");
  app.add_option("--ranks-per-node", ranks_per_node, "with a probe: ranks sharing this machine (0: the ranks probing)");
  app.add_option("--memory-gib", memory_gib, "with a probe: memory per rank (0: physical memory / ranks per node)");
  app.add_option("--save-profile", save_profile, "write the profile used to this file");
  app.add_option("--margin", margin, "share of each rank's memory kept free");
  app.add_option("--tp", tps, "only these tensor-parallel sizes")->delimiter(',');
  app.add_option("--pp", pps, "only these pipeline sizes")->delimiter(',');
  app.add_option("--zero", zeros, "only these ZeRO stages")->delimiter(',');
  app.add_option("--recompute", recomputes, "only these recomputation modes (none, selective, full)")->delimiter(',');
  app.add_option("--schedule", schedules,
                 "pipeline schedules to consider (1f1b, gpipe, interleaved, zb-h1; default 1f1b,gpipe)")
      ->delimiter(',');
  app.add_option("--virtual-stages", virtual_stages, "chunks per rank of the interleaved schedule");
  app.add_option("--max-micro-batch", max_micro_batch, "largest micro-batch (0: any)");
  app.add_option("--top", top, "plans printed")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the plans as JSON to this file ('-': standard output only)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUsage;
  }

  std::unique_ptr<ht::comm::MpiRuntime> runtime;
  std::unique_ptr<ht::comm::Communicator> comm;
  try {
    if (launched_by_mpi()) {
      runtime = std::make_unique<ht::comm::MpiRuntime>(&argc, &argv);
      comm = ht::comm::make_mpi_world(ht::comm::comm_options_from_env());
    }
    const bool rank0 = !comm || comm->rank() == 0;
    ht::plan::PlanRequest rq;
    rq.model = model_spec(m, seq);
    rq.world = world > 0 ? world : (comm ? comm->size() : 1);
    rq.global_batch = global_batch;
    rq.precision = ht::precision::parse_policy(precision);
    rq.memory_margin = margin;
    rq.tp = tps, rq.pp = pps, rq.zero = zeros, rq.max_micro_batch = max_micro_batch;
    rq.recompute = parse_recompute_list(recomputes);
    for (const std::string& s : schedules) rq.schedules.push_back(ht::parallel::parse_schedule(s));
    rq.virtual_stages = virtual_stages;
    if (!profile_path.empty()) {
      rq.profile = ht::plan::load_profile(profile_path);
    } else {
      ht::plan::ProbeOptions po;
      po.memory_gib = memory_gib;
      rq.profile = ht::plan::probe_profile(po, comm.get(), ranks_per_node > 0 ? ranks_per_node : (comm ? comm->size() : 1));
    }
    if (!save_profile.empty() && rank0) {
      std::ofstream out(save_profile);
      out << ht::plan::to_json(rq.profile) << "\n";
      HT_CHECK(out.good(), ht::ErrorKind::kIo, "cannot write the profile to '{}'", save_profile);
    }
    const ht::plan::PlanResult result = ht::plan::search_plans(rq, top);
    if (rank0) {
      const std::string json = ht::plan::plans_to_json(result, rq);
      if (json_path == "-") {
        std::printf("%s\n", json.c_str());
      } else {
        std::fputs(ht::plan::format_plans(result, rq).c_str(), stdout);
        if (!json_path.empty()) {
          std::ofstream out(json_path);
          out << json << "\n";
          HT_CHECK(out.good(), ht::ErrorKind::kIo, "cannot write the plans to '{}'", json_path);
        }
      }
    }
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
