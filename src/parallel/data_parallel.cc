// ht::parallel::DataParallel: flat groups, bucketed reductions, ZeRO shards
// and the stage-3 gather/free hooks.
#include "ht/parallel/data_parallel.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/clock.h"
#include "ht/ops/cast.h"
#include "ht/parallel/tables.h"
#include "parallel/flat_group.h"

namespace ht::parallel {

using detail::FlatGroup;

namespace {

// A copy of `src` in `dtype`, accounted as `category`.
Tensor copy_as(const Tensor& src, DType dtype, MemCategory category) {
  Tensor out = Tensor::empty(src.shape(), dtype, src.device(), category);
  if (dtype == src.dtype())
    out.copy_from(src);
  else
    ops::cast(src, out);
  return out;
}

void wait_all(std::vector<comm::WorkPtr>& works) {
  for (auto& w : works) w->wait();
  works.clear();
}

// The parameters `m` holds itself, in none of its children.
std::vector<nn::Parameter*> own_parameters(nn::Module& m) {
  std::unordered_set<const nn::Parameter*> in_children;
  for (nn::Module* c : m.children())
    for (const nn::Parameter* p : c->parameters()) in_children.insert(p);
  std::vector<nn::Parameter*> own;
  for (nn::Parameter* p : m.parameters())
    if (!in_children.count(p)) own.push_back(p);
  return own;
}

}  // namespace

void DataParallelOptions::validate(int dp) const {
  HT_CHECK(bucket_bytes > 0, ErrorKind::kConfig, "the gradient bucket size must be positive, got {} bytes",
           bucket_bytes);
  hybrid_shard(dp, shard_group, 0, zero_stage);  // the stage and the shard group
}

DataParallel::DataParallel(nn::Model& model, comm::DeviceMesh& mesh, const DataParallelOptions& options,
                           InitialValues initial_values)
    : model_(model), mesh_(mesh), options_(options), initial_values_(std::move(initial_values)) {
  const comm::MeshShape& shape = mesh.shape();
  // Every rank holding these parameters (dp x cp) shares their gradients and state.
  options_.validate(shape.size(comm::MeshAxis::kDpCp));
  add_domain(mesh.dp_cp_group(), shape.dp_cp_rank(mesh.coord()), 1.f);
  if (mesh.ep_size() > 1) {
    HT_CHECK(options_.shard_group == 0, ErrorKind::kNotSupported,
             "hybrid sharding (--zero-shard-group {}) with expert parallelism (ep {}) is not supported yet: the experts' "
             "state is sharded over their own expert-data-parallel group; give --zero-shard-group 0",
             options_.shard_group, mesh.ep_size());
    add_domain(mesh.edp_group(), mesh.edp_group().rank(), 1.f / float(mesh.ep_size()));
  }
  tied_ = std::make_unique<TiedWeights>(model_, mesh_);
  build_groups();
  if (options_.zero_stage == 2) install_zero2_hooks();
  if (options_.zero_stage == 3) install_zero3_hooks();
}

void DataParallel::add_domain(comm::Communicator& group, int rank_in_group, float grad_scale) {
  const HybridShard h = hybrid_shard(group.size(), options_.shard_group, rank_in_group, options_.zero_stage);
  Domain d;
  d.group = &group;
  d.shards = h.shards, d.shard_rank = h.shard_rank;
  d.replicas = h.replicas, d.replica_rank = h.replica_rank;
  d.grad_scale = grad_scale;
  if (options_.zero_stage > 0) {
    const std::string& name = group.name();
    d.shard_comm = group.split(h.replica_rank, h.shard_rank, fmt::format("{}.shard{}", name, h.replica_rank));
    d.replica_comm = group.split(h.shard_rank, h.replica_rank, fmt::format("{}.replica{}", name, h.shard_rank));
  }
  domains_.push_back(std::move(d));
}

int DataParallel::domain_of(const nn::Parameter& p) const {
  return p.layout().expert && domains_.size() > 1 ? 1 : 0;
}

DataParallel::~DataParallel() = default;

std::vector<ParamGroup> DataParallel::group_table(const std::vector<nn::Parameter*>& params) {
  // Which parameters share a flat group is a table (parallel/tables.h):
  // buckets in reverse registration order at stages 0-2, one unit per child
  // module at stage 3; weights tied across stages are reduced after backward.
  // A group holds parameters of one domain only: at stages 0-2 each
  // domain's parameters are bucketed on their own, at stage 3 a unit's
  // experts are a group of their own.
  std::unordered_map<const nn::Parameter*, int> index_of;
  std::vector<bool> isolated;
  for (nn::Parameter* p : params) {
    index_of[p] = int(isolated.size());
    isolated.push_back(tied_->tied(p));
  }
  const auto by_domain = [&](const ParamGroup& g) {
    std::vector<ParamGroup> out(domains_.size(), ParamGroup{.params = {}, .deferred = g.deferred});
    for (int i : g.params) out[std::size_t(domain_of(*params[std::size_t(i)]))].params.push_back(i);
    std::erase_if(out, [](const ParamGroup& part) { return part.params.empty(); });
    return out;
  };
  if (options_.zero_stage != 3) {
    std::vector<ParamGroup> groups;
    for (int d = 0; d < int(domains_.size()); ++d) {
      std::vector<int> members;  // of this domain, in registration order
      std::vector<std::int64_t> numels;
      std::vector<bool> member_isolated;
      for (int i = 0; i < int(params.size()); ++i)
        if (domain_of(*params[std::size_t(i)]) == d) {
          members.push_back(i);
          numels.push_back(shape_numel(params[std::size_t(i)]->shape()));
          member_isolated.push_back(isolated[std::size_t(i)]);
        }
      for (ParamGroup g : assign_buckets(numels, std::int64_t(sizeof(float)), options_.bucket_bytes, member_isolated)) {
        for (int& i : g.params) i = members[std::size_t(i)];
        groups.push_back(std::move(g));
      }
    }
    return groups;
  }
  const std::vector<nn::Parameter*> own = own_parameters(model_);
  HT_CHECK(own.empty(), ErrorKind::kInvalidArgument,
           "ZeRO-3: model '{}' holds parameter '{}' itself, outside its child modules; ZeRO-3 gathers and frees "
           "parameters per child module: move it into a child (a small Module holding it)",
           model_.describe(), own.empty() ? "" : own.front()->name());
  std::vector<std::vector<int>> module_params;
  std::vector<std::string> names;
  for (nn::Module* m : model_.children()) {
    sequence_.push_back(m);
    names.push_back(m->name());
    module_params.emplace_back();
    for (const nn::Parameter* p : m->parameters()) module_params.back().push_back(index_of.at(p));
  }
  UnitAssignment units = assign_units(module_params, isolated, names);
  unit_of_.assign(units.unit_of_module.begin(), units.unit_of_module.end());
  std::vector<ParamGroup> groups;
  for (const ParamGroup& unit : units.units) {
    unit_groups_.emplace_back();
    for (ParamGroup& part : by_domain(unit)) {
      unit_groups_.back().push_back(groups.size());
      groups.push_back(std::move(part));
    }
  }
  return groups;
}

std::unique_ptr<FlatGroup> DataParallel::make_group(const std::vector<nn::Parameter*>& members, bool deferred) {
  const ZeroBuffers keep = zero_buffers(options_.zero_stage);
  const DType compute = options_.precision.compute;
  const bool mixed = options_.precision.mixed();
  Tensor values;  // f32, padded
  const int domain = domain_of(*members.front());
  const Domain& d = domains_[std::size_t(domain)];
  auto g = std::make_unique<FlatGroup>(detail::make_flat_group(
      members, d.shards, d.shard_rank, model_.device(),
      [&](const nn::Parameter& p) {
        if (initial_values_) return initial_values_(p);
        HT_CHECK(p.data().defined(), ErrorKind::kInvalidArgument,
                 "parameter {} has no storage: a model built with deferred storage needs its initial values "
                 "(DataParallel's initial_values)",
                 p.name());
        return p.data();
      },
      values));
  g->deferred = deferred;
  g->domain = domain;
  g->compute = compute;
  g->reduce = options_.precision.reduce;
  const std::int64_t lo = g->shard_begin(), hi = lo + g->shard_numel();
  // The f32 master shard is optimizer state when a separate working copy
  // exists; in f32 training it is the parameters themselves.
  if (mixed) g->master = copy_as(values.slice(lo, hi), DType::kF32, MemCategory::kOptimizerState);
  if (keep.whole_params) {
    g->work_params = mixed ? copy_as(values, compute, MemCategory::kParameters) : values;
    if (!mixed) g->master = g->work_params.slice(lo, hi);
    g->bind_params();
  } else {
    g->work_shard = mixed ? copy_as(g->master, compute, MemCategory::kParameters) : values.slice(lo, hi).clone();
    if (!mixed) g->master = g->work_shard;
    g->unbind_params();
  }
  if (keep.whole_grads) {
    g->work_grads = Tensor::zeros({g->padded()}, compute, g->device, MemCategory::kGradients);
    g->reduce_grads = g->converts_grads() ? Tensor::zeros({g->padded()}, g->reduce, g->device, MemCategory::kGradients)
                                          : g->work_grads;
    g->bind_grads();
    g->shard_grads = g->reduce_grads.slice(lo, hi);
  } else {
    g->shard_grads = Tensor::zeros({g->shard_numel()}, g->reduce, g->device, MemCategory::kGradients);
    g->unbind_grads();
  }
  return g;
}

void DataParallel::build_groups() {
  const std::vector<nn::Parameter*> params = model_.parameters();
  for (const ParamGroup& t : group_table(params)) {
    std::vector<nn::Parameter*> members;
    for (int i : t.params) members.push_back(params[std::size_t(i)]);
    std::unique_ptr<FlatGroup> g = make_group(members, t.deferred);
    const std::size_t index = groups_.size();
    for (nn::Parameter* p : g->params)
      p->set_grad_ready_hook([this, index](nn::Parameter& q) { on_grad_ready(index, q); });
    groups_.push_back(std::move(g));
  }
  slots_ = make_slots();
}

// Stage 2 keeps no full gradient between steps: a bucket's is allocated
// when the backward of the first module writing into it begins, and freed
// once its reduce-scatter has completed (free_reduced_grads). Allocating
// them all at the start of the step held a whole gradient plus the shard at
// the peak (590 MiB for the 124M model at dp 4, against 118 MiB after the step).
void DataParallel::install_zero2_hooks() {
  std::unordered_map<const nn::Parameter*, std::size_t> group_of;
  for (std::size_t i = 0; i < groups_.size(); ++i)
    for (const nn::Parameter* p : groups_[i]->params) group_of[p] = i;
  // Each child, and the model itself for parameters it holds directly (its
  // backward begins before its children's).
  std::vector<std::pair<nn::Module*, std::vector<nn::Parameter*>>> writers;
  for (nn::Module* m : model_.children()) writers.emplace_back(m, m->parameters());
  if (std::vector<nn::Parameter*> own = own_parameters(model_); !own.empty()) writers.emplace_back(&model_, own);
  for (auto& [m, params] : writers) {
    std::vector<std::size_t> written;
    for (const nn::Parameter* p : params) {
      const std::size_t g = group_of.at(p);
      if (std::find(written.begin(), written.end(), g) == written.end()) written.push_back(g);
    }
    m->set_pre_backward_hook([this, written](nn::Module&, nn::Context&) {
      if (final_) free_reduced_grads();
      for (std::size_t g : written) ensure_grads(*groups_[g]);
    });
  }
}

void DataParallel::install_zero3_hooks() {
  const std::size_t n = sequence_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t unit = unit_of_[i];
    const std::size_t next = i + 1 < n ? unit_of_[i + 1] : unit;
    const std::size_t prev = i > 0 ? unit_of_[i - 1] : unit;
    sequence_[i]->set_pre_forward_hook([this, unit, next](nn::Module&, nn::Context&) {
      acquire(unit);
      if (next != unit) prefetch(next);
    });
    sequence_[i]->set_post_forward_hook([this, unit](nn::Module&, nn::Context&) { release(unit); });
    sequence_[i]->set_pre_backward_hook([this, unit, prev](nn::Module&, nn::Context&) {
      if (final_) free_reduced_grads();
      acquire(unit);
      for (std::size_t g : unit_groups_[unit]) ensure_grads(*groups_[g]);
      if (prev != unit) prefetch(prev);
    });
    sequence_[i]->set_post_backward_hook([this, unit](nn::Module&, nn::Context&) { release(unit); });
  }
}

