// ht::parallel::DataParallel: flat groups, bucketed reductions, ZeRO shards
// and the stage-3 gather/free hooks.
#include "ht/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include "ht/ops/cast.h"
#include "ht/optim/clip.h"
#include "parallel/flat_group.h"

namespace ht::parallel {

using detail::FlatGroup;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
  HT_CHECK(zero_stage >= 0 && zero_stage <= 3, ErrorKind::kConfig, "--zero {} must be 0 (DDP), 1, 2 or 3", zero_stage);
  HT_CHECK(bucket_bytes > 0, ErrorKind::kConfig, "the gradient bucket size must be positive, got {} bytes",
           bucket_bytes);
  HT_CHECK(shard_group >= 0 && (shard_group == 0 || dp % shard_group == 0), ErrorKind::kConfig,
           "--zero-shard-group {} must divide the data-parallel size {} (or be 0 for all of it)", shard_group, dp);
  HT_CHECK(shard_group == 0 || zero_stage > 0, ErrorKind::kConfig,
           "--zero-shard-group {} needs a ZeRO stage (--zero 1, 2 or 3): plain data parallelism shards nothing",
           shard_group);
}

DataParallel::DataParallel(nn::Model& model, comm::DeviceMesh& mesh, const DataParallelOptions& options,
                           InitialValues initial_values)
    : model_(model), mesh_(mesh), options_(options), initial_values_(std::move(initial_values)) {
  const comm::MeshLayout& layout = mesh.layout();
  const comm::MeshCoord& at = mesh.coord();
  options_.validate(layout.dp_size());
  if (options_.zero_stage > 0) {
    shards_ = options_.shard_group > 0 ? options_.shard_group : layout.dp_size();
    shard_rank_ = at.dp_rank % shards_;
    replicas_ = layout.dp_size() / shards_;
    replica_rank_ = at.dp_rank / shards_;
    const std::string& dp_name = mesh.dp_group().name();
    shard_comm_ = mesh.dp_group().split(replica_rank_, shard_rank_, fmt::format("{}.shard{}", dp_name, replica_rank_));
    replica_comm_ = mesh.dp_group().split(shard_rank_, replica_rank_, fmt::format("{}.replica{}", dp_name, shard_rank_));
  } else {
    replicas_ = layout.dp_size();
    replica_rank_ = at.dp_rank;
  }
  setup_tied_weights();
  build_groups();
  if (options_.zero_stage == 2) install_zero2_hooks();
  if (options_.zero_stage == 3) install_zero3_hooks();
}

DataParallel::~DataParallel() = default;

void DataParallel::setup_tied_weights() {
  const comm::MeshLayout& layout = mesh_.layout();
  const comm::MeshCoord& at = mesh_.coord();
  const int stage = model_.stage().rank;
  std::vector<nn::Parameter*> params = model_.parameters();
  for (const nn::TiedWeight& t : model_.tied_weights()) {
    HT_CHECK(t.stages.size() >= 2 && std::is_sorted(t.stages.begin(), t.stages.end()) &&
                 std::adjacent_find(t.stages.begin(), t.stages.end()) == t.stages.end() && t.stages.front() >= 0 &&
                 t.stages.back() < model_.stage().size,
             ErrorKind::kInvalidArgument,
             "model '{}' declares weight '{}' tied across stages {{{}}}: a tie needs two or more distinct stages, "
             "ascending, each below the pipeline's {}",
             model_.describe(), t.name, fmt::join(t.stages, ","), model_.stage().size);
    const bool holds = std::find(t.stages.begin(), t.stages.end(), stage) != t.stages.end();
    nn::Parameter* param = nullptr;
    if (holds) {
      const auto it = std::find_if(params.begin(), params.end(), [&](nn::Parameter* p) { return p->name() == t.name; });
      HT_CHECK(it != params.end(), ErrorKind::kInvalidArgument,
               "model '{}' declares weight '{}' tied across stages {{{}}}, but stage {} holds no parameter of that "
               "name",
               model_.describe(), t.name, fmt::join(t.stages, ","), stage);
      param = *it;
      param->layout().pp_tied_copy = stage != t.stages.front();
    }
    // The copies of one (dp, tp) position, ordered by stage.
    const int color = holds ? at.dp_rank * layout.tp_size() + at.tp_rank : -1;
    tied_.emplace_back(param, mesh_.world().split(color, at.pp_rank, fmt::format("tied.{}.{}", t.name, color)));
  }
}

