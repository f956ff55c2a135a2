// ht-plan-bench: the plan layer's memory and time models against measured
// runs, side by side, on this machine.
//
//   mpirun -np 4 ht-plan-bench --model gpt --layers 4 --embd 256 --heads 4 --seq 128 --global-batch 16
//
// Probes the machine with every rank at once (plan::probe_profile), then for
// each layout of the list (default: every tp x pp mesh of the world that the
// model splits over, ZeRO 0-3 where dp > 1, a pipeline's accumulation
// 2 pp, and the three recomputation modes on the first mesh; plus the plan
// the search picks) builds an Engine on a fresh mesh, runs --warmup steps,
// resets the allocator's peaks and runs --steps more. With --rounds N the
// whole list runs N times, each round starting one layout further on, so
// that a slow spell of the machine falls on different layouts. Per layout it
// prints: the measured step time (median over steps, slowest rank; with
// rounds, the quickest round's, as load only ever adds) beside the time
// model's, and for each memory category the step peak measured on each rank
// beside the model's figure for that rank's stage, as the largest relative
// error over ranks (and rounds). At the end: the Spearman rank correlation
// of modelled against measured step times; with rounds, the mean
// correlation of one round's measured times with another's (how far the
// machine repeats its own ranking: a ceiling for the model's); the chosen
// plan's measured time against the fastest measured; the range of the
// model's step-time error, (modelled - measured) / measured over layouts
// (where layouts lie closer together than the machine repeats itself, this
// says more than the ranking); and the largest memory errors. --json: JSON
// Lines.
// Exit 0 unless a run fails (figures are reported, not enforced: the
// machine is noisy).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "parallel_common.h"
#include "ht/comm/comm_env.h"
#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/core/memory.h"
#include "ht/models/model_flags.h"
#include "ht/plan/search.h"

namespace ht::bench {
namespace {

using nlohmann::json;

struct Args {
  models::ModelFlags model = models::ModelFlags::either("gpt-small", "llama-small");
  std::int64_t seq = 128;
  std::int64_t global_batch = 16;
  std::int64_t steps = 2, warmup = 1;
  int rounds = 1;
  std::string precision = "fp32";
  std::vector<std::string> layouts;  // "tp,pp,zero,micro_batch[,recompute[,schedule[,virtual_stages]]]"
  bool json = false;
};

constexpr MemCategory kShown[] = {MemCategory::kParameters, MemCategory::kGradients, MemCategory::kOptimizerState,
                                  MemCategory::kActivations};
constexpr const char* kShownNames[] = {"params", "grads", "optim", "activ"};

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const auto ranks = [](const std::vector<double>& v) {
    std::vector<std::size_t> idx(v.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < idx.size();) {  // ties share their mean rank
      std::size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (std::size_t k = i; k <= j; ++k) r[idx[k]] = (double(i) + double(j)) / 2.0;
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = double(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb), saa += (ra[i] - ma) * (ra[i] - ma), sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

plan::LayoutChoice parse_layout(const std::string& text, int world, std::int64_t global_batch,
                                const precision::Policy& p) {
  std::vector<std::string> f;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = text.find(',', at);
    f.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  HT_CHECK(f.size() >= 4, ErrorKind::kConfig,
           "--layouts '{}': give tp,pp,zero,micro_batch[,recompute[,schedule[,virtual_stages]]]", text);
  plan::LayoutChoice l;
  l.tp = std::stoi(f[0]), l.pp = std::stoi(f[1]), l.zero = std::stoi(f[2]), l.micro_batch = std::stoll(f[3]);
  HT_CHECK(l.tp > 0 && l.pp > 0 && world % (l.tp * l.pp) == 0, ErrorKind::kConfig,
           "--layouts '{}': tp x pp must divide the world of {}", text, world);
  l.dp = world / (l.tp * l.pp);
  HT_CHECK(l.micro_batch > 0 && global_batch % (l.micro_batch * l.dp) == 0, ErrorKind::kConfig,
           "--layouts '{}': micro-batch x dp must divide the global batch {}", text, global_batch);
  l.grad_accum = int(global_batch / (l.micro_batch * l.dp));
  if (f.size() > 4) l.recompute = nn::parse_recompute(f[4]);
  if (f.size() > 5) l.schedule = parallel::parse_schedule(f[5]);
  if (l.schedule == parallel::Schedule::kInterleaved) l.virtual_stages = f.size() > 6 ? std::stoi(f[6]) : 2;
  l.precision = p;
  return l;
}

std::vector<plan::LayoutChoice> default_layouts(const nn::ModelSpec& spec, int world, std::int64_t gb,
                                                const precision::Policy& p) {
  std::vector<plan::LayoutChoice> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp || !spec.splits_over(tp)) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp || pp > spec.num_blocks()) continue;
      const int dp = world / tp / pp;
      if (gb % dp) continue;
      const int accum = pp > 1 ? 2 * pp : 1;
      if ((gb / dp) % accum) continue;
      for (int zero : dp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0}) {
        plan::LayoutChoice l{{.tp = tp, .pp = pp, .dp = dp, .zero = zero, .micro_batch = gb / dp / accum,
                             .grad_accum = accum},
                            nn::Recompute::kNone, p};
        out.push_back(l);
        if (out.size() == 1)
          for (nn::Recompute rc : {nn::Recompute::kSelective, nn::Recompute::kFull}) {
            l.recompute = rc;
            out.push_back(l);
          }
      }
    }
  }
  return out;
}

