// ht::train::ExpertLoads: the engine's per-step report of every
// mixture-of-experts layer (nn::MoE) of the model, whichever stage holds it:
// the token choices each expert took and the auxiliary losses, summed over
// the ranks that saw its tokens (dp x cp; tp replicas counted once).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ht/comm/device_mesh.h"
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
  std::vector<ExpertLoad> take(int micro_batches);

 private:
  struct Layer {
    std::string name;
    int experts = 0;
    nn::MoE* mine = nullptr;  // null on ranks that do not hold it
  };
  ExpertLoads(std::vector<Layer> layers, comm::DeviceMesh& mesh) : layers_(std::move(layers)), mesh_(mesh) {}

  std::vector<Layer> layers_;
  comm::DeviceMesh& mesh_;
};

}  // namespace ht::train
