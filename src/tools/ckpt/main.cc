// ht-ckpt: looks into hypertrain checkpoints (the format of ht/ckpt/checkpoint.h).
//
//   ht-ckpt list DIR                          committed checkpoints, oldest first; leftover *.tmp saves
//   ht-ckpt inspect STEP_DIR | DIR [--step N] run state, layout, version, tensor table (default: newest)
//   ht-ckpt verify STEP_DIR | DIR [--step N] [--all]
//                                             reads every piece: checksums, coverage, rank files
//   ht-ckpt export STEP_DIR | DIR OUT.h5 [--step N] [--kinds master,exp_avg,...]
//                                             one HDF5 file of full f32 tensors (see ckpt_tool.h)
//   ht-ckpt export --format hf STEP_DIR | DIR OUT_DIR [--step N] [--dtype f32|bf16|f16]
//                                             a Hugging Face model directory (GPT-2, Llama)
//
// Exit status: 0 on success (verify: every checkpoint is good); 1 when a
// checkpoint is corrupt or cannot be read (the message names the file and
// dataset), or the export cannot be written; 2 on a usage error (bad flags, a
// path that names no checkpoint, a kind the checkpoint lacks).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ckpt_tool.h"
#include "ht/ckpt/checkpoint.h"
#include "ht/core/error.h"

namespace {

namespace tool = ht::ckpt::tool;

constexpr int kOk = 0, kCorrupt = 1, kUsage = 2;

// Prints one checkpoint's verdict; returns whether it is good.
bool verify_one(const std::string& step_dir) {
  const tool::VerifyReport r = tool::verify_checkpoint(step_dir);
  if (r.problems.empty()) {
    fmt::print("OK {}: step {}, {} rank file(s), {} pieces, {} bytes of tensor data read and verified\n", step_dir,
               r.step, r.files, r.pieces, r.bytes);
    return true;
  }
  fmt::print("CORRUPT {}: {} problem(s)\n", step_dir, r.problems.size());
  for (const std::string& p : r.problems) fmt::print("  {}\n", p);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Look into hypertrain checkpoints: list, inspect, verify, export to one HDF5 file", "ht-ckpt"};
  app.require_subcommand(1);
  std::string dir, path, out;
  std::int64_t step = -1;
  bool all = false;
  std::vector<std::string> kinds{"master"};
  std::string format = "h5", dtype = "f32";

  CLI::App* list = app.add_subcommand("list", "the committed checkpoints of a checkpoint directory, oldest first");
  list->add_option("DIR", dir, "checkpoint directory (--ckpt-dir of the run)")->required();

  const char* path_help = "a step directory (DIR/step_N), or a checkpoint directory";
  const char* step_help = "with a checkpoint directory: the step (default: the newest committed)";
  CLI::App* inspect = app.add_subcommand("inspect", "run state, layout and tensor table of one checkpoint");
  inspect->add_option("PATH", path, path_help)->required();
  inspect->add_option("--step", step, step_help)->check(CLI::NonNegativeNumber);

  CLI::App* verify = app.add_subcommand(
      "verify", "read every piece of a checkpoint and check checksums, coverage and rank files (exit 1 if corrupt)");
  verify->add_option("PATH", path, path_help)->required();
  verify->add_option("--step", step, step_help)->check(CLI::NonNegativeNumber);
  verify->add_flag("--all", all, "verify every committed checkpoint of the checkpoint directory PATH");

  CLI::App* exp =
      app.add_subcommand("export",
                         "write the full tensors of one checkpoint to one HDF5 file: dataset <tensor> (master), "
                         "<tensor>.<kind> (other kinds); root attributes step, model, ...");
  exp->add_option("PATH", path, path_help)->required();
  exp->add_option("OUT", out, "the HDF5 file to write (replaced atomically), or with --format hf a new directory")->required();
  exp->add_option("--step", step, step_help)->check(CLI::NonNegativeNumber);
  exp->add_option("--format", format, "h5: one HDF5 file (default); hf: a Hugging Face directory, OUT is a new directory")
      ->check(CLI::IsMember({"h5", "hf"}));
  exp->add_option("--dtype", dtype, "--format hf: the weights' dtype (f32 default, bf16, f16)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  exp->add_option("--kinds", kinds, "state kinds to export, comma-separated (master, exp_avg, exp_avg_sq, ...)")
      ->delimiter(',');

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kOk : kUsage;
  }

  try {
    if (list->parsed()) return tool::list_checkpoints(dir, stdout) == 0 ? kOk : kCorrupt;
    if (inspect->parsed()) {
      tool::inspect_checkpoint(tool::resolve_step_dir(path, step), stdout);
      return kOk;
    }
    if (verify->parsed()) {
      if (!all) return verify_one(tool::resolve_step_dir(path, step)) ? kOk : kCorrupt;
      if (step >= 0) throw tool::UsageError("--all and --step exclude each other");
      // (resolve_step_dir returns PATH itself for a step directory, and refuses one without checkpoints.)
      if (tool::resolve_step_dir(path, -1) == path)
        throw tool::UsageError(
            fmt::format("--all verifies a checkpoint directory, and '{}' is a step directory: drop --all", path));
      const auto committed = ht::ckpt::committed_checkpoints(path);
      int bad = 0;
      for (const auto& c : committed) bad += verify_one(c.dir) ? 0 : 1;
      fmt::print("# {} of {} committed checkpoint(s) good\n", int(committed.size()) - bad, committed.size());
      return bad == 0 ? kOk : kCorrupt;
    }
    if (exp->parsed()) {
      const std::string step_dir = tool::resolve_step_dir(path, step);
      if (format == "hf") {
        if (kinds != std::vector<std::string>{"master"})
          throw tool::UsageError("--format hf writes the model's weights (master) only: drop --kinds");
        const ht::DType d = dtype == "bf16" ? ht::DType::kBF16 : dtype == "f16" ? ht::DType::kF16 : ht::DType::kF32;
        const int n = tool::export_checkpoint_hf(step_dir, out, d);
        fmt::print("# exported {} parameter(s) of {} to the Hugging Face directory {} ({})\n", n, step_dir, out,
                   dtype);
        return kOk;
      }
      if (dtype != "f32") throw tool::UsageError("--dtype is for --format hf; an HDF5 export holds f32");
      if (kinds.empty()) throw tool::UsageError("--kinds names no kind: pass e.g. --kinds master,exp_avg");
      const int n = tool::export_checkpoint(step_dir, out, kinds);
      fmt::print("# exported {} dataset(s) ({}) of {} to {}\n", n, fmt::join(kinds, ","), step_dir, out);
      return kOk;
    }
  } catch (const tool::UsageError& e) {
    std::fprintf(stderr, "ht-ckpt: %s\n", e.what());
    return kUsage;
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "ht-ckpt: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-ckpt: %s\n", e.what());
  }
  return kCorrupt;
}