struct Measured {
  double step_ms = 0;                    // median over steps, slowest rank
  std::vector<double> modelled_ms;       // per layout: the time model's step
  std::vector<double> error;             // per shown category: largest relative error over ranks
  std::vector<double> measured_bytes, modelled_bytes;  // per shown category: rank 0's, for the table
  double total_error = 0;
};

Measured run_layout(const Args& a, const plan::LayoutChoice& l, const nn::ModelSpec& spec,
                    const models::ModelConfig& config, const data::TokenSplits& splits, const comm::CommOptions& copts) {
  comm::DeviceMesh mesh(comm::make_mpi_world(copts), l.tp, l.pp);
  train::EngineOptions o;
  o.layout = l;
  o.steps = a.warmup + a.steps;
  o.warmup_steps = 1;
  o.eval_samples = 0;
  o.eval_every = 0;
  o.precision = l.precision;
  o.recompute = l.recompute;
  Measured r;
  std::vector<double> times;
  std::vector<std::int64_t> peaks(kMemCategoryCount, 0);
  {
    std::unique_ptr<LmEngine> engine = std::visit(
        [&](const auto& c) { return std::make_unique<LmEngine>(o, c, splits, a.seq, &mesh); }, config);
    for (std::int64_t i = 0; i < a.warmup; ++i) (*engine)->step();
    mesh.world().barrier()->wait();
    reset_memory_peaks();
    for (std::int64_t i = 0; i < a.steps; ++i) times.push_back((*engine)->step().ms);
    for (int c = 0; c < kMemCategoryCount; ++c) peaks[std::size_t(c)] = memory_stats(DeviceType::kCPU, MemCategory(c)).peak_bytes;
  }
  const std::vector<plan::StageMemory> model = plan::estimate_memory(spec, l);
  const plan::StageMemory& mine = model.at(std::size_t(mesh.coord().pp_rank));
  std::vector<double> errors;
  double measured_total = 0, modelled_total = 0;
  for (MemCategory c : kShown) {
    const double m = double(peaks[std::size_t(c)]), e = mine.of(c);
    errors.push_back(m > 0 ? std::abs(e - m) / m : (e > 0 ? 1.0 : 0.0));
    measured_total += m, modelled_total += e;
  }
  errors.push_back(measured_total > 0 ? std::abs(modelled_total - measured_total) / measured_total : 0.0);
  const std::vector<double> all_errors = gather_f64(mesh.world(), errors);
  const int ranks = mesh.world().size(), k = int(errors.size());
  r.error.assign(std::size_t(k), 0.0);
  for (int rank = 0; rank < ranks; ++rank)
    for (int i = 0; i < k; ++i) r.error[std::size_t(i)] = std::max(r.error[std::size_t(i)], all_errors[std::size_t(rank * k + i)]);
  r.total_error = r.error.back();
  r.error.pop_back();
  for (MemCategory c : kShown) {
    r.measured_bytes.push_back(double(peaks[std::size_t(c)]));
    r.modelled_bytes.push_back(mine.of(c));
  }
  const std::vector<double> all_ms = gather_f64(mesh.world(), {median(times)});
  r.step_ms = *std::max_element(all_ms.begin(), all_ms.end());
  mesh.finalize(copts.timeout);
  return r;
}

