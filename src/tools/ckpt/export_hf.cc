// ht-ckpt export --format hf: a Hugging Face model directory (config.json
// and safetensors) from a checkpoint of a bundled GPT or Llama. The model is
// the one the checkpoint records (its description, parsed back by
// models::parse_model_description); its full master weights are assembled
// one tensor at a time and written by models::write_hf_model.
#include <filesystem>

#include "ckpt/assemble.h"
#include "ckpt/manifest.h"
#include "ckpt_tool.h"
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
  std::map<std::string, Tensor> full;
  for (const auto& [key, pieces] : detail::pieces_by_tensor(m.pieces))
    if (pieces.front().kind == "master") full.emplace(pieces.front().tensor, detail::assemble_tensor(step_dir, pieces));
  models::write_hf_model(out_dir, config, full, dtype);
  return int(full.size());
}

}  // namespace ht::ckpt::tool
