// ht::nn::Sequential and ht::nn::Residual.
#include "ht/nn/sequential.h"

#include "ht/nn/functional.h"

namespace ht::nn {

Var Sequential::compute(const Var& x) {
  Var h = x;
  for (Module* m : steps_) h = (*m)(h);
  return h;
}

Residual::Residual(std::string name, std::unique_ptr<Module> inner)
    : Module(std::move(name)), inner_(&add_module(std::move(inner))) {}

Var Residual::compute(const Var& x) { return x + (*inner_)(x); }

}  // namespace ht::nn
