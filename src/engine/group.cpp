// All-to-all groups: a Group's steps (group.h), over the engine's step API (engine_steps.cpp).
#include "engine/group.h"

#include <algorithm>
#include <string>

namespace pact::engine {

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
    if (r.status() != Status::kTimeout) {  // released: the step is over, its buffers not yet free
      xfers_.clear();
      unsent_.clear();
    }
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
