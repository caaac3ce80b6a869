// The engine's step API for all-to-all groups (engine.h, group.h): each call takes the engine's
// lock once.
#include "engine/engine.h"

#include <algorithm>
#include <string>

namespace pact::engine {

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

}  // namespace pact::engine
