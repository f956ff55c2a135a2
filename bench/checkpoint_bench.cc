// checkpoint_bench: what an asynchronous checkpoint costs training, how fast
// its background write is against the disk, and how long loading takes —
// all in one run on the same disk, for a 124M-class GPT with AdamW state.
//
// Under mpirun each rank saves its shards (use --tp/--pp/--zero for the save
// layout); --reshard-zero/--reshard-tp/--reshard-pp load the checkpoint again
// under another layout and time that too.
//
// Output: "# " preamble lines, then one line per measure:
//   sync save      the stall of a save waited for at once (copy + write + sync + commit)
//   async save     the stall of an asynchronous save (copy to host only)
//   stall ratio    async / sync (target <= 0.10)
//   write          background write throughput, and raw sequential write
//                  throughput of the same bytes (the rank file itself) to the
//                  same directory (fwrite + fsync), and their ratio (target >= 0.70)
//   load           resume time, same layout; resharded load time when asked
//   snapshot       memory tiers at the default interval (auto): an engine
//                  that snapshots and one that does not, stepped in turn on
//                  the same data; the snapshots taken, their stall and
//                  thread time, and the step-time overhead (target <= 3%).
//                  Under mpirun each rank is a simulated node of its own
//                  (HT_SIMULATED_NODES, unless set), so snapshots replicate.
//   snapshot cost  the same engine against itself: what the steps its
//                  snapshots touched took beyond the median of its other
//                  steps. Two identical engines in one process differ by a
//                  few percent (the one built first is slower;
//                  --plain-first builds the plain one first), which the
//                  overhead above includes and this does not.
// and with --json a JSON object per run instead. Rank 0 reports its own
// rank's figures (every rank writes its own file in parallel).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ht/comm/agreement.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/core/error.h"
#include "ht/core/version.h"

using namespace ht;
using bench::now_ms;
namespace fs = std::filesystem;

namespace {

struct Args {
  int tp = 1, pp = 1, zero = 0, reshard_tp = 0, reshard_pp = 0, reshard_zero = -1;
  int layers = 12, heads = 12;
  std::int64_t embd = 768, vocab = 50304;
  std::string dir = "/tmp/ht_checkpoint_bench";
  int snapshot_steps = 12;
  std::int64_t snapshot_every = -1;  // -1: auto
  bool snapshot_warm = false;
  bool plain_first = false;  // build the plain engine first (the engines differ by which was built first)
  std::string step_log;  // each compared step of both engines, written by rank 0
  bool json = false;