void DataParallel::prefetch(std::size_t unit) {
  for (std::size_t i : unit_groups_[unit]) {
    FlatGroup& g = *groups_[i];
    if (g.work_params.defined()) continue;
    g.work_params = Tensor::empty({g.padded()}, g.compute, g.device, MemCategory::kParameters);
    g.gather_work = domains_[std::size_t(g.domain)].shard_comm->all_gather(g.work_shard, g.work_params);
  }
}

void DataParallel::acquire(std::size_t unit) {
  prefetch(unit);
  for (std::size_t i : unit_groups_[unit]) {
    FlatGroup& g = *groups_[i];
    if (g.gather_work) {
      // Only the layer's kernels read the gathered weights: on a GPU the
      // compute stream waits for the gather, not the host, which goes on
      // queueing the layer (and the next unit's prefetch).
      g.gather_work->stream_wait();
      g.gather_work.reset();
    }
    if (g.gather_refs++ == 0) g.bind_params();
  }
}

void DataParallel::release(std::size_t unit) {
  for (std::size_t i : unit_groups_[unit]) {
    FlatGroup& g = *groups_[i];
    HT_CHECK(g.gather_refs > 0, ErrorKind::kInvalidArgument, "ZeRO-3: unit {} released more often than gathered",
             unit);
    if (--g.gather_refs > 0) continue;
    g.unbind_params();
    g.work_params = Tensor();
  }
}

