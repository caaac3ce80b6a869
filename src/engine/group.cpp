#include "engine/group.h"

#include <string>

namespace pact::engine {

Group::Group(Engine& engine, uint64_t groupId, std::vector<uint64_t> peers, uint32_t myRank)
    : engine_(engine), groupId_(groupId), peers_(std::move(peers)), myRank_(myRank) {}

Group::~Group() {
  std::lock_guard lock(engine_.mutex());
  releaseAll();
}

void Group::releaseAll() {
  for (uint64_t id : xfers_)
    if (id != 0) (void)engine_.releaseLocked(id);
  xfers_.clear();
  unsent_.clear();
}

Status Group::step(uint64_t epoch, uint32_t generation, std::span<const BlockRef> send,
                 std::span<const BlockRef> recv, uint64_t deadlineUs) {
  std::lock_guard lock(engine_.mutex());
  if (!xfers_.empty())
    return fail(Status::kBusy, "group " + std::to_string(groupId_) + ": the previous step is not waited for");
  const auto chunkKey = [&](uint64_t src, uint64_t dst) {
    return TransferKey{groupId_, src << 32 | dst, epoch, generation};
  };
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    uint64_t id = 0;
    Status c = engine_.expectLocked(chunkKey(r, myRank_), recv.subspan(r, 1), deadlineUs, "A2A", &id);
    if (c != Status::kOk) {
      releaseAll();
      return fail(c, "group step, chunk from rank " + std::to_string(r) + ": " + lastError());
    }
    engine_.markGroupChunk(id, peers_[r]);
    xfers_.push_back(id);
  }
  unsent_.assign(peers_.size(), std::string());
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    uint64_t id = 0;
    Status c = engine_.sendLocked(peers_[r], chunkKey(myRank_, r), send.subspan(r, 1), deadlineUs,
                                "A2A", &id);
    if (c == Status::kRemoteError) {  // the rank is gone; the others still get their chunks
      unsent_[r] = lastError();
      xfers_.push_back(0);
      continue;
    }
    if (c != Status::kOk) {
      releaseAll();
      return fail(c, "group step, chunk to rank " + std::to_string(r) + ": " + lastError());
    }
    xfers_.push_back(id);
  }
  return Status::kOk;
}

Status Group::wait(int timeoutMs) {
  std::unique_lock lock(engine_.mutex());
  if (xfers_.empty()) return fail(Status::kNotFound, "group: no step started");
  const bool done = engine_.waitFor(lock, timeoutMs, [&] {
    for (uint64_t id : xfers_) {
      const Transfer* x = engine_.find(id);
      if (x != nullptr && !x->final()) return false;
    }
    return true;
  });
  if (!done) return fail(Status::kTimeout, "group step not final after " + std::to_string(timeoutMs) + " ms");
  Status result = Status::kOk;
  std::string why;
  for (size_t i = 0; i < xfers_.size() && result == Status::kOk; ++i) {
    if (xfers_[i] == 0) {
      result = Status::kRemoteError;
      why = "chunk to rank " + std::to_string(i % peers_.size()) + ": " + unsent_[i % peers_.size()];
      continue;
    }
    const Transfer* x = engine_.find(xfers_[i]);
    if (x != nullptr && x->result != Status::kOk) {
      result = x->result;
      why = std::string(i < peers_.size() ? "chunk from rank " : "chunk to rank ") +
            std::to_string(i % peers_.size()) + ": " + statusName(x->result);
    }
  }
  releaseAll();
  return result == Status::kOk ? Status::kOk : fail(result, "group step failed, " + why);
}

}  // namespace pact::engine