  bool reshard() const { return reshard_tp > 0 || reshard_pp > 0 || reshard_zero >= 0; }
  models::GPTConfig model() const {
    return {.vocab_size = vocab, .context = 64, .n_layer = layers, .n_head = heads, .n_embd = embd};
  }
};

void add_flags(CLI::App& app, Args& a) {
  app.add_option("--dir", a.dir, "checkpoint directory (on the disk to measure)");
  app.add_option("--tp", a.tp);
  app.add_option("--pp", a.pp);
  app.add_option("--zero", a.zero);
  app.add_option("--reshard-tp", a.reshard_tp, "also load under this tp (0: no resharded load)");
  app.add_option("--reshard-pp", a.reshard_pp);
  app.add_option("--reshard-zero", a.reshard_zero);
  app.add_option("--layers", a.layers);
  app.add_option("--heads", a.heads);
  app.add_option("--embd", a.embd);
  app.add_option("--vocab", a.vocab);
  app.add_option("--snapshot-steps", a.snapshot_steps, "steps of each engine in the memory-tier comparison (0: none)");
  app.add_option("--snapshot-every", a.snapshot_every, "snapshot interval in the comparison (-1: auto, the default)");
  app.add_flag("--snapshot-warm", a.snapshot_warm,
               "before the compared steps, step until two snapshots reused their pages: a run's first snapshots "
               "map their images afresh, a cost paid once and reported apart (warm-up)");
  app.add_flag("--plain-first", a.plain_first,
               "build the engine without snapshots first: two identical engines in one process differ by a few "
               "percent, the one built first slower, so the comparison is worth running both ways");
  app.add_option("--step-log", a.step_log,
                 "write each compared step to this file (rank 0): the block, the engine, the step, its time, "
                 "whether it began a snapshot and whether one was under way after it");
  app.add_flag("--json", a.json);
}

constexpr std::int64_t kSeqLen = 32;

/// The options of every engine here: one row of 32 tokens, checkpoints under a.dir.
train::EngineOptions engine_options(const Args& a) {
  train::EngineOptions o;
  o.layout = {.tp = a.tp, .pp = a.pp, .zero = a.zero, .micro_batch = 1};
  o.eval_samples = 8;
  o.ckpt_dir = a.dir;
  o.ckpt_keep = 2;
  return o;
}

// Writes the bytes of `source` (the checkpoint's own rank file, read first,
// untimed) to a fresh file in the same directory with write + fsync: the
// disk's sequential write rate for the same data, side by side.
double raw_write_ms(const std::string& source, const std::string& dir) {
  std::vector<char> bytes(fs::file_size(source));
  {
    std::FILE* in = std::fopen(source.c_str(), "rb");
    HT_CHECK(in && std::fread(bytes.data(), 1, bytes.size(), in) == bytes.size(), ErrorKind::kIo, "cannot read '{}'",
             source);
    std::fclose(in);
  }
  const std::string path = (fs::path(dir) / "raw_write.bin").string();
  const double t0 = now_ms();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  HT_CHECK(f, ErrorKind::kIo, "cannot write '{}'", path);
  HT_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(), ErrorKind::kIo, "short write to '{}'", path);
  std::fflush(f);
  ::fsync(fileno(f));
  std::fclose(f);
  const double ms = now_ms() - t0;
  fs::remove(path);
  return ms;
}

/// Steps and saves twice (step 1 synchronously, step 2 asynchronously) and
/// measures the disk beside it; fills the save figures of `out`.
void measure_saves(const Args& a, const data::TokenSplits& data, nlohmann::json& out) {
  comm::DeviceMesh mesh(comm::make_mpi_world(), a.tp, a.pp);
  out["layout"] = fmt::format("{}, zero {}", mesh.shape().str(), a.zero);
  if (mesh.rank() == 0) fs::remove_all(a.dir);
  mesh.world().barrier()->wait();
  bench::LmEngine t(engine_options(a), a.model(), data, kSeqLen, &mesh);
  t->step();  // AdamW state that is not zero
  // Synchronous: the save, waited for at once.
  double t0 = now_ms();
  t->save_checkpoint();
  HT_CHECK(t->wait_for_checkpoint().empty(), ErrorKind::kIo, "the synchronous save failed");
  const double sync_ms = now_ms() - t0;
  // Asynchronous: training pauses only for the host copy.
  t->step();
  t->save_checkpoint();
  const ckpt::SaveStats async = t->checkpointer()->last_save();
  HT_CHECK(t->wait_for_checkpoint().empty(), ErrorKind::kIo, "the asynchronous save failed");
  const ckpt::SaveStats written = t->checkpointer()->last_save();
  mesh.world().barrier()->wait();  // rank 0 has committed: every rank file is in place
  const double raw_ms = raw_write_ms(
      (fs::path(ckpt::checkpoint_dir(a.dir, 2)) / ckpt::rank_file_name(mesh.rank())).string(), a.dir);
  out["sync_save_ms"] = sync_ms;
  out["async_stall_ms"] = async.stall_ms;
  out["stall_ratio"] = async.stall_ms / sync_ms;
  out["rank_file_bytes"] = written.bytes;
  out["write_ms"] = written.write_ms;
  out["write_mb_s"] = double(written.bytes) / 1e3 / written.write_ms;
  out["raw_write_ms"] = raw_ms;
  out["raw_write_mb_s"] = double(written.bytes) / 1e3 / raw_ms;
  out["write_ratio"] = raw_ms / written.write_ms;
}

