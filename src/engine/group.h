// All-to-all groups (ARCHITECTURE.md section 5): a step (epoch, generation) sends one chunk to
// every rank and expects one from every rank, as engine transfers keyed
// (group id, source rank << 32 | destination rank, epoch, generation). The chunks land and verify
// like any transfer but skip the application's commit hook: the step commits as a whole when
// every chunk is in, and a chunk of an older step is rejected as stale by the receiver's
// generation check (counted in Stats::staleRejected).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace pact::engine {

class Group {
 public:
  Group(Engine& engine, uint64_t groupId, std::vector<uint64_t> peers, uint32_t myRank);
  ~Group();  // releases the transfers of an unfinished step (aborting them)
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  size_t ranks() const { return peers_.size(); }
  Result<void> step(uint64_t epoch, uint32_t generation, std::span<const BlockRef> send,
                    std::span<const BlockRef> recv, uint64_t deadlineUs);
  // Holds no engine lock of its own: each call is one locked call of the engine's step API.
  // A rank already lost does not fail the step here: its chunk is not sent, the others are, and
  // wait() reports the loss (kRemoteError).
  // Blocks until every transfer of the step is final, or one failed: kOk when all committed, else
  // the first failure (receives first); the transfers still open then are released (aborted)
  // instead of waited for. The step's transfers are released either way.
  Result<void> wait(int timeoutMs);

 private:
  Engine& engine_;
  uint64_t groupId_;
  std::vector<uint64_t> peers_;
  uint32_t myRank_;
  std::vector<uint64_t> xfers_;  // the current step's receives, then its sends (0: not sent)
  // Why a send of the current step was not started (its rank is lost); wait() reports it. The
  // step still sends every other chunk, so the other ranks are not left waiting for theirs.
  std::vector<std::string> unsent_;
};

}  // namespace pact::engine
