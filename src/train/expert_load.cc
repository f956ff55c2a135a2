// ht::train::ExpertLoads.
#include "train/expert_load.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include "ht/comm/agreement.h"

namespace ht::train {
namespace {

// The MoE layers under `m`, by their path from the model ("layers.3.mlp").
void collect(nn::Module& m, const std::string& path, std::vector<std::pair<std::string, nn::MoE*>>& found) {
  if (auto* moe = dynamic_cast<nn::MoE*>(&m)) found.emplace_back(path, moe);
  for (nn::Module* child : m.children()) collect(*child, path.empty() ? child->name() : path + "." + child->name(), found);
}

// Every rank's `text`, in rank order.
std::vector<std::string> all_gather_text(comm::Communicator& c, const std::string& text) {
  const std::vector<std::uint64_t> sizes = comm::all_gather_u64(c, text.size());
  const std::int64_t width = std::int64_t(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<std::int32_t> mine(std::size_t(std::max<std::int64_t>(width, 1)), 0);
  for (std::size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<unsigned char>(text[i]);
  Tensor all = Tensor::empty({std::int64_t(mine.size()) * c.size()}, DType::kI32, Device::cpu());
  c.all_gather(Tensor::from_vector(mine, {std::int64_t(mine.size())}), all)->wait();
  const std::int32_t* p = all.data<std::int32_t>();
  std::vector<std::string> out;
  for (int r = 0; r < c.size(); ++r) {
    std::string s(sizes[std::size_t(r)], '\0');
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = char(p[std::int64_t(r) * std::int64_t(mine.size()) + i]);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::unique_ptr<ExpertLoads> ExpertLoads::of(nn::Model& model, comm::DeviceMesh& mesh) {
  std::vector<std::pair<std::string, nn::MoE*>> found;
  collect(model, "", found);
  std::ostringstream mine;  // "path experts bias_update_rate\n" per layer (the rate in hex: exact)
  for (const auto& [path, m] : found)
    mine << path << ' ' << m->options().experts << ' ' << fmt::format("{:a}", m->options().bias_update_rate) << '\n';
  std::vector<Layer> layers;
  for (const std::string& text : all_gather_text(mesh.world(), mine.str())) {
    std::istringstream in(text);
    std::string name, rate;
    int experts = 0;
    while (in >> name >> experts >> rate)
      if (std::none_of(layers.begin(), layers.end(), [&](const Layer& l) { return l.name == name; }))
        layers.push_back({.name = name,
                          .experts = experts,
                          .bias_update_rate = std::strtof(rate.c_str(), nullptr),
                          .bias = std::vector<float>(std::size_t(experts), 0.f)});
  }
  if (layers.empty()) return nullptr;
  for (Layer& l : layers)
    for (const auto& [path, m] : found)
      if (path == l.name) l.mine = m;
  return std::unique_ptr<ExpertLoads>(new ExpertLoads(std::move(layers), mesh));
}

std::vector<ExpertLoad> ExpertLoads::take(int micro_batches, bool applied) {
  // Counts in i32 (exact), losses in f32, each in one all-reduce.
  std::vector<std::int32_t> counts;
  std::vector<float> losses;
  for (const Layer& l : layers_) {
    const nn::MoEStepLoad load = l.mine ? l.mine->take_step_load() : nn::MoEStepLoad{};
    for (int e = 0; e < l.experts; ++e)
      counts.push_back(l.mine ? std::int32_t(load.tokens_per_expert[std::size_t(e)]) : 0);
    counts.push_back(std::int32_t(load.dropped));
    losses.push_back(float(load.aux_loss));
    losses.push_back(float(load.z_loss));
  }
  Tensor c = Tensor::from_vector(counts, {std::int64_t(counts.size())});
  Tensor f = Tensor::from_vector(losses, {std::int64_t(losses.size())});
  mesh_.world().all_reduce(c, c, comm::ReduceOp::kSum)->wait();
  mesh_.world().all_reduce(f, f, comm::ReduceOp::kSum)->wait();
  // Each tp rank holds the whole layer and routes the same tokens.
  const comm::MeshShape& shape = mesh_.shape();
  const int tp = shape.size(comm::MeshAxis::kTp);
  const double replicas = double(tp) * double(shape.size(comm::MeshAxis::kDpCp)) * double(std::max(micro_batches, 1));
  std::vector<ExpertLoad> out;
  const std::int32_t* n = c.data<std::int32_t>();
  const float* loss = f.data<float>();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    ExpertLoad l{.layer = layers_[i].name};
    for (int e = 0; e < layers_[i].experts; ++e) l.tokens.push_back(*n++ / tp);
    l.dropped = *n++ / tp;
    l.aux_loss = double(loss[2 * i]) / replicas;
    l.z_loss = double(loss[2 * i + 1]) / replicas;
    if (applied) update_bias(layers_[i], l.tokens);
    out.push_back(std::move(l));
  }
  return out;
}

namespace {
std::string bias_key(const std::string& layer) { return "moe_bias." + layer; }
}  // namespace

void ExpertLoads::update_bias(Layer& l, const std::vector<std::int64_t>& tokens) {
  // Every rank moves every layer's bias by the same global loads, so the
  // rank that saves the run holds the biases of layers on other stages.
  if (l.bias_update_rate == 0.f) return;
  nn::balance_bias_step(l.bias, l.bias_update_rate, tokens);
  if (l.mine) l.mine->set_expert_bias(l.bias);
}

void ExpertLoads::save(ClientState& state) const {
  for (const Layer& l : layers_) {
    if (l.bias_update_rate == 0.f) continue;
    std::string text;
    for (float b : l.bias) text += fmt::format("{}{:a}", text.empty() ? "" : " ", b);  // hex: exact
    state[bias_key(l.name)] = text;
  }
}

void ExpertLoads::restore(const ClientState& state) {
  for (Layer& l : layers_) {
    if (l.bias_update_rate == 0.f) continue;
    const auto it = state.find(bias_key(l.name));
    HT_CHECK(it != state.end() && std::holds_alternative<std::string>(it->second), ErrorKind::kConfig,
             "the checkpoint holds no routing bias for the mixture-of-experts layer {}, which balances its load by "
             "one (bias_update_rate {}): it was saved by a run without that balancing; resume with the same MoE "
             "options, or start afresh",
             l.name, l.bias_update_rate);
    std::vector<float> bias;
    std::istringstream in(std::get<std::string>(it->second));
    for (std::string word; in >> word;) bias.push_back(std::strtof(word.c_str(), nullptr));
    HT_CHECK(int(bias.size()) == l.experts, ErrorKind::kConfig,
             "the checkpoint's routing bias for {} has {} values; the layer has {} experts", l.name, bias.size(),
             l.experts);
    l.bias = bias;
    if (l.mine) l.mine->set_expert_bias(std::move(bias));
  }
}

}  // namespace ht::train
