// ht::nn::Sequential and ht::nn::Residual: modules made of modules, forward
// only (their backward comes from the tape, nn/tape.h).
//   Sequential: its children in the order they were added, each one's output
//               the next one's input (torch.nn.Sequential).
//   Residual:   x + inner(x), the skip connection around any module.
#pragma once

#include <memory>

#include "ht/nn/module.h"

namespace ht::nn {

class Sequential : public Module {
 public:
  explicit Sequential(std::string name) : Module(std::move(name)) {}

  /// Appends `m`, whose parameters get this module's name before theirs;
  /// returns it.
  template <typename M>
  M& add(std::unique_ptr<M> m) {
    M& ref = add_module(std::move(m));
    steps_.push_back(&ref);
    return ref;
  }

 protected:
  Var compute(const Var& x) override;

 private:
  std::vector<Module*> steps_;
};

class Residual : public Module {
 public:
  /// `inner` maps its input to an output of the same shape.
  Residual(std::string name, std::unique_ptr<Module> inner);
  Module& inner() { return *inner_; }

 protected:
  Var compute(const Var& x) override;

 private:
  Module* inner_;
};

}  // namespace ht::nn
