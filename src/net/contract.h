// The class contract on NCCL comms (docs/plugin.md, "The class contract"): what a comm does about
// verify, timeout and retries is decided by the receiver at accept, from the sender's class (its
// comm shape) and its own (listen's class); seals (transport/seal.h) carry each message's epoch
// and checks. These are the rules and the checks, shared by both sides of a comm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "cuda/driver.h"
#include "transport/channel.h"
#include "transport/profile.h"
#include "transport/seal.h"
#include "transport/wire.h"
#include "ucx/reg_cache.h"

namespace pact::net {

// What the receiver answers the sender's class with: the stronger check (the sender's kind when
// it asks one, else the receiver's), the shorter of two timeouts, the larger retry budget, and
// seals whenever a check, a timeout or the receiver's fencing needs them.
wire::Contract decideContract(const wire::Contract& sender, const Profile& receiver, bool receiverFences);
// A profile's side of the contract, as a sender offers it.
wire::Contract offerOf(const Profile& p);
// What a decided contract makes of a comm's channel (both ends apply the receiver's decision).
void applyContract(const wire::Contract& c, transport::ChannelConfig* cfg);

// The check of `size` bytes at data, memory of type t (CUDA through staging and the driver).
Result<uint64_t> checkBytes(Verify kind, const void* data, size_t size, ucx::MemoryType t,
                            const cuda::Driver& driver, std::vector<uint8_t>& staging);
// The message's check handed to the commit hook: the piece's own for a one-piece message, else
// the kind's digest over the pieces' checks as the seal carries them; 0 without verify.
uint64_t messageCheck(const wire::SealView& seal);
// "message 17 of tag 1 (3 MiB in 6 pieces)", for log lines.
std::string messageName(uint32_t tag, uint32_t seq, uint64_t bytes, uint32_t pieces);

}  // namespace pact::net
