// ht-ckpt inspect: a checkpoint's run state, layout and tensor table, from its manifest alone.
#include <algorithm>
#include <map>

#include "ckpt/manifest.h"
#include "ckpt_tool.h"

namespace ht::ckpt::tool {
namespace {

// How the tensor is split over tensor parallelism: "-" when replicated,
// "dim0/2" (dimension 0 over 2 ranks), "dim0/2 x3" for 3 stacked pieces.
std::string tp_str(const nn::ParamLayout& l) {
  if (!l.tp_split()) return "-";
  std::string s = fmt::format("dim{}/{}", l.tp_split_dim, l.tp_size);
  if (l.tp_parts > 1) s += fmt::format(" x{}", l.tp_parts);
  return s;
}

struct TensorRow {
  Shape shape;
  nn::ParamLayout layout;
  std::vector<std::string> kinds;
  std::map<std::string, int> pieces;  // per kind
  std::int64_t bytes = 0;             // all kinds
};

}  // namespace

void inspect_checkpoint(const std::string& step_dir, std::FILE* out) {
  const detail::Manifest m = detail::read_manifest(step_dir);
  const RunState& r = m.run;
  std::int64_t file_bytes = 0;
  for (const detail::RankFileEntry& f : m.files) file_bytes += f.bytes;

  // Kinds in a fixed, readable order: master first, then alphabetically.
  std::map<std::string, TensorRow> rows;
  std::vector<std::string> kinds;
  for (const detail::PieceInfo& p : m.pieces) {
    TensorRow& row = rows[p.tensor];
    if (row.kinds.empty()) {
      row.shape = p.global_shape;
      row.layout = p.layout;
    }
    if (std::find(row.kinds.begin(), row.kinds.end(), p.kind) == row.kinds.end()) row.kinds.push_back(p.kind);
    if (std::find(kinds.begin(), kinds.end(), p.kind) == kinds.end()) kinds.push_back(p.kind);
    ++row.pieces[p.kind];
    row.bytes += (p.end - p.begin) * std::int64_t(sizeof(float));
  }
  auto by_order = [&](std::vector<std::string>& v) {
    std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
      return (a != "master") == (b != "master") ? a < b : a == "master";
    });
  };
  by_order(kinds);

  fmt::print(out, "# checkpoint {}\n", step_dir);
  fmt::print(out, "step              {}\n", r.step);
  fmt::print(out, "optimizer steps   {}\n", r.optimizer_steps);
  fmt::print(out, "consumed samples  {}\n", r.consumed_samples >= 0 ? fmt::format("{}", r.consumed_samples)
                                                                    : std::string("not recorded (an older checkpoint)"));
  if (!r.stream_shard.empty())
    fmt::print(out, "stream            {}, position {}\n", r.stream_shard, client_state_json(r.data));
  fmt::print(out, "client state      {}\n", client_state_json(r.client));
  fmt::print(out, "loss scaler       scale {}, good steps {}, hysteresis left {}, skipped steps {}\n", r.scaler.scale,
             r.scaler.good_steps, r.scaler.hysteresis_left, r.scaler.skipped_steps);
  fmt::print(out, "model             {}\n", r.model);
  fmt::print(out, "layout            {} (world {}, {} rank file(s), {} bytes)\n", m.layout, m.world, m.files.size(),
             file_bytes);
  fmt::print(out, "library           hypertrain {} (commit {}), format version {}\n", m.library_version, m.git_commit,
             m.format_version);
  fmt::print(out, "kinds             {}\n", fmt::join(kinds, ","));

  std::size_t width = 6;
  for (const auto& [name, row] : rows) width = std::max(width, name.size());
  fmt::print(out, "{:<{}}  {:<26} {:<12} {:<9} {:>8} {:>12}\n", "tensor", width, "kinds", "shape", "tp", "pieces",
             "bytes");
  std::int64_t values = 0, bytes = 0;
  for (auto& [name, row] : rows) {
    by_order(row.kinds);
    // Pieces per kind: one number when every kind is split alike, else one per kind.
    std::vector<int> counts;
    for (const std::string& k : row.kinds) counts.push_back(row.pieces[k]);
    const bool alike = std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts.front(); });
    const std::string pieces = alike ? std::to_string(counts.front()) : fmt::format("{}", fmt::join(counts, "/"));
    fmt::print(out, "{:<{}}  {:<26} {:<12} {:<9} {:>8} {:>12}\n", name, width,
               fmt::format("{}", fmt::join(row.kinds, ",")), dims_str(row.shape), tp_str(row.layout), pieces,
               row.bytes);
    values += shape_numel(row.shape);
    bytes += row.bytes;
  }
  fmt::print(out, "# {} tensors, {} values per kind, {} kind(s), {} pieces, {} bytes of tensor data\n", rows.size(),
             values, kinds.size(), m.pieces.size(), bytes);
}

}  // namespace ht::ckpt::tool
