// ht::plan search.
#include "ht/plan/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <numeric>
#include <tuple>

#include "ht/core/error.h"
#include "ht/parallel/tables.h"

namespace ht::plan {
namespace {

constexpr double kGiB = double(1 << 30);

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> d;
  for (std::int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(int(i));
  return d;
}

template <typename T>
std::vector<T> or_all(const std::vector<T>& given, std::vector<T> all) {
  return given.empty() ? all : given;
}

/// Whether plan a ranks before b: faster, then smaller, then simpler (fewer
/// stages, lower tp, lower ZeRO stage), so ties resolve the same everywhere.
bool better(const Plan& a, const Plan& b) {
  const auto key = [](const Plan& p) {
    return std::make_tuple(p.time.step_ms, p.peak_bytes, p.layout.pp, p.layout.tp, p.layout.ep, p.layout.zero,
                           int(p.layout.recompute), p.layout.micro_batch, int(p.layout.schedule),
                           p.layout.stage_layers);
  };
  return key(a) < key(b);
}

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / kGiB); }

}  // namespace

void PlanRequest::validate() const {
  model.validate();
  profile.validate();
  HT_CHECK(world > 0 && global_batch > 0, ErrorKind::kConfig, "plan: world ({}) and global batch ({}) must be positive",
           world, global_batch);
  HT_CHECK(memory_margin >= 0 && memory_margin < 1, ErrorKind::kConfig,
           "plan: the memory margin {} must lie in [0, 1)", memory_margin);
  HT_CHECK(virtual_stages >= 2, ErrorKind::kConfig,
           "plan: --virtual-stages {} is not a number of chunks per rank for the interleaved schedule: use 2 or more",
           virtual_stages);
}

std::vector<int> balanced_stage_layers(const nn::ModelSpec& model, const LayoutChoice& layout,
                                       const MachineProfile& profile) {
  // Each layer's modelled forward + backward time alone, in ns, as an integer cost.
  LayoutChoice one = layout;
  // (dp as ep: the all-to-alls of a mixture's layer count in its time.)
  one.pp = 1, one.dp = layout.ep, one.zero = 0, one.shard_group = 0, one.grad_accum = 1, one.stage_layers.clear();
  const int first = model.first_block(), end = model.end_block();
  std::vector<std::int64_t> costs;
  for (int i = first; i < end; ++i) {
    nn::ModelSpec single = model;
    // The block alone, with the embedding folded into the first and the head into the last.
    std::vector<nn::LayerSpec> layers;
    if (i == first)
      for (int j = 0; j < first; ++j) layers.push_back(model.layers[std::size_t(j)]);
    layers.push_back(model.layers[std::size_t(i)]);
    if (i == end - 1)
      for (int j = end; j < int(model.layers.size()); ++j) layers.push_back(model.layers[std::size_t(j)]);
    for (nn::LayerSpec& l : layers) l.shares_with = -1;  // sharing does not change time
    single.layers = std::move(layers);
    const TimeEstimate t = estimate_time(single, one, profile);
    costs.push_back(std::int64_t(std::llround(t.stages.at(0).total_ms() * 1e6)));
  }
  const std::vector<int> b = parallel::partition_by_cost(costs, layout.pp);
  std::vector<int> per;
  for (std::size_t s = 0; s + 1 < b.size(); ++s) per.push_back(b[s + 1] - b[s]);
  return per;
}

