// All-to-all groups: a Group's steps (group.h), and the engine's step API they use (engine.h:
// each call takes the engine's lock once).
#include "engine/group.h"

#include <algorithm>
#include <string>

namespace pact::engine {

// ---- the engine's step API ----------------------------------------------------------------------

Result<void> Engine::startStep(std::span<const StepChunk> recv, std::span<const StepChunk> send,
                               uint64_t deadlineUs, std::vector<uint64_t>* ids,
                               std::vector<std::string>* unsent, size_t* failedAt) {
  std::lock_guard lock(mu_);
  ids->clear();
  unsent->assign(send.size(), std::string());
  const auto undo = [&](const Error& e, size_t at) {
    for (uint64_t id : *ids)
      if (id != 0) proto_->release(id).ignore();
    ids->clear();
    *failedAt = at;
    return e;
  };
  for (size_t i = 0; i < recv.size(); ++i) {
    auto id = expectLocked(recv[i].key, std::span(&recv[i].block, 1), deadlineUs, "A2A");
    if (!id) return undo(id.error(), i);
    const Peer* p = peers_.find(recv[i].peer);
    proto_->markGroupChunk(*id, p == nullptr ? 0 : p->id);
    ids->push_back(*id);
  }
  for (size_t i = 0; i < send.size(); ++i) {
    auto id = sendLocked(send[i].peer, send[i].key, std::span(&send[i].block, 1), deadlineUs, "A2A");
    if (id.status() == Status::kRemoteError) {  // the rank is gone; the others still get their chunks
      (*unsent)[i] = id.error().message;
      ids->push_back(0);
      continue;
    }
    if (!id) return undo(id.error(), recv.size() + i);
    ids->push_back(*id);
  }
  wake();
  return {};
}

Result<void> Engine::finishStep(std::span<const uint64_t> ids, int timeoutMs, std::vector<Status>* results) {
  EngineLock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  // Done when every transfer is final, or as soon as one failed: the step has failed then, and
  // the rest are released unjudged (kInProgress) rather than waited for to their deadlines.
  const bool done = waitFor(lock, timeoutMs, [&] {
    bool all = true;
    for (uint64_t id : ids) {
      const Transfer* x = id == 0 ? nullptr : proto_->find(id);
      if (x == nullptr) continue;
      if (x->settled && x->result != Status::kOk) return true;
      all = all && x->final();
    }
    return all;
  });
  if (!done)
    return Error{Status::kTimeout, "not final after " + std::to_string(timeoutMs) + " ms"};
  results->clear();
  for (uint64_t id : ids) {
    const Transfer* x = id == 0 ? nullptr : proto_->find(id);
    results->push_back(x == nullptr ? Status::kOk : x->settled ? x->result : Status::kInProgress);
    if (id != 0) proto_->release(id).ignore();
  }
  // An aborted chunk is gone only once no UCX operation touches its block (a rendezvous receive
  // in flight still lands): the step's buffers are the application's again only then.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  const bool quiet = waitFor(lock, static_cast<int>(std::max<int64_t>(left.count(), 0)), [&] {
    return std::all_of(ids.begin(), ids.end(), [&](uint64_t id) { return id == 0 || proto_->find(id) == nullptr; });
  });
  if (!quiet) {
    std::string which;  // the first chunk still busy, for the message
    for (size_t i = 0; i < ids.size() && which.empty(); ++i) {
      const Transfer* x = ids[i] == 0 ? nullptr : proto_->find(ids[i]);
      if (x == nullptr) continue;
      const Peer* p = peers_.find(x->peer);
      which = "chunk " + std::to_string(i) + (x->role == Role::kSender ? " (send to " : " (receive from ") +
              (p == nullptr ? "an unknown peer" : p->name) + ", " + stateName(x->state) + ", " +
              std::to_string(x->pendingOps) + " UCX operation(s) pending)";
    }
    return Error{Status::kBusy, "failed, and a UCX operation still touches " + which + " after " +
                                    std::to_string(timeoutMs) + " ms (do not reuse the step's buffers)"};
  }
  return {};
}

void Engine::releaseStep(std::span<const uint64_t> ids) {
  std::lock_guard lock(mu_);
  for (uint64_t id : ids)
    if (id != 0) proto_->release(id).ignore();
}

// ---- the group ----------------------------------------------------------------------------------


Group::Group(Engine& engine, uint64_t groupId, std::vector<uint64_t> peers, uint32_t myRank)
    : engine_(engine), groupId_(groupId), peers_(std::move(peers)), myRank_(myRank) {}

Group::~Group() { engine_.releaseStep(xfers_); }

Result<void> Group::step(uint64_t epoch, uint32_t generation, std::span<const BlockRef> send,
                         std::span<const BlockRef> recv, uint64_t deadlineUs) {
  if (!xfers_.empty())
    return Error{Status::kBusy, "group " + std::to_string(groupId_) + ": the previous step is not waited for"};
  const auto chunkKey = [&](uint64_t src, uint64_t dst) {
    return TransferKey{groupId_, src << 32 | dst, epoch, generation};
  };
  std::vector<Engine::StepChunk> in, out;
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    in.push_back({peers_[r], chunkKey(r, myRank_), recv[r]});
    out.push_back({peers_[r], chunkKey(myRank_, r), send[r]});
  }
  size_t at = 0;
  if (auto r = engine_.startStep(in, out, deadlineUs, &xfers_, &unsent_, &at); !r) {
    const size_t ranks = peers_.size();
    return Error{r.status(), std::string("group step, chunk ") + (at < ranks ? "from" : "to") + " rank " +
                                 std::to_string(at % ranks) + ": " + r.error().message};
  }
  return {};
}

Result<void> Group::wait(int timeoutMs) {
  if (xfers_.empty()) return Error{Status::kNotFound, "group: no step started"};
  std::vector<Status> results;
  if (auto r = engine_.finishStep(xfers_, timeoutMs, &results); !r) {
    if (r.status() == Status::kTimeout) return Error{r.status(), "group step " + r.error().message};
    xfers_.clear();  // released: the step is over, its buffers not yet free
    unsent_.clear();
    return Error{r.status(), "group step " + r.error().message};
  }
  const size_t ranks = peers_.size();
  Status result = Status::kOk;
  std::string why;
  for (size_t i = 0; i < xfers_.size() && result == Status::kOk; ++i) {
    const std::string chunk = std::string(i < ranks ? "chunk from rank " : "chunk to rank ") + std::to_string(i % ranks);
    if (xfers_[i] == 0) {
      result = Status::kRemoteError;
      why = chunk + ": " + unsent_[i - ranks];
    } else if (results[i] != Status::kOk && results[i] != Status::kInProgress) {
      result = results[i];
      why = chunk + ": " + statusName(results[i]);
    }
  }
  xfers_.clear();
  unsent_.clear();
  if (result != Status::kOk) return Error{result, "group step failed, " + why};
  return {};
}

}  // namespace pact::engine
