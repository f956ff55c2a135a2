// The parallel layer's layouts: buckets, ZeRO-3 units, shard pieces, hybrid
// sharding and pipeline stage partitions, as pure functions.
#include "ht/parallel/tables.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "ht/core/error.h"

namespace ht::parallel {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

void check_counts(std::span<const std::int64_t> numels, const char* what) {
  for (std::size_t i = 0; i < numels.size(); ++i)
    HT_CHECK_ARG(numels[i] >= 0, "{}: element count {} of parameter {} is negative", what, numels[i], i);
}

}  // namespace

std::vector<ParamGroup> assign_buckets(std::span<const std::int64_t> numels, std::int64_t element_bytes,
                                       std::int64_t bucket_bytes, const std::vector<bool>& isolated) {
  HT_CHECK(bucket_bytes > 0, ErrorKind::kConfig, "the gradient bucket size must be positive, got {} bytes",
           bucket_bytes);
  HT_CHECK_ARG(element_bytes > 0, "buckets: the element size must be positive, got {} bytes", element_bytes);
  HT_CHECK_ARG(isolated.empty() || isolated.size() == numels.size(),
               "buckets: {} isolation flags for {} parameters (give one per parameter, or none)", isolated.size(),
               numels.size());
  check_counts(numels, "buckets");
  std::vector<ParamGroup> groups;
  ParamGroup bucket;
  std::int64_t bytes = 0;
  for (int i = int(numels.size()) - 1; i >= 0; --i) {
    if (!isolated.empty() && isolated[std::size_t(i)]) {
      groups.push_back({{i}, true});
      continue;
    }
    bucket.params.push_back(i);
    bytes += numels[std::size_t(i)] * element_bytes;
    if (bytes >= bucket_bytes) {
      groups.push_back(std::move(bucket));
      bucket = {};
      bytes = 0;
    }
  }
  if (!bucket.params.empty()) groups.push_back(std::move(bucket));
  return groups;
}

UnitAssignment assign_units(const std::vector<std::vector<int>>& module_params, const std::vector<bool>& isolated,
                            const std::vector<std::string>& module_names) {
  HT_CHECK_ARG(module_names.empty() || module_names.size() == module_params.size(),
               "ZeRO-3: {} module names for {} modules", module_names.size(), module_params.size());
  auto name = [&](std::size_t k) {
    return module_names.empty() ? fmt::format("#{}", k) : fmt::format("'{}'", module_names[k]);
  };
  UnitAssignment out;
  std::vector<int> unit_of_param;  // -1: not in a unit yet
  for (std::size_t k = 0; k < module_params.size(); ++k) {
    const std::vector<int>& ps = module_params[k];
    HT_CHECK_ARG(!ps.empty(), "ZeRO-3: module {} has no parameters", name(k));
    std::unordered_set<int> seen;
    std::size_t fresh = 0;
    for (int p : ps) {
      HT_CHECK_ARG(p >= 0, "ZeRO-3: module {} lists parameter index {}", name(k), p);
      HT_CHECK_ARG(seen.insert(p).second, "ZeRO-3: module {} lists parameter {} twice", name(k), p);
      if (std::size_t(p) >= unit_of_param.size()) unit_of_param.resize(std::size_t(p) + 1, -1);
      if (unit_of_param[std::size_t(p)] < 0) ++fresh;
    }
    if (fresh == 0) {
      out.unit_of_module.push_back(unit_of_param[std::size_t(ps.front())]);
      continue;
    }
    HT_CHECK_ARG(fresh == ps.size(), "ZeRO-3: module {} shares only some of its parameters with an earlier unit",
                 name(k));
    const int unit = int(out.units.size());
    ParamGroup g{ps, false};
    for (int p : ps) {
      unit_of_param[std::size_t(p)] = unit;
      if (std::size_t(p) < isolated.size() && isolated[std::size_t(p)]) g.deferred = true;
    }
    out.units.push_back(std::move(g));
    out.unit_of_module.push_back(unit);
  }
  return out;
}

std::int64_t FlatLayout::shard_begin(int shard_rank) const {
  HT_CHECK(shard_rank >= 0 && shard_rank < shards, ErrorKind::kOutOfRange, "shard {} outside {} shards", shard_rank,
           shards);
  return std::int64_t(shard_rank) * shard_numel();
}

std::int64_t FlatLayout::shard_end(int shard_rank) const { return shard_begin(shard_rank) + shard_numel(); }