void DataParallel::ensure_grads(FlatGroup& g) {
  if (g.work_grads.defined()) return;
  g.work_grads = Tensor::zeros({g.padded()}, g.compute, g.device, MemCategory::kGradients);
  g.bind_grads();
}

void DataParallel::drop_full_grads(FlatGroup& g) {
  g.unbind_grads();
  g.work_grads = Tensor();
  g.reduce_grads = Tensor();
}

void DataParallel::begin_step() {
  for (auto& g : groups_) g->ready = 0;
  // The gradients are discarded, not zeroed: the first micro-batch's
  // backward overwrites each (GEMM beta 0) or zeroes it on first use, and
  // finish_gradients() zeroes any that got no contribution before it is
  // reduced. Restarts the grad-ready counts.
  model_.discard_grads();
  final_ = false;
  final_params_.clear();
}

void DataParallel::set_final_part(nn::Module& part) {
  if (!final_ && final_params_.empty()) final_start_ = now_ms();
  if (&part == static_cast<nn::Module*>(&model_)) {
    final_ = true;  // every parameter: no need to name them
    return;
  }
  for (const nn::Parameter* p : part.parameters()) final_params_.insert(p);
}

void DataParallel::free_reduced_grads() {
  // Stages 2-3 keep only the reduced shard: a group's full gradient goes as
  // soon as its reduce-scatter is done, not at the end of backward.
  if (options_.zero_stage < 2) return;
  for (auto& g : groups_)
    if (g->reduce_work && g->work_grads.defined() && g->reduce_work->test()) drop_full_grads(*g);
}

