// The environment variables of the communication layer, read in one place.
//
//   HT_COMM_TIMEOUT  seconds (a decimal number > 0), default 300: the deadline
//                    of every operation, from its enqueue.
//   HT_COMM_DEBUG    0 or 1, default 0: check before each collective that all
//                    ranks of the group call the same operation (one small
//                    exchange per collective).
//
// Programs call comm_options_from_env() once at start-up and pass the
// options down; the library below never reads the environment.
#pragma once

#include "ht/comm/communicator.h"

namespace ht::comm {

/// `defaults` overridden by whichever of the variables above are set. Throws
/// ht::Error(kConfig) naming the variable and its value when one is malformed.
CommOptions comm_options_from_env(CommOptions defaults = {});

}  // namespace ht::comm