FlatLayout flat_layout(std::span<const std::int64_t> numels, int shards) {
  HT_CHECK_ARG(shards > 0, "flat group: {} shards (must be positive)", shards);
  check_counts(numels, "flat group");
  FlatLayout g;
  g.shards = shards;
  g.numels.assign(numels.begin(), numels.end());
  for (std::int64_t n : numels) {
    g.offsets.push_back(g.numel);
    g.numel += n;
  }
  g.padded = (g.numel + shards - 1) / shards * shards;
  return g;
}

std::vector<ShardPiece> shard_pieces(const FlatLayout& layout, int shard_rank) {
  // A member [begin, end) of the buffer meets the shard [lo, hi) in
  // [max(lo, begin), min(hi, end)); empty intersections are skipped. Example:
  // members of 3, 7, 20, 30 in 4 shards of 15: shard 1 = [15, 30) meets
  // member 2 = [10, 30) in [15, 30), its elements [5, 20).
  const std::int64_t lo = layout.shard_begin(shard_rank), hi = layout.shard_end(shard_rank);
  std::vector<ShardPiece> out;
  for (std::size_t i = 0; i < layout.offsets.size(); ++i) {
    const std::int64_t begin = layout.offsets[i], end = begin + layout.numels[i];
    const std::int64_t a = std::max(lo, begin), b = std::min(hi, end);
    if (a >= b) continue;
    out.push_back({.member = int(i),
                   .offset = a - begin,
                   .begin = a - lo,
                   .end = b - lo,
                   .whole = a == begin && b == end});
  }
  return out;
}

namespace {

void check_zero_stage(int stage) {
  HT_CHECK(stage >= 0 && stage <= 3, ErrorKind::kConfig, "--zero {} must be 0 (DDP), 1, 2 or 3", stage);
}

}  // namespace

ZeroBuffers zero_buffers(int stage) {
  check_zero_stage(stage);
  return {.whole_params = stage < 3, .whole_grads = stage < 2};
}

HybridShard hybrid_shard(int dp_size, int shard_group, int dp_rank, int zero_stage) {
  HT_CHECK_ARG(dp_size > 0 && dp_rank >= 0 && dp_rank < dp_size, "dp rank {} outside a data-parallel size of {}",
               dp_rank, dp_size);
  check_zero_stage(zero_stage);
  HT_CHECK(shard_group >= 0 && (shard_group == 0 || dp_size % shard_group == 0), ErrorKind::kConfig,
           "--zero-shard-group {} must divide the data-parallel size {} (or be 0 for all of it): choose one of {{{}}}",
           shard_group, dp_size, fmt::join(divisors(dp_size), ","));
  HT_CHECK(shard_group == 0 || zero_stage > 0, ErrorKind::kConfig,
           "--zero-shard-group {} needs a ZeRO stage (--zero 1, 2 or 3): plain data parallelism shards nothing",
           shard_group);
  HybridShard h;
  h.shards = zero_stage == 0 ? 1 : shard_group > 0 ? shard_group : dp_size;
  h.shard_rank = dp_rank % h.shards;
  h.replicas = dp_size / h.shards;
  h.replica_rank = dp_rank / h.shards;
  for (int r = 0; r < h.shards; ++r) h.shard_group.push_back(h.replica_rank * h.shards + r);
  for (int r = 0; r < h.replicas; ++r) h.replica_group.push_back(r * h.shards + h.shard_rank);
  return h;
}

std::vector<int> partition_by_count(int n_layers, int stages) {
  HT_CHECK(stages > 0, ErrorKind::kConfig, "{} pipeline stages: the stage count (--pp) must be positive", stages);
  HT_CHECK(n_layers >= stages, ErrorKind::kConfig,
           "{} layers cannot fill {} pipeline stages (one layer per stage at least): lower --pp to <= {}", n_layers,
           stages, std::max(n_layers, 1));
  // Example: 7 layers over 3 stages: base 2, extra 1 -> {0, 3, 5, 7}.
  const int base = n_layers / stages, extra = n_layers % stages;
  std::vector<int> b(std::size_t(stages) + 1);
  for (int s = 0; s <= stages; ++s) b[std::size_t(s)] = s * base + std::min(s, extra);
  return b;
}

std::pair<int, int> stage_range(int n_layers, int stage, int stages) {
  HT_CHECK_ARG(stages > 0 && stage >= 0 && stage < stages, "stage {} outside a pipeline of {}", stage, stages);
  const std::vector<int> b = partition_by_count(n_layers, stages);
  return {b[std::size_t(stage)], b[std::size_t(stage) + 1]};
}

