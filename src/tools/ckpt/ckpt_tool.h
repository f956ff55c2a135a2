// ht-ckpt's subcommands (list, inspect, verify, export) over the checkpoint
// format of ht/ckpt/checkpoint.h, and the step-directory lookup they share.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/core/dtype.h"

namespace ht::ckpt::tool {

/// A wrong command line or a path that names no checkpoint: ht-ckpt exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The step directory `path` names: `path` itself when it is a step
/// directory (it holds a manifest.json, or is named step_NNNNNNNN or
/// step_NNNNNNNN.tmp), otherwise the committed checkpoint of step `step`
/// (-1: the newest) in the checkpoint directory `path`. UsageError when there
/// is none, or when `step` is given with a step directory.
std::string resolve_step_dir(const std::string& path, std::int64_t step);

/// The committed checkpoints of a checkpoint directory `dir`, oldest first,
/// one table row each (step, layout, world, files, bytes, model), then the
/// leftovers of interrupted saves (*.tmp). UsageError when `dir` is not a
/// directory. Returns the number of unreadable manifests (listed as such).
int list_checkpoints(const std::string& dir, std::FILE* out);

/// The run state, layout and library version of one checkpoint, then a table
/// of its tensors (name, kinds, global shape, tp split, pieces, bytes).
/// Throws ht::Error when the manifest is unreadable.
void inspect_checkpoint(const std::string& step_dir, std::FILE* out);

/// What verify found in one checkpoint.
struct VerifyReport {
  std::int64_t step = -1;             // from the manifest; -1 when it is unreadable
  int files = 0;                      // rank files listed
  std::size_t pieces = 0;             // pieces listed (all read)
  std::int64_t bytes = 0;             // tensor data read
  std::vector<std::string> problems;  // empty: the checkpoint is good
};

/// Everything wrong with one checkpoint; no problems when it is good. Reads the
/// manifest and every piece of every rank file it lists (checksums), and
/// checks that the rank files exist with the recorded sizes and hold the
/// datasets the manifest lists, and that the pieces of each (tensor, kind)
/// cover every tensor-parallel part exactly once. Each message names the
/// file and dataset concerned.
VerifyReport verify_checkpoint(const std::string& step_dir);

/// Writes one HDF5 file holding the full tensors of `kinds` (f32, global
/// shape): dataset "<tensor>" for kind master, "<tensor>.<kind>" for the
/// others, each with a string attribute `kind`; root attributes step,
/// optimizer_steps (int64), model, layout,
/// data_state and client_state (JSON objects' text), library_version,
/// git_commit, kinds and source (strings). Written to a
/// temporary file beside `out_path`, synced, then renamed over it. Throws
/// UsageError for a kind the checkpoint lacks, ht::Error when a piece cannot
/// be read or the file cannot be written (nothing is left at `out_path`
/// then). Returns the number of datasets written.
int export_checkpoint(const std::string& step_dir, const std::string& out_path, const std::vector<std::string>& kinds);

/// Writes a Hugging Face model directory `out_dir` (config.json and
/// safetensors, models/hf_format.h) from the master weights of a checkpoint
/// of a bundled GPT or Llama, converted to `dtype` (f32, bf16, f16). Throws
/// UsageError for a checkpoint of another model or an `out_dir` that is not
/// a new or empty directory, ht::Error when a piece cannot be read or a file
/// cannot be written. Returns the number of parameters written.
int export_checkpoint_hf(const std::string& step_dir, const std::string& out_dir, DType dtype);

/// "[256, 32]" -> "256x32"; "scalar" for a shape of rank 0.
std::string dims_str(const std::vector<std::int64_t>& shape);

}  // namespace ht::ckpt::tool
