// ht::comm agreements: the small collectives ranks use to agree on a
// scalar — a verdict, a count, a checksum, a configuration — on top of any
// Communicator. Blocking and collective over the group: every rank calls
// with its own value and gets the group's answer. Exact for 64-bit values
// (carried as 32-bit halves: a float reduction would round above 2^24).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ht/comm/communicator.h"

namespace ht::comm {

/// Every rank's value, in rank order.
std::vector<std::uint64_t> all_gather_u64(Communicator& c, std::uint64_t value);
/// The smallest of the group's values (a verdict where 0 means "no": every rank must say yes).
int agree_min(Communicator& c, int value);
std::uint64_t agree_min_u64(Communicator& c, std::uint64_t value);
std::uint64_t agree_max_u64(Communicator& c, std::uint64_t value);
/// The exact sum of the group's values.
std::int64_t sum_i64(Communicator& c, std::int64_t value);
/// Whether every rank holds the same value.
bool all_equal_u64(Communicator& c, std::uint64_t value);
/// Whether every rank holds the same text (compared by a 64-bit FNV-1a hash).
bool all_equal(Communicator& c, std::string_view text);

}  // namespace ht::comm
