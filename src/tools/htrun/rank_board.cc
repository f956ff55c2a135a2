// A node agent's board of its ranks (rank_board.h).
#include "htrun/rank_board.h"

#include <algorithm>
#include <utility>

namespace htrun {

using ht::resilience::Heartbeat;
using ht::resilience::Phase;

bool behind(const wire::RankPlace& a, const wire::RankPlace& b) {
  const auto place = [](const wire::RankPlace& p) { return std::make_pair(p.step, p.phase); };
  if (place(a) != place(b)) return place(a) < place(b);
  return a.progress_ms < b.progress_ms;
}

wire::RankPlace place_of(const Heartbeat& beat) {
  return {.rank = beat.rank, .step = beat.step, .phase = beat.phase, .progress_ms = beat.progress_ms,
          .time_ms = beat.time_ms};
}

void RankBoard::launch(std::int64_t epoch, int first_rank, int ranks) {
  epoch_ = epoch;
  first_ = first_rank;
  slots_.assign(std::size_t(std::max(0, ranks)), Slot{});
}

bool RankBoard::beat(const Heartbeat& beat) {
  if (!holds(beat.rank) || !ht::resilience::of_launch(beat.epoch, epoch_)) return false;
  Slot& s = slots_[std::size_t(beat.rank - first_)];
  if (s.beat && beat.time_ms > s.beat->time_ms) {
    const std::int64_t gap = beat.time_ms - s.beat->time_ms;
    s.shortest_gap_ms = s.shortest_gap_ms > 0 ? std::min(s.shortest_gap_ms, gap) : gap;
  }
  s.beat = beat;
  return true;
}

void RankBoard::set_live(int rank, bool live) {
  if (holds(rank)) slots_[std::size_t(rank - first_)].live = live;
}

const Heartbeat* RankBoard::last(int rank) const {
  if (!holds(rank)) return nullptr;
  const auto& b = slots_[std::size_t(rank - first_)].beat;
  return b ? &*b : nullptr;
}

wire::Summary RankBoard::summary(std::int64_t now_ms) {
  wire::Summary s;
  s.time_ms = now_ms;
  s.epoch = epoch_;
  s.ranks = ranks();
  // The laggard: the first rank with no beat, else the first still in
  // kLaunch, then in kStart (MPI not up before still starting).
  int laggard_class = 3;
  std::int64_t comm_wait_total = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    const int rank = first_ + int(i);
    if (slot.live) ++s.live;
    if (!slot.beat) {
      if (laggard_class > 0) {
        laggard_class = 0;
        s.laggard = {.rank = rank, .step = 0, .phase = Phase::kLaunch, .progress_ms = 0, .time_ms = 0};
      }
      continue;
    }
    const Heartbeat& b = *slot.beat;
    ++s.beating;
    comm_wait_total += std::max<std::int64_t>(0, b.comm_wait_ms);
    s.newest_beat_ms = std::max(s.newest_beat_ms, b.time_ms);
    s.newest_progress_ms = std::max(s.newest_progress_ms, b.progress_ms);
    if (slot.shortest_gap_ms > 0)
      s.beat_interval_ms = std::int32_t(s.beat_interval_ms > 0 ? std::min<std::int64_t>(s.beat_interval_ms, slot.shortest_gap_ms)
                                                               : slot.shortest_gap_ms);
    s.completed_step = std::max(s.completed_step, ht::resilience::completed_step(b.step, b.phase));
    const int cls = b.phase == Phase::kLaunch ? 1 : b.phase == Phase::kStart ? 2 : 3;
    if (cls < laggard_class) {
      laggard_class = cls;
      s.laggard = place_of(b);
    }
    if (!ht::resilience::starting(b.phase) && (!s.slowest || behind(place_of(b), *s.slowest)))
      s.slowest = place_of(b);
  }
  if (laggard_class == 3) s.laggard = wire::RankPlace{};  // rank -1: every rank started
  if (s.beating > 0) s.comm_wait_ms = comm_wait_total / s.beating;
  return s;
}

}  // namespace htrun
