// A checkpoint's manifest.json.
#include "ckpt/manifest.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "ht/config.h"

namespace ht::ckpt::detail {

using nlohmann::json;

namespace {

json to_json(const ClientState& state) {
  json j = json::object();
  for (const auto& [key, value] : state) std::visit([&](const auto& v) { j[key] = v; }, value);
  return j;
}

// Integers stay integers, other numbers are reals, strings strings;
// anything else (a nested object, a boolean) was not written by this library.
ClientState from_json(const json& j, const char* what) {
  HT_CHECK(j.is_object(), ErrorKind::kIo, "the manifest's run.{} is not a JSON object", what);
  ClientState state;
  for (const auto& [key, v] : j.items()) {
    if (v.is_number_integer())
      state[key] = v.get<std::int64_t>();
    else if (v.is_number())
      state[key] = v.get<double>();
    else if (v.is_string())
      state[key] = v.get<std::string>();
    else
      HT_CHECK(false, ErrorKind::kIo, "the manifest's run.{}.{} is neither a number nor a string", what, key);
  }
  return state;
}

}  // namespace

void write_manifest(const std::string& step_dir, const Manifest& m) {
  json pieces = json::array();
  for (const PieceInfo& p : m.pieces) {
    pieces.push_back({{"tensor", p.tensor},
                      {"kind", p.kind},
                      {"global_shape", p.global_shape},
                      {"tp_split_dim", p.layout.tp_split_dim},
                      {"tp_parts", p.layout.tp_parts},
                      {"tp_rank", p.layout.tp_rank},
                      {"tp_size", p.layout.tp_size},
                      {"begin", p.begin},
                      {"end", p.end},
                      {"checksum", fmt::format("{:016x}", p.checksum)},
                      {"file", p.file},
                      {"dataset", p.dataset}});
    if (p.real_rows >= 0) pieces.back()["real_rows"] = p.real_rows;  // a padded vocabulary's real rows
  }
  json files = json::array();
  for (const RankFileEntry& f : m.files) files.push_back({{"rank", f.rank}, {"file", f.file}, {"bytes", f.bytes}});
  const RunState& r = m.run;
  const json j{{"format", "hypertrain-checkpoint"},
               {"format_version", m.format_version},
               {"library_version", HT_VERSION},
               {"git_commit", HT_GIT_COMMIT},
               {"step", r.step},
               {"run",
                {{"step", r.step},
                 {"optimizer_steps", r.optimizer_steps},
                 {"model", r.model},
                 {"data", to_json(r.data)},
                 {"client", to_json(r.client)},
                 {"loss_scaler",
                  {{"scale", r.scaler.scale},
                   {"good_steps", r.scaler.good_steps},
                   {"hysteresis_left", r.scaler.hysteresis_left},
                   {"skipped_steps", r.scaler.skipped_steps}}}}},
               {"layout", m.layout},
               {"world", m.world},
               {"files", files},
               {"pieces", pieces}};
  const std::string path = (std::filesystem::path(step_dir) / kManifestName).string();
  ht::detail::write_file(path, j.dump(1) + "\n", /*sync=*/true, "checkpoint manifest");
}

Manifest read_manifest(const std::string& step_dir) {
  const std::string path = (std::filesystem::path(step_dir) / kManifestName).string();
  std::ifstream in(path);
  HT_CHECK(in.good(), ErrorKind::kIo, "checkpoint '{}' has no readable {}", step_dir, kManifestName);
  json j;
  try {
    in >> j;
    Manifest m;
    HT_CHECK(j.at("format") == "hypertrain-checkpoint", ErrorKind::kIo, "'{}' is not a hypertrain checkpoint manifest",
             path);
    m.format_version = j.at("format_version").get<int>();
    HT_CHECK(m.format_version == kFormatVersion, ErrorKind::kIo,
             "checkpoint '{}' has format version {}; this build reads version {}", step_dir, m.format_version,
             kFormatVersion);
    m.library_version = j.at("library_version").get<std::string>();
    m.git_commit = j.at("git_commit").get<std::string>();
    const json& r = j.at("run");
    m.run.step = r.at("step").get<std::int64_t>();
    m.run.optimizer_steps = r.at("optimizer_steps").get<std::int64_t>();
    m.run.model = r.at("model").get<std::string>();
    m.run.data = from_json(r.at("data"), "data");
    m.run.client = from_json(r.at("client"), "client");
    const json& s = r.at("loss_scaler");
    m.run.scaler = {.scale = s.at("scale").get<float>(),
                    .good_steps = s.at("good_steps").get<std::int64_t>(),
                    .hysteresis_left = s.at("hysteresis_left").get<int>(),
                    .skipped_steps = s.at("skipped_steps").get<std::int64_t>()};
    m.layout = j.at("layout").get<std::string>();
    m.world = j.at("world").get<int>();
    for (const json& f : j.at("files"))
      m.files.push_back({f.at("rank").get<int>(), f.at("file").get<std::string>(), f.at("bytes").get<std::int64_t>()});
    for (const json& p : j.at("pieces")) {
      PieceInfo i;
      i.tensor = p.at("tensor").get<std::string>();
      i.kind = p.at("kind").get<std::string>();
      i.global_shape = p.at("global_shape").get<Shape>();
      if (p.contains("real_rows")) i.real_rows = p.at("real_rows").get<std::int64_t>();
      i.layout = {.tp_split_dim = p.at("tp_split_dim").get<int>(),
                  .tp_rank = p.at("tp_rank").get<int>(),
                  .tp_size = p.at("tp_size").get<int>(),
                  .tp_parts = p.at("tp_parts").get<int>()};
      i.begin = p.at("begin").get<std::int64_t>();
      i.end = p.at("end").get<std::int64_t>();
      i.checksum = std::stoull(p.at("checksum").get<std::string>(), nullptr, 16);
      i.file = p.at("file").get<std::string>();
      i.dataset = p.at("dataset").get<std::string>();
      m.pieces.push_back(std::move(i));
    }
    return m;
  } catch (const json::exception& e) {
    HT_CHECK(false, ErrorKind::kIo, "checkpoint manifest '{}' is malformed: {}", path, e.what());
  } catch (const std::invalid_argument& e) {
    HT_CHECK(false, ErrorKind::kIo, "checkpoint manifest '{}' has a malformed checksum", path);
  }
  return {};
}

}  // namespace ht::ckpt::detail

namespace ht::ckpt {

std::string client_state_json(const ClientState& state) { return detail::to_json(state).dump(); }

}  // namespace ht::ckpt

namespace ht::ckpt {

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.h5", rank); }

std::string checkpoint_dir(const std::string& dir, std::int64_t step) {
  return (std::filesystem::path(dir) / fmt::format("step_{:08d}", step)).string();
}

std::int64_t checkpoint_step(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return -1;
  std::int64_t v = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

}  // namespace ht::ckpt