void DataParallel::on_grad_ready(std::size_t index, const nn::Parameter& p) {
  if (!final_ && !final_params_.contains(&p)) return;
  free_reduced_grads();
  FlatGroup& g = *groups_[index];
  if (++g.ready == int(g.params.size()) && !g.deferred) start_reduction(g);
}

void DataParallel::start_reduction(FlatGroup& g) {
  if (options_.zero_stage == 3) {
    // At most one unit's reduction in flight: the one before finishes (and
    // its full gradient goes) before this one's reduction copy is made, so a
    // step holds two units' full gradients at most, and one reduction-dtype
    // copy, not as many as MPI leaves unprogressed (it progresses
    // non-blocking collectives only inside its calls).
    for (auto& other : groups_)
      if (other.get() != &g && other->reduce_work && other->work_grads.defined()) {
        other->reduce_work->wait();
        drop_full_grads(*other);
      }
  }
  if (g.converts_grads()) {
    // Compute-dtype gradients reduce in the reduction dtype (f32 under f16).
    if (!g.reduce_grads.defined())
      g.reduce_grads = Tensor::empty({g.padded()}, g.reduce, g.device, MemCategory::kGradients);
    ops::cast(g.work_grads, g.reduce_grads);
  } else {
    g.reduce_grads = g.work_grads;
  }
  const Domain& d = domains_[std::size_t(g.domain)];
  if (options_.zero_stage <= 1) {
    g.reduce_work = d.group->all_reduce(g.reduce_grads, g.reduce_grads, comm::ReduceOp::kAvg);
    return;
  }
  g.reduce_work = d.shard_comm->reduce_scatter(g.reduce_grads, g.shard_grads, comm::ReduceOp::kAvg);
}