/// Milliseconds to resume from step 2 on a tp x pp mesh at ZeRO stage
/// `zero` (building the model included); `layout` gets the mesh's layout.
double measure_load(const Args& a, const data::TokenSplits& data, int tp, int pp, int zero, std::string& layout) {
  comm::DeviceMesh mesh(comm::make_mpi_world(), tp, pp);
  train::EngineOptions r = engine_options(a);
  r.resume = true;
  r.layout.tp = tp, r.layout.pp = pp, r.layout.zero = zero;
  layout = fmt::format("{}, zero {}", mesh.shape().str(), zero);
  const double t0 = now_ms();
  bench::LmEngine t(r, a.model(), data, kSeqLen, &mesh);
  const double ms = now_ms() - t0;
  HT_CHECK(t->resumed_from() == 2, ErrorKind::kInternal, "resumed from step {}, expected 2", t->resumed_from());
  return ms;
}

/// Two engines stepped in turn, one with memory snapshots at the default
/// interval and one without; fills the snapshot figures of `out`.
void measure_snapshots(const Args& a, const data::TokenSplits& data, nlohmann::json& out) {
  comm::DeviceMesh mesh(comm::make_mpi_world(), a.tp, a.pp);
  train::EngineOptions with = engine_options(a);
  with.ckpt_dir = a.dir + "_snapshots";
  with.mem_ckpt_every = a.snapshot_every;
  with.mem_ckpt_dir = "/dev/shm/ht_checkpoint_bench_memory";
  train::EngineOptions without = engine_options(a);
  without.ckpt_dir.clear();
  std::unique_ptr<bench::LmEngine> snap_engine, plain_engine;
  if (a.plain_first) plain_engine = std::make_unique<bench::LmEngine>(without, a.model(), data, kSeqLen, &mesh);
  snap_engine = std::make_unique<bench::LmEngine>(with, a.model(), data, kSeqLen, &mesh);
  if (!plain_engine) plain_engine = std::make_unique<bench::LmEngine>(without, a.model(), data, kSeqLen, &mesh);
  bench::LmEngine& snap = *snap_engine;
  bench::LmEngine& plain = *plain_engine;
  // Whether any rank's snapshot is still being written (every rank asks,
  // so every rank steps alike).
  const auto any_busy = [&] { return comm::agree_max_u64(mesh.world(), snap->checkpointer()->snapshot_busy()) > 0; };
  // Warm-up, the engine that snapshots alone, nothing waited for (auto
  // measures a snapshot's cost by the steps its work slows): the first
  // snapshot; with --snapshot-warm, until two have reused their pages (the
  // first ones map their images and spares afresh, at both ends), so that
  // auto's interval was measured on one. Then the plain engine as many
  // steps: what a run pays once.
  constexpr int kMaxWarmSteps = 500;
  double warm_snap_ms = 0, warm_plain_ms = 0;
  int warm_steps = 0, warm_taken = 0, reused = 0;
  for (; warm_steps < 2 || (a.snapshot_warm && reused < 2 && warm_steps < kMaxWarmSteps); ++warm_steps) {
    const train::StepStats s = snap->step();
    warm_snap_ms += s.ms;
    if (s.snapshotted) {
      ++warm_taken;
      if (!snap->checkpointer()->last_snapshot().fresh_image) ++reused;
    }
  }
  if (a.snapshot_warm && reused < 2 && mesh.rank() == 0)
    std::fprintf(stderr, "warning: fewer than 2 snapshots reused their pages in %d steps; the steps compared include "
                 "fresh ones\n", warm_steps);
  double t0 = now_ms();
  snap->checkpointer()->wait_snapshot();
  warm_snap_ms += now_ms() - t0;
  for (int i = 0; i < warm_steps; ++i) warm_plain_ms += plain->step().ms;
  // In blocks of 10 steps or more, in turn: stepped one by one, the
  // snapshot thread of one engine would run during the other's steps. A
  // block of the engine that snapshots goes on while a snapshot's work is
  // under way (its cost lands in its own steps, as auto measures it), and
  // the plain engine then steps as many.
  double snap_ms = 0, plain_ms = 0;
  int taken = 0, stepped = 0, blocks = 0;
  // The snapshotting engine's steps: a snapshot touches the step that began
  // it and each that began with a rank's snapshot work under way.
  std::vector<double> quiet_ms;
  double touched_ms = 0;
  int touched = 0;
  ckpt::SnapshotStats last;
  std::FILE* log = !a.step_log.empty() && mesh.rank() == 0 ? std::fopen(a.step_log.c_str(), "w") : nullptr;
  if (log) std::fprintf(log, "block engine step ms snapshotted busy_after\n");
  while (stepped < a.snapshot_steps) {
    int block = 0;
    ++blocks;
    for (bool busy = false; block < 10 || busy;) {
      const train::StepStats s = snap->step();
      const bool was_busy = busy;
      busy = any_busy();
      snap_ms += s.ms;
      ++block;
      if (s.snapshotted || was_busy) {
        touched_ms += s.ms;
        ++touched;
      } else {
        quiet_ms.push_back(s.ms);
      }
      if (s.snapshotted) {
        ++taken;
        last = snap->checkpointer()->last_snapshot();
      }
      if (log) std::fprintf(log, "%d snap %lld %.2f %d %d\n", blocks, static_cast<long long>(s.step), s.ms,
                            int(s.snapshotted), int(busy));
    }
    for (int i = 0; i < block; ++i) {
      const train::StepStats s = plain->step();
      plain_ms += s.ms;
      if (log) std::fprintf(log, "%d plain %lld %.2f 0 0\n", blocks, static_cast<long long>(s.step), s.ms);
    }
    stepped += block;
  }
  if (log) std::fclose(log);
  t0 = now_ms();
  snap->checkpointer()->wait_snapshot();
  snap_ms += now_ms() - t0;
  if (taken == 0) last = snap->checkpointer()->last_snapshot();  // the warm-up's
  const ckpt::SnapshotStats done = snap->checkpointer()->last_snapshot();
  snap->checkpointer()->discard_memory(true);
  out["snapshot_steps"] = stepped;
  out["snapshot_every"] = a.snapshot_every;
  out["snapshots_taken"] = taken;
  out["snapshot_warmup_steps"] = warm_steps;
  out["snapshot_warmup_snapshots"] = warm_taken;
  out["snapshot_warmup_extra_ms"] = warm_snap_ms - warm_plain_ms;
  out["snapshot_stall_ms"] = last.stall_ms;
  out["snapshot_write_ms"] = done.write_ms;
  out["snapshot_replicate_ms"] = done.replicate_ms;
  out["snapshot_cpu_ms"] = done.cpu_ms;
  out["snapshot_bytes"] = done.bytes;
  out["step_ms_without"] = plain_ms / stepped;
  out["step_ms_with"] = snap_ms / stepped;
  out["snapshot_overhead"] = snap_ms / plain_ms - 1;
  // What the touched steps took beyond the median of the others, against
  // the steps' time: the snapshots' cost as the engine's own steps show it,
  // free of the difference between two engines.
  if (!quiet_ms.empty()) {
    std::sort(quiet_ms.begin(), quiet_ms.end());
    const double median = quiet_ms[quiet_ms.size() / 2];
    const double excess = touched_ms - touched * median;
    out["snapshot_touched_steps"] = touched;
    out["snapshot_excess_ms"] = taken > 0 ? excess / taken : 0.0;
    out["snapshot_excess_share"] = excess / (median * stepped);
  }
  if (mesh.rank() == 0) fs::remove_all(with.ckpt_dir);
}

