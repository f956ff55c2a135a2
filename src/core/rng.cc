// Rng::normal, out of line to keep <cmath> out of the header.
#include "ht/core/rng.h"

#include <cmath>

namespace ht {

float Rng::normal() {
  // Box-Muller on (0, 1] x [0, 1): u1 never 0, so log is finite.
  const double u1 = (double(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = double(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace ht
