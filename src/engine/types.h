// The engine's plain types, shared by the commit protocol (protocol.h), the engine facade
// (engine.h), groups and the C API: registrations and blocks, what a transfer's state looks like
// from outside, the counters, and the commit hook.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/memory_type.h"
#include "engine/control.h"
#include "engine/state.h"
#include "engine/transfer.h"

namespace pact::ucx {
struct Region;  // ucx/reg_cache.h: the engine's headers need no UCX
}

namespace pact::engine {


// What the application registers (pact_mem_desc_t).
struct MemorySpec {
  void* addr = nullptr;
  size_t length = 0;
  MemoryType type = MemoryType::kHost;
  int device = -1;       // CUDA ordinal the memory must be on; -1: any
  int dmabufFd = -1;     // checked, never kept
  uint64_t dmabufOffset = 0;
};

struct Registration {
  uint8_t* addr = nullptr;
  uint64_t length = 0;
  MemoryType type = MemoryType::kHost;
  // From the core's registration caches: one region per rail of each of the engine's contexts.
  std::vector<std::shared_ptr<ucx::Region>> regions;
  int users = 0;  // unreleased transfers with a block in it
};

// What the application passes for a block (layout of pact_block_t).
struct BlockRef {
  Registration* mr = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
};


// What a peer granted this engine as a sender (pact_peer_credit).
struct CreditView {
  uint64_t budget = 0;  // kUnlimited, or bytes
  uint64_t inUse = 0;   // advertised to this sender, not final
};

struct XferInfo {
  State state = State::kAllocated;
  Status result = Status::kInProgress;
  bool final = false;
  uint32_t retries = 0;
  TransferKey key;
  uint64_t peer = 0;
  uint64_t bytes = 0;
};


// Called once per verified transfer with the application's destination blocks; true commits.
using CommitHook = std::function<bool(uint64_t xfer, const TransferKey& key, uint64_t from,
                                      std::span<const BlockRef> blocks)>;

}  // namespace pact::engine
