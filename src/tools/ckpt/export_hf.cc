// ht-ckpt export --format hf: a Hugging Face model directory (config.json
// and safetensors) from a checkpoint of a bundled GPT or Llama. The model is
// the one the checkpoint records (its description, parsed back by
// models::parse_model_description); its full master weights are assembled
// one tensor at a time, as models::write_hf_model reaches each, so the
// export holds one parameter (and its converted copy), not the model.
#include <filesystem>

#include "ckpt/assemble.h"
#include "ckpt/manifest.h"
#include "ckpt_tool.h"
#include "core/staged_directory.h"
#include "ht/models/hf_format.h"

namespace ht::ckpt::tool {

namespace fs = std::filesystem;

int export_checkpoint_hf(const std::string& step_dir, const std::string& out_dir, DType dtype) {
  const detail::Manifest m = detail::read_manifest(step_dir);
  models::ModelConfig config;
  try {
    config = models::parse_model_description(m.run.model);
  } catch (const Error& e) {
    throw UsageError(fmt::format("checkpoint '{}' is of the model '{}', which --format hf cannot write: {} (export "
                                 "it with --format h5)",
                                 step_dir, m.run.model, e.message()));
  }
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    throw UsageError(fmt::format("'{}' exists and is not an empty directory: name a new directory for the model, "
                                 "so that no file of another model is left beside it",
                                 out_dir));
  // The shapes from the manifest; each tensor's pieces read and joined only
  // when the writer reaches it, so one parameter is in memory at a time.
  std::map<std::string, std::vector<detail::PieceInfo>> masters;
  models::FullParameters full;
  for (auto& [key, pieces] : detail::pieces_by_tensor(m.pieces))
    if (pieces.front().kind == "master") {
      full.shapes.emplace(pieces.front().tensor, pieces.front().global_shape);
      masters.emplace(pieces.front().tensor, std::move(pieces));
    }
  full.value = [&](const std::string& name) { return detail::assemble_tensor(step_dir, masters.at(name)); };
  // Written beside OUT and renamed into place when whole: a checkpoint
  // found corrupt halfway leaves no directory that looks like a model.
  ::ht::detail::StagedDirectory staging(out_dir, "the Hugging Face model directory");
  models::write_hf_model(staging.path().string(), config, full, dtype);
  staging.commit();
  return int(masters.size());
}

}  // namespace ht::ckpt::tool