void DataParallel::finish_gradients() {
  const double start = now_ms();
  times_.early_groups = 0;
  times_.groups = int(groups_.size());
  for (const auto& g : groups_) times_.early_groups += g->reduce_work ? 1 : 0;
  for (auto& g : groups_) {
    if (g->reduce_work) continue;
    // A group not reduced yet: a tied weight (its stages' copies are summed
    // first), or parameters whose gradients never became ready this step
    // (any that got no contribution still hold the last step's values:
    // grad() zeroes them).
    ensure_grads(*g);
    for (nn::Parameter* p : g->params) p->grad();
    if (g->deferred)
      for (nn::Parameter* p : g->params) tied_->sum_gradient(*p);
    start_reduction(*g);
  }
  std::vector<comm::WorkPtr> works;
  for (auto& g : groups_) works.push_back(std::move(g->reduce_work));
  wait_all(works);
  times_.exposed_ms = now_ms() - start;
  times_.backward_ms = start - final_start_;
  if (options_.zero_stage >= 2) {
    for (auto& g : groups_)
      if (const Domain& d = domains_[std::size_t(g->domain)]; d.replicas > 1)
        works.push_back(d.replica_comm->all_reduce(g->shard_grads, g->shard_grads, comm::ReduceOp::kAvg));
    wait_all(works);
    for (auto& g : groups_) drop_full_grads(*g);
  }
  for (auto& g : groups_)
    if (const float scale = domains_[std::size_t(g->domain)].grad_scale; scale != 1.f) ops::scale(g->shard_grads, scale);
}

std::vector<Tensor> DataParallel::shard_gradients() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.push_back(g->shard_grads);
  return out;
}

std::vector<optim::Slot> DataParallel::make_slots() const {
  // The slots are views into buffers that live as long as this object: one
  // per piece of a parameter this rank's shard holds.
  std::vector<optim::Slot> out;
  for (const auto& g : groups_) {
    const Domain& d = domains_[std::size_t(g->domain)];
    for (const ShardPiece& piece : shard_pieces(g->layout, d.shard_rank)) {
      const nn::Parameter& p = *g->params[std::size_t(piece.member)];
      const std::string name =
          piece.whole ? p.name() : fmt::format("{}[{}:{}]", p.name(), piece.offset, piece.offset + piece.numel());
      // The primary copy: its shard's owner in the first replica of its
      // domain, tp rank 0 for unsplit tensors, and never a later stage's
      // tied copy.
      const bool primary = d.replica_rank == 0 && !p.layout().pp_tied_copy &&
                           (p.layout().tp_split() || mesh_.coord().tp_rank == 0);
      out.push_back({.name = name,
                     .param = g->master.slice(piece.begin, piece.end),
                     .grad = g->shard_grads.slice(piece.begin, piece.end),
                     .weight_decay = p.weight_decay(),
                     .source = &p,
                     .offset = piece.offset,
                     .primary = primary});
    }
  }
  return out;
}

void DataParallel::after_step() {
  // The working copies follow the updated master shards: converted, and
  // (stages 1-2) all-gathered in the compute dtype.
  const int stage = options_.zero_stage;
  const bool mixed = options_.precision.mixed();
  std::vector<comm::WorkPtr> works;
  for (auto& g : groups_) {
    if (stage == 3) {
      if (mixed) ops::cast(g->master, g->work_shard);
      continue;
    }
    Tensor own = g->work_params.slice(g->shard_begin(), g->shard_begin() + g->shard_numel());
    if (mixed) ops::cast(g->master, own);
    if (stage > 0) works.push_back(domains_[std::size_t(g->domain)].shard_comm->all_gather(own, g->work_params));
  }
  wait_all(works);
}

void DataParallel::gather_all() {
  if (options_.zero_stage == 3)
    for (std::size_t u = 0; u < unit_groups_.size(); ++u) acquire(u);
}

void DataParallel::release_all() {
  if (options_.zero_stage == 3)
    for (std::size_t u = 0; u < unit_groups_.size(); ++u) release(u);
}

}  // namespace ht::parallel
