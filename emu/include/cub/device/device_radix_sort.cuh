// The emulated device's cub::DeviceRadixSort::SortPairs: a stable sort of
// (key, value) pairs by the key's bits [begin_bit, end_bit), ordered on the
// stream, as CUB's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace cub {

struct DeviceRadixSort {
  template <typename K, typename V>
  static cudaError_t SortPairs(void* temp, std::size_t& temp_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, int n, int begin_bit = 0,
                               int end_bit = int(sizeof(K) * 8), cudaStream_t stream = nullptr) {
    if (!temp) {  // the size query
      temp_bytes = 256;
      return cudaSuccess;
    }
    if (n <= 0) return cudaSuccess;
    return ::ht::emu::enqueue_work(stream, [=] {
      const int bits = end_bit - begin_bit;
      const K mask = bits >= int(sizeof(K) * 8) ? K(~K(0)) : K((K(1) << bits) - 1);
      auto digit = [&](int i) { return K(keys_in[i] >> begin_bit) & mask; };
      std::vector<int> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return digit(a) < digit(b); });
      std::vector<K> k(static_cast<std::size_t>(n));
      std::vector<V> v(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) {
        k[std::size_t(i)] = keys_in[order[std::size_t(i)]];
        v[std::size_t(i)] = values_in[order[std::size_t(i)]];
      }
      std::copy(k.begin(), k.end(), keys_out);
      std::copy(v.begin(), v.end(), values_out);
    });
  }
};

}  // namespace cub