void print_lines(const Args& a, const nlohmann::json& out) {
  std::printf("# %s\n# model %s, save layout %s; %.1f MB per rank file (rank 0)\n",
              out["build"].get<std::string>().c_str(), a.model().str().c_str(),
              out["layout"].get<std::string>().c_str(), double(out["rank_file_bytes"]) / 1e6);
  std::printf("sync save     %9.1f ms\n", double(out["sync_save_ms"]));
  std::printf("async save    %9.1f ms stall\n", double(out["async_stall_ms"]));
  std::printf("stall ratio   %9.3f (async / sync; target <= 0.10)\n", double(out["stall_ratio"]));
  std::printf("write         %9.1f MB/s background, %.1f MB/s raw fwrite+fsync, ratio %.2f (target >= 0.70)\n",
              double(out["write_mb_s"]), double(out["raw_write_mb_s"]), double(out["write_ratio"]));
  std::printf("load          %9.1f ms (same layout, building the model included)\n", double(out["load_ms"]));
  if (out.contains("reshard_load_ms"))
    std::printf("reshard load  %9.1f ms (into %s)\n", double(out["reshard_load_ms"]),
                out["reshard_layout"].get<std::string>().c_str());
  if (out.contains("snapshot_overhead"))
    std::printf("snapshot      %9.1f ms stall, %.1f ms write + %.1f ms replicate in the background (%.1f ms CPU; %.1f MB); every %s: "
                "%d in %d steps of %.1f ms; step time %+.1f%% (target <= 3%%)\n",
                double(out["snapshot_stall_ms"]), double(out["snapshot_write_ms"]),
                double(out["snapshot_replicate_ms"]), double(out["snapshot_cpu_ms"]), double(out["snapshot_bytes"]) / 1e6,
                int(out["snapshot_every"]) < 0 ? "auto" : std::to_string(int(out["snapshot_every"])).c_str(),
                int(out["snapshots_taken"]), int(out["snapshot_steps"]), double(out["step_ms_without"]),
                100 * double(out["snapshot_overhead"]));
  if (out.contains("snapshot_excess_share"))
    std::printf("snapshot cost %9.1f ms a snapshot beyond the quiet steps' median, over %d steps touched: %+.1f%% of "
                "the steps' time (the engine against itself)\n",
                double(out["snapshot_excess_ms"]), int(out["snapshot_touched_steps"]),
                100 * double(out["snapshot_excess_share"]));
  if (out.contains("snapshot_overhead") && a.snapshot_warm)
    std::printf("warm-up       %9.1f ms more than without, once: %d snapshot(s) in %d steps before those compared\n",
                double(out["snapshot_warmup_extra_ms"]), int(out["snapshot_warmup_snapshots"]),
                int(out["snapshot_warmup_steps"]));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Checkpoint cost: async vs sync stall, background write vs raw disk, load and resharded load"};
  add_flags(app, a);
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<comm::MpiRuntime> mpi;  // outlives the try: a failure exits before MPI_Finalize
  try {
    mpi = std::make_unique<comm::MpiRuntime>(&argc, &argv);
    const data::TokenSplits data = bench::random_tokens(a.vocab, 20000, 2000, 7);
    nlohmann::json out{{"type", "checkpoint_bench"}, {"model", a.model().str()}, {"build", ht::build_description()}};
    measure_saves(a, data, out);
    std::string layout;
    out["load_ms"] = measure_load(a, data, a.tp, a.pp, a.zero, layout);
    if (a.snapshot_steps > 0) {
      // Each rank a node of its own: the snapshots replicate, as across machines.
      if (!std::getenv("HT_SIMULATED_NODES")) {
        std::string ids;
        for (int r = 0; r < mpi->world_size(); ++r) ids += (r ? "," : "") + std::to_string(r);
        ::setenv("HT_SIMULATED_NODES", ("1:" + ids).c_str(), 1);
      }
      measure_snapshots(a, data, out);
    }
    if (a.reshard()) {
      const int rtp = a.reshard_tp > 0 ? a.reshard_tp : a.tp, rpp = a.reshard_pp > 0 ? a.reshard_pp : a.pp;
      out["reshard_load_ms"] = measure_load(a, data, rtp, rpp, a.reshard_zero >= 0 ? a.reshard_zero : a.zero, layout);
      out["reshard_layout"] = layout;
    }
    if (mpi->world_rank() == 0) {
      if (a.json)
        bench::print_json_line(out);
      else
        print_lines(a, out);
    }
    return 0;
  } catch (const std::exception& e) {
    // Exit at once: MPI_Finalize would wait for ranks still in a collective.
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(2);
  }
}