namespace {

/// Every layout the search weighs: each tp x pp x dp of the world the model
/// splits over, micro-batch, recomputation, schedule, stage split (by count,
/// and balanced by modelled time where that differs; over pp v virtual
/// stages when interleaved), ZeRO stage and shard group (whole dp, or one
/// node's dp ranks), less those the engine would refuse.
std::vector<LayoutChoice> candidate_layouts(const PlanRequest& rq) {
  const nn::ModelSpec& model = rq.model;
  const int blocks = model.num_blocks();
  // (tp, cp, ep, stages, recomputation, micro-batch) -> balanced split
  std::map<std::tuple<int, int, int, int, int, std::int64_t>, std::vector<int>> balanced_cache;
  std::vector<LayoutChoice> out;
  // Context-parallel sizes: 1, and for a model that runs under cp each size
  // cutting the sequence into 2 cp chunks of at least kMinContextChunk
  // positions; or those of the request that cut it.
  const auto cuts = [&](int c) { return c == 1 || (model.kv_width > 0 && model.seq_len % (2 * c) == 0); };
  std::vector<int> cps{1};
  for (int c = 2; std::int64_t(2 * c) * kMinContextChunk <= model.seq_len; ++c)
    if (cuts(c)) cps.push_back(c);
  if (!rq.cp.empty()) {
    cps = rq.cp;
    std::erase_if(cps, [&](int c) { return !cuts(c); });
  }
  for (int tp : or_all(rq.tp, divisors(rq.world))) {
    if (rq.world % tp != 0 || !model.splits_over(tp)) continue;
    for (int pp : or_all(rq.pp, divisors(rq.world / tp))) {
      for (int cp : cps) {
        if ((rq.world / tp) % (pp * cp) != 0 || pp > blocks) continue;
        const int dp = rq.world / tp / pp / cp;
        if (rq.global_batch % dp != 0) continue;
        const std::int64_t per_dp = rq.global_batch / dp;
        std::vector<int> shard_groups{0};
        // Shards over dp x cp; one node's share of them (pp outermost).
        const int node_holders = rq.profile.ranks_per_node / tp, holders = dp * cp;
        if (node_holders > 1 && node_holders < holders && holders % node_holders == 0)
          shard_groups.push_back(node_holders);
        // Expert-parallel sizes: those dividing dp and every mixture's experts (1 for a dense model).
        std::vector<int> eps;
        for (int e : or_all(rq.ep, divisors(dp)))
          if (dp % e == 0 && model.splits_experts_over(e)) eps.push_back(e);
        for (int ep : eps)
        for (std::int64_t mb : divisors(per_dp)) {
          if (rq.max_micro_batch > 0 && mb > rq.max_micro_batch) continue;
          const int accum = int(per_dp / mb);
          for (nn::Recompute rc : or_all(rq.recompute, {nn::Recompute::kNone, nn::Recompute::kSelective,
                                                           nn::Recompute::kFull})) {
            const auto splits_of = [&](int stages) {
              std::vector<std::vector<int>> splits{{}};
              if (stages > 1) {
                const LayoutChoice probe{{.tp = tp, .pp = stages, .dp = dp, .cp = cp, .ep = ep, .micro_batch = mb}, rc,
                                         rq.precision};
                auto& cached = balanced_cache[{tp, cp, ep, stages, int(rc), mb}];
                if (cached.empty()) cached = balanced_stage_layers(model, probe, rq.profile);
                if (cached != probe.layers_per_stage(blocks)) splits.push_back(cached);
              }
              return splits;
            };
            std::vector<parallel::Schedule> schedules{parallel::Schedule::k1F1B};
            if (pp > 1) schedules = or_all(rq.schedules, {parallel::Schedule::k1F1B, parallel::Schedule::kGPipe});
            for (parallel::Schedule sched : schedules) {
              // One micro-batch: GPipe's table is 1F1B's; one name for it is enough.
              if (sched == parallel::Schedule::kGPipe && accum == 1 && schedules.size() > 1) continue;
              const int v = sched == parallel::Schedule::kInterleaved ? rq.virtual_stages : 1;
              if (pp * v > blocks) continue;  // a virtual stage without a block
              for (const std::vector<int>& split : splits_of(pp * v))
                for (int zero : or_all(rq.zero, {0, 1, 2, 3}))
                  for (int sg : shard_groups) {
                    if (zero == 0 && sg != 0) continue;
                    if (holders == 1 && zero > 0) continue;  // nothing to shard over
                    const parallel::Layout layout{.tp = tp, .pp = pp, .dp = dp, .cp = cp, .ep = ep, .zero = zero,
                                                  .shard_group = sg, .micro_batch = mb, .grad_accum = accum,
                                                  .schedule = sched, .virtual_stages = v, .stage_layers = split};
                    if (!parallel::layout_problem(layout).empty()) continue;  // the engine would refuse it
                    out.push_back({layout, rc, rq.precision});
                  }
            }
          }
        }
      }
    }
  }
  return out;
}

/// For the reasons: per family of layouts ("tp2", "zero3", "ddp", ...) the
/// best fitting plan and the smallest need.
class Families {
 public:
  void note(const Plan& p, bool fits) {
    const LayoutChoice& l = p.layout;
    add(fmt::format("tp{}", l.tp), p, fits);
    add(fmt::format("pp{}", l.pp), p, fits);
    add(fmt::format("cp{}", l.cp), p, fits);
    add(fmt::format("ep{}", l.ep), p, fits);
    add(fmt::format("zero{}", l.zero), p, fits);
    add(fmt::format("recompute {}", nn::recompute_name(l.recompute)), p, fits);
    if (l.pp > 1) add("schedule " + parallel::schedule_name(l.schedule), p, fits);
    if (l.tp == 1 && l.pp == 1 && l.zero == 0) add("ddp", p, fits);
  }

