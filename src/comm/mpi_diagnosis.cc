// MpiWorker's control channel and deadline diagnosis.
//
// Every MpiCommunicator owns a second duplicate of its group, the control
// communicator, carrying only small fixed-size messages. Its communication
// thread, between polls and while idle, answers status queries (tag
// kQueryTag) with how far its owner has got: the last collective enqueued
// and completed, and the number of point-to-point calls. When a waiter's
// deadline passes, the thread sends a query to the peers and collects the
// answers for a bounded time (min(5 s, timeout)); a peer whose enqueued
// collective number is at least the stuck operation's has arrived, a lower
// number says where it is instead, and silence means dead or hung.
#include <algorithm>

#include "comm/mpi_worker.h"
#include "core/mpi_check.h"
#include "ht/comm/flight_recorder.h"

namespace ht::comm::detail {
namespace {

constexpr int kQueryTag = 1;
constexpr int kReplyTag = 2;
constexpr auto kMaxDiagnosis = std::chrono::milliseconds(5000);

std::string format_duration(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  if (ms >= 1000) return fmt::format("{:.3g} s", double(ms) / 1000.0);
  return fmt::format("{} ms", ms);
}

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

}  // namespace

void MpiWorker::service_control() {
  const MPI_Comm c = control_.get();
  // Sends that have completed release their buffers.
  for (std::size_t i = 0; i < sends_.size();) {
    int done = 0;
    HT_MPI_CHECK(MPI_Test(&sends_[i]->request, &done, MPI_STATUS_IGNORE));
    if (done)
      sends_.erase(sends_.begin() + std::ptrdiff_t(i));
    else
      ++i;
  }
  // A waiter asked for a diagnosis: send the queries.
  if (diag_pending_.exchange(false)) {
    std::lock_guard lock(diag_mu_);
    if (diag_state_ == DiagState::kRequested) {
      for (int peer : diag_peers_) {
        auto s = std::make_unique<PendingSend>();
        s->msg.query_id = diag_id_;
        HT_MPI_CHECK(MPI_Isend(&s->msg, int(sizeof(PeerStatus)), MPI_BYTE, peer, kQueryTag, c, &s->request));
        sends_.push_back(std::move(s));
      }
      diag_state_ = DiagState::kCollecting;
    }
  }
  // Answer the peers' queries.
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    HT_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, kQueryTag, c, &flag, &msg, &status));
    if (!flag) break;
    PeerStatus query;
    HT_MPI_CHECK(MPI_Mrecv(&query, int(sizeof query), MPI_BYTE, &msg, MPI_STATUS_IGNORE));
    auto s = std::make_unique<PendingSend>();
    s->msg.query_id = query.query_id;
    s->msg.coll_enqueued = coll_enqueued_.load();
    s->msg.coll_completed = coll_completed_.load();
    s->msg.p2p_enqueued = p2p_enqueued_.load();
    s->msg.broken = broken_.load() ? 1 : 0;
    HT_MPI_CHECK(MPI_Isend(&s->msg, int(sizeof(PeerStatus)), MPI_BYTE, status.MPI_SOURCE, kReplyTag, c, &s->request));
    sends_.push_back(std::move(s));
  }
  // Collect replies to our own queries (stale ones, from an earlier query, are dropped).
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    HT_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, kReplyTag, c, &flag, &msg, &status));
    if (!flag) break;
    PeerStatus reply;
    HT_MPI_CHECK(MPI_Mrecv(&reply, int(sizeof reply), MPI_BYTE, &msg, MPI_STATUS_IGNORE));
    std::lock_guard lock(diag_mu_);
    const auto src = std::size_t(status.MPI_SOURCE);
    if (diag_state_ == DiagState::kCollecting && reply.query_id == diag_id_ && src < diag_replies_.size()) {
      diag_replies_[src] = reply;
      diag_answered_[src] = true;
    }
  }
  // A diagnosis ends when every peer answered or its time is up.
  std::lock_guard lock(diag_mu_);
  if (diag_state_ == DiagState::kCollecting) {
    bool all = true;
    for (int peer : diag_peers_) all = all && diag_answered_[std::size_t(peer)];
    if (all || std::chrono::steady_clock::now() >= diag_deadline_) {
      diag_state_ = DiagState::kDone;
      diag_cv_.notify_all();
    }
  }
}

void MpiWorker::on_deadline(WorkState& w) {
  std::lock_guard serial(diag_serial_mu_);
  if (w.status.load() != WorkState::kPending) return;
  if (broken_) {
    w.settle(std::make_exception_ptr(CommError(
        ErrorKind::kComm, fmt::format("{} did not complete: the communicator was aborted ({})", w.describe(),
                                      broken_reason()))));
    return;
  }
  std::exception_ptr err = diagnose(w, options_.timeout, "");
  // Broken before any waiter wakes, so that no later call is accepted.
  w.settle(err, [&] { abort(fmt::format("{} timed out", w.describe())); });
}