comm::Communicator* DataParallel::tied_comm(const nn::Parameter* p) const {
  for (const auto& [param, comm] : tied_)
    if (param == p) return comm.get();
  return nullptr;
}

void DataParallel::build_groups() {
  auto tied = [&](const nn::Parameter* p) { return tied_comm(p) != nullptr; };
  std::vector<std::vector<nn::Parameter*>> members;
  std::vector<bool> deferred;
  if (options_.zero_stage == 3) {
    // One unit per top-level module; a module whose parameters all belong to
    // an earlier unit (the head tied to the embedding) reuses that unit.
    std::unordered_map<const nn::Parameter*, std::size_t> unit_of_param;
    auto unit_holding = [&](nn::Parameter* p) {
      const auto it = unit_of_param.find(p);
      return it == unit_of_param.end() ? members.size() : it->second;
    };
    const std::vector<nn::Parameter*> own = own_parameters(model_);
    HT_CHECK(own.empty(), ErrorKind::kInvalidArgument,
             "ZeRO-3: model '{}' holds parameter '{}' itself, outside its child modules; ZeRO-3 gathers and frees "
             "parameters per child module: move it into a child (a small Module holding it)",
             model_.describe(), own.empty() ? "" : own.front()->name());
    for (nn::Module* m : model_.children()) {
      const std::vector<nn::Parameter*> ps = m->parameters();
      std::vector<nn::Parameter*> fresh;
      for (nn::Parameter* p : ps)
        if (unit_holding(p) == members.size()) fresh.push_back(p);
      sequence_.push_back(m);
      if (fresh.empty()) {
        HT_CHECK(!ps.empty(), ErrorKind::kInvalidArgument, "ZeRO-3: module '{}' has no parameters", m->name());
        unit_of_.push_back(unit_holding(ps.front()));
        continue;
      }
      HT_CHECK(fresh.size() == ps.size(), ErrorKind::kInvalidArgument,
               "ZeRO-3: module '{}' shares only some of its parameters with an earlier unit", m->name());
      bool d = false;
      for (nn::Parameter* p : fresh) d = d || tied(p);
      unit_of_.push_back(members.size());
      for (nn::Parameter* p : fresh) unit_of_param[p] = members.size();
      members.push_back(fresh);
      deferred.push_back(d);
    }
  } else {
    // Buckets in reverse registration order: about the order gradients become ready.
    std::vector<nn::Parameter*> params = model_.parameters();
    std::vector<nn::Parameter*> bucket;
    std::int64_t bytes = 0;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      nn::Parameter* p = *it;
      if (tied(p)) {
        members.push_back({p});
        deferred.push_back(true);
        continue;
      }
      bucket.push_back(p);
      bytes += shape_numel(p->shape()) * std::int64_t(sizeof(float));
      if (bytes >= options_.bucket_bytes) {
        members.push_back(std::move(bucket));
        deferred.push_back(false);
        bucket.clear();
        bytes = 0;
      }
    }
    if (!bucket.empty()) {
      members.push_back(std::move(bucket));
      deferred.push_back(false);
    }
  }

  const int stage = options_.zero_stage;
  const DType compute = options_.precision.compute;
  const bool mixed = options_.precision.mixed();
  for (std::size_t i = 0; i < members.size(); ++i) {
    Tensor values;  // f32, padded
    auto g = std::make_unique<FlatGroup>(detail::make_flat_group(
        members[i], shards_, shard_rank_, model_.device(), [&](const nn::Parameter& p) {
          if (initial_values_) return initial_values_(p);
          HT_CHECK(p.data().defined(), ErrorKind::kInvalidArgument,
                   "parameter {} has no storage: a model built with deferred storage needs its initial values "
                   "(DataParallel's initial_values)",
                   p.name());
          return p.data();
        },
        values));
    g->deferred = deferred[i];
    g->compute = compute;
    g->reduce = options_.precision.reduce;
    const std::int64_t lo = g->shard_begin(), hi = lo + g->shard_numel();
    // The f32 master shard is optimizer state when a separate working copy
    // exists; in f32 training it is the parameters themselves.
    if (mixed) g->master = copy_as(values.slice(lo, hi), DType::kF32, MemCategory::kOptimizerState);
    if (stage == 3) {
      g->work_shard = mixed ? copy_as(g->master, compute, MemCategory::kParameters) : values.slice(lo, hi).clone();
      if (!mixed) g->master = g->work_shard;
      g->unbind_params();
    } else {
      g->work_params = mixed ? copy_as(values, compute, MemCategory::kParameters) : values;
      if (!mixed) g->master = g->work_params.slice(lo, hi);
      g->bind_params();
    }
    if (stage <= 1) {
      g->work_grads = Tensor::zeros({g->padded}, compute, g->device, MemCategory::kGradients);
      g->reduce_grads = g->converts_grads()
                            ? Tensor::zeros({g->padded}, g->reduce, g->device, MemCategory::kGradients)
                            : g->work_grads;
      g->bind_grads();
      g->shard_grads = g->reduce_grads.slice(lo, hi);
    } else {
      g->shard_grads = Tensor::zeros({g->shard_numel()}, g->reduce, g->device, MemCategory::kGradients);
      g->unbind_grads();
    }
    const std::size_t index = groups_.size();
    for (nn::Parameter* p : g->params) p->set_grad_ready_hook([this, index](nn::Parameter&) { on_grad_ready(index); });
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
      ensure_grads(*groups_[unit]);
      if (prev != unit) prefetch(prev);
    });
    sequence_[i]->set_post_backward_hook([this, unit](nn::Module&, nn::Context&) { release(unit); });
  }
}

