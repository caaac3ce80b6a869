#include "net/contract.h"

#include <algorithm>

#include "common/checksum.h"
#include "transport/memory_copy.h"

namespace pact::net {

wire::Contract offerOf(const Profile& p) {
  wire::Contract c;
  c.verify = static_cast<uint8_t>(p.verify);
  c.retries = static_cast<uint8_t>(p.retries);
  c.timeoutUs = static_cast<uint64_t>(p.timeout.count());
  return c;
}

void applyContract(const wire::Contract& c, transport::ChannelConfig* cfg) {
  cfg->verify = static_cast<Verify>(c.verify);
  cfg->retries = c.retries;
  cfg->timeout = std::chrono::microseconds(c.timeoutUs);
  cfg->sealed = c.sealed != 0;
}

wire::Contract decideContract(const wire::Contract& sender, const Profile& receiver, bool receiverFences) {
  const wire::Contract mine = offerOf(receiver);
  wire::Contract c;
  c.verify = sender.verify != 0 ? sender.verify : mine.verify;
  c.retries = std::max(sender.retries, mine.retries);
  c.timeoutUs = sender.timeoutUs == 0 ? mine.timeoutUs
                : mine.timeoutUs == 0 ? sender.timeoutUs
                                      : std::min(sender.timeoutUs, mine.timeoutUs);
  c.sealed = c.verify != 0 || c.timeoutUs != 0 || receiverFences ? 1 : 0;
  return c;
}

Result<uint64_t> checkBytes(Verify kind, const void* data, size_t size, ucx::MemoryType t,
                            const cuda::Driver& driver, std::vector<uint8_t>& staging) {
  Digest d(kind);
  if (t == ucx::MemoryType::kHost) {
    d.update(data, size);
    return d.value();
  }
  constexpr size_t kStaging = size_t{1} << 20;  // as the engine's checksums of GPU blocks
  if (staging.size() < kStaging) staging.resize(kStaging);
  Status s = transport::readStaged(&driver, data, size, t, staging,
                                   [&](const uint8_t* p, size_t n) { d.update(p, n); });
  if (s != Status::kOk) return Error{s, "reading GPU memory for its checksum through the CUDA driver failed"};
  return d.value();
}

uint64_t messageCheck(const wire::SealView& seal) {
  if (seal.verify == 0) return 0;
  if (seal.pieces == 1) return seal.check(0);
  Digest d(static_cast<Verify>(seal.verify));
  d.update(seal.checks.data(), seal.checks.size());
  return d.value();
}

std::string messageName(uint32_t tag, uint32_t seq, uint64_t bytes, uint32_t pieces) {
  return "message " + std::to_string(seq) + " of tag " + std::to_string(tag) + " (" +
         std::to_string(bytes) + " bytes in " + std::to_string(pieces) + " piece" + (pieces == 1 ? "" : "s") + ")";
}

}  // namespace pact::net
