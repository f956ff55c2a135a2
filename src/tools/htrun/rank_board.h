// What a node agent knows of its host's ranks in the current launch, and the
// summary of them it sends the controller (wire::Summary): a few numbers per
// host, whatever the ranks per host, so that the controller's work grows
// with hosts. The simulated hosts of bench/control_plane_scale keep one too.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ht/resilience/run_protocol.h"
#include "htrun/wire.h"

namespace htrun {

/// Whether `a` got less far than `b`: an earlier step, an earlier phase of
/// the step (the protocol's order), or the same place reached earlier.
bool behind(const wire::RankPlace& a, const wire::RankPlace& b);
wire::RankPlace place_of(const ht::resilience::Heartbeat& beat);

class RankBoard {
 public:
  /// Launch `epoch` puts world ranks [first_rank, first_rank + ranks) on
  /// this host: what the board held of older launches is forgotten.
  void launch(std::int64_t epoch, int first_rank, int ranks);
  std::int64_t epoch() const { return epoch_; }
  int first_rank() const { return first_; }
  int ranks() const { return int(slots_.size()); }
  /// Whether `rank` is one of this launch's ranks here.
  bool holds(int rank) const { return rank >= first_ && rank < first_ + ranks(); }

  /// A heartbeat; false (ignored) when it is not of this launch's ranks here.
  bool beat(const ht::resilience::Heartbeat& beat);
  /// The rank's process is alive (its channel opened) or has ended.
  void set_live(int rank, bool live);
  /// The rank's newest heartbeat, if any.
  const ht::resilience::Heartbeat* last(int rank) const;
  /// The summary at `now_ms` (the agent's clock). O(ranks on this host).
  wire::Summary summary(std::int64_t now_ms);

 private:
  struct Slot {
    std::optional<ht::resilience::Heartbeat> beat;
    std::int64_t shortest_gap_ms = 0;  // between two of its beats; 0: none seen
    bool live = false;
  };
  std::int64_t epoch_ = 0;
  int first_ = 0;
  std::vector<Slot> slots_;
};

}  // namespace htrun