  /// "<label>: best is ... x% slower" or "<label>: nothing fits ...", when
  /// the family was searched and its best is not `best` itself.
  void compare(const std::string& family, const std::string& label, const Plan& best, double budget,
               std::vector<std::string>& reasons) const {
    const auto it = families_.find(family);
    if (it == families_.end()) return;
    const Family& f = it->second;
    if (!f.best) {
      reasons.push_back(fmt::format("{}: nothing fits (the smallest needs {} GiB of {})", label, gib(f.least_bytes),
                                    gib(budget)));
    } else if (f.best->layout.str() != best.layout.str() || f.best->layout.stage_layers != best.layout.stage_layers) {
      reasons.push_back(fmt::format("{}: best is {} at {:.1f} ms, {:.0f}% slower", label, f.best->layout.str(),
                                    f.best->time.step_ms, (f.best->time.step_ms / best.time.step_ms - 1) * 100));
    }
  }

 private:
  struct Family {
    std::optional<Plan> best;
    double least_bytes = 1e300;
  };
  void add(const std::string& family, const Plan& p, bool fits) {
    Family& f = families_[family];
    f.least_bytes = std::min(f.least_bytes, p.peak_bytes);
    if (fits && (!f.best || better(p, *f.best))) f.best = p;
  }
  std::map<std::string, Family> families_;
};

/// Why the best wins, and what rules out the obvious others.
std::vector<std::string> reasons_for(const Plan& best, const Families& families, const PlanRequest& rq,
                                     double budget) {
  const TimeEstimate& bt = best.time;
  std::vector<std::string> reasons{fmt::format(
      "{} wins: {:.1f} ms a step ({:.0f} tokens/s): pipeline {:.1f} ms (bubble {:.0f}%), exposed data-parallel "
      "communication {:.1f} ms, optimizer {:.1f} ms; its heaviest stage needs {} of {} GiB",
      best.layout.str(), bt.step_ms, bt.tokens_per_s, bt.pipeline_ms, bt.bubble * 100, bt.dp_exposed_ms,
      bt.optimizer_ms, gib(best.peak_bytes), gib(budget))};
  const auto compare = [&](const std::string& family, const std::string& label) {
    families.compare(family, label, best, budget, reasons);
  };
  compare("ddp", "plain data parallelism (tp1 pp1 zero0)");
  const int per_node = rq.profile.ranks_per_node;
  for (int tp : divisors(rq.world)) {
    std::string label = fmt::format("tp {}", tp);
    if (tp > per_node) label += fmt::format(" (crosses the node boundary: {} ranks per node)", per_node);
    if (tp != best.layout.tp) compare(fmt::format("tp{}", tp), label);
  }
  for (int pp : divisors(rq.world))
    if (pp != best.layout.pp) compare(fmt::format("pp{}", pp), fmt::format("pp {}", pp));
  for (int cp : divisors(rq.world))
    if (cp != best.layout.cp) compare(fmt::format("cp{}", cp), fmt::format("cp {}", cp));
  for (int ep : divisors(rq.world))
    if (ep != best.layout.ep) compare(fmt::format("ep{}", ep), fmt::format("ep {}", ep));
  for (int z = 0; z <= 3; ++z)
    if (z != best.layout.zero) compare(fmt::format("zero{}", z), fmt::format("ZeRO {}", z));
  for (nn::Recompute rc : {nn::Recompute::kNone, nn::Recompute::kSelective, nn::Recompute::kFull})
    if (rc != best.layout.recompute)
      compare(fmt::format("recompute {}", nn::recompute_name(rc)), fmt::format("recompute {}", nn::recompute_name(rc)));
  // Pipeline schedules, among the pipelined plans (absent when none was searched).
  for (parallel::Schedule sch : {parallel::Schedule::kGPipe, parallel::Schedule::k1F1B, parallel::Schedule::kInterleaved,
                                 parallel::Schedule::kZeroBubbleH1})
    if (best.layout.pp == 1 || sch != best.layout.schedule)
      compare("schedule " + parallel::schedule_name(sch), "schedule " + parallel::schedule_name(sch));
  return reasons;
}

}  // namespace

