// ht::nn::Init: how a parameter's first values are drawn, and the values.
//
// Every parameter carries an Init (set by the module that creates it, and
// changeable by the model: GPT draws its matrices from N(0, 0.02)). Values
// are drawn from a counter-based stream seeded by (seed, parameter name), the
// full tensor at once, and a tensor-parallel rank then cuts its part: so a
// parameter's values depend neither on the order of parameters nor on the
// layout (tp, pp, dp, ZeRO) they are trained under, and no rank ever needs
// another's values.
//
// Fan-in and fan-out (Xavier, Kaiming, PyTorch's Linear default) are read
// from the full shape as PyTorch reads them: dimension 1 (times the trailing
// dimensions) is the fan-in, dimension 0 the fan-out.
#pragma once

#include <cstdint>
#include <string>

#include "ht/core/tensor.h"

namespace ht::nn {

struct Init {
  enum class Kind { kZeros, kConstant, kNormal, kUniform, kXavierUniform, kXavierNormal, kKaimingUniform, kKaimingNormal };
  Kind kind = Kind::kZeros;
  float a = 0.f;  // constant: value; normal: mean; uniform: low; Xavier: gain; Kaiming: negative slope
  float b = 0.f;  // normal: standard deviation; uniform: high

  static Init zeros() { return {}; }
  static Init ones() { return constant(1.f); }
  static Init constant(float value) { return {Kind::kConstant, value, 0.f}; }
  static Init normal(float std, float mean = 0.f) { return {Kind::kNormal, mean, std}; }
  static Init uniform(float low, float high) { return {Kind::kUniform, low, high}; }
  /// U(-g sqrt(6 / (fan_in + fan_out)), +...) and N(0, g sqrt(2 / (fan_in + fan_out))).
  static Init xavier_uniform(float gain = 1.f) { return {Kind::kXavierUniform, gain, 0.f}; }
  static Init xavier_normal(float gain = 1.f) { return {Kind::kXavierNormal, gain, 0.f}; }
  /// Fan-in mode with a leaky-ReLU slope: bound sqrt(6 / ((1 + a^2) fan_in)),
  /// std sqrt(2 / ((1 + a^2) fan_in)). kaiming_uniform(sqrt(5)) is PyTorch's
  /// nn.Linear weight default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static Init kaiming_uniform(float negative_slope = 0.f) { return {Kind::kKaimingUniform, negative_slope, 0.f}; }
  static Init kaiming_normal(float negative_slope = 0.f) { return {Kind::kKaimingNormal, negative_slope, 0.f}; }

  /// "normal(std=0.02)", for messages.
  std::string str() const;
  friend bool operator==(const Init&, const Init&) = default;
};

/// The whole tensor (host f32 of `full_shape`) that `init` gives the
/// parameter named `name` under `seed`. Element i of a normal draw comes from
/// counters 2i+1 and 2i+2 of the stream (seed ^ hash(name)), of a uniform one
/// from counter i+1, so blocks are drawn in parallel with the values of one
/// sequential pass. Throws kConfig when a fan-based init meets a shape
/// without one (fewer than 2 dimensions).
Tensor init_full(const Init& init, const Shape& full_shape, const std::string& name, std::uint64_t seed);

}  // namespace ht::nn
