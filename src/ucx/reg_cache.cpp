#include "ucx/reg_cache.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "ucx/ucx_status.h"

namespace pact::ucx {


Region::~Region() {
  if (key_ != nullptr) ucp_rkey_destroy(key_);  // before the map it names is unmapped
}

Result<ucp_rkey_h> Region::flushKey(ucp_ep_h ep, RegCache* cache) {
  if (key_ != nullptr && keyEp_ == ep) return key_;
  auto packed = cache->packedKey(*this);
  if (!packed.ok()) return packed.error();
  ucp_rkey_h key = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(ep, (*packed)->data(), &key);
  if (st != UCS_OK) return Error{toStatus(st), std::string("ucp_ep_rkey_unpack: ") + ucs_status_string(st)};
  if (key_ != nullptr) ucp_rkey_destroy(key_);
  key_ = key;
  keyEp_ = ep;
  return key_;
}

RegCache::RegCache(const Context& ctx, const cuda::Driver& driver)
    : ctx_(ctx.get()), driver_(driver), ucxMemoryTypes_(ctx.memoryTypes()) {}

bool RegCache::cudaMemory(std::string* why) const {
  const char* no = nullptr;
  if (!driver_.available())
    no = "no usable CUDA driver";
  else if (!driver_.hostBacked() && (ucxMemoryTypes_ & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) == 0)
    no = "the UCP context lists no CUDA memory type (a UCX built without CUDA, or its cuda modules "
         "found no driver)";
  if (no != nullptr && why != nullptr) *why = no;
  return no == nullptr;
}

Result<std::shared_ptr<Region>> RegCache::acquire(const RegRequest& req, bool* hit) {
  if (hit != nullptr) *hit = false;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto addr = reinterpret_cast<uintptr_t>(req.addr);
  if (req.addr == nullptr && req.length != 0)
    return Error{Status::kInvalidArgument, "registration of a NULL address"};
  if (addr + req.length < addr) return Error{Status::kInvalidArgument, "registration wraps around"};
  const size_t len = req.length == 0 ? 1 : req.length;
  uintptr_t start = addr & ~(page - 1);
  uintptr_t end = (addr + len + page - 1) & ~(page - 1);
  ucs_memory_type_t ucxType = UCS_MEMORY_TYPE_HOST;
  int device = -1;
  if (req.type == MemoryType::kCuda) {
    std::string why;
    if (!cudaMemory(&why))
      return Error{Status::kUnsupported, "CUDA memory cannot be registered here: " + why};
    auto facts = driver_.pointer(req.addr);
    if (!facts.ok()) return facts.error();
    if (!facts->device)
      return Error{Status::kInvalidArgument,
                   "CUDA registration of an address the CUDA driver does not know as device memory"};
    if (req.device >= 0 && facts->ordinal != req.device)
      return Error{Status::kInvalidArgument, "the memory is on CUDA device " + std::to_string(facts->ordinal) +
                                                 ", not device " + std::to_string(req.device)};
    const uintptr_t allocEnd = facts->rangeStart + facts->rangeSize;
    if (addr + len > allocEnd)
      return Error{Status::kOutOfRange, "CUDA registration of " + std::to_string(req.length) +
                                            " bytes runs past the end of its allocation (" +
                                            std::to_string(allocEnd - addr) + " bytes left)"};
    start = std::max(start, facts->rangeStart);
    end = std::min(end, allocEnd);
    device = facts->ordinal;
    ucxType = ucxMemoryType(req.type, driver_);
  }

  std::lock_guard lock(mu_);
  // Any live region starting at or before addr may cover it.
  for (auto it = byStart_.upper_bound(addr); it != byStart_.begin();) {
    --it;
    if (auto region = it->second.lock(); region && region->covers(addr, len, req.type)) {
      ++hits_;
      if (hit != nullptr) *hit = true;
      return region;
    }
  }
  purgeExpiredLocked();
  return mapLocked(start, end, req, ucxType, device);
}

Result<std::shared_ptr<Region>> RegCache::mapLocked(uintptr_t start, uintptr_t end,
                                                    const RegRequest& req,
                                                    ucs_memory_type_t ucxType, int device) {
  auto region = std::make_shared<Region>();
  region->start = start;
  region->end = end;
  region->type = req.type;
  region->ucxType = ucxType;
  region->device = device;
  auto map = MemMap::map(ctx_, reinterpret_cast<void*>(start), end - start, ucxType);
  if (!map.ok()) return map.error();
  region->map = std::move(map.value());
  byStart_.emplace(region->start, region);
  ++misses_;
  PACT_DEBUG("regcache: mapped %s [%#lx, %#lx)", memoryTypeName(req.type),
             static_cast<unsigned long>(start), static_cast<unsigned long>(end));
  return region;
}

Result<const std::vector<uint8_t>*> RegCache::packedKey(Region& region) {
  std::lock_guard lock(mu_);
  if (region.rkey.empty()) {
    void* buf = nullptr;
    size_t size = 0;
    ucs_status_t st = ucp_rkey_pack(ctx_, region.map.get(), &buf, &size);
    if (st != UCS_OK) return Error{toStatus(st), std::string("ucp_rkey_pack: ") + ucs_status_string(st)};
    region.rkey.assign(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + size);
    ucp_rkey_buffer_release(buf);
  }
  return &region.rkey;
}

void RegCache::purgeExpiredLocked() {
  for (auto it = byStart_.begin(); it != byStart_.end();)
    it = it->second.expired() ? byStart_.erase(it) : std::next(it);
}

RegCache::Stats RegCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  for (const auto& [start, weak] : byStart_) s.live += weak.expired() ? 0 : 1;
  s.hits = hits_;
  s.misses = misses_;
  return s;
}

}  // namespace pact::ucx