namespace {

// "3,5,5,3": layer counts as --stage-layers takes them.
std::string counts_str(const std::vector<int>& counts) { return fmt::format("{}", fmt::join(counts, ",")); }

// How the errors below name a stage. Under the interleaved schedule
// (virtual_stages v > 1) --stage-layers counts the pp x v virtual stages,
// and an error that spoke of "pipeline stages" and --pp would send the user
// looking for pp counts that can never be right.
const char* stage_noun(int virtual_stages) { return virtual_stages > 1 ? "virtual stage" : "pipeline stage"; }
const char* stage_short(int virtual_stages) { return virtual_stages > 1 ? "virtual stage" : "stage"; }
// "the pipeline has 4 (--pp 4)" or "the interleaved pipeline has 8 virtual
// stages (--pp 4 x --virtual-stages 2)".
std::string pipeline_has(int stages, int virtual_stages) {
  if (virtual_stages <= 1) return fmt::format("the pipeline has {} (--pp {})", stages, stages);
  return fmt::format("the interleaved pipeline has {} virtual stages (--pp {} x --virtual-stages {})", stages,
                     stages / virtual_stages, virtual_stages);
}

}  // namespace

std::vector<int> stage_boundaries(const std::vector<int>& counts, int stages, int virtual_stages) {
  HT_CHECK_ARG(virtual_stages >= 1, "stage boundaries: {} virtual stages per pipeline rank (1 without interleaving)",
               virtual_stages);
  if (counts.empty()) return {};
  // The valid value each error offers. The model's layer count is not known
  // here (validate_boundaries checks it when the model is built), so: the
  // layers the counts add up to, one per stage at least, split by count.
  const auto example = [&] {
    std::int64_t given = 0;
    for (int c : counts) given += std::max(c, 0);
    const int n = int(std::clamp<std::int64_t>(given, std::max(stages, 1), std::numeric_limits<int>::max()));
    return fmt::format("e.g. --stage-layers {} ({} layers, split by count)",
                       counts_str(layers_per_stage(partition_by_count(n, stages))), n);
  };
  const char* noun = stage_noun(virtual_stages);
  HT_CHECK(int(counts.size()) == stages, ErrorKind::kConfig,
           "--stage-layers {} gives {} {}s but {}: give one layer count per {}, or none for the split by count, {}",
           counts_str(counts), counts.size(), noun, pipeline_has(stages, virtual_stages), stage_short(virtual_stages),
           example());
  std::vector<int> b{0};
  for (std::size_t s = 0; s < counts.size(); ++s) {
    HT_CHECK(counts[s] >= 1, ErrorKind::kConfig,
             "--stage-layers {}: {} {} would hold {} layers; every {} needs at least one, {}", counts_str(counts),
             stage_short(virtual_stages), s, counts[s], noun, example());
    HT_CHECK(counts[s] <= std::numeric_limits<int>::max() - b.back(), ErrorKind::kConfig,
             "--stage-layers {}: the layers add up beyond {}, {}", counts_str(counts), std::numeric_limits<int>::max(),
             example());
    b.push_back(b.back() + counts[s]);
  }
  return b;
}

std::vector<int> layers_per_stage(const std::vector<int>& boundaries) {
  std::vector<int> counts;
  for (std::size_t s = 0; s + 1 < boundaries.size(); ++s) counts.push_back(boundaries[s + 1] - boundaries[s]);
  return counts;
}

