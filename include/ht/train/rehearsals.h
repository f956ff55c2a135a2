// The failures HT_FAULTS rehearses (resilience/faults.h), as step hooks of an
// Engine, so that a program built on the engine rehearses them with no code
// of its own and the step's main path knows nothing of them:
//   crash, hang     at the start of the step (this rank dies / stops)
//   slow            at the start of each step: sleeps (factor - 1) x the
//                   previous step's own time
//   nan             after the gradient reduction: this rank's first gradient
//                   slot and its share of the loss become NaN (from the
//                   fault's step on)
//   bitflip         after the update: one bit of the first parameter flips
//   ckpt-corrupt    after the step's checkpoint: once committed, rank 0
//                   damages its rank file
// Each records the fault as fired in the run directory (faults_fired.txt),
// so a relaunched job does not rehearse it again.
#pragma once

#include <string>

#include "ht/resilience/faults.h"
#include "ht/train/engine.h"

namespace ht::train {

/// Adds `plan`'s rehearsals for this rank (engine.mesh().rank()) to
/// `engine`; nothing for an empty plan. `run_dir` holds the fired-fault record.
void add_fault_rehearsals(Engine& engine, const resilience::FaultPlan& plan, const std::string& run_dir);

}  // namespace ht::train
