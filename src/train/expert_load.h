// ht::train::ExpertLoads: the engine's per-step report of every
// mixture-of-experts layer (nn::MoE) of the model, whichever stage holds it:
// the token choices each expert took and the auxiliary losses, summed over
// the ranks that saw its tokens (dp x cp; tp replicas counted once).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/core/client_state.h"
#include "ht/nn/model.h"
#include "ht/nn/moe.h"
#include "ht/train/engine.h"

namespace ht::train {

class ExpertLoads {
 public:
  /// Collective over the world: agrees on the layers (by name, in the order
  /// of the stages). Null when no rank holds one.
  static std::unique_ptr<ExpertLoads> of(nn::Model& model, comm::DeviceMesh& mesh);

  /// Collective over the world: the step's loads, one per layer, from what
  /// each layer counted since the last call (`micro_batches` per replica).
  /// `applied` (the optimizer stepped): each layer balanced by its bias
  /// (MoEOptions::bias_update_rate) moves it by these loads, the same on
  /// every rank.
  std::vector<ExpertLoad> take(int micro_batches, bool applied);
  /// The routing bias of every layer balanced by one, whichever stage holds
  /// it (every rank follows every layer's bias from the global loads), for
  /// a checkpoint's client state ("moe_bias.<layer>": E floats as hex text,
  /// which reads back exactly); restore() gives them back.
  void save(ClientState& state) const;
  /// Throws kConfig naming the layer when the checkpoint lacks a bias this
  /// model balances by, or holds one of another size.
  void restore(const ClientState& state);

 private:
  struct Layer {
    std::string name;
    int experts = 0;
    float bias_update_rate = 0.f;
    std::vector<float> bias;  // the layer's routing bias, kept on every rank
    nn::MoE* mine = nullptr;  // null on ranks that do not hold it
  };
  void update_bias(Layer& l, const std::vector<std::int64_t>& tokens);
  ExpertLoads(std::vector<Layer> layers, comm::DeviceMesh& mesh) : layers_(std::move(layers)), mesh_(mesh) {}

  std::vector<Layer> layers_;
  comm::DeviceMesh& mesh_;
};

}  // namespace ht::train