void validate_boundaries(const std::vector<int>& boundaries, int n_layers, int stages, int virtual_stages) {
  HT_CHECK_ARG(virtual_stages >= 1, "stage boundaries: {} virtual stages per pipeline rank (1 without interleaving)",
               virtual_stages);
  // The sizes first (stages > 0, a layer per stage at least), with
  // partition_by_count's errors; its split is the valid choice offered.
  HT_CHECK(virtual_stages == 1 || stages <= 0 || n_layers >= stages, ErrorKind::kConfig,
           "{} layers cannot fill {} virtual stages (--pp {} x --virtual-stages {}; one layer per virtual stage at "
           "least): choose --pp and --virtual-stages whose product is <= {}",
           n_layers, stages, stages / virtual_stages, virtual_stages, std::max(n_layers, 1));
  const std::vector<int> by_count = partition_by_count(n_layers, stages);
  if (boundaries.empty()) return;
  const std::string valid =
      virtual_stages > 1
          ? fmt::format("e.g. --stage-layers {} (the split by count over {} virtual stages)",
                        counts_str(layers_per_stage(by_count)), stages)
          : fmt::format("e.g. --stage-layers {} (the split by count)", counts_str(layers_per_stage(by_count)));
  const char* noun = stage_noun(virtual_stages);
  HT_CHECK(boundaries.size() == by_count.size(), ErrorKind::kConfig,
           "{} {} boundaries ({}) make {} {}s but {}: give one layer count per {} ({} boundaries), {}",
           boundaries.size(), noun, counts_str(boundaries), int(boundaries.size()) - 1, stage_short(virtual_stages),
           pipeline_has(stages, virtual_stages), stage_short(virtual_stages), stages + 1, valid);
  HT_CHECK(boundaries.front() == 0, ErrorKind::kConfig,
           "{} boundaries {} start at layer {}: the first {} starts at layer 0, {}", noun, counts_str(boundaries),
           boundaries.front(), stage_short(virtual_stages), valid);
  const std::vector<int> counts = layers_per_stage(boundaries);
  for (std::size_t s = 0; s < counts.size(); ++s)
    HT_CHECK(counts[s] >= 1, ErrorKind::kConfig,
             "--stage-layers {}: {} {} would hold {} layers; every {} needs at least one, {}", counts_str(counts),
             stage_short(virtual_stages), s, counts[s], noun, valid);
  HT_CHECK(boundaries.back() == n_layers, ErrorKind::kConfig,
           "--stage-layers {} sums to {} layers but the model has {}: the layers per {} must sum to {}, {}",
           counts_str(counts), boundaries.back(), n_layers, stage_short(virtual_stages), n_layers, valid);
}

std::pair<int, int> stage_range(int n_layers, int stage, int stages, const std::vector<int>& boundaries) {
  HT_CHECK_ARG(stages > 0 && stage >= 0 && stage < stages, "stage {} outside a pipeline of {}", stage, stages);
  validate_boundaries(boundaries, n_layers, stages);
  if (boundaries.empty()) return stage_range(n_layers, stage, stages);
  return {boundaries[std::size_t(stage)], boundaries[std::size_t(stage) + 1]};
}

namespace {

// Stage weights w = cost * (n + 1) + layers fit in 128 bits for any int64
// costs: comparing two stages' weights compares their costs first, then their
// layer counts (layers <= n < n + 1), the order the header promises.
__extension__ typedef __int128 Wide;

// Partitions of layers [0, n) with weights prefix[] into stages whose weights
// lie in [lo_w, hi_w]. With positive layer weights the prefix sums increase
// strictly, so from a start i the admissible ends j form one interval
// [first[i], last[i]], found with two pointers. feasible[k][i]: layers [i, n)
// split into exactly k admissible stages; row k from row k - 1 with prefix
// counts, O(n) a row.
class Bounded {
 public:
  Bounded(const std::vector<Wide>& prefix, Wide lo_w, Wide hi_w) : n_(int(prefix.size()) - 1) {
    first_.resize(std::size_t(n_));
    last_.resize(std::size_t(n_));
    int a = 1, b = 1;
    for (int i = 0; i < n_; ++i) {
      a = std::max(a, i + 1);
      while (a <= n_ && prefix[std::size_t(a)] - prefix[std::size_t(i)] < lo_w) ++a;
      b = std::max(b, i + 1);
      while (b + 1 <= n_ && prefix[std::size_t(b) + 1] - prefix[std::size_t(i)] <= hi_w) ++b;
      first_[std::size_t(i)] = a;
      // b = i + 1 even when layer i alone exceeds hi_w: callers pass hi_w >= every layer's weight.
      last_[std::size_t(i)] = b;
    }
  }

  int first(int i) const { return first_[std::size_t(i)]; }
  int last(int i) const { return last_[std::size_t(i)]; }

  /// Row k of feasible[][] from row k - 1.
  std::vector<char> next_row(const std::vector<char>& prev) const {
    std::vector<int> count(std::size_t(n_) + 2, 0);  // count[j] = ones in prev[0, j)
    for (int j = 0; j <= n_; ++j) count[std::size_t(j) + 1] = count[std::size_t(j)] + (prev[std::size_t(j)] ? 1 : 0);
    std::vector<char> row(std::size_t(n_) + 1, 0);
    for (int i = 0; i < n_; ++i) {
      const int a = first(i), b = last(i);
      row[std::size_t(i)] = a <= b && count[std::size_t(b) + 1] - count[std::size_t(a)] > 0;
    }
    return row;
  }

  /// feasible[k] for k = 0..stages.
  std::vector<std::vector<char>> rows(int stages) const {
    std::vector<std::vector<char>> out;
    out.emplace_back(std::size_t(n_) + 1, 0);
    out[0][std::size_t(n_)] = 1;
    for (int k = 1; k <= stages; ++k) out.push_back(next_row(out.back()));
    return out;
  }