std::exception_ptr MpiWorker::diagnose(const WorkState& w, std::chrono::milliseconds waited, const std::string& context) {
  const bool collective = is_collective(OpKind(w.sig.kind));
  std::vector<int> peers;
  if (collective) {
    for (int r = 0; r < size_; ++r)
      if (r != rank_) peers.push_back(r);
  } else {
    for (int p : {w.peer, w.peer2})
      if (p >= 0 && p != rank_ && std::find(peers.begin(), peers.end(), p) == peers.end()) peers.push_back(p);
  }
  const auto budget = std::min<std::chrono::milliseconds>(kMaxDiagnosis, options_.timeout);
  bool thread_running;
  {
    std::lock_guard lock(mu_);
    thread_running = !stop_;
  }
  std::vector<PeerStatus> replies(static_cast<std::size_t>(size_));
  std::vector<bool> answered(std::size_t(size_), false);
  bool asked = false;
  if (thread_running && !peers.empty()) {
    {
      std::lock_guard lock(diag_mu_);
      ++diag_id_;
      diag_peers_ = peers;
      diag_replies_.assign(std::size_t(size_), PeerStatus{});
      diag_answered_.assign(std::size_t(size_), false);
      diag_deadline_ = std::chrono::steady_clock::now() + budget;
      diag_state_ = DiagState::kRequested;
      diag_pending_.store(true);
    }
    cv_.notify_all();
    std::unique_lock lock(diag_mu_);
    // The thread ends the collection itself at `budget`; the extra second
    // covers a thread that is itself stuck (then nobody could be asked).
    asked = diag_cv_.wait_for(lock, budget + std::chrono::seconds(1),
                              [&] { return diag_state_ == DiagState::kDone; });
    replies = diag_replies_;
    answered = diag_answered_;
    diag_state_ = DiagState::kIdle;
  }
  std::vector<int> arrived, missing;
  std::string text = context + fmt::format("{} did not complete within {}: ", w.describe(), format_duration(waited)) +
                     arrival_text(w, replies, answered, asked || peers.empty(), budget, arrived, missing);

  FlightRecorder::global().update(w.recorder_id, OpState::kTimedOut);
  dumped_.store(true);
  try {
    const std::string path = FlightRecorder::global().dump(options_.run_dir, world_rank_, text);
    text += fmt::format(" [flight recorder: {}]", path);
  } catch (const std::exception& e) {
    text += fmt::format(" [flight recorder not dumped: {}]", e.what());
  }
  std::vector<int> blame = suspects(missing, answered, asked || peers.empty());
  return std::make_exception_ptr(CommTimeout(text, std::move(arrived), std::move(missing), std::move(blame)));
}

std::vector<int> MpiWorker::suspects(const std::vector<int>& missing, const std::vector<bool>& answered, bool asked) const {
  std::vector<int> silent, all;
  for (int r : missing) {
    all.push_back(world_of_[std::size_t(r)]);
    if (!asked || !answered[std::size_t(r)]) silent.push_back(world_of_[std::size_t(r)]);
  }
  return silent.empty() ? all : silent;
}

std::string MpiWorker::arrival_text(const WorkState& w, const std::vector<PeerStatus>& replies,
                                 const std::vector<bool>& answered, bool asked, std::chrono::milliseconds budget,
                                 std::vector<int>& arrived, std::vector<int>& missing) const {
  const bool collective = is_collective(OpKind(w.sig.kind));
  const std::string silent = fmt::format("did not answer within {}: dead or hung", format_duration(budget));
  if (!asked) {
    for (int r = 0; r < size_; ++r) (r == rank_ ? arrived : missing).push_back(r);
    return fmt::format("the other ranks could not be asked where they are (this rank's communication thread did not "
                       "respond within {})",
                       format_duration(budget + std::chrono::seconds(1)));
  }
  if (!collective) {
    arrived.push_back(rank_);
    std::vector<std::string> parts;
    for (int p : {w.peer, w.peer2}) {
      if (p < 0 || p == rank_ || std::find(missing.begin(), missing.end(), p) != missing.end()) continue;
      missing.push_back(p);
      const auto i = std::size_t(p);
      if (!answered[i])
        parts.push_back(fmt::format("rank {} {}", p, silent));
      else
        parts.push_back(fmt::format("rank {} has made {} point-to-point call(s) on this group and is at collective "
                                    "#{}{}",
                                    p, replies[i].p2p_enqueued, replies[i].coll_enqueued,
                                    replies[i].broken ? " (its communicator has failed)" : ""));
    }
    if (parts.empty()) return "the peer is this rank itself";
    return fmt::format("{}", fmt::join(parts, "; "));
  }
  std::vector<std::string> behind;
  for (int r = 0; r < size_; ++r) {
    const auto i = std::size_t(r);
    if (r == rank_ || (answered[i] && replies[i].coll_enqueued >= w.sig.seq)) {
      arrived.push_back(r);
      continue;
    }
    missing.push_back(r);
    if (!answered[i])
      behind.push_back(silent);
    else
      behind.push_back(fmt::format("it is at #{}{}", replies[i].coll_enqueued,
                                   replies[i].broken ? ", its communicator has failed" : ""));
  }
  if (missing.empty())
    return fmt::format("all {} ranks arrived, so the operation is stuck inside MPI (a slow or failed transport)",
                       size_);
  std::string text = ranks_text(arrived) + " arrived; ";
  if (missing.size() == 1) return text + fmt::format("rank {} did not ({})", missing[0], behind[0]);
  std::vector<std::string> parts;
  for (std::size_t k = 0; k < missing.size(); ++k) parts.push_back(fmt::format("{} ({})", missing[k], behind[k]));
  return text + fmt::format("ranks {} did not", fmt::join(parts, ", "));
}

}  // namespace ht::comm::detail