int bench(int argc, char** argv, const comm::MpiRuntime&) {
  CLI::App app{"The plan layer's memory and time models against measured runs of the same layouts"};
  app.option_defaults()->always_capture_default();
  Args a;
  a.model.add_to(app);
  app.add_option("--seq", a.seq, "tokens per row (at most the model's --context)");
  app.add_option("--global-batch", a.global_batch, "rows per optimizer step");
  app.add_option("--steps", a.steps, "measured steps per layout");
  app.add_option("--warmup", a.warmup, "steps before measuring");
  app.add_option("--rounds", a.rounds, "times the whole list runs, each round rotated by one layout")
      ->check(CLI::Range(1, 100));
  app.add_option("--precision", a.precision, "fp32, bf16 or fp16");
  app.add_option("--layouts", a.layouts, "tp,pp,zero,micro_batch[,recompute[,schedule[,virtual_stages]]] (default: see the header)")
      ->delimiter(';');
  app.add_flag("--json", a.json, "JSON Lines instead of a table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const comm::CommOptions copts = comm::comm_options_from_env();
  auto world = comm::make_mpi_world(copts);
  const bool print = world->rank() == 0;
  const precision::Policy policy = precision::parse_policy(a.precision);

  const models::ModelConfig config = a.model.resolve();
  HT_CHECK(a.seq > 0 && a.seq <= models::context(config), ErrorKind::kConfig,
           "--seq {} must lie in [1, the model's context {}]; raise --context", a.seq, models::context(config));
  const nn::ModelSpec spec = models::spec(config, a.seq);
  const auto [embd, heads] = std::visit([](const auto& c) { return std::pair{c.n_embd, c.n_head}; }, config);

  // The machine, measured by every rank at once at the model's shapes.
  plan::ProbeOptions po;
  po.gemm_m = std::max<std::int64_t>(a.global_batch / world->size(), 1) * a.seq;
  po.gemm_k = embd, po.gemm_n = 4 * embd;
  po.attn_batch = 2, po.attn_seq = a.seq, po.attn_heads = heads, po.attn_head_dim = embd / heads;
  const plan::MachineProfile profile = plan::probe_profile(po, world.get(), world->size());

  std::vector<plan::LayoutChoice> layouts;
  for (const std::string& t : a.layouts) {
    layouts.push_back(parse_layout(t, world->size(), a.global_batch, policy));
    HT_CHECK(spec.splits_over(layouts.back().tp), ErrorKind::kConfig, "--layouts '{}': {} does not split over tp {}", t,
             spec.description, layouts.back().tp);
  }
  if (layouts.empty()) layouts = default_layouts(spec, world->size(), a.global_batch, policy);
  // The search's choice among every layout, measured too.
  plan::PlanRequest rq;
  rq.model = spec;
  rq.profile = profile;
  rq.world = world->size();
  rq.global_batch = a.global_batch;
  rq.precision = policy;
  const plan::PlanResult chosen = plan::search_plans(rq, 1);
  const plan::LayoutChoice& best = chosen.plans.at(0).layout;
  int chosen_index = -1;
  for (std::size_t i = 0; i < layouts.size(); ++i)
    if (layouts[i].str() == best.str() && layouts[i].stage_layers == best.stage_layers) chosen_index = int(i);
  if (chosen_index < 0) {
    layouts.push_back(best);
    chosen_index = int(layouts.size()) - 1;
  }

  const std::int64_t window = a.seq + 1;
  const data::TokenSplits splits =
      random_tokens(models::vocab_size(config), std::max<std::int64_t>(window * a.global_batch * 4, 1 << 15), 2 * window, 2024);
  if (print && !a.json) {
    std::printf("# ht-plan-bench %s | %d ranks | global batch %lld x %lld | %s\n", spec.description.c_str(),
                world->size(), (long long)a.global_batch, (long long)a.seq, a.precision.c_str());
    std::printf("# profile (probed, all ranks at once): fp32 GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, bandwidth %.1f "
                "GB/s, link %.1f us %.2f GB/s\n",
                profile.rates.at("fp32").gemm_gflops, profile.rates.at("fp32").attention_gflops, profile.memory_gbps,
                profile.intra_node.latency_us, profile.intra_node.gbps);
    std::printf("%-40s %9s %9s  %s\n", "layout", "meas ms", "model ms",
                "memory MiB measured/model (largest error over ranks): params grads optim activ | total err");
  }
  // Every round measures every layout; the list is rotated by one a round.
  const std::size_t n = layouts.size();
  std::vector<std::vector<double>> round_ms(std::size_t(a.rounds), std::vector<double>(n, 0.0));
  std::vector<Measured> runs(n);  // per layout: the quickest round's, with the largest errors of any round
  for (int round = 0; round < a.rounds; ++round) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (k + std::size_t(round)) % n;
      Measured m = run_layout(a, layouts[i], spec, config, splits, copts);
      round_ms[std::size_t(round)][i] = m.step_ms;
      if (round == 0) {
        runs[i] = std::move(m);
        continue;
      }
      Measured& kept = runs[i];
      for (std::size_t c = 0; c < kept.error.size(); ++c) kept.error[c] = std::max(kept.error[c], m.error[c]);
      kept.total_error = std::max(kept.total_error, m.total_error);
      kept.step_ms = std::min(kept.step_ms, m.step_ms);
    }
    if (print && !a.json && a.rounds > 1) std::fprintf(stderr, "# round %d of %d done\n", round + 1, a.rounds);
  }
  std::vector<double> measured, modelled;
  double worst_state = 0, worst_activ = 0, worst_total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const plan::LayoutChoice& l = layouts[i];
    const Measured& m = runs[i];
    const double model_ms = plan::estimate_time(spec, l, profile).step_ms;
    measured.push_back(m.step_ms);
    modelled.push_back(model_ms);
    worst_state = std::max({worst_state, m.error[0], m.error[1], m.error[2]});
    worst_activ = std::max(worst_activ, m.error[3]);
    worst_total = std::max(worst_total, m.total_error);
    if (!print) continue;
    std::string name = l.str() + (int(i) == chosen_index ? " *" : "");
    if (a.json) {
      json line{{"type", "plan_layout"}, {"layout", l.str()}, {"chosen", int(i) == chosen_index},
                {"measured_ms", m.step_ms}, {"modelled_ms", model_ms}, {"errors", m.error},
                {"total_error", m.total_error}, {"measured_bytes_rank0", m.measured_bytes},
                {"modelled_bytes_rank0", m.modelled_bytes}};
      if (a.rounds > 1) {
        std::vector<double> per_round;
        for (const auto& r : round_ms) per_round.push_back(r[i]);
        line["round_ms"] = per_round;
      }
      print_json_line(line);
      continue;
    }
    std::string mem;
    for (std::size_t c = 0; c < m.error.size(); ++c)
      mem += fmt::format(" {}:{:.1f}/{:.1f} ({:.1f}%)", kShownNames[c], m.measured_bytes[c] / kMiB,
                         m.modelled_bytes[c] / kMiB, m.error[c] * 100);
    std::string rounds;
    if (a.rounds > 1) {
      rounds = " | rounds";
      for (const auto& r : round_ms) rounds += fmt::format(" {:.1f}", r[i]);
    }
    std::printf("%-40s %9.1f %9.1f %s | %.1f%%%s\n", name.c_str(), m.step_ms, model_ms, mem.c_str(),
                m.total_error * 100, rounds.c_str());
    std::fflush(stdout);
  }
  // How well the machine agrees with itself: the mean correlation over pairs of rounds.
  double repeat = 0;
  int pairs = 0;
  for (int x = 0; x < a.rounds; ++x)
    for (int y = x + 1; y < a.rounds; ++y, ++pairs)
      repeat += spearman(round_ms[std::size_t(x)], round_ms[std::size_t(y)]);
  if (pairs > 0) repeat /= pairs;
  const double rho = spearman(modelled, measured);
  const double fastest = *std::min_element(measured.begin(), measured.end());
  const double chosen_ratio = measured[std::size_t(chosen_index)] / fastest;
  double time_low = HUGE_VAL, time_high = -HUGE_VAL;  // the model's relative step-time error over layouts
  for (std::size_t i = 0; i < n; ++i) {
    const double e = (modelled[i] - measured[i]) / measured[i];
    time_low = std::min(time_low, e), time_high = std::max(time_high, e);
  }
  const double worst_time = std::max(-time_low, time_high);
  if (print) {
    if (a.json) {
      print_json_line({{"type", "plan_summary"}, {"layouts", layouts.size()}, {"spearman", rho}, {"rounds", a.rounds},
                       {"round_to_round_spearman", pairs > 0 ? json(repeat) : json(nullptr)},
                       {"chosen", layouts[std::size_t(chosen_index)].str()}, {"chosen_over_fastest", chosen_ratio},
                       {"worst_time_error", worst_time}, {"time_error_range", {time_low, time_high}},
                       {"worst_state_error", worst_state}, {"worst_activation_error", worst_activ},
                       {"worst_total_error", worst_total}});
    } else {
      std::printf("# %zu layouts: Spearman rank correlation of modelled vs measured step time %.3f (target >= 0.8); "
                  "chosen plan (*) %s measured %.3fx the fastest (target <= 1.10)\n",
                  layouts.size(), rho, layouts[std::size_t(chosen_index)].str().c_str(), chosen_ratio);
      std::printf("# the model's step time against the measured: %+.1f%% to %+.1f%% (largest %.1f%%)\n",
                  time_low * 100, time_high * 100, worst_time * 100);
      if (pairs > 0)
        std::printf("# %d rounds: measured step times of one round against another's, mean Spearman %.3f (the "
                    "machine's own repeatability)\n",
                    a.rounds, repeat);
      std::printf("# largest memory error over layouts and ranks: model state %.1f%%, activations %.1f%%, total %.1f%% "
                  "(target 5%%)\n",
                  worst_state * 100, worst_activ * 100, worst_total * 100);
    }
  }
  world->finalize(copts.timeout);
  return 0;
}

}  // namespace
}  // namespace ht::bench

int main(int argc, char** argv) {
  return ht::bench::mpi_bench_main(argc, argv, "ht-plan-bench", ht::bench::bench, ht::bench::OnConfigError::kExit2);
}