void DataParallel::prefetch(std::size_t unit) {
  FlatGroup& g = *groups_[unit];
  if (g.work_params.defined()) return;
  g.work_params = Tensor::empty({g.padded}, g.compute, g.device, MemCategory::kParameters);
  g.gather_work = shard_comm_->all_gather(g.work_shard, g.work_params);
}

void DataParallel::acquire(std::size_t unit) {
  FlatGroup& g = *groups_[unit];
  prefetch(unit);
  if (g.gather_work) {
    g.gather_work->wait();
    g.gather_work.reset();
  }
  if (g.gather_refs++ == 0) g.bind_params();
}

void DataParallel::release(std::size_t unit) {
  FlatGroup& g = *groups_[unit];
  HT_CHECK(g.gather_refs > 0, ErrorKind::kInvalidArgument, "ZeRO-3: unit {} released more often than gathered", unit);
  if (--g.gather_refs > 0) return;
  g.unbind_params();
  g.work_params = Tensor();
}

void DataParallel::ensure_grads(FlatGroup& g) {
  if (g.work_grads.defined()) return;
  g.work_grads = Tensor::zeros({g.padded}, g.compute, g.device, MemCategory::kGradients);
  g.bind_grads();
}

void DataParallel::drop_full_grads(FlatGroup& g) {
  g.unbind_grads();
  g.work_grads = Tensor();
  g.reduce_grads = Tensor();
}

void DataParallel::begin_step() {
  for (auto& g : groups_) g->ready = 0;
  model_.zero_grad();  // zeroes the bound gradient views and restarts the grad-ready counts
  final_ = false;
}

void DataParallel::set_final_micro_batch(bool final) {
  final_ = final;
  if (final) final_start_ = now_ms();
}

void DataParallel::free_reduced_grads() {
  // Stages 2-3 keep only the reduced shard: a group's full gradient goes as
  // soon as its reduce-scatter is done, not at the end of backward.
  if (options_.zero_stage < 2) return;
  for (auto& g : groups_)
    if (g->reduce_work && g->work_grads.defined() && g->reduce_work->test()) drop_full_grads(*g);
}

void DataParallel::on_grad_ready(std::size_t index) {
  if (!final_) return;
  free_reduced_grads();
  FlatGroup& g = *groups_[index];
  if (++g.ready == int(g.params.size()) && !g.deferred) start_reduction(g);
}

void DataParallel::start_reduction(FlatGroup& g) {
  if (g.converts_grads()) {
    // Compute-dtype gradients reduce in the reduction dtype (f32 under f16).
    if (!g.reduce_grads.defined())
      g.reduce_grads = Tensor::empty({g.padded}, g.reduce, g.device, MemCategory::kGradients);
    ops::cast(g.work_grads, g.reduce_grads);
  } else {
    g.reduce_grads = g.work_grads;
  }
  if (options_.zero_stage <= 1)
    g.reduce_work = mesh_.dp_group().all_reduce(g.reduce_grads, g.reduce_grads, comm::ReduceOp::kAvg);
  else
    g.reduce_work = shard_comm_->reduce_scatter(g.reduce_grads, g.shard_grads, comm::ReduceOp::kAvg);
}

