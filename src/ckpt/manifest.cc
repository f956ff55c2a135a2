// A checkpoint's manifest.json.
#include "ckpt/manifest.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/json_integer.h"
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

// Field `key` of `j` as an integer of T's range (ht::detail::json_integer).
template <std::integral T>
T integer(const json& j, const char* key) {
  return ht::detail::json_integer<T>(j.at(key), key);
}

// A checksum as written: 1 to 16 hex digits (std::stoull would take a sign,
// spaces and a "0x", and throw out_of_range past 64 bits).
std::uint64_t parse_checksum(const std::string& text) {
  const auto malformed = [&] { return std::invalid_argument(fmt::format("checksum '{}' is not 16 hex digits", text)); };
  if (text.empty() || text.size() > 16) throw malformed();
  std::uint64_t v = 0;
  for (const char c : text) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) throw malformed();
    v = v << 4 | std::uint64_t(digit);
  }
  return v;
}

}  // namespace

std::string manifest_text(const Manifest& m) {
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
    if (p.offset >= 0) pieces.back()["offset"] = p.offset;           // a raw image's (memory snapshots)
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
                 {"optimizer", r.optimizer},
                 {"layout", r.layout},
                 {"consumed_samples", r.consumed_samples},
                 {"data", to_json(r.data)},
                 {"stream_shard", r.stream_shard},
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
  return j.dump(1) + "\n";
}

void write_manifest(const std::string& step_dir, const Manifest& m) {
  const std::string path = (std::filesystem::path(step_dir) / kManifestName).string();
  ht::detail::write_file(path, manifest_text(m), /*sync=*/true, "checkpoint manifest");
}

Manifest read_manifest(const std::string& step_dir) {
  const std::string path = (std::filesystem::path(step_dir) / kManifestName).string();
  std::ifstream in(path);
  HT_CHECK(in.good(), ErrorKind::kIo, "checkpoint '{}' has no readable {}", step_dir, kManifestName);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_manifest(text, path, step_dir);
}

Manifest parse_manifest(const std::string& text, const std::string& path, const std::string& step_dir) {
  json j;
  try {
    j = json::parse(text);
    Manifest m;
    HT_CHECK(j.at("format") == "hypertrain-checkpoint", ErrorKind::kIo, "'{}' is not a hypertrain checkpoint manifest",
             path);
    m.format_version = integer<int>(j, "format_version");
    HT_CHECK(m.format_version == kFormatVersion, ErrorKind::kIo,
             "checkpoint '{}' has format version {}; this build reads version {}", step_dir, m.format_version,
             kFormatVersion);
    m.library_version = j.at("library_version").get<std::string>();
    m.git_commit = j.at("git_commit").get<std::string>();
    const json& r = j.at("run");
    m.run.step = integer<std::int64_t>(r, "step");
    m.run.optimizer_steps = integer<std::int64_t>(r, "optimizer_steps");
    m.run.model = r.at("model").get<std::string>();
    // Absent in checkpoints written before the optimizer was a choice: AdamW's.
    m.run.optimizer = r.contains("optimizer") ? r.at("optimizer").get<std::string>() : "adamw";
    if (r.contains("layout")) m.run.layout = r.at("layout").get<std::string>();
    // Absent in checkpoints written before the engine counted samples.
    if (r.contains("consumed_samples")) m.run.consumed_samples = integer<std::int64_t>(r, "consumed_samples");
    m.run.data = from_json(r.at("data"), "data");
    if (r.contains("stream_shard")) m.run.stream_shard = r.at("stream_shard").get<std::string>();
    m.run.client = from_json(r.at("client"), "client");
    const json& s = r.at("loss_scaler");
    const double scale = s.at("scale").get<double>();
    if (!std::isfinite(scale) || std::abs(scale) > std::numeric_limits<float>::max())
      throw std::invalid_argument(fmt::format("the loss scale {} is not a finite float", scale));
    m.run.scaler = {.scale = float(scale),
                    .good_steps = integer<std::int64_t>(s, "good_steps"),
                    .hysteresis_left = integer<int>(s, "hysteresis_left"),
                    .skipped_steps = integer<std::int64_t>(s, "skipped_steps")};
    m.layout = j.at("layout").get<std::string>();
    m.world = integer<int>(j, "world");
    for (const json& f : j.at("files"))
      m.files.push_back({integer<int>(f, "rank"), f.at("file").get<std::string>(), integer<std::int64_t>(f, "bytes")});
    for (const json& p : j.at("pieces")) {
      PieceInfo i;
      i.tensor = p.at("tensor").get<std::string>();
      i.kind = p.at("kind").get<std::string>();
      if (!p.at("global_shape").is_array()) throw std::invalid_argument("a piece's global_shape is not an array");
      for (const json& d : p.at("global_shape"))
        i.global_shape.push_back(ht::detail::json_integer<std::int64_t>(d, "global_shape"));
      if (p.contains("real_rows")) i.real_rows = integer<std::int64_t>(p, "real_rows");
      i.layout = {.tp_split_dim = integer<int>(p, "tp_split_dim"),
                  .tp_rank = integer<int>(p, "tp_rank"),
                  .tp_size = integer<int>(p, "tp_size"),
                  .tp_parts = integer<int>(p, "tp_parts")};
      i.begin = integer<std::int64_t>(p, "begin");
      i.end = integer<std::int64_t>(p, "end");
      i.checksum = parse_checksum(p.at("checksum").get<std::string>());
      i.file = p.at("file").get<std::string>();
      i.dataset = p.at("dataset").get<std::string>();
      if (p.contains("offset")) {
        i.offset = integer<std::int64_t>(p, "offset");
        if (i.offset < 0) throw std::invalid_argument("a piece's offset is negative");
      }
      check_piece_info(i, path);
      m.pieces.push_back(std::move(i));
    }
    return m;
  } catch (const json::exception& e) {
    HT_CHECK(false, ErrorKind::kIo, "checkpoint manifest '{}' is malformed: {}", path, e.what());
  } catch (const std::invalid_argument& e) {
    HT_CHECK(false, ErrorKind::kIo, "checkpoint manifest '{}' is malformed: {}", path, e.what());
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