PlanResult search_plans(const PlanRequest& rq, int top) {
  rq.validate();
  const auto t0 = std::chrono::steady_clock::now();
  const nn::ModelSpec& model = rq.model;
  PlanResult res;
  res.budget_bytes = rq.profile.memory_gib * kGiB * (1.0 - rq.memory_margin);
  std::vector<Plan> fitting;
  Families families;
  double least_bytes = 1e300;
  std::string least_layout;
  for (const LayoutChoice& l : candidate_layouts(rq)) {
    Plan p;
    p.layout = l;
    p.memory = estimate_memory(model, l);
    p.peak_bytes = peak_bytes(p.memory);
    ++res.considered;
    if (p.peak_bytes < least_bytes) least_bytes = p.peak_bytes, least_layout = l.str();
    const bool fits = p.peak_bytes <= res.budget_bytes;
    p.time = estimate_time(model, l, rq.profile);
    families.note(p, fits);
    if (!fits) continue;
    ++res.fitting;
    fitting.push_back(std::move(p));
  }
  HT_CHECK(!fitting.empty(), ErrorKind::kConfig,
           "no layout of {} on {} ranks with a global batch of {} fits in {} GiB per rank ({:.0f}% kept free): the "
           "smallest needs {} GiB ({}); give more ranks or memory, a smaller global batch, or a shorter sequence",
           model.description, rq.world, rq.global_batch, gib(rq.profile.memory_gib * kGiB), rq.memory_margin * 100,
           gib(least_bytes), least_layout.empty() ? "none was possible" : least_layout);
  std::sort(fitting.begin(), fitting.end(), better);
  res.reasons = reasons_for(fitting.front(), families, rq, res.budget_bytes);
  if (int(fitting.size()) > top) fitting.resize(std::size_t(std::max(top, 1)));
  res.plans = std::move(fitting);
  res.search_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string format_plans(const PlanResult& r, const PlanRequest& rq) {
  const std::int64_t active = rq.model.active_parameters();
  const std::string params = active != rq.model.num_parameters()
                                 ? fmt::format("{} parameters ({} active)", rq.model.num_parameters(), active)
                                 : fmt::format("{} parameters", rq.model.num_parameters());
  std::string s = fmt::format(
      "# ht-plan {} | {} | {} ranks ({} per node) | global batch {} x {} tokens | {} | {} GiB per rank, "
      "{} usable | profile: {}\n",
      rq.model.description, params, rq.world, rq.profile.ranks_per_node, rq.global_batch, rq.model.seq_len,
      precision::policy_name(rq.precision), gib(rq.profile.memory_gib * kGiB), gib(r.budget_bytes), rq.profile.name);
  s += fmt::format("# {} layouts considered, {} fit, searched in {:.0f} ms\n", r.considered, r.fitting, r.search_ms);
  s += fmt::format("{:>3} {:<46} {:>9} {:>10} {:>9} {:>7} {:>6}  {}\n", "#", "layout", "step ms", "tokens/s",
                   "peak GiB", "bubble", "comm", "memory per stage GiB (params/grads/optim/activ/comm)");
  int i = 0;
  for (const Plan& p : r.plans) {
    std::string stages;
    for (const StageMemory& m : p.memory) {
      if (!stages.empty()) stages += " | ";
      stages += fmt::format("s{} {}b {:.2f} ({:.2f}/{:.2f}/{:.2f}/{:.2f}/{:.2f})", m.stage, m.blocks, m.total() / kGiB,
                            m.of(MemCategory::kParameters) / kGiB, m.of(MemCategory::kGradients) / kGiB,
                            m.of(MemCategory::kOptimizerState) / kGiB, m.of(MemCategory::kActivations) / kGiB,
                            m.of(MemCategory::kCommunication) / kGiB);
    }
    std::string name = p.layout.str();
    if (!p.layout.stage_layers.empty()) {
      name += " [";
      name += fmt::format("{}", fmt::join(p.layout.stage_layers, ","));
      name += "]";
    }
    s += fmt::format("{:>3} {:<46} {:>9.1f} {:>10.0f} {:>9} {:>6.1f}% {:>5.1f}%  {}\n", ++i, name, p.time.step_ms,
                     p.time.tokens_per_s, gib(p.peak_bytes), p.time.bubble * 100, p.time.comm_share * 100, stages);
  }
  if (!r.plans.empty()) {
    // The best plan's memory per rank by category, stage by stage.
    const Plan& best = r.plans.front();
    s += fmt::format("# memory of plan 1 ({}) per rank, GiB:\n", best.layout.str());
    s += fmt::format("# {:>5} {:>6} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}\n", "stage", "blocks", "parameters",
                     "gradients", "optimizer", "activations", "comm", "total");
    for (const StageMemory& m : best.memory)
      s += fmt::format("# {:>5} {:>6} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.3f} {:>10.3f} {:>10.3f}\n", m.stage, m.blocks,
                       m.of(MemCategory::kParameters) / kGiB, m.of(MemCategory::kGradients) / kGiB,
                       m.of(MemCategory::kOptimizerState) / kGiB, m.of(MemCategory::kActivations) / kGiB,
                       m.of(MemCategory::kCommunication) / kGiB, m.total() / kGiB);
  }
  s += "# why:\n";
  for (const std::string& why : r.reasons) s += "#   " + why + "\n";
  return s;
}

std::string plans_to_json(const PlanResult& r, const PlanRequest& rq) {
  using nlohmann::json;
  json plans = json::array();
  for (const Plan& p : r.plans) {
    const LayoutChoice& l = p.layout;
    json stages = json::array();
    for (const StageMemory& m : p.memory) {
      json bytes = json::object();
      for (int c = 0; c < kMemCategoryCount; ++c)
        bytes[std::string(mem_category_name(MemCategory(c)))] = m.bytes[std::size_t(c)];
      const StageTime& t = p.time.stages.at(std::size_t(m.stage));
      stages.push_back({{"stage", m.stage}, {"first_block", m.first_block}, {"blocks", m.blocks},
                        {"in_flight", m.in_flight}, {"bytes", bytes}, {"total_bytes", m.total()},
                        {"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}, {"tp_comm_ms", t.tp_comm_ms},
                        {"p2p_ms", t.p2p_ms}, {"ep_comm_ms", t.ep_comm_ms}});
    }
    plans.push_back({{"layout",
                      {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"cp", l.cp}, {"ep", l.ep}, {"zero", l.zero}, {"shard_group", l.shard_group},
                       {"micro_batch", l.micro_batch}, {"grad_accum", l.grad_accum},
                       {"schedule", parallel::schedule_name(l.schedule)},
                       {"virtual_stages", l.virtual_stages},
                       {"recompute", nn::recompute_name(l.recompute)},
                       {"precision", precision::policy_name(l.precision)},
                       {"stage_layers", l.layers_per_stage(rq.model.num_blocks())},
                       {"name", l.str()}}},
                     {"stages", stages},
                     {"peak_bytes", p.peak_bytes},
                     {"step_ms", p.time.step_ms},
                     {"tokens_per_s", p.time.tokens_per_s},
                     {"bubble", p.time.bubble},
                     {"comm_share", p.time.comm_share},
                     {"pipeline_ms", p.time.pipeline_ms},
                     {"dp_comm_ms", p.time.dp_comm_ms},
                     {"dp_exposed_ms", p.time.dp_exposed_ms},
                     {"optimizer_ms", p.time.optimizer_ms}});
  }
  return json{{"model", rq.model.description},
              {"parameters", rq.model.num_parameters()},
              {"active_parameters", rq.model.active_parameters()},
              {"world", rq.world},
              {"global_batch", rq.global_batch},
              {"seq_len", rq.model.seq_len},
              {"precision", precision::policy_name(rq.precision)},
              {"profile", rq.profile.name},
              {"budget_gib", r.budget_bytes / kGiB},
              {"considered", r.considered},
              {"fitting", r.fitting},
              {"search_ms", r.search_ms},
              {"plans", plans},
              {"reasons", r.reasons}}
      .dump(2);
}

}  // namespace ht::plan