void DataParallel::finish_gradients() {
  const double start = now_ms();
  for (auto& g : groups_) {
    if (g->reduce_work) continue;
    // A group not reduced yet: a tied weight (its stages' copies are summed
    // first), or parameters whose gradients never became ready this step.
    ensure_grads(*g);
    if (g->deferred)
      for (nn::Parameter* p : g->params)
        if (comm::Communicator* c = tied_comm(p)) c->all_reduce(p->grad(), p->grad(), comm::ReduceOp::kSum)->wait();
    start_reduction(*g);
  }
  std::vector<comm::WorkPtr> works;
  for (auto& g : groups_) works.push_back(std::move(g->reduce_work));
  wait_all(works);
  times_.exposed_ms = now_ms() - start;
  times_.backward_ms = start - final_start_;
  if (options_.zero_stage >= 2) {
    if (replicas_ > 1) {
      for (auto& g : groups_) works.push_back(replica_comm_->all_reduce(g->shard_grads, g->shard_grads, comm::ReduceOp::kAvg));
      wait_all(works);
    }
    for (auto& g : groups_) drop_full_grads(*g);
  }
}

float DataParallel::unscale_and_norm(float loss_scale) {
  // Every gradient this rank holds is divided by the loss scale, fused with a
  // check for Inf and NaN.
  const Device device = model_.device();
  Tensor found = Tensor::zeros({1}, DType::kF32, device, MemCategory::kOther);
  if (loss_scale != 1.f)
    for (const auto& g : groups_) ops::scale_and_check_finite(g->shard_grads, 1.f / loss_scale, found);
  // Each gradient element is counted on exactly one rank (Slot::primary).
  std::vector<Tensor> counted;
  for (const optim::Slot& s : slots_)
    if (s.primary) counted.push_back(s.grad);
  // A rank that found a non-finite gradient adds +Inf to its part of the
  // sum of squares: the one world all-reduce then gives every rank a
  // non-finite norm, an OR of the flags over the whole mesh.
  const bool nonfinite_here = found.item(0) != 0.f;
  comm::Communicator& world = mesh_.world();
  return optim::global_grad_norm(counted, [&](Tensor& t) {
    if (nonfinite_here) t.fill_(INFINITY);
    world.all_reduce(t, t, comm::ReduceOp::kSum)->wait();
  });
}

std::vector<optim::Slot> DataParallel::make_slots() const {
  // The slots are views into buffers that live as long as this object.
  std::vector<optim::Slot> out;
  for (const auto& g : groups_) {
    const std::int64_t lo = g->shard_begin(), hi = lo + g->shard_numel();
    for (std::size_t i = 0; i < g->params.size(); ++i) {
      const nn::Parameter& p = *g->params[i];
      const std::int64_t begin = g->offsets[i], end = begin + shape_numel(p.shape());
      const std::int64_t a = std::max(lo, begin), b = std::min(hi, end);
      if (a >= b) continue;
      const std::string name =
          (a == begin && b == end) ? p.name() : fmt::format("{}[{}:{}]", p.name(), a - begin, b - begin);
      // The primary copy: its shard's owner in the first replica, tp rank 0
      // for unsplit tensors, and never the last stage's tied copy.
      const bool primary = replica_rank_ == 0 && !p.layout().pp_tied_copy &&
                           (p.layout().tp_split() || mesh_.coord().tp_rank == 0);
      out.push_back({.name = name,
                     .param = g->master.slice(a - lo, b - lo),
                     .grad = g->shard_grads.slice(a - lo, b - lo),
                     .weight_decay = p.weight_decay(),
                     .source = &p,
                     .offset = a - begin,
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
    if (stage > 0) works.push_back(shard_comm_->all_gather(own, g->work_params));
  }
  wait_all(works);
}

void DataParallel::gather_all() {
  if (options_.zero_stage == 3)
    for (std::size_t u = 0; u < groups_.size(); ++u) acquire(u);
}

void DataParallel::release_all() {
  if (options_.zero_stage == 3)
    for (std::size_t u = 0; u < groups_.size(); ++u) release(u);
}

}  // namespace ht::parallel
