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
// and with --json a JSON object per run instead. Rank 0 reports its own
// rank's figures (every rank writes its own file in parallel).
#include <CLI/CLI.hpp>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ht/core/version.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/train/metrics.h"
#include "ht/train/trainer.h"

using namespace ht;
namespace fs = std::filesystem;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

data::TokenSplits random_tokens(std::int64_t vocab) {
  data::TokenSplits s;
  s.vocab_size = vocab;
  Rng rng(7);
  for (int i = 0; i < 20000; ++i) s.train.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
  for (int i = 0; i < 2000; ++i) s.val.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
  return s;
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

}  // namespace

int main(int argc, char** argv) {
  int tp = 1, pp = 1, zero = 0, reshard_tp = 0, reshard_pp = 0, reshard_zero = -1;
  int layers = 12, heads = 12;
  std::int64_t embd = 768, vocab = 50304;
  std::string dir = "/tmp/ht_checkpoint_bench";
  bool json = false;
  CLI::App app{"Checkpoint cost: async vs sync stall, background write vs raw disk, load and resharded load"};
  app.add_option("--dir", dir, "checkpoint directory (on the disk to measure)");
  app.add_option("--tp", tp);
  app.add_option("--pp", pp);
  app.add_option("--zero", zero);
  app.add_option("--reshard-tp", reshard_tp, "also load under this tp (0: no resharded load)");
  app.add_option("--reshard-pp", reshard_pp);
  app.add_option("--reshard-zero", reshard_zero);
  app.add_option("--layers", layers);
  app.add_option("--heads", heads);
  app.add_option("--embd", embd);
  app.add_option("--vocab", vocab);
  app.add_flag("--json", json);
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<comm::MpiRuntime> mpi;  // outlives the try: a failure exits before MPI_Finalize
  try {
    mpi = std::make_unique<comm::MpiRuntime>(&argc, &argv);
    const bool rank0 = mpi->world_rank() == 0;
    train::TrainerOptions o;
    o.model = {.vocab_size = vocab, .context = 64, .n_layer = layers, .n_head = heads, .n_embd = embd};
    o.seq_len = 32;
    o.micro_batch = 1;
    o.eval_batches = 1;
    o.data_parallel.zero_stage = zero;
    o.ckpt_dir = dir;
    o.ckpt_keep = 2;
    const data::TokenSplits data = random_tokens(vocab);
    nlohmann::json out{{"type", "checkpoint_bench"}, {"model", o.model.str()}, {"build", ht::build_description()}};
    {
      comm::DeviceMesh mesh(comm::make_mpi_world(), tp, pp);
      out["layout"] = fmt::format("{}, zero {}", mesh.layout().str(), zero);
      if (rank0) fs::remove_all(dir);
      mesh.world().barrier()->wait();
      train::Trainer t(o, data, &mesh);
      t.step();  // AdamW state that is not zero
      // Synchronous: the save, waited for at once.
      double t0 = now_ms();
      t.save_checkpoint();
      HT_CHECK(t.wait_for_checkpoint().empty(), ErrorKind::kIo, "the synchronous save failed");
      const double sync_ms = now_ms() - t0;
      // Asynchronous: training pauses only for the host copy.
      t.step();
      t.save_checkpoint();
      const ckpt::SaveStats async = t.checkpointer()->last_save();
      HT_CHECK(t.wait_for_checkpoint().empty(), ErrorKind::kIo, "the asynchronous save failed");
      const ckpt::SaveStats written = t.checkpointer()->last_save();
      mesh.world().barrier()->wait();  // rank 0 has committed: every rank file is in place
      const double raw_ms = raw_write_ms(
          (fs::path(ckpt::checkpoint_dir(dir, 2)) / ckpt::rank_file_name(mesh.rank())).string(), dir);
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
    {
      comm::DeviceMesh mesh(comm::make_mpi_world(), tp, pp);
      train::TrainerOptions r = o;
      r.resume = true;
      const double t0 = now_ms();
      train::Trainer t(r, data, &mesh);
      out["load_ms"] = now_ms() - t0;  // includes building the model
      HT_CHECK(t.resumed_from() == 2, ErrorKind::kInternal, "resumed from step {}, expected 2", t.resumed_from());
    }
    if (reshard_tp > 0 || reshard_pp > 0 || reshard_zero >= 0) {
      const int rtp = reshard_tp > 0 ? reshard_tp : tp, rpp = reshard_pp > 0 ? reshard_pp : pp;
      comm::DeviceMesh mesh(comm::make_mpi_world(), rtp, rpp);
      train::TrainerOptions r = o;
      r.resume = true;
      r.data_parallel.zero_stage = reshard_zero >= 0 ? reshard_zero : zero;
      out["reshard_layout"] = fmt::format("{}, zero {}", mesh.layout().str(), r.data_parallel.zero_stage);
      const double t0 = now_ms();
      train::Trainer t(r, data, &mesh);
      out["reshard_load_ms"] = now_ms() - t0;
      HT_CHECK(t.resumed_from() == 2, ErrorKind::kInternal, "resumed from step {}, expected 2", t.resumed_from());
    }
    if (rank0) {
      if (json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        std::printf("# %s\n# model %s, save layout %s; %.1f MB per rank file (rank 0)\n",
                    out["build"].get<std::string>().c_str(), o.model.str().c_str(),
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
      }
    }
    return 0;
  } catch (const std::exception& e) {
    // Exit at once: MPI_Finalize would wait for ranks still in a collective.
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(2);
  }
}