  bool feasible(int stages) const {
    std::vector<char> row(std::size_t(n_) + 1, 0);
    row[std::size_t(n_)] = 1;
    for (int k = 1; k <= stages; ++k) row = next_row(row);
    return row[0] != 0;
  }

 private:
  int n_;
  std::vector<int> first_, last_;
};

}  // namespace

std::vector<int> partition_by_cost(std::span<const std::int64_t> layer_costs, int stages) {
  const int n = int(layer_costs.size());
  partition_by_count(n, stages);  // the same errors for the same sizes
  Wide total_cost = 0;
  for (std::size_t i = 0; i < layer_costs.size(); ++i) {
    HT_CHECK_ARG(layer_costs[i] >= 0, "pipeline partition: layer {} costs {} (costs must be >= 0)", i, layer_costs[i]);
    total_cost += layer_costs[i];
  }
  HT_CHECK_ARG(total_cost <= std::numeric_limits<std::int64_t>::max(),
               "pipeline partition: the layer costs of {} layers add up beyond int64: use a coarser unit", n);
  std::vector<Wide> prefix(std::size_t(n) + 1, 0);
  Wide heaviest_layer = 0;
  for (int i = 0; i < n; ++i) {
    const Wide w = Wide(layer_costs[std::size_t(i)]) * (n + 1) + 1;
    heaviest_layer = std::max(heaviest_layer, w);
    prefix[std::size_t(i) + 1] = prefix[std::size_t(i)] + w;
  }

  // 1. The least heaviest-stage weight B: with positive weights, stages of at
  // most B exist iff greedy packing needs at most `stages` of them (a stage
  // of several layers can always be split to make up the count).
  auto greedy_stages = [&](Wide cap) {
    int count = 1;
    Wide load = 0;
    for (int i = 0; i < n; ++i) {
      const Wide w = prefix[std::size_t(i) + 1] - prefix[std::size_t(i)];
      if (load + w > cap) {
        ++count;
        load = w;
      } else {
        load += w;
      }
    }
    return count;
  };
  Wide lo = heaviest_layer, hi = prefix[std::size_t(n)];
  while (lo < hi) {
    const Wide mid = lo + (hi - lo) / 2;
    if (greedy_stages(mid) <= stages)
      hi = mid;
    else
      lo = mid + 1;
  }
  const Wide cap = lo;

  // 2. The greatest lightest-stage weight L under B: feasibility is monotone
  // in L, and L = 1 (any stage) is feasible since step 1 found a partition.
  Wide floor_lo = 1, floor_hi = prefix[std::size_t(n)] / stages;
  while (floor_lo < floor_hi) {
    const Wide mid = floor_lo + (floor_hi - floor_lo + 1) / 2;
    if (Bounded(prefix, mid, cap).feasible(stages))
      floor_lo = mid;
    else
      floor_hi = mid - 1;
  }

  // 3. Stage by stage, the longest admissible stage after which the rest
  // still splits into the remaining stages.
  const Bounded bounded(prefix, floor_lo, cap);
  const std::vector<std::vector<char>> rows = bounded.rows(stages);
  std::vector<int> b{0};
  int at = 0;
  for (int s = 0; s < stages; ++s) {
    const std::vector<char>& rest = rows[std::size_t(stages - s - 1)];
    int end = -1;
    for (int j = bounded.last(at); j >= bounded.first(at); --j)
      if (rest[std::size_t(j)]) {
        end = j;
        break;
      }
    HT_CHECK(end > at, ErrorKind::kInternal, "pipeline partition: no admissible stage {} from layer {} of {}", s, at,
             n);
    b.push_back(end);
    at = end;
  }
  return b;
}

std::vector<std::int64_t> stage_costs(std::span<const std::int64_t> layer_costs, std::span<const int> boundaries) {
  HT_CHECK_ARG(boundaries.size() >= 2 && boundaries.front() == 0 && boundaries.back() == int(layer_costs.size()),
               "stage costs: boundaries must run from 0 to the layer count {}", layer_costs.size());
  std::vector<std::int64_t> out;
  for (std::size_t s = 0; s + 1 < boundaries.size(); ++s) {
    HT_CHECK_ARG(boundaries[s] <= boundaries[s + 1], "stage costs: boundaries decrease at stage {}", s);
    std::int64_t c = 0;
    for (int i = boundaries[s]; i < boundaries[s + 1]; ++i) c += layer_costs[std::size_t(i)];
    out.push_back(c);
  }
  return out;
}

}  // namespace ht::parallel
